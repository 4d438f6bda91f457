"""ToolRerank's query classifier: single-tool or multi-tool query, and the label it learns."""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


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
