"""The retrieval metrics of Table 2 with binary relevance: Recall@k, NDCG@k, Pass Rate@k, and their
means over queries.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


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
