"""ToolRerank (Zheng et al., LREC-COLING 2024, arXiv 2403.06551) after any first-stage retriever.

Pipeline per query (docs/retrieval.md):

1. first stage (BM25, TF-IDF, embeddings, embeddings + TGR, ...): a ranked candidate list C;
2. **adaptive truncation**: an API of a *seen* tool is kept down to rank ``m_s``, an API of an
   *unseen* tool down to rank ``m_u`` (``adaptive_truncation``); without it, a fixed cut ``m``;
3. the **pair model** scores every kept (query, API) pair in [0, 1] and sorts them: R;
4. a **classifier** (logistic regression on the query embedding) says single- or multi-tool;
5. **hierarchy-aware reranking**: Alg. 1 for single-tool queries (``single_tool_rerank``: the APIs of
   the tools of r_1 and of every API scoring above ``tau_s`` lead; the unseen ones among those tools
   bring all their library APIs along), Alg. 2 for multi-tool queries (``multi_tool_rerank``: in each
   group of same-tool or near-duplicate (doc cosine > ``tau_m``) APIs only the ``n`` best lead).

"Seen" tools are those with a gold API in a training query (``seeded_split``): the shared data sets
have test queries only, so tools are held out with a seeded split and the reranker and classifier
are trained on the queries of the others. The pair model stands in for the paper's BERT
cross-encoder: a logistic regression over pair features (dense cosine and the element-wise product
of the two embeddings, BM25, TF-IDF, tool- and group-centroid cosines, name overlaps), trained on
gold pairs plus hard negatives from the dense and BM25 first stages. A transformer cross-encoder on
100 candidates costs seconds per query on 2 CPU cores (bench/bench_rerank.py), the budget is 50 ms.

Tool hierarchy (``tool_parents``): ToolBench ``tool::api`` ids; TMDB the description prefix
(``[Movie ...]``, 8 groups); UltraTool the domain (the tool's group); any other set (API-Bank) has
no tool level: every API is its own tool, so Alg. 1 keeps R's order and Alg. 2 only merges
near-duplicates.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tasks.retrieval.core import BM25, TfIdf, evaluate_rankings, l2_normalize, tokenize

# Grids of ToolRerank's Table 2 (grid search on dev).
M_GRID = (10, 30, 50)
TAU_GRID = tuple(round(0.60 + 0.05 * i, 2) for i in range(7))  # 0.60 ... 0.90
N_GRID = (2, 3, 4)
PAIR_C_GRID = (0.0001, 0.001, 0.01)  # inverse L2 strength of the pair model, chosen on validation
PAIR_PRODUCT_GRID = (False, True)  # with or without the q * d block, chosen on validation
CLASSIFIER_C_GRID = (0.01, 0.1, 1.0)
VARIANTS = ("rerank", "truncation", "hierarchy", "both", "both_alg1")
REPORTED = ("first", *VARIANTS, "both_oracle")
VARIANT_LABEL = {"first": "first stage", "rerank": "none (rerank top m)", "truncation": "truncation",
                 "both_oracle": "both, gold single/multi label",
                 "hierarchy": "hierarchy", "both": "both (ToolRerank)",
                 "both_alg1": "both, Alg. 2 off (multi-tool queries keep the score order)"}
DEPTH = max(M_GRID)  # first-stage depth the reranker needs (m >= m_u)
SELECT_METRIC = "ndcg@5"  # what validation maximises (ties: recall@5)


# ---------------------------------------------------------------- hierarchy
_TMDB_PREFIX = re.compile(r"\s*\[\s*([A-Za-z]+)")
_TMDB_TYPOS = {"Perso": "Person"}
HIERARCHY_SOURCE = {
    "toolbench": "ToolBench tool of `tool::api`",
    "tmdb": "TMDB description prefix `[Movie ...]`",
    "ultratool": "UltraTool domain",
    "none": "none: every API is its own tool",
}


def hierarchy_kind(dataset: str) -> str:
    if dataset.startswith("toolbench"):
        return "toolbench"
    return dataset if dataset in ("tmdb", "ultratool") else "none"


def tool_parents(dataset: str, tool_ids: Sequence[str], groups: Sequence[str] | None = None,
                 descriptions: Sequence[str] | None = None) -> list[str]:
    """The tool each API belongs to (the hierarchy of Alg. 1 and Alg. 2)."""
    kind = hierarchy_kind(dataset)
    if kind == "toolbench":
        return [t.split("::", 1)[0] if "::" in t else t for t in tool_ids]
    if kind == "tmdb":
        if descriptions is None:
            raise ValueError("TMDB's hierarchy needs the tool descriptions")
        out = []
        for t, d in zip(tool_ids, descriptions):
            m = _TMDB_PREFIX.match(d or "")
            out.append(_TMDB_TYPOS.get(m.group(1), m.group(1)) if m else t)
        return out
    if kind == "ultratool":
        if groups is None:
            raise ValueError("UltraTool's hierarchy needs the tool groups (domains)")
        return list(groups)
    return list(tool_ids)


# ---------------------------------------------------------------- the list algorithms
def adaptive_truncation(candidates: Sequence[Hashable], seen: Callable[[Hashable], bool] | Iterable[Hashable],
                        m_s: int, m_u: int) -> list:
    """Keep the candidate at rank i (1-based) when its tool is seen and i <= m_s, or unseen and i <= m_u.

    ``seen`` is a predicate on a candidate or a collection of seen candidates. With m_s < m_u this is
    the top m_s plus the unseen-tool candidates at ranks m_s+1 .. m_u (the paper's choice 10, 50).
    """
    if m_s < 1 or m_u < 1:
        raise ValueError(f"cut-offs must be positive, got m_s={m_s}, m_u={m_u}")
    is_seen = seen if callable(seen) else set(seen).__contains__
    return [c for i, c in enumerate(candidates, 1) if i <= (m_s if is_seen(c) else m_u)]


def sort_by_score(items: Sequence[Hashable], score: Mapping | np.ndarray) -> list:
    """Highest score first; equal scores keep their order in ``items``."""
    return sorted(items, key=lambda a: -float(score[a]))


def single_tool_rerank(ranked: Sequence[Hashable], score: Mapping | np.ndarray, tool_of: Mapping | Sequence,
                       tau_s: float, extend: Callable[[set], Iterable[Hashable]] | None = None) -> list:
    """ToolRerank Alg. 1 on R (``ranked``, sorted by ``score``, best first).

    X = {tool(r_1)} plus the tools of every API scoring above ``tau_s``; F1 = the members of R whose
    tool is in X, F2 = the rest, both in R's order; F = F1 + F2. ``extend(X)`` (the extended list)
    returns more APIs for F1, meant to be every library API of the *unseen* tools in X; they join F1,
    which is then sorted by ``score`` again (``score`` must cover them).
    """
    if not ranked:
        return []
    x = {tool_of[ranked[0]]} | {tool_of[r] for r in ranked if float(score[r]) > tau_s}
    f1 = [r for r in ranked if tool_of[r] in x]
    f2 = [r for r in ranked if tool_of[r] not in x]
    if extend is not None:
        present = set(ranked)
        extra = [a for a in dict.fromkeys(extend(x)) if a not in present]
        if extra:
            f1 = sort_by_score(f1 + extra, score)
    return f1 + f2


def groups_of(ranked: Sequence[Hashable], tool_of: Mapping | Sequence, sim: np.ndarray, tau_m: float) -> np.ndarray:
    """Connected-component label of each member of ``ranked`` in Alg. 2's graph: an edge joins two
    members of the same tool or with ``sim`` (doc-doc cosine, aligned with ``ranked``) above tau_m."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    n = len(ranked)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    sim = np.asarray(sim)
    if sim.shape != (n, n):
        raise ValueError(f"sim must be ({n}, {n}) for {n} ranked items, got {sim.shape}")
    codes = {t: i for i, t in enumerate(dict.fromkeys(tool_of[r] for r in ranked))}
    tools = np.array([codes[tool_of[r]] for r in ranked])
    adjacency = (tools[:, None] == tools[None, :]) | (sim > tau_m)
    return connected_components(csr_matrix(adjacency), directed=False)[1]


def multi_tool_rerank(ranked: Sequence[Hashable], score: Mapping | np.ndarray, tool_of: Mapping | Sequence,
                      sim: np.ndarray, tau_m: float, n: int) -> list:
    """ToolRerank Alg. 2 on R: in each connected component (same tool, or doc cosine > tau_m) the
    ``n`` members with the highest score form S; F = the members of R in S, then the rest (R order)."""
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    labels = groups_of(ranked, tool_of, sim, tau_m)
    keep: set[int] = set()
    for label in np.unique(labels):
        members = [i for i in np.flatnonzero(labels == label)]
        members.sort(key=lambda i: (-float(score[ranked[i]]), i))
        keep.update(members[:n])
    return [ranked[i] for i in range(len(ranked)) if i in keep] + [ranked[i] for i in range(len(ranked)) if i not in keep]


# ---------------------------------------------------------------- library, pair model, classifier
@dataclass
class Library:
    """One data set's tools as the reranker sees them; ``embeddings`` are the base (dual-encoder)
    vectors, the same for every first stage (Alg. 2's doc-doc cosine and the pair features)."""

    dataset: str
    tool_ids: list[str]
    texts: list[str]  # what the encoder and BM25 saw
    parents: list[str]  # tool of each API (tool_parents)
    groups: list[str]  # ToolBench category, API-Bank level folder, ...
    embeddings: np.ndarray
    names: list[str] | None = None  # API names (default: the part of the id after '::')

    def __post_init__(self) -> None:
        n = len(self.tool_ids)
        if not (len(self.texts) == len(self.parents) == len(self.groups) == self.embeddings.shape[0] == n):
            raise ValueError("tool_ids, texts, parents, groups and embeddings must have one row per tool")
        self.embeddings = l2_normalize(np.asarray(self.embeddings, dtype=np.float32))
        self.names = self.names or [t.split("::", 1)[-1] for t in self.tool_ids]
        self.index = {t: i for i, t in enumerate(self.tool_ids)}
        self.by_tool: dict[str, list[int]] = {}
        for i, p in enumerate(self.parents):
            self.by_tool.setdefault(p, []).append(i)
        self.tool_centroids = self._centroids(self.parents)
        self.group_centroids = self._centroids(self.groups)

    def _centroids(self, keys: Sequence[str]) -> np.ndarray:
        sums: dict[str, np.ndarray] = {}
        for k, e in zip(keys, self.embeddings):
            sums[k] = sums.get(k, 0) + e
        return l2_normalize(np.stack([sums[k] for k in keys]).astype(np.float32))


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


class QueryTypeClassifier:
    """Single-tool (True) vs multi-tool query: logistic regression on the standardised query embedding."""

    def __init__(self, c: float = 0.1) -> None:
        self.c, self.model, self.constant = c, None, None

    def fit(self, embeddings: np.ndarray, single: Sequence[bool]) -> "QueryTypeClassifier":
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        labels = np.asarray(single, dtype=bool)
        if len(set(labels.tolist())) < 2:
            self.constant = bool(labels[0]) if len(labels) else True
            return self
        self.model = make_pipeline(StandardScaler(), LogisticRegression(C=self.c, max_iter=3000))
        self.model.fit(embeddings, labels)
        return self

    def predict(self, embeddings: np.ndarray) -> np.ndarray:
        embeddings = np.atleast_2d(embeddings)
        if self.model is None:
            return np.full(len(embeddings), True if self.constant is None else self.constant)
        return self.model.predict(embeddings).astype(bool)


def is_single_tool(gold: Iterable[int], parents: Sequence[str]) -> bool:
    """The classifier's label: all gold APIs belong to one tool."""
    return len({parents[g] for g in gold}) == 1


# ---------------------------------------------------------------- seeded split
@dataclass
class Split:
    """Tools are drawn into a training pool and two held-out pools (validation, test); queries that
    touch a held-out tool go to that pool's split (test wins), the others are divided at random
    into train / validation / test. Seen tools: those with a gold API in a training query."""

    seed: int
    train: list[int]
    val: list[int]
    test: list[int]
    seen_tools: set[str]
    held_out_val: set[str]
    held_out_test: set[str]

    def summary(self) -> dict[str, Any]:
        return {"seed": self.seed, "train": len(self.train), "val": len(self.val), "test": len(self.test),
                "seen_tools": len(self.seen_tools), "held_out_val_tools": len(self.held_out_val),
                "held_out_test_tools": len(self.held_out_test)}


def seeded_split(gold_tools: Sequence[set[str]], seed: int = 0, pools: tuple[float, float] = (0.15, 0.15),
                 shares: tuple[float, float] = (0.6, 0.15)) -> Split:
    """``gold_tools``: per query, the tools (hierarchy parents) of its gold APIs. ``pools``: shares of
    the tools held out for validation and for test; ``shares``: train and validation shares of the
    remaining queries (the rest is test)."""
    rng = np.random.default_rng(seed)
    tools = sorted({t for g in gold_tools for t in g})
    order = [tools[i] for i in rng.permutation(len(tools))]
    n_val, n_test = round(pools[0] * len(tools)), round(pools[1] * len(tools))
    held_val, held_test = set(order[:n_val]), set(order[n_val:n_val + n_test])
    train, val, test, rest = [], [], [], []
    for qi, g in enumerate(gold_tools):
        if g & held_test:
            test.append(qi)
        elif g & held_val:
            val.append(qi)
        else:
            rest.append(qi)
    rest = [rest[i] for i in rng.permutation(len(rest))]
    n_train, n_rval = round(shares[0] * len(rest)), round(shares[1] * len(rest))
    train = sorted(rest[:n_train])
    val = sorted(val + rest[n_train:n_train + n_rval])
    test = sorted(test + rest[n_train + n_rval:])
    seen = {t for qi in train for t in gold_tools[qi]}
    return Split(seed, train, val, test, seen, held_val, held_test)


# ---------------------------------------------------------------- one query
@dataclass(frozen=True)
class RerankParams:
    m: int = 30  # fixed cut when truncation is off (the paper's Rerank-m)
    m_s: int = 10
    m_u: int = 50
    tau_s: float = 0.75
    tau_m: float = 0.75
    n: int = 3


def rerank(candidates: Sequence[int], variant: str, params: RerankParams, score: Mapping | np.ndarray,
           library: Library, seen_tools: set[str], single: bool, depth: int | None = None) -> list[int]:
    """The final list for one query. ``candidates``: first-stage ranking (library indices, >= m_u
    deep); ``score``: pair-model scores by library index (covering the library APIs of unseen
    tools, Alg. 1's extended list). Variants: ``rerank`` (fixed cut m, sort by score), ``truncation``,
    ``hierarchy`` (fixed cut + Alg. 1/2), ``both`` and ``both_alg1`` (``both`` with Alg. 2 switched off:
    multi-tool queries keep the pair-model order, as Alg. 2 lowered them in our runs). Candidates the list left out follow it in
    first-stage order, so every @k up to ``depth`` (default: the candidate count) is defined."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    parents = library.parents
    if variant in ("truncation", "both", "both_alg1"):
        kept = adaptive_truncation(candidates, lambda a: parents[a] in seen_tools, params.m_s, params.m_u)
    else:
        kept = list(candidates[:params.m])
    ranked = sort_by_score(kept, score)
    if variant in ("hierarchy", "both") or (variant == "both_alg1" and single):
        if single:
            def extend(x: set) -> list[int]:
                return [a for t in sorted(x) if t not in seen_tools for a in library.by_tool.get(t, ())]

            ranked = single_tool_rerank(ranked, score, parents, params.tau_s, extend)
        else:
            e = library.embeddings[np.asarray(ranked, dtype=np.int64)]
            ranked = multi_tool_rerank(ranked, score, parents, e @ e.T, params.tau_m, params.n)
    final = list(ranked)
    present = set(final)
    final += [c for c in candidates if c not in present]
    return final[:depth] if depth else final


class ToolReranker:
    """A trained reranker for one library: ``rerank_query(text, embedding, candidates)`` scores only
    the candidates (plus Alg. 1's extension) with the pair model, as a deployment would."""

    def __init__(self, library: Library, pair_model: PairModel, classifier: QueryTypeClassifier,
                 seen_tools: set[str], params: RerankParams) -> None:
        self.library, self.pair_model, self.classifier = library, pair_model, classifier
        self.seen_tools, self.params = seen_tools, params

    def rerank_query(self, query: str, query_embedding: np.ndarray, candidates: Sequence[int],
                     variant: str = "both") -> list[int]:
        p = self.params
        keep = candidates[:max(p.m_s, p.m_u, p.m)]
        scores: dict[int, float] = dict(zip(keep, self.pair_model.score(query, query_embedding, keep).tolist()))
        single = bool(self.classifier.predict(query_embedding)[0])
        if variant in ("hierarchy", "both", "both_alg1") and single:
            # Alg. 1's extended list may need the library APIs of unseen tools: score them too.
            extra = sorted({a for c in keep for a in self.library.by_tool[self.library.parents[c]]
                            if self.library.parents[c] not in self.seen_tools} - set(keep))
            if extra:
                scores.update(zip(extra, self.pair_model.score(query, query_embedding, extra).tolist()))
        return rerank(list(candidates), variant, p, _Scores(scores), self.library, self.seen_tools, single)


class _Scores(dict):
    """Pair scores by index; an API never scored (outside the candidates) scores 0."""

    def __missing__(self, key):
        return 0.0


# ---------------------------------------------------------------- training, selection, evaluation
@dataclass
class RerankResult:
    dataset: str
    split: dict[str, Any]
    pair_model: dict[str, Any]
    classifier_test_accuracy: float | None
    params: dict[str, dict[str, Any]]  # first stage -> chosen parameters (+ validation score)
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per first stage x variant x subset x k


class TooFewQueries(ValueError):
    """The split leaves a training, validation or test part empty."""


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


def subsets_of(query_ids: Sequence[int], single: Sequence[bool], seen: Sequence[bool]) -> dict[str, list[int]]:
    """Positions (into ``query_ids``) of each reported subset; empty subsets are left out."""
    out = {"all": list(range(len(query_ids))),
           "single": [i for i, q in enumerate(query_ids) if single[q]],
           "multi": [i for i, q in enumerate(query_ids) if not single[q]],
           "seen": [i for i, q in enumerate(query_ids) if seen[q]],
           "unseen": [i for i, q in enumerate(query_ids) if not seen[q]]}
    return {k: v for k, v in out.items() if v}


def _mean_metric(rankings: Sequence[Sequence[int]], golds: Sequence[set[int]], metric: str = SELECT_METRIC) -> float:
    k = int(metric.split("@")[1])
    return evaluate_rankings(rankings, golds, (k,))[metric] if rankings else 0.0


def run_toolrerank(library: Library, query_texts: Sequence[str], query_embeddings: np.ndarray,
                   golds: Sequence[set[int]], first_stages: Mapping[str, Sequence[Sequence[int]]],
                   seed: int = 0, ks: Sequence[int] = (5, 10), log: Callable[[str], None] | None = None
                   ) -> RerankResult:
    """Split, train the pair model and the classifier, choose the parameters per first stage on the
    validation split, and evaluate every first stage x variant on the test split.

    ``golds``: gold API indices per query; ``first_stages``: name -> per-query ranking of library
    indices, at least ``DEPTH`` deep. The dense (``embedding``) and ``BM25`` first stages, when
    present, give the training pairs' hard negatives.
    """
    log = log or (lambda _msg: None)
    parents = library.parents
    gold_tools = [{parents[g] for g in gold} for gold in golds]
    split = seeded_split(gold_tools, seed)
    if not (split.train and split.val and split.test):
        raise TooFewQueries(f"{library.dataset}: {len(golds)} queries give {len(split.train)} train / "
                            f"{len(split.val)} validation / {len(split.test)} test queries: too few to rerank")
    single = [is_single_tool(g, parents) for g in golds]
    seen_q = [g <= split.seen_tools for g in gold_tools]
    negative_sources = [first_stages[n] for n in ("embedding", "BM25") if n in first_stages] or \
        [next(iter(first_stages.values()))]
    base, feats, labels = pair_training_set(library, query_texts, query_embeddings, golds, split,
                                            [[src[qi] for src in negative_sources] for qi in range(len(golds))], seed)
    everything = np.arange(len(library.tool_ids))
    eval_ids = split.val + split.test
    val_golds = [golds[q] for q in split.val]
    # The lexical features of every (validation or test query, library API) pair, computed once.
    scalars = {qi: base.scalar_features(query_texts[qi], query_embeddings[qi], everything) for qi in eval_ids}

    def library_scores(model: PairModel, qids: Sequence[int]) -> dict[int, np.ndarray]:
        return {qi: model.score(query_texts[qi], query_embeddings[qi], everything, scalars[qi]) for qi in qids}

    # Pair model: C and the q * d block chosen on validation, by the pair model ranking the library alone.
    best: tuple[float, PairModel] | None = None
    c_scores = {}
    for product in PAIR_PRODUCT_GRID:
        for c in PAIR_C_GRID:
            model = base.with_c(c, product).fit(feats, labels)
            val = library_scores(model, split.val)
            alone = [list(np.argsort(-val[qi], kind="stable")[:10]) for qi in split.val]
            key = f"C={c}" + (" +q*d" if product else "")
            c_scores[key] = _mean_metric(alone, val_golds)
            log(f"{library.dataset}: pair model {key}: validation {SELECT_METRIC} {c_scores[key]:.3f} (ranking the library alone)")
            if best is None or c_scores[key] > best[0]:
                best = (c_scores[key], model)
    pair_model = best[1]
    scores = np.zeros((len(golds), len(everything)), dtype=np.float32)
    for qi, row in library_scores(pair_model, eval_ids).items():
        scores[qi] = row
    # Single/multi classifier: C chosen on validation accuracy.
    val_single = [single[q] for q in split.val]
    classifier = max((QueryTypeClassifier(c).fit(query_embeddings[split.train], [single[q] for q in split.train])
                      for c in CLASSIFIER_C_GRID),
                     key=lambda m: float(np.mean(m.predict(query_embeddings[split.val]) == np.asarray(val_single))))
    predicted = np.zeros(len(golds), dtype=bool)
    predicted[eval_ids] = classifier.predict(query_embeddings[eval_ids])
    accuracy = float(np.mean([predicted[q] == single[q] for q in split.test])) if split.test else None

    def lists(ranking, qids, variant, params):
        return [rerank(ranking[q][:DEPTH], variant, params, scores[q], library, split.seen_tools,
                       bool(predicted[q]), depth=max(ks)) for q in qids]

    result = RerankResult(library.dataset, split.summary() | {"seen_test_queries": sum(seen_q[q] for q in split.test),
                                                              "single_test_queries": sum(single[q] for q in split.test)},
                          {"kind": "logistic regression on pair features", "C": pair_model.c,
                           "product_features": pair_model.product,
                           "validation": {k: round(v, 4) for k, v in c_scores.items()},
                           "training_pairs": len(labels), "positives": int(labels.sum())}, accuracy, {})
    result.split["classifier_C"] = classifier.c
    for name, ranking in first_stages.items():
        if any(len(ranking[q]) < DEPTH for q in eval_ids) and len(library.tool_ids) >= DEPTH:
            raise ValueError(f"first stage {name!r}: rankings must be at least {DEPTH} deep")
        params, chosen = select_params(lambda v, p: _mean_metric(lists(ranking, split.val, v, p), val_golds),
                                       lambda v, p, qids: _mean_metric(lists(ranking, qids, v, p),
                                                                       [golds[q] for q in qids]),
                                       [q for q in split.val if predicted[q]], [q for q in split.val if not predicted[q]])
        result.params[name] = chosen
        log(f"{library.dataset}/{name}: chosen on validation {chosen}")
        test_lists = {"first": [list(ranking[q][:max(ks)]) for q in split.test]}
        for variant in VARIANTS:
            test_lists[variant] = lists(ranking, split.test, variant, params)
        # Diagnosis, as the paper's Table 6: the gold single/multi label (ToolBench G1 vs G2/G3) routes.
        test_lists["both_oracle"] = [rerank(ranking[q][:DEPTH], "both", params, scores[q], library, split.seen_tools,
                                            single[q], depth=max(ks)) for q in split.test]
        subsets = subsets_of(split.test, single, seen_q)
        for variant, ranked in test_lists.items():
            for subset, positions in subsets.items():
                m = evaluate_rankings([ranked[i] for i in positions], [golds[split.test[i]] for i in positions], ks)
                for k in ks:
                    result.rows.append({"dataset": library.dataset, "first_stage": name, "variant": variant,
                                        "subset": subset, "k": k, "n_queries": len(positions),
                                        "recall": m[f"recall@{k}"], "ndcg": m[f"ndcg@{k}"],
                                        "pass_rate": m[f"pass_rate@{k}"]})
    return result


def select_params(score_all: Callable[[str, RerankParams], float],
                  score_on: Callable[[str, RerankParams, list[int]], float],
                  val_single: list[int], val_multi: list[int]) -> tuple[RerankParams, dict[str, Any]]:
    """Grid search on validation, in stages: m (fixed cut) for ``rerank``; (m_s, m_u) for
    ``truncation``; then, with that truncation, tau_s on the validation queries classified single-tool
    and (tau_m, n) on those classified multi-tool (Alg. 1 only sees the former and Alg. 2 the latter,
    so this equals the joint grid). Ties keep the earlier grid point."""
    m = max(M_GRID, key=lambda v: (score_all("rerank", RerankParams(m=v)), -M_GRID.index(v)))
    pairs = [(s, u) for s in M_GRID for u in M_GRID]
    m_s, m_u = max(pairs, key=lambda su: (score_all("truncation", RerankParams(m=m, m_s=su[0], m_u=su[1])),
                                          -pairs.index(su)))
    p = RerankParams(m=m, m_s=m_s, m_u=m_u)
    tau_s = p.tau_s
    if val_single:
        tau_s = max(TAU_GRID, key=lambda t: (score_on("both", RerankParams(m, m_s, m_u, tau_s=t), val_single),
                                             -TAU_GRID.index(t)))
    tau_m, n = p.tau_m, p.n
    if val_multi:
        grid = [(t, nn) for t in TAU_GRID for nn in N_GRID]
        tau_m, n = max(grid, key=lambda tn: (score_on("both", RerankParams(m, m_s, m_u, tau_m=tn[0], n=tn[1]),
                                                      val_multi), -grid.index(tn)))
    params = RerankParams(m, m_s, m_u, tau_s, tau_m, n)
    chosen = asdict(params) | {f"val_{SELECT_METRIC}": {v: round(score_all(v, params), 4) for v in VARIANTS}}
    return params, chosen


def markdown_tables(result: RerankResult, ks: Sequence[int] = (5, 10)) -> str:
    """Per data set: test-split table first stage x variant at R/N/P@k, then NDCG@5 / Recall@5 by
    subset (single/multi-tool, seen/unseen), then the chosen parameters."""
    by = {(r["first_stage"], r["variant"], r["subset"], r["k"]): r for r in result.rows}
    stages = list(dict.fromkeys(r["first_stage"] for r in result.rows))
    subsets = [s for s in ("single", "multi", "seen", "unseen") if any(r["subset"] == s for r in result.rows)]
    n = {s: next(r["n_queries"] for r in result.rows if r["subset"] == s) for s in ["all", *subsets]}
    cols = [(m, k) for m in ("recall", "ndcg", "pass_rate") for k in ks]
    head = " | ".join(f"{m[0].upper()}@{k}" for m, k in cols)
    lines = [f"### {result.dataset}: ToolRerank on the test split ({n['all']} queries)", "",
             f"| first stage | reranking | {head} |", "|---|---|" + "---|" * len(cols)]
    for s in stages:
        for v in REPORTED:
            lines.append(f"| {s} | {VARIANT_LABEL[v]} | " +
                         " | ".join(f"{by[(s, v, 'all', k)][m]:.3f}" for m, k in cols) + " |")
    if subsets:
        lines += ["", "NDCG@5 / Recall@5 by subset (" + ", ".join(f"{s} {n[s]}" for s in subsets) + " queries):", "",
                  "| first stage | reranking | " + " | ".join(subsets) + " |", "|---|---|" + "---|" * len(subsets)]
        for s in stages:
            for v in REPORTED:
                lines.append(f"| {s} | {VARIANT_LABEL[v]} | " + " | ".join(
                    f"{by[(s, v, sub, 5)]['ndcg']:.3f} / {by[(s, v, sub, 5)]['recall']:.3f}" for sub in subsets) + " |")
    lines += ["", "Parameters chosen on validation (" + SELECT_METRIC + "):", "",
              "| first stage | m | m_s | m_u | tau_s | tau_m | n |", "|---|---|---|---|---|---|---|"]
    for s in stages:
        p = result.params[s]
        lines.append(f"| {s} | {p['m']} | {p['m_s']} | {p['m_u']} | {p['tau_s']:.2f} | {p['tau_m']:.2f} | {p['n']} |")
    sp, pm = result.split, result.pair_model
    acc = "n/a" if result.classifier_test_accuracy is None else f"{result.classifier_test_accuracy:.3f}"
    lines += ["", f"Split (seed {sp['seed']}): {sp['train']} train / {sp['val']} validation / {sp['test']} test queries; "
              f"{sp['seen_tools']} seen tools, {sp['held_out_val_tools']} + {sp['held_out_test_tools']} held out; "
              f"test: {sp['seen_test_queries']} seen, {sp['single_test_queries']} single-tool. Pair model: "
              f"{pm['kind']}{' with q*d' if pm['product_features'] else ''}, C = {pm['C']} ({pm['training_pairs']} pairs, {pm['positives']} positive). "
              f"Single/multi classifier test accuracy {acc}. Hierarchy: {HIERARCHY_SOURCE[hierarchy_kind(result.dataset)]}.",
              ""]
    return "\n".join(lines)

