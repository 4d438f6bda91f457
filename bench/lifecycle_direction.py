"""The direction from the names' lifecycle (tasks/graph/lifecycle.py), measured (bench/RESULTS.md, "The direction
from the names' lifecycle"):

1. per tool set, how often the names order a gold edge, and how often the way the gold goes (every gold edge,
   whatever its tools declare: the names' own accuracy);
2. per checkpoint, the held-out report's pairs (UltraTool's and TMDB's held-out groups, every pair: the figure the
   issue's UltraTool+TMDB target reads) decided at the checkpoint's calibrated cut, the cross-encoder's own
   direction against build-graph's (the names' where both tools declare no inputs), on every pair and at the
   sets' prior.

    .venv/bin/python -m bench.lifecycle_direction --sets ultratool,tmdb,apibank,nestools \\
        --checkpoint artifacts/discriminator/minilm/best [--checkpoint <run>/best ...]
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from schemas.tdi import LABEL_A_DEPENDS_ON_B
from tasks.graph.lifecycle import example_orders, first_of, orient
from tasks.training.metrics import counts_at_cut, prf_of_counts

BENCHMARKS = Path("../shared/data/benchmarks")


def gold_directions(edges: Sequence) -> Counter:
    """Per gold edge: "right" (the names put its prerequisite first), "wrong" or "silent"."""
    said = Counter()
    for e in edges:
        order = first_of(e.dependent, e.prerequisite)  # LABEL_A_DEPENDS_ON_B: the dependent comes later
        said["silent" if order is None else "right" if order == LABEL_A_DEPENDS_ON_B else "wrong"] += 1
    return said


def decisions(examples: Sequence, probs: np.ndarray, cut: float, weights: np.ndarray) -> dict[str, tuple]:
    """(P, R, F1) on every pair and at the prior (``weights``), the cross-encoder's direction and the names'."""
    labels = [e.label for e in examples]
    named = orient(probs, example_orders(examples))[0]
    return {name: (prf_of_counts(counts_at_cut(labels, p, cut)), prf_of_counts(counts_at_cut(labels, p, cut, weights)))
            for name, p in (("cross-encoder's direction", probs), ("names' lifecycle (build-graph)", named))}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="ultratool,tmdb,apibank,nestools")
    parser.add_argument("--checkpoint", action="append", default=[])
    args = parser.parse_args(argv)
    from tasks.toolsets.readers import load_benchmark

    print("| set | gold edges | ordered by the names | the gold's way | share right |\n|---|---|---|---|---|")
    for name in args.sets.split(","):
        said = gold_directions(load_benchmark(name, BENCHMARKS).edges)
        ordered = said["right"] + said["wrong"]
        share = f"{said['right'] / ordered:.2f}" if ordered else "-"
        print(f"| {name} | {sum(said.values())} | {ordered} | {said['right']} | {share} |")
    if not args.checkpoint:
        return
    from bench.calibration_crossfit import held_out_groups
    from flows.train_discriminator import TrainDiscriminatorConfig, score_examples

    valid, weights = held_out_groups()
    orders = example_orders(valid)
    print(f"\nheld-out groups: {len(valid)} pairs, {sum(e.label != 1 for e in valid)} gold; the names order "
          f"{sum(o is not None for o in orders)} pairs")
    print("| checkpoint | decision | P | R | F1 | at the prior: P | R | F1 |\n|---|---|---|---|---|---|---|---|")
    for checkpoint in args.checkpoint:
        cut = json.loads((Path(checkpoint) / "calibration.json").read_text())["threshold"]
        probs = np.array(score_examples.fn(Path(checkpoint), valid, TrainDiscriminatorConfig().max_length, 64, True,
                                           False)["probs"])
        for decision, (every, prior) in decisions(valid, probs, cut, weights).items():
            print(f"| {checkpoint} | {decision} | " + " | ".join(f"{x:.3f}" for x in (*every, *prior)) + " |")


if __name__ == "__main__":
    main()
