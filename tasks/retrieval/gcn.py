"""The parameter-free GCN step of TGR (Eq. 3, on a 0/1 or a weighted graph): adjacency matrices
and their symmetric normalisation. The dense numpy matrices are the reference the tests check by hand;
the propagation itself runs on a sparse matrix (scipy), so 10^5 tools need memory for their edges only.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import numpy as np
from scipy import sparse

Direction = Literal["both", "dependent_to_prerequisite", "prerequisite_to_dependent"]


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
    """TGR's graph-based tool encoding G(X, A) = D^-1/2 (A + I) D^-1/2 X (no trainable weights), with A
    ``adjacency_matrix``'s, held sparse (a dense A of 10^5 tools would be 80 GB)."""
    return _propagate(x, _sparse_adjacency(x.shape[0], ((dep, pre, 1.0) for dep, pre in edges), direction, True))


def _sparse_adjacency(n: int, edges: Iterable[tuple[int, int, float]], direction: Direction,
                      binary: bool) -> sparse.csr_matrix:
    """``weighted_adjacency`` (``binary``: ``adjacency_matrix``, repeats count once) as a sparse matrix."""
    rows, cols, weights = [], [], []
    for dep, pre, w in edges:
        if dep == pre:
            continue  # self loops come from +I only
        if direction in ("both", "dependent_to_prerequisite"):
            rows.append(dep), cols.append(pre), weights.append(w)
        if direction in ("both", "prerequisite_to_dependent"):
            rows.append(pre), cols.append(dep), weights.append(w)
    a = sparse.coo_matrix((np.asarray(weights, dtype=np.float64), (np.asarray(rows, dtype=np.int64),
                                                                    np.asarray(cols, dtype=np.int64))),
                          shape=(n, n)).tocsr()  # repeated cells are summed
    if binary:
        a.data = np.minimum(a.data, 1.0)
    return a


def _propagate(x: np.ndarray, a: sparse.csr_matrix) -> np.ndarray:
    """``normalized_adjacency(a) @ x`` without a dense matrix."""
    a_hat = a + sparse.identity(a.shape[0], dtype=np.float64, format="csr")
    inv_sqrt_deg = 1.0 / np.sqrt(np.asarray(a_hat.sum(axis=1)).ravel())
    out = np.empty(x.shape, dtype=np.float32)
    for c in range(0, x.shape[1], 64):  # 64 columns at a time: float64 copies of 64 columns, not of all
        z = x[:, c:c + 64].astype(np.float64) * inv_sqrt_deg[:, None]
        out[:, c:c + 64] = (a_hat @ z) * inv_sqrt_deg[:, None]
    return out


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
    """Eq. 3 with a weighted A (``weighted_adjacency``): D^-1/2 (A + I) D^-1/2 X, A held sparse."""
    return _propagate(x, _sparse_adjacency(x.shape[0], edges, direction, False))
