"""Tool retrieval: the parameter-free GCN step of TGR (Eq. 3, on a 0/1 or a weighted graph), cosine
top-k, successor expansion of a ranking (ToolNet's transition graph), BM25 / TF-IDF baselines and the
retrieval metrics of Table 2 (Recall@k, NDCG@k with binary relevance, Pass Rate@k).

Plain numpy/python, so the numbers can be checked by hand in tests, except TF-IDF, which is
scikit-learn's ``TfidfVectorizer`` on the same tokenizer as BM25.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np

Direction = Literal["both", "dependent_to_prerequisite", "prerequisite_to_dependent"]


# ---------------------------------------------------------------- graph encoding (Eq. 3)
def adjacency_matrix(
    n: int, edges: Iterable[tuple[int, int]], direction: Direction = "both"
) -> np.ndarray:
    """Dense 0/1 adjacency of ``n`` tools from (dependent, prerequisite) index pairs.

    The paper's graph is directed (t_a -> t_b when t_a depends on t_b) but Eq. 3 normalises with one
    degree matrix, the symmetric GCN form. ``both`` (default) makes A symmetric so a tool's
    embedding mixes in its prerequisites and its dependents alike; the two one-way options keep A
    directed and use row degrees (out-degree + 1).
    """
    return np.minimum(weighted_adjacency(n, ((dep, pre, 1.0) for dep, pre in edges), direction), 1.0)


def normalized_adjacency(a: np.ndarray) -> np.ndarray:
    """``D^-1/2 (A + I) D^-1/2`` with D the (row) degree matrix of A + I."""
    a_hat = a + np.eye(a.shape[0], dtype=a.dtype)
    inv_sqrt_deg = 1.0 / np.sqrt(a_hat.sum(axis=1))
    return a_hat * inv_sqrt_deg[:, None] * inv_sqrt_deg[None, :]


def gcn_propagate(
    x: np.ndarray, edges: Iterable[tuple[int, int]], direction: Direction = "both"
) -> np.ndarray:
    """TGR's graph-based tool encoding G(X, A) = D^-1/2 (A + I) D^-1/2 X (no trainable weights).

    Dense on purpose: the largest graph here (ToolBench stable, 2,479 tools) is a 6M-cell matrix.
    """
    return _propagate(x, adjacency_matrix(x.shape[0], edges, direction))


def _propagate(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    return (normalized_adjacency(a) @ x.astype(np.float64)).astype(np.float32)


def weighted_adjacency(
    n: int, edges: Iterable[tuple[int, int, float]], direction: Direction = "both"
) -> np.ndarray:
    """``adjacency_matrix`` with a weight per (dependent, prerequisite, weight) edge, e.g. ToolNet's
    transition weights (prerequisite = the tool called first). ``both`` adds A and its transpose, so
    a pair seen in both call orders weighs the sum of its two weights."""
    a = np.zeros((n, n), dtype=np.float64)
    for dep, pre, w in edges:
        if dep == pre:
            continue  # self loops come from +I only
        if direction in ("both", "dependent_to_prerequisite"):
            a[dep, pre] += w
        if direction in ("both", "prerequisite_to_dependent"):
            a[pre, dep] += w
    return a


def gcn_propagate_weighted(
    x: np.ndarray, edges: Iterable[tuple[int, int, float]], direction: Direction = "both"
) -> np.ndarray:
    """Eq. 3 with a weighted A (``weighted_adjacency``): D^-1/2 (A + I) D^-1/2 X."""
    return _propagate(x, weighted_adjacency(x.shape[0], edges, direction))


# ---------------------------------------------------------------- dense retrieval
def l2_normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms == 0, 1.0, norms)


def cosine_scores(queries: np.ndarray, tools: np.ndarray) -> np.ndarray:
    """(n_queries, n_tools) cosine similarities."""
    return l2_normalize(np.atleast_2d(queries)) @ l2_normalize(tools).T


def top_k_from_scores(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best tools per row, best first; ties go to the lower tool index
    (the same order as SQL ``ORDER BY score DESC, tool_id`` when tools are sorted by tool_id)."""
    scores = np.atleast_2d(scores)
    k = min(k, scores.shape[1])
    # lexsort's last key is primary: -score, then the index as tie breaker.
    idx = np.arange(scores.shape[1])
    return np.stack([np.lexsort((idx, -row))[:k] for row in scores])


def cosine_top_k(queries: np.ndarray, tools: np.ndarray, k: int) -> np.ndarray:
    return top_k_from_scores(cosine_scores(queries, tools), k)


def expand_with_successors(
    ranked: Sequence[int], successors: dict[int, Sequence[int]], top: int = 3, per_tool: int = 1
) -> list[int]:
    """A ranking where each of the first ``top`` results is followed by its ``per_tool``
    highest-weight successors (``successors[i]``, best first) not listed yet; the rest of
    ``ranked`` follows in its order. ToolNet offers the successors of the last tool; here they
    join the retrieved set (the tools a task calls next are often not named in its text)."""
    out: list[int] = []
    seen: set[int] = set()

    def add(i: int) -> None:
        if i not in seen:
            seen.add(i)
            out.append(i)

    for rank, i in enumerate(ranked):
        add(i)
        if rank < top:
            for j in [s for s in successors.get(i, ()) if s not in seen][:per_tool]:
                add(j)
    return out


# ---------------------------------------------------------------- lexical baselines
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_TOKEN = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lower-case alphanumeric tokens; camelCase and snake_case names split into words
    (API names such as GetUserToken would otherwise never match a query's words)."""
    return _TOKEN.findall(_CAMEL.sub(" ", text).lower())


class BM25:
    """Okapi BM25 (k1, b) with the non-negative idf ``log(1 + (N - df + 0.5) / (df + 0.5))``.

    Term counts are kept as a sparse document x term matrix, so a query costs a few column slices."""

    def __init__(self, documents: Sequence[str], k1: float = 1.5, b: float = 0.75) -> None:
        from scipy.sparse import csr_matrix

        self.k1, self.b = k1, b
        counts = [Counter(tokenize(d)) for d in documents]
        self.vocab = {t: i for i, t in enumerate(sorted({t for c in counts for t in c}))}
        rows = [r for r, c in enumerate(counts) for _ in c]
        cols = [self.vocab[t] for c in counts for t in c]
        vals = [float(v) for c in counts for v in c.values()]
        n = len(documents)
        self.tf = csr_matrix((vals, (rows, cols)), shape=(n, len(self.vocab)), dtype=np.float64)
        self.tf_by_term = self.tf.tocsc()
        self.doc_len = np.array([sum(c.values()) for c in counts], dtype=np.float64)
        self.avgdl = float(self.doc_len.mean()) if n else 0.0
        df = np.diff(self.tf_by_term.indptr).astype(np.float64)
        self.idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def scores(self, query: str, indices: Sequence[int] | None = None) -> np.ndarray:
        """Score of every document, or of ``indices`` only (in that order)."""
        cols = sorted({self.vocab[t] for t in tokenize(query) if t in self.vocab})
        if indices is None:
            tf, doc_len = self.tf_by_term[:, cols], self.doc_len
        else:
            idx = np.asarray(indices, dtype=np.int64)
            tf, doc_len = self.tf[idx][:, cols], self.doc_len[idx]
        if not cols:
            return np.zeros(len(doc_len), dtype=np.float64)
        tf = tf.toarray()
        norm = self.k1 * (1.0 - self.b + self.b * doc_len / max(self.avgdl, 1e-9))
        return (self.idf[cols] * tf * (self.k1 + 1.0) / (tf + norm[:, None])).sum(axis=1)


class TfIdf:
    """scikit-learn's ``TfidfVectorizer`` with its defaults (raw term counts x smooth idf
    ``ln((1 + N) / (1 + df)) + 1``, rows L2-normalised) on this module's ``tokenize``, ranked by
    cosine similarity (the dot product of the unit rows)."""

    def __init__(self, documents: Sequence[str]) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer

        # tokenize lower-cases after splitting camelCase, so the vectorizer must not lower-case first.
        self.vectorizer = TfidfVectorizer(tokenizer=tokenize, lowercase=False, token_pattern=None)
        self.matrix = self.vectorizer.fit_transform(documents)  # sparse (n_docs, vocab)

    def scores(self, query: str) -> np.ndarray:
        return self.scores_many([query])[0]

    def scores_for(self, query: str, indices: Sequence[int]) -> np.ndarray:
        """Cosine similarity with the documents ``indices`` only (in that order)."""
        q = self.vectorizer.transform([query])
        return np.asarray((self.matrix[np.asarray(indices, dtype=np.int64)] @ q.T).todense(), dtype=np.float64).ravel()

    def scores_many(self, queries: Sequence[str]) -> np.ndarray:
        """(n_queries, n_docs) cosine similarities."""
        return np.asarray((self.vectorizer.transform(list(queries)) @ self.matrix.T).todense(), dtype=np.float64)


# ---------------------------------------------------------------- metrics (binary relevance)
def recall_at_k(ranked: Sequence[Any], gold: set[Any], k: int) -> float:
    """Share of the gold tools found in the top k."""
    if not gold:
        raise ValueError("a query without gold tools cannot be scored")
    return len(set(ranked[:k]) & gold) / len(gold)


def ndcg_at_k(ranked: Sequence[Any], gold: set[Any], k: int) -> float:
    """DCG of the top k (gain 1 per gold tool at rank r: 1 / log2(r + 1)) over the ideal DCG,
    where all min(|gold|, k) gold tools sit at the top."""
    if not gold:
        raise ValueError("a query without gold tools cannot be scored")
    dcg = sum(1.0 / math.log2(r + 2) for r, t in enumerate(ranked[:k]) if t in gold)
    ideal = sum(1.0 / math.log2(r + 2) for r in range(min(len(gold), k)))
    return dcg / ideal


def pass_rate_at_k(ranked: Sequence[Any], gold: set[Any], k: int) -> float:
    """1 when the whole gold tool set is inside the top k, else 0 (averaged over queries)."""
    if not gold:
        raise ValueError("a query without gold tools cannot be scored")
    return float(gold <= set(ranked[:k]))


def evaluate_rankings(
    rankings: Sequence[Sequence[Any]], golds: Sequence[set[Any]], ks: Sequence[int] = (5, 10)
) -> dict[str, float]:
    """Mean metrics over queries: keys ``recall@5``, ``ndcg@5``, ``pass_rate@5``, ..."""
    if len(rankings) != len(golds):
        raise ValueError(f"{len(rankings)} rankings but {len(golds)} gold sets")
    if not rankings:
        raise ValueError("no queries to evaluate")
    out: dict[str, float] = {}
    for k in ks:
        for name, fn in (("recall", recall_at_k), ("ndcg", ndcg_at_k), ("pass_rate", pass_rate_at_k)):
            out[f"{name}@{k}"] = float(np.mean([fn(r, g, k) for r, g in zip(rankings, golds)]))
    return out


# ---------------------------------------------------------------- what the encoder sees of a tool
EMBED_STYLES = ("structured", "description")
# Paper, Sec. 4: ToolBench embeddings use a structured document (name, description, parameters),
# API-Bank embeddings the description only.
DEFAULT_EMBED_STYLE = {"apibank": "description"}


def embed_style_for(dataset: str) -> str:
    return DEFAULT_EMBED_STYLE.get(dataset, "structured")


def embed_text(doc: dict[str, Any], style: str) -> str:
    """Text of a tool for the sentence encoder and the lexical baselines."""
    if style == "description":
        return doc["description"]
    if style != "structured":
        raise ValueError(f"unknown embed style {style!r}; known: {', '.join(EMBED_STYLES)}")

    def params(items: Sequence[dict]) -> str:
        return "; ".join(
            f"{p['name']} ({p['type']})" + (f": {p['description']}" if p.get("description") else "") for p in items
        ) or "none"

    return (f"name: {doc['name']}\ndescription: {doc['description']}\n"
            f"input parameters: {params(doc['input_params'])}\noutput parameters: {params(doc['output_params'])}")
