"""One data set's tools as ToolRerank sees them: ids, texts, hierarchy parents, groups, base
embeddings and the tool and group centroids of those embeddings.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tasks.retrieval.ranking import l2_normalize


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
