"""Can a separate cut for pairs *without* parameter-match evidence add recall? (issue 7 diagnostic)

Scores the calibration pairs (held-out UltraTool/TMDB groups + TDI validation, as the train flow
builds them) and the API-Bank test pairs with a checkpoint, then compares one global cut with two
cuts chosen on validation: one for pairs with a parameter-match hint, one for pairs without.

    .venv/bin/python -m bench.calibration_strata --checkpoint artifacts/discriminator/minilm/best
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import flows.train_discriminator as td
from models.discriminator import decide, load_calibration
from schemas.docs import parse_doc
from schemas.name_rule import feeds
from tasks.training.doc_views import trained_method_docs
from tasks.training.examples import grouped_split, none_weights
from tasks.training.metrics import choose_threshold


def has_hint(e) -> bool:
    a, b = parse_doc(e.doc_a), parse_doc(e.doc_b)
    return bool(a and b and (feeds(a, b) or feeds(b, a)))


def dependency_counts(y, pred) -> str:
    y, pred = np.asarray(y), np.asarray(pred)
    tp = int(((pred == y) & (y != 1)).sum())
    fp, fn = int((pred != 1).sum()) - tp, int((y != 1).sum()) - tp
    f1 = 2 * tp / max(2 * tp + fp + fn, 1)
    return f"F1 {f1:.3f} (TP {tp}, FP {fp}, FN {fn})"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", default="artifacts/discriminator/minilm/best")
    a = p.parse_args(argv)
    cfg, best = td.TrainDiscriminatorConfig(), Path(a.checkpoint)
    ft_valid = grouped_split(td.build_toolset_pairs.fn(cfg.finetune, cfg.benchmarks_root, cfg.finetune_max_none, cfg.split_seed),
                             cfg.valid_fraction, cfg.split_seed)[1]
    tdi = td.resolve_pretrain_data(cfg.pretrain_data)
    sets = {"finetune": ft_valid}
    if tdi is not None:
        sets["tdi"] = td.load_pretraining_pairs.fn(tdi, cfg.pretrain_max_pairs, cfg.pretrain_max_valid, cfg.seed,
                                                   valid_seed=cfg.split_seed,
                                                   method_docs=trained_method_docs(load_calibration(best)))[1]
    sets["test"] = td.build_toolset_pairs.fn(cfg.test, cfg.benchmarks_root, cfg.test_max_none, cfg.split_seed)
    probs = {n: np.asarray(td.score_examples.fn(best, ex, cfg.max_length, 128, True, False)) for n, ex in sets.items()}
    hints = {n: np.array([has_hint(e) for e in ex]) for n, ex in sets.items()}
    prior = td.toolset_none_ratio.fn(cfg.finetune, cfg.benchmarks_root)
    valid = [n for n in sets if n != "test"]
    y = np.array([e.label for n in valid for e in sets[n]])
    p_all, h = np.concatenate([probs[n] for n in valid]), np.concatenate([hints[n] for n in valid])
    w = np.concatenate([none_weights(sets[n], prior) for n in valid])
    cut = choose_threshold(y, p_all, "max_f1", 0.9, w)
    cut_h = choose_threshold(y[h], p_all[h], "max_f1", 0.9, w[h])
    cut_n = choose_threshold(y[~h], p_all[~h], "max_f1", 0.9, w[~h])
    print(f"validation at the natural prior ({prior:.1f} none per dependency): one cut {cut['threshold']:.3f} F1 {cut['f1']:.3f}; "
          f"hint pairs cut {cut_h['threshold']:.3f} P {cut_h['precision']:.3f} F1 {cut_h['f1']:.3f}; "
          f"no-hint pairs cut {cut_n['threshold']:.3f} P {cut_n['precision']:.3f} R {cut_n['recall']:.3f} F1 {cut_n['f1']:.3f}")
    for n, ex in sets.items():
        y_n = [e.label for e in ex]
        two = np.where(hints[n], decide(probs[n], cut_h["threshold"]), decide(probs[n], cut_n["threshold"]))
        print(f"{n} ({len(ex)} pairs, {int(hints[n].sum())} with a hint): one cut {dependency_counts(y_n, decide(probs[n], cut['threshold']))}; "
              f"two cuts {dependency_counts(y_n, two)}")


if __name__ == "__main__":
    main()
