"""The seeded split of ToolRerank's queries: tools held out for validation and test, seen tools.

"Seen" tools are those with a gold API in a training query (``seeded_split``): the shared data sets
have test queries only, so tools are held out with a seeded split and the reranker and classifier
are trained on the queries of the others.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Split:
    """Tools are drawn into a training pool and two held-out pools (validation, test); queries that
    touch a held-out tool go to that pool's split (test wins), the others are divided at random
    into train / validation / test. Seen tools: those with a gold API in a training query."""

    seed: int
    train: list[int]
    val: list[int]
    test: list[int]
    seen_tools: set[str]
    held_out_val: set[str]
    held_out_test: set[str]

    def summary(self) -> dict[str, Any]:
        return {"seed": self.seed, "train": len(self.train), "val": len(self.val), "test": len(self.test),
                "seen_tools": len(self.seen_tools), "held_out_val_tools": len(self.held_out_val),
                "held_out_test_tools": len(self.held_out_test)}


def seeded_split(gold_tools: Sequence[set[str]], seed: int = 0, pools: tuple[float, float] = (0.15, 0.15),
                 shares: tuple[float, float] = (0.6, 0.15)) -> Split:
    """``gold_tools``: per query, the tools (hierarchy parents) of its gold APIs. ``pools``: shares of
    the tools held out for validation and for test; ``shares``: train and validation shares of the
    remaining queries (the rest is test)."""
    rng = np.random.default_rng(seed)
    tools = sorted({t for g in gold_tools for t in g})
    order = [tools[i] for i in rng.permutation(len(tools))]
    n_val, n_test = round(pools[0] * len(tools)), round(pools[1] * len(tools))
    held_val, held_test = set(order[:n_val]), set(order[n_val:n_val + n_test])
    train, val, test, rest = [], [], [], []
    for qi, g in enumerate(gold_tools):
        if g & held_test:
            test.append(qi)
        elif g & held_val:
            val.append(qi)
        else:
            rest.append(qi)
    rest = [rest[i] for i in rng.permutation(len(rest))]
    n_train, n_rval = round(shares[0] * len(rest)), round(shares[1] * len(rest))
    train = sorted(rest[:n_train])
    val = sorted(val + rest[n_train:n_train + n_rval])
    test = sorted(test + rest[n_train + n_rval:])
    seen = {t for qi in train for t in gold_tools[qi]}
    return Split(seed, train, val, test, seen, held_val, held_test)
