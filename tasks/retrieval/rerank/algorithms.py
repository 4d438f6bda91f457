"""ToolRerank's list algorithms on one ranked list: adaptive truncation, Alg. 1 (single-tool queries)
and Alg. 2 (multi-tool queries).
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

import numpy as np


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
