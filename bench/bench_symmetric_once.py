"""Symmetric scoring with each unordered pair scored once against both orders scored apart (bench/RESULTS.md,
"Each unordered pair scored once"): seconds per pair set, their ratio, and how far the scores and the decisions
at the checkpoint's calibrated cut move.

    python -m bench.bench_symmetric_once [--checkpoint artifacts/discriminator/minilm/best] [--rounds 2]

Pair sets, as train-discriminator scores them: the held-out report of the default --finetune sets (every pair of
their held-out groups), the mined TDI's validation sample, and the API-Bank test pairs (--test-max-none 500). Both
paths run round-robin ``--rounds`` times on the same loaded model; each reports its median, so quote the ratio.
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

BENCHMARKS = Path("../shared/data/benchmarks")


def pair_sets(tdi: Path) -> dict[str, list]:
    from flows.train_discriminator import (TrainDiscriminatorConfig, build_toolset_pairs, finetune_pairs,
                                           held_out_report_pairs, load_pretraining_pairs)

    cfg = replace(TrainDiscriminatorConfig(), benchmarks_root=BENCHMARKS)
    return {"held-out report (UltraTool+TMDB)": held_out_report_pairs(cfg, *finetune_pairs.fn(cfg)),
            "TDI validation sample": load_pretraining_pairs.fn(tdi, cfg.pretrain_max_pairs, cfg.pretrain_max_valid,
                                                               cfg.seed, valid_seed=cfg.split_seed)[1],
            "API-Bank test": build_toolset_pairs.fn(("apibank",), BENCHMARKS, cfg.test_max_none, cfg.split_seed)}


def main(argv: list[str] | None = None) -> None:
    from models.discriminator import (DEFAULT_MAX_LENGTH, decide, load_calibration, load_discriminator, predict_proba,
                                      trained_max_length, unordered_pairs)

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default="artifacts/discriminator/minilm/best")
    ap.add_argument("--tdi", default="artifacts/tdi/tdi-mined")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-length", type=int, default=None, help="default: the checkpoint's own (its calibration.json)")
    args = ap.parse_args(argv)
    model, tokenizer = load_discriminator(args.checkpoint)
    calibration = load_calibration(args.checkpoint) or {}
    cut = calibration.get("threshold")
    max_length = args.max_length or trained_max_length(calibration) or DEFAULT_MAX_LENGTH
    print(f"checkpoint {args.checkpoint}, cut {cut}, torch threads {torch.get_num_threads()}")
    print("| pairs | ordered pairs | unordered | both orders apart (s) | each unordered pair once (s) | speedup | "
          "max abs diff | decisions changed |")
    print("|---|---|---|---|---|---|---|---|")
    for name, pairs in pair_sets(Path(args.tdi)).items():
        docs_a, docs_b = [e.doc_a for e in pairs], [e.doc_b for e in pairs]
        apart = [frozenset()] * len(pairs)  # an `ignore` list: the path that scores every ordered pair
        times = {"apart": [], "once": []}
        scores = {}
        for _ in range(args.rounds):
            for path in ("apart", "once"):
                start = time.perf_counter()
                scores[path] = predict_proba(model, tokenizer, docs_a, docs_b, max_length, 128, symmetric=True,
                                             ignore=apart if path == "apart" else None).numpy()
                times[path].append(time.perf_counter() - start)
        apart_s, once_s = statistics.median(times["apart"]), statistics.median(times["once"])
        diff = float(np.abs(scores["apart"] - scores["once"]).max())
        changed = int((decide(scores["apart"], cut) != decide(scores["once"], cut)).sum())
        print(f"| {name} | {len(pairs)} | {len(unordered_pairs(docs_a, docs_b)[0])} | {apart_s:.1f} | {once_s:.1f} | "
              f"{apart_s / once_s:.2f}x | {diff:.1e} | {changed} |")


if __name__ == "__main__":
    main()
