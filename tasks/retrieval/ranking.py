"""Dense retrieval: cosine top-k (ties to the lower tool index) and successor expansion of a ranking
(ToolNet's transition graph).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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
