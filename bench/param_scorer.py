"""The parameter-level scorer on NesTools held-out domains (issue 20 item 3).

NesTools' 146 domains (``group``) are split seeded 70/15/15 (no domain in two splits). The scorer
(3-layer offline MiniLM cross-encoder, tasks/training/param_scorer.py) trains on mined TDI v2
(``--tdi``) and, in variant ``tdi+nestools``, also on the train domains' gold parameter edges with
sampled negatives; the checkpoint is chosen on a sample of the validation domains and the cut is
calibrated on every (producer, consumer input) unit of the validation domains; the figures are on
every unit of every same-group ordered pair of the test domains (no pruning: all gold in reach),
with the name rules on the same units beside them.

    .venv/bin/python -m bench.param_scorer --tdi /tmp/m20/big --variant tdi+nestools --out /tmp/param-bench
"""
from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np

from tasks.graph.pruning import same_group_pairs
from tasks.toolsets.readers import load_toolset_spec
from tasks.training.param_examples import (ParamExample, load_tdi_param_examples, parameter_units, split_groups,
                                           toolset_param_examples, unit_labels)


def units_of(toolset, groups, keep_negatives: float = 1.0, seed: int = 0) -> tuple[list[ParamExample], np.ndarray]:
    """Every gold unit of ``groups`` and a seeded ``keep_negatives`` share of the others, with weights
    (1 / keep_negatives on a negative) that give precision and the calibration the full class prior."""
    tools = [t for t in toolset.tools if t.group in groups]
    units = parameter_units(tools, same_group_pairs(tools))
    labels = unit_labels(tools, units, toolset)
    rng = random.Random(seed)
    kept = [(u, y) for u, y in zip(units, labels) if y or rng.random() < keep_negatives]
    examples = [ParamExample(tools[p].doc, tools[c].doc, q, y, tools[c].group, tools[p].tool_id, tools[c].tool_id)
                for (p, c, q), y in kept]
    return examples, np.array([1.0 if y else 1.0 / keep_negatives for _, y in kept])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tdi", type=Path, required=True, help="a mined TDI v2 dataset folder")
    parser.add_argument("--variant", choices=("tdi", "tdi+nestools"), default="tdi+nestools")
    parser.add_argument("--out", type=Path, default=Path("/tmp/param-bench"))
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--loss", choices=("ce", "category_averaged"), default="category_averaged")
    parser.add_argument("--max-train", type=int, default=20000, help="cap on training examples (seeded sample)")
    parser.add_argument("--max-length", type=int, default=96)
    parser.add_argument("--name-dropout", type=float, default=0.3)
    parser.add_argument("--keep-negatives", type=float, default=1.0,
                        help="share of negative validation/test units scored (seeded); figures reweighted to all")
    args = parser.parse_args()

    from models.discriminator import load_model, load_tokenizer
    from tasks.training.param_scorer import param_metrics, score_param_examples, train_param_scorer
    from tasks.training.trainer import StageArguments
    started = time.time()
    toolset = load_toolset_spec("nestools")
    train_g, valid_g, test_g = split_groups({t.group for t in toolset.tools}, seed=args.split_seed)
    train = load_tdi_param_examples(args.tdi, "train", seed=args.seed)
    if args.variant == "tdi+nestools":
        train += toolset_param_examples(toolset, train_g, seed=args.seed)
    random.Random(args.seed).shuffle(train)
    train = train[: args.max_train]
    select = toolset_param_examples(toolset, valid_g, negatives_per_positive=3, seed=args.seed)  # checkpoint choice
    valid_units, valid_w = units_of(toolset, valid_g, args.keep_negatives, args.seed)
    test_units, test_w = units_of(toolset, test_g, args.keep_negatives, args.seed)
    stage = StageArguments(epochs=args.epochs, batch_size=32, learning_rate=args.learning_rate, max_length=args.max_length,
                           seed=args.seed, evals_per_epoch=2, progress=False, length_grouped=True)  # as its figures were measured
    tokenizer, model = load_tokenizer("offline-minilm"), load_model("offline-minilm", args.layers)
    out = args.out / f"{args.variant}-seed{args.seed}-n{args.max_train}-lr{args.learning_rate:g}-{args.loss}"
    t0 = time.time()
    result, _ = train_param_scorer(model, tokenizer, train, select, stage, out, args.name_dropout, loss_name=args.loss)
    train_s = time.time() - t0
    from models.discriminator import load_discriminator
    from tasks.training.param_scorer import calibrate

    best, tok = load_discriminator(result.best_dir)
    t0 = time.time()
    p_valid = score_param_examples(best, tok, valid_units, args.max_length)
    calibration = calibrate([e.label for e in valid_units], p_valid, weights=valid_w)
    p_test = score_param_examples(best, tok, test_units, args.max_length)
    score_s = time.time() - t0
    (result.best_dir / "calibration.json").write_text(json.dumps(calibration | {"max_length": args.max_length}, indent=1))
    report = {"variant": args.variant, "seed": args.seed, "learning_rate": args.learning_rate, "loss": args.loss, "layers": args.layers,
              "max_length": args.max_length, "epochs": args.epochs, "name_dropout": args.name_dropout, "split_seed": args.split_seed,
              "domains": {"train": len(train_g), "validation": len(valid_g), "test": len(test_g)},
              "train_examples": len(train), "train_positives": sum(e.label for e in train),
              "select_examples": len(select), "best_step": result.best_step, "calibration": calibration,
              "keep_negatives": args.keep_negatives,
              "validation": param_metrics(valid_units, p_valid, calibration["threshold"], valid_w),
              "test": param_metrics(test_units, p_test, calibration["threshold"], test_w),
              "gold_param_edges_in_test_domains": sum(1 for e in toolset.parameter_edges
                                                      if next((t.group for t in toolset.tools if t.tool_id == e.dependent), None) in test_g),
              "seconds": {"train": round(train_s), "score_valid_and_test": round(score_s),
                          "total": round(time.time() - started)},
              "units_scored": len(valid_units) + len(test_units)}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
