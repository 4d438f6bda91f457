"""Lexical baselines: the tokenizer (camelCase and snake_case split into words), BM25, and TF-IDF
(scikit-learn's ``TfidfVectorizer`` on the same tokenizer).
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

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
