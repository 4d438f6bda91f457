"""The parameter-level scorer: train the cross-encoder on (parameter, producer) texts with the project's
Trainer path, calibrate its cut on validation, score parameter-level examples; metrics beside the name rule."""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from models.discriminator import CALIBRATION_FILE
from schemas.tdi import LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A
from tasks.training.examples import PairExample
from tasks.training.metrics import choose_probability_cut
from tasks.training.param_examples import ParamExample, pair_examples, param_rule
from tasks.training.trainer import StageArguments, TrainResult, predict_examples, train_classifier

PARAM_MAX_LENGTH = 96  # word pieces per (parameter, producer) text pair


def p_takes(probs: np.ndarray) -> np.ndarray:
    """p(this parameter takes the producer's output): p0 + p2 of the 3-class head (trained on 0 and 1)."""
    probs = np.asarray(probs, dtype=np.float64).reshape(-1, 3)
    return probs[:, LABEL_A_DEPENDS_ON_B] + probs[:, LABEL_B_DEPENDS_ON_A]


def score_param_examples(model, tokenizer, examples: Sequence[ParamExample], max_length: int = PARAM_MAX_LENGTH,
                         batch_size: int = 128) -> np.ndarray:
    """p(takes) of each example, shown with its names (no dropout at scoring time)."""
    if not examples:
        return np.zeros(0)
    return p_takes(predict_examples(model, tokenizer, pair_examples(examples), max_length, batch_size, symmetric=False))


def calibrate(labels: Sequence[int], probs: np.ndarray, criterion: str = "max_f1",
              target_precision: float = 0.9, weights: np.ndarray | None = None) -> dict[str, Any]:
    """The cut on p(takes) chosen on validation (``choose_threshold`` on the 3-class view); ``weights``:
    per unit, how many units a negative stands for (a sample of the negatives)."""
    return choose_probability_cut(np.asarray(labels) == 1, probs, criterion, target_precision, weights) | {
        "level": "parameter"}


def train_param_scorer(model, tokenizer, train: Sequence[ParamExample], valid: Sequence[ParamExample],
                       args: StageArguments, out_dir: Path, name_dropout: float = 0.3, criterion: str = "max_f1",
                       target_precision: float = 0.9, loss_name: str = "category_averaged") -> tuple[TrainResult, dict[str, Any]]:
    """Train on ``train`` (identifier dropout ``name_dropout``), keep the best checkpoint on ``valid``
    (``out_dir/best``), choose the cut on ``valid`` and store it there as ``calibration.json``.
    ``loss_name``: category-averaged CE (Eq. 2) by default: with about one positive in seven, plain CE
    collapsed onto the prior on NesTools (every unit the same p; bench/RESULTS.md)."""
    from models.discriminator import load_discriminator

    train_pairs: list[PairExample] = pair_examples(train, name_dropout, args.seed)
    valid_pairs = pair_examples(valid)
    result = train_classifier(model, tokenizer, train_pairs, valid_pairs, args, Path(out_dir), loss_name=loss_name,
                              stage="param")
    best, best_tok = load_discriminator(result.best_dir)
    probs = score_param_examples(best, best_tok, valid, args.max_length, args.eval_batch_size)
    calibration = calibrate([e.label for e in valid], probs, criterion, target_precision) | {
        "max_length": args.max_length, "n_train": len(train), "n_valid": len(valid), "name_dropout": name_dropout}
    (result.best_dir / CALIBRATION_FILE).write_text(json.dumps(calibration, indent=1, sort_keys=True))
    return result, calibration


def param_metrics(examples: Sequence[ParamExample], probs: np.ndarray, threshold: float,
                  weights: np.ndarray | None = None) -> dict[str, Any]:
    """Parameter-level P/R/F1 of the scorer at ``threshold`` and of the exact and exact-or-partial name
    rules on the same units, and beyond-rule recall (gold units neither rule finds) with precision on
    the units neither rule fires on (as ``tasks.training.metrics.beyond_rule_metrics`` for tool pairs).
    ``weights``: per unit, how many units it stands for in the precision counts (sampled negatives)."""
    y = np.array([e.label for e in examples], dtype=bool)
    w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=np.float64)
    pred = np.asarray(probs) >= threshold
    rule = [param_rule(e.producer, e.param) for e in examples]
    exact = np.array([r == "exact" for r in rule])
    either = np.array([r is not None for r in rule])

    def prf(p: np.ndarray) -> dict[str, Any]:
        tp, predicted = int((p & y).sum()), float(w[p].sum())
        prec = tp / predicted if predicted else 0.0
        rec = tp / int(y.sum()) if y.sum() else 0.0
        return {"precision": prec, "recall": rec, "f1": 2 * prec * rec / (prec + rec) if prec + rec else 0.0,
                "predicted": predicted, "true_positives": tp}

    beyond, silent = y & ~either, ~either
    n_pred = float(w[pred & silent].sum())
    return {"n": len(examples), "gold": int(y.sum()), "threshold": threshold,
            "model": prf(pred), "rule_exact": prf(exact), "rule_exact_or_partial": prf(either),
            "model_or_rule": prf(pred | either),
            "beyond_rule": {"n_gold": int(beyond.sum()),
                            "recall": float((pred & beyond).sum() / beyond.sum()) if beyond.sum() else None,
                            "precision": float((pred & silent & y).sum() / n_pred) if n_pred else None,
                            "n_predicted": n_pred}}
