"""ToolRerank's pair model (the score of a (query, API) pair in [0, 1]) and its training pairs.

It stands in for the paper's BERT cross-encoder: a logistic regression over pair features (dense
cosine and the element-wise product of the two embeddings, BM25, TF-IDF, tool- and group-centroid
cosines, name overlaps), trained on gold pairs plus hard negatives from the dense and BM25 first
stages. A transformer cross-encoder on 100 candidates costs seconds per query on 2 CPU cores
(bench/bench_rerank.py), the budget is 50 ms.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tasks.retrieval.lexical import BM25, TfIdf, tokenize
from tasks.retrieval.ranking import l2_normalize
from tasks.retrieval.rerank.library import Library
from tasks.retrieval.rerank.split import Split

N_SCALAR_FEATURES = 7


class PairModel:
    """score(q, d) in [0, 1]: standardised pair features -> logistic regression.

    Features: cos(q, d), cos(q, centroid of d's tool), cos(q, centroid of d's group), log(1 + BM25),
    TF-IDF cosine, share of the API name's tokens in the query, share of the tool name's tokens in
    the query, and with ``product`` q * d element-wise (a learned weighting of the cosine's terms;
    it overfits the few hundred training queries here, so validation usually turns it off).
    """

    def __init__(self, library: Library, c: float = 0.001, seed: int = 0, product: bool = False) -> None:
        self.library, self.c, self.seed, self.product = library, c, seed, product
        self.bm25 = BM25(library.texts)
        self.tfidf = TfIdf(library.texts)
        self.api_tokens = [set(tokenize(n)) for n in library.names]
        self.tool_tokens = [set(tokenize(p)) for p in library.parents]
        self.model = self.platt = None

    def with_c(self, c: float, product: bool | None = None) -> "PairModel":
        """An unfitted copy with another C (and product setting) that shares the lexical indexes."""
        other = PairModel.__new__(PairModel)
        other.__dict__.update(self.__dict__)
        other.c, other.model, other.platt = c, None, None
        if product is not None:
            other.product = product
        return other

    @property
    def n_features(self) -> int:
        return N_SCALAR_FEATURES + (self.library.embeddings.shape[1] if self.product else 0)

    def scalar_features(self, query: str, query_embedding: np.ndarray, indices: Sequence[int]) -> np.ndarray:
        """The first N_SCALAR_FEATURES columns of ``features`` (the costly, lexical part)."""
        idx = np.asarray(indices, dtype=np.int64)
        lib = self.library
        q = l2_normalize(np.asarray(query_embedding, dtype=np.float32).ravel())
        words = set(tokenize(query))

        def overlap(tokens: set) -> float:
            return len(tokens & words) / len(tokens) if tokens else 0.0

        return np.column_stack([
            lib.embeddings[idx] @ q, lib.tool_centroids[idx] @ q, lib.group_centroids[idx] @ q,
            np.log1p(self.bm25.scores(query, idx)), self.tfidf.scores_for(query, idx),
            [overlap(self.api_tokens[i]) for i in idx], [overlap(self.tool_tokens[i]) for i in idx],
        ]).astype(np.float32)

    def features(self, query: str, query_embedding: np.ndarray, indices: Sequence[int],
                 scalars: np.ndarray | None = None) -> np.ndarray:
        """(len(indices), n_features) pair features; ``scalars`` reuses scalar_features."""
        idx = np.asarray(indices, dtype=np.int64)
        if scalars is None:
            scalars = self.scalar_features(query, query_embedding, idx)
        if not self.product:
            return scalars
        q = l2_normalize(np.asarray(query_embedding, dtype=np.float32).ravel())
        return np.hstack([scalars, self.library.embeddings[idx] * q[None, :]])

    def fit(self, features: np.ndarray, labels: np.ndarray) -> "PairModel":
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        if len(set(labels.tolist())) < 2:
            raise ValueError("the pair model needs positive and negative training pairs")
        features = features[:, :self.n_features]  # a full training set (pair_training_set) fits both kinds
        self.model = make_pipeline(StandardScaler(), LogisticRegression(C=self.c, max_iter=2000))
        self.model.fit(features, labels)
        # A strongly regularised model's probabilities all sit near the base rate; Platt scaling of its
        # decision value on the training pairs makes them probabilities again (tau_s compares against
        # them) and keeps the ranking.
        self.platt = LogisticRegression(C=1e6, max_iter=2000).fit(
            self.model.decision_function(features)[:, None], labels)
        return self

    def score(self, query: str, query_embedding: np.ndarray, indices: Sequence[int],
              scalars: np.ndarray | None = None) -> np.ndarray:
        if self.model is None:
            raise RuntimeError("PairModel.fit first")
        if len(indices) == 0:
            return np.zeros(0)
        z = self.model.decision_function(self.features(query, query_embedding, indices, scalars))
        return self.platt.predict_proba(z[:, None])[:, 1]


def training_pairs(library: Library, query_ids: Sequence[int], golds: Sequence[set[int]],
                   hard_negatives: Sequence[Sequence[int]], excluded: set[int], per_query: int = 30
                   ) -> tuple[list[int], list[int], list[int]]:
    """(query index, API index, label) triples: gold APIs positive, the first ``per_query`` hard
    negatives of each listed first-stage ranking negative; APIs in ``excluded`` (held-out tools) never
    appear, so held-out tools stay unseen."""
    qs, ds, ys = [], [], []
    for qi in query_ids:
        gold = golds[qi]
        negatives = [d for d in dict.fromkeys(d for ranking in hard_negatives[qi] for d in ranking[:per_query])
                     if d not in gold and d not in excluded]
        for d in sorted(gold) + negatives:
            qs.append(qi)
            ds.append(d)
            ys.append(int(d in gold))
    return qs, ds, ys


def pair_training_set(library: Library, query_texts: Sequence[str], query_embeddings: np.ndarray,
                      golds: Sequence[set[int]], split: Split, hard_negatives: Sequence[Sequence[Sequence[int]]],
                      seed: int = 0) -> tuple[PairModel, np.ndarray, np.ndarray]:
    """An unfitted PairModel and the features and labels of the training split's pairs (gold APIs;
    hard negatives from the listed first-stage rankings, never APIs of held-out tools)."""
    held_out = split.held_out_val | split.held_out_test
    excluded = {i for i, p in enumerate(library.parents) if p in held_out}
    qs, ds, ys = training_pairs(library, split.train, golds, hard_negatives, excluded)
    model = PairModel(library, seed=seed, product=True)  # all columns; fit() keeps those a model uses
    return model, _pair_features(model, query_texts, query_embeddings, qs, ds), np.asarray(ys)


def _pair_features(model: PairModel, texts, embs, qs, ds) -> np.ndarray:
    order: dict[int, list[int]] = {}
    for pos, qi in enumerate(qs):
        order.setdefault(qi, []).append(pos)
    out = np.zeros((len(qs), model.n_features), dtype=np.float32)
    for qi, positions in order.items():
        out[positions] = model.features(texts[qi], embs[qi], [ds[p] for p in positions])
    return out
