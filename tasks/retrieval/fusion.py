"""Fusion that never hurts: the query-time score s = (1 - w) cos(q, x) + w cos(q, x') of a tool's plain
embedding x and its graph-propagated x', with the graph weight w (0: the embedding alone, 1: TGR as
published) chosen per tool set and graph by seeded k-fold cross-validation over the tool set's queries
(``cross_validate``), or, for a graph built from training runs, on the validation queries alone
(``choose_on_validation``). Both choose by the one-standard-error rule: the smallest w as good as the best within
noise, so the graph has to earn its weight.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tasks.retrieval.metrics import ndcg_at_k, recall_at_k
from tasks.retrieval.ranking import top_k_from_scores

DEFAULT_WEIGHTS = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)  # the grid of w; 0 and 1 always among them
DEFAULT_FOLDS = 5
SELECT_K = 5  # w is chosen on Recall@5, then NDCG@5, of the training folds


def check_weights(weights: Sequence[float]) -> None:
    """Refuse a grid that is not distinct values in [0, 1] with 0 (the embedding) and 1 (TGR) among them."""
    ws = [float(w) for w in weights]
    if any(not 0.0 <= w <= 1.0 for w in ws) or len(set(ws)) != len(ws) or not {0.0, 1.0} <= set(ws):
        raise ValueError(f"graph weights {tuple(weights)}: distinct values in [0, 1], 0 and 1 among them")


def fold_assignment(n_queries: int, folds: int, seed: int) -> np.ndarray:
    """The fold (0 .. folds-1) of each query: a seeded permutation cut into ``folds`` parts whose sizes
    differ by at most one, so the folds are disjoint, cover every query and depend on the seed only."""
    if folds < 2 or n_queries < folds:
        raise ValueError(f"{folds} folds over {n_queries} queries: need 2 <= folds <= queries")
    order = np.random.default_rng(seed).permutation(n_queries)
    out = np.empty(n_queries, dtype=np.int64)
    for f, part in enumerate(np.array_split(order, folds)):
        out[part] = f
    return out


def fused_scores(base: np.ndarray, graph: np.ndarray, weight: float) -> np.ndarray:
    """(1 - w) * cos(q, x) + w * cos(q, x'), both (n_queries, n_tools)."""
    return (1.0 - weight) * base + weight * graph


def choose_weight(weights: Sequence[float], recall: np.ndarray, ndcg: np.ndarray, rows: np.ndarray) -> float:
    """The w of ``weights`` with the best mean Recall@5 over the queries ``rows``, then NDCG@5; a tie goes
    to the smaller w (the graph has to earn its weight). ``recall``/``ndcg``: (n_weights, n_queries)."""
    r, n = recall[:, rows].mean(axis=1), ndcg[:, rows].mean(axis=1)
    best = max(range(len(weights)), key=lambda i: (round(float(r[i]), 12), round(float(n[i]), 12), -weights[i]))
    return float(weights[best])


def within_one_se(weights: Sequence[float], recall: np.ndarray, rows: np.ndarray, best: float) -> float:
    """The one-standard-error rule: the smallest w of ``weights`` whose mean Recall@5 over ``rows`` trails
    ``best``'s by at most the standard error of their per-query difference (paired: the same queries). A
    validation set of a few dozen queries cannot tell w apart by one query; the graph has to earn its weight."""
    if len(rows) < 2:
        return best
    top = recall[list(weights).index(best), rows]
    for i in sorted(range(len(weights)), key=lambda j: weights[j]):
        gap = top - recall[i, rows]
        if weights[i] >= best or gap.mean() <= gap.std(ddof=1) / np.sqrt(len(rows)) + 1e-12:
            return float(weights[i])
    return best


@dataclass
class FusionResult:
    weights: tuple[float, ...]  # the grid
    folds: np.ndarray  # fold of each query
    fold_weights: list[float]  # per fold: the w chosen on the other folds
    weight: float  # chosen on all queries: what a deployment would use (not the reported figure's)
    rankings: list[list[int]]  # each query ranked with its fold's w (held out from that choice), best first
    grid_recall: list[float]  # mean Recall@5 over all queries at each w of the grid (in-sample, for the log)


def _grid(base: np.ndarray, graph: np.ndarray, golds: Sequence[set[int]], weights: Sequence[float], depth: int
          ) -> tuple[tuple[float, ...], list[np.ndarray], np.ndarray, np.ndarray]:
    """Every query ranked at each w of the grid (``depth`` best, at least SELECT_K) and its Recall@5 and
    NDCG@5 there: (weights, rankings per w, recall and ndcg as (n_weights, n_queries))."""
    check_weights(weights)
    weights = tuple(float(w) for w in weights)
    n = len(golds)
    if base.shape != graph.shape or base.shape[0] != n:
        raise ValueError(f"scores {base.shape} and {graph.shape} for {n} queries")
    tops = [top_k_from_scores(fused_scores(base, graph, w), max(depth, SELECT_K)) for w in weights]
    recall = np.array([[recall_at_k(t[q].tolist(), golds[q], SELECT_K) for q in range(n)] for t in tops])
    ndcg = np.array([[ndcg_at_k(t[q].tolist(), golds[q], SELECT_K) for q in range(n)] for t in tops])
    return weights, tops, recall, ndcg


def cross_validate(base: np.ndarray, graph: np.ndarray, golds: Sequence[set[int]],
                   weights: Sequence[float] = DEFAULT_WEIGHTS, folds: int = DEFAULT_FOLDS, seed: int = 0,
                   depth: int = 10, data: np.ndarray | None = None) -> FusionResult:
    """Choose w per fold on the other folds' queries (Recall@5, then NDCG@5; the smallest w within one standard
    error of the best, ``within_one_se``) and rank the fold's queries with it, so every query's ranking comes from a
    w chosen without it. Without the rule a graph that won the training folds by less than their noise took weight
    and cost the held-out fold more (ToolBench, bench/RESULTS.md "Pooled as the encoder was trained").
    ``base``/``graph``: cosine scores (n_queries, n_tools) with the plain and the propagated tool embeddings;
    ``golds``: tool indices per query; ``folds`` is capped at the number of queries; ``depth``: how many tools each
    ranking keeps.

    ``data``: the scores of the same graph without its precondition edges. Then the choice has two stages on the
    same training folds: the data graph's w over the embedding, then ``graph``'s w over that fusion, so w = 0 is
    the data graph's own cross-validated fusion and the precondition edges have to earn their weight over it."""
    n = len(golds)
    assign = fold_assignment(n, min(folds, n), seed)
    if data is None:
        fixed = _grid(base, graph, golds, weights, depth)

        def grid_for(rows: np.ndarray):
            return fixed
    else:
        data_weights, _, data_recall, data_ndcg = _grid(base, data, golds, weights, depth)
        grids: dict[float, tuple] = {}  # folds mostly agree on the data graph's weight: one grid per weight

        def grid_for(rows: np.ndarray):
            w = within_one_se(data_weights, data_recall, rows, choose_weight(data_weights, data_recall, data_ndcg, rows))
            if w not in grids:
                grids[w] = _grid(fused_scores(base, data, w), graph, golds, weights, depth)
            return grids[w]

    def chosen(rows: np.ndarray):
        ws, tops, recall, ndcg = grid = grid_for(rows)
        return grid, within_one_se(ws, recall, rows, choose_weight(ws, recall, ndcg, rows))

    rankings: list[list[int]] = [[] for _ in range(n)]
    fold_weights = []
    for f in range(int(assign.max()) + 1):
        (ws, tops, _, _), w = chosen(np.flatnonzero(assign != f))
        fold_weights.append(w)
        for q in np.flatnonzero(assign == f):
            rankings[q] = tops[ws.index(w)][q][:depth].tolist()
    (ws, _, recall, _), weight = chosen(np.arange(n))
    return FusionResult(ws, assign, fold_weights, weight, rankings, recall.mean(axis=1).tolist())


def choose_on_validation(base: np.ndarray, graph: np.ndarray, golds: Sequence[set[int]], validation: Sequence[int],
                         weights: Sequence[float] = DEFAULT_WEIGHTS, depth: int = 10) -> FusionResult:
    """w chosen on the ``validation`` queries alone, every query ranked with it: for a graph built from training
    runs (ToolNet transitions, call-order edges), whose test queries must not choose its weight and whose
    training queries gave its edges. The best w (Recall@5, then NDCG@5) gives way to the smallest w within one
    standard error of it (``within_one_se``): validation sets here are small (TMDB: 15 queries).
    ``fold_weights`` is empty: there are no folds."""
    if not len(validation):
        raise ValueError("choose_on_validation: no validation queries to choose the graph weight on")
    weights, tops, recall, ndcg = _grid(base, graph, golds, weights, depth)
    rows = np.asarray(validation, dtype=np.int64)
    w = within_one_se(weights, recall, rows, choose_weight(weights, recall, ndcg, rows))
    ranked = tops[weights.index(w)]
    return FusionResult(weights, np.zeros(len(golds), dtype=np.int64), [], w,
                        [ranked[q][:depth].tolist() for q in range(len(golds))], recall.mean(axis=1).tolist())
