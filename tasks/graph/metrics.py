"""Predicted dependency edges against a tool set's gold edges: precision, recall and F1 (direction
counted), and recall per gold dependency kind, so a source can be measured on the kind it is meant to find
(a precondition scorer on 'precondition' gold edges)."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from schemas.toolset import DEPENDENCY_KINDS, DependencyEdge

UNLABELLED = "unlabelled"  # gold edges whose kind the source does not say
GOLD_KINDS = (*DEPENDENCY_KINDS, UNLABELLED)


def edge_metrics(gold: Sequence[DependencyEdge], predicted: Iterable[DependencyEdge]) -> dict[str, Any]:
    """P/R/F1 of ``predicted`` against ``gold`` on ordered (dependent, prerequisite) pairs, and per gold kind
    (data, precondition, unlabelled) the gold edges, those found and the recall (None without gold edges
    of that kind); ``predicted_kinds`` counts the predicted edges by their own kind."""
    gold_kind = {(e.dependent, e.prerequisite): e.kind or UNLABELLED for e in gold}
    found: dict[tuple[str, str], str] = {}
    for e in predicted:
        found.setdefault((e.dependent, e.prerequisite), e.kind or UNLABELLED)
    hits = gold_kind.keys() & found.keys()
    precision = len(hits) / len(found) if found else 0.0
    recall = len(hits) / len(gold_kind) if gold_kind else 0.0
    by_kind = {}
    for kind in GOLD_KINDS:
        pairs = [p for p, k in gold_kind.items() if k == kind]
        kept = sum(p in hits for p in pairs)
        by_kind[kind] = {"gold": len(pairs), "found": kept, "recall": kept / len(pairs) if pairs else None}
    return {"precision": precision, "recall": recall,
            "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
            "predicted": len(found), "gold": len(gold_kind), "true_positives": len(hits),
            "recall_by_gold_kind": by_kind,
            "predicted_kinds": {k: sum(v == k for v in found.values()) for k in GOLD_KINDS}}


def describe(dataset: str, source: str, m: dict[str, Any]) -> str:
    """One log line: P/R/F1 and the recall per gold kind that has gold edges."""
    kinds = ", ".join(f"{k} {v['recall']:.3f} ({v['found']}/{v['gold']})"
                      for k, v in m["recall_by_gold_kind"].items() if v["gold"])
    return (f"{dataset}: {source} edges vs gold: P {m['precision']:.3f} R {m['recall']:.3f} F1 {m['f1']:.3f} "
            f"({m['true_positives']} of {m['predicted']} predicted, {m['gold']} gold); recall by gold kind: "
            f"{kinds or 'no gold edges'}")
