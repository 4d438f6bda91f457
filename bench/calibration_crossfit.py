"""How far a better cut could take the tool-level cross-encoder on UltraTool+TMDB's held-out groups, at the real
prior (bench/RESULTS.md, "Preconditions from the discriminator"). Every none pair counts as ``none_weights`` says
(the tool sets' natural none-per-dependency ratio), as calibration counts it. Printed per checkpoint: the stored
cut, the best cut chosen on the held-out groups themselves (in-sample: an upper bound), a cut chosen on half of
the groups and measured on the other half (2-fold, 5 seeded splits of the groups), and the highest in-sample cut
whose recall reaches 0.5 (issue 20's beyond-rule target asks recall 0.5 at precision 0.6; every gold link of these
sets is beyond the name rules).

    .venv/bin/python -m bench.calibration_crossfit artifacts/discriminator/minilm/best [more checkpoints]
"""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from flows.train_discriminator import (TrainDiscriminatorConfig, finetune_pairs, held_out_report_pairs, score_examples,
                                       toolset_none_ratio)
from tasks.training.examples import none_weights
from tasks.training.metrics import choose_threshold, counts_at_cut, dependency_curve, prf_of_counts

BENCHMARKS = Path("../shared/data/benchmarks")


def counts(examples, probs, cut, weights) -> np.ndarray:
    """(true positives, weighted false positives, gold dependencies) at ``cut`` (``metrics.counts_at_cut``)."""
    return counts_at_cut([e.label for e in examples], probs, cut, weights)


def cut_for_recall(examples, probs, weights, recall: float) -> float:
    """The highest cut at which the dependencies called reach ``recall`` of the gold ones (in-sample)."""
    cuts, tp, _, _, n_true = dependency_curve([e.label for e in examples], probs, weights)
    reached = np.flatnonzero(tp >= recall * n_true)
    if not len(reached):
        raise ValueError(f"no cut reaches recall {recall}")
    return float(cuts[reached[0]])


def f1_line(name: str, c: np.ndarray) -> str:
    return "{:32s} P {:.3f} R {:.3f} F1 {:.3f}".format(name, *prf_of_counts(c))


def held_out_groups() -> tuple[list, np.ndarray]:
    """The held-out groups train-discriminator reports (its default --finetune sets and split), every pair they
    hold (``held_out_report_pairs``), and each pair's weight at the sets' real prior."""
    cfg = replace(TrainDiscriminatorConfig(), benchmarks_root=BENCHMARKS)
    valid = held_out_report_pairs(cfg, *finetune_pairs.fn(cfg))
    return valid, none_weights(valid, toolset_none_ratio.fn(cfg.finetune, BENCHMARKS))


def figures(checkpoint: Path, valid: list, weights: np.ndarray) -> dict[str, tuple[float, np.ndarray]]:
    """(cut, counts) per row, for ``f1_line``: the stored cut, the in-sample best cut, the 2-fold cross-fit (cut
    nan: one per half) and the highest in-sample cut reaching recall 0.5."""
    cfg = TrainDiscriminatorConfig()
    labels, groups = [e.label for e in valid], sorted({e.group for e in valid})
    probs = np.array(score_examples.fn(Path(checkpoint), valid, cfg.max_length, 64, True, False)["probs"])
    stored = json.loads((Path(checkpoint) / "calibration.json").read_text())["threshold"]
    best = choose_threshold(labels, probs, "max_f1", 0.9, weights)["threshold"]
    crossfit = np.zeros(3)
    for seed in range(5):
        order = list(groups)
        np.random.default_rng(seed).shuffle(order)
        for half in (set(order[::2]), set(order[1::2])):
            fit = [i for i, e in enumerate(valid) if e.group in half]
            rest = [i for i, e in enumerate(valid) if e.group not in half]
            cut = choose_threshold([labels[i] for i in fit], probs[fit], "max_f1", 0.9, weights[fit])["threshold"]
            crossfit += counts([valid[i] for i in rest], probs[rest], cut, weights[rest])
    half = cut_for_recall(valid, probs, weights, 0.5)
    return {"stored": (stored, counts(valid, probs, stored, weights)), "best": (best, counts(valid, probs, best, weights)),
            "crossfit": (float("nan"), crossfit / 5), "recall_half": (half, counts(valid, probs, half, weights))}


def main(argv: list[str]) -> None:
    valid, weights = held_out_groups()
    for checkpoint in argv:
        rows = figures(Path(checkpoint), valid, weights)
        print(checkpoint)
        print(f1_line(f"stored cut {rows['stored'][0]:.3f}", rows["stored"][1]))
        print(f1_line(f"in-sample best cut {rows['best'][0]:.3f}", rows["best"][1]))
        print(f1_line("2-fold cross-fit", rows["crossfit"][1]))
        print(f1_line(f"in-sample cut {rows['recall_half'][0]:.3f}, recall 0.5", rows["recall_half"][1]))


if __name__ == "__main__":
    main(sys.argv[1:])
