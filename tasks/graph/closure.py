"""Indirect dependencies of a decision: every pair that a chain of decided dependencies reaches, as the warehouse's
``prerequisite_closure`` (what ``prerequisites_of`` returns) reads the same edges. The evaluate-only flow reports
the default decision closed this way beside it, for test sets whose gold counts indirect dependencies
(bench/RESULTS.md, "Indirect prerequisites: what the closure adds")."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from schemas.tdi import LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY


def closure_labels(pairs: Sequence[tuple[str, str, str]], labels: np.ndarray) -> np.ndarray:
    """``labels`` of the (group, tool_a, tool_b) ``pairs`` with each "no dependency" pair that a chain of the
    labelled dependencies of its group reaches called dependent in that direction (a depends on b when b is among
    a's prerequisites through the chain; on a cycle, where each reaches the other, a depends on b)."""
    labels = np.asarray(labels)
    needs: dict[tuple[str, str], set[str]] = defaultdict(set)  # (group, dependent) -> its direct prerequisites
    for (group, a, b), label in zip(pairs, labels):
        if label == LABEL_A_DEPENDS_ON_B:
            needs[(group, a)].add(b)
        elif label == LABEL_B_DEPENDS_ON_A:
            needs[(group, b)].add(a)
    reached: dict[tuple[str, str], set[str]] = {}

    def prerequisites(group: str, tool: str) -> set[str]:
        if (group, tool) not in reached:  # depth-first over the group's edges, each tool visited once
            seen, stack = set(), list(needs.get((group, tool), ()))
            while stack:
                t = stack.pop()
                if t not in seen:
                    seen.add(t)
                    stack += needs.get((group, t), ())
            reached[(group, tool)] = seen
        return reached[(group, tool)]

    out = labels.copy()
    for i, ((group, a, b), label) in enumerate(zip(pairs, labels)):
        if label != LABEL_NO_DEPENDENCY or a == b:
            continue
        if b in prerequisites(group, a):
            out[i] = LABEL_A_DEPENDS_ON_B
        elif a in prerequisites(group, b):
            out[i] = LABEL_B_DEPENDS_ON_A
    return out
