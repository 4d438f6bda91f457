"""The tool-level cross-encoder's pair score as one more parameter-head column (bench/RESULTS.md, "Measured, not
adopted: the cross-encoder's pair score as a head column"). Each head is fitted as train-retriever fits it, on
NesTools' fit domains (``nes_fit`` minus ``nes_train`` of ``bench.nestools_split``, and a copy with 30% of the
producers' outputs removed), and measured on ``nes_test``'s units and as tool edges on API-Bank with and without
outputs. The cross-encoder must not have seen the fit domains: train it with ``--finetune-extra <split>/nes_train``.

    .venv/bin/python -m bench.head_cross_encoder_column --retriever artifacts/discriminator/minilm/best/parameter_scorer \\
        --cross-encoder <ce>/best --split <n> --cache <cache>
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

import numpy as np

from tasks.toolsets.readers import DEFAULT_DATA_ROOT as BENCHMARKS
COLUMNS = ("ce_dir", "ce_dep", "ce_dir_logit", "ce_dep_logit")  # p(consumer depends on producer), p0 + p2, log-odds
VARIANTS = (("the default columns", ()), ("+ p(consumer depends on producer)", ("ce_dir",)),
            ("+ p(dependency), either direction", ("ce_dep",)), ("+ log-odds of the first", ("ce_dir_logit",)),
            ("+ log-odds of the second", ("ce_dep_logit",)))


def cross_encoder_scores(checkpoint: Path, name: str, toolset, cache: Path) -> dict[tuple[str, str], list[float]]:
    """(a, b) -> [p(a depends on b), p(dependency)] over every same-group ordered pair, symmetrized; cached."""
    from flows.train_discriminator import score_examples
    from schemas.toolset import Tool
    from tasks.training.examples import build_pairs

    path = cache / f"{name}.json"
    if path.exists():
        return {tuple(k.split("\t")): v for k, v in json.loads(path.read_text()).items()}
    # a doc without its outputs key is shown with none, as build-graph reads it
    shown = dataclasses.replace(toolset, tools=[
        Tool(t.tool_id, t.group, {"input_params": [], "output_params": [], **t.doc}) for t in toolset.tools])
    pairs = build_pairs(shown)
    probs = score_examples.fn(checkpoint, pairs, 96, 64, True, False)["probs"]
    scores = {(e.tool_a, e.tool_b): [p[0], p[0] + p[2]] for e, p in zip(pairs, probs)}
    path.write_text(json.dumps({"\t".join(k): v for k, v in scores.items()}))
    return scores


def prf(tp: int, predicted: int, gold: int) -> list[float]:
    p, r = tp / predicted if predicted else 0.0, tp / gold if gold else 0.0
    return [round(p, 3), round(r, 3), round(2 * p * r / (p + r) if p + r else 0.0, 3)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retriever", type=Path, required=True, help="a parameter scorer folder (retriever + head)")
    parser.add_argument("--cross-encoder", type=Path, required=True, help="a discriminator checkpoint")
    parser.add_argument("--split", type=Path, required=True, help="bench.nestools_split's output folder")
    parser.add_argument("--cache", type=Path, required=True, help="the cross-encoder's scores, kept for reruns")
    args = parser.parse_args()

    from bench.inputs_only_eval import without_outputs as benchmark_without_outputs
    from models.sentence_encoder import EncoderConfig, SentenceEncoder
    from tasks.toolsets.readers import load_toolset_spec, read_toolset_dir
    from tasks.training.param_head import (FEATURES, HEAD_FEATURES, fit_param_head, unit_features, unit_gold,
                                           without_outputs)

    args.cache.mkdir(parents=True, exist_ok=True)
    encode = SentenceEncoder(EncoderConfig(str(args.retriever), batch_size=128)).encode
    nes_fit = read_toolset_dir(args.split / "nes_fit")
    trained = {t.group for t in read_toolset_dir(args.split / "nes_train").tools}
    fit = nes_fit.only_groups({t.group for t in nes_fit.tools} - trained)
    test = read_toolset_dir(args.split / "nes_test")
    tmp = tempfile.TemporaryDirectory()
    apibank_no_outputs = benchmark_without_outputs("apibank", BENCHMARKS, Path(tmp.name))
    sets = {"fit": fit, "fit_copy": without_outputs(fit, 0.3, 0),  # the head's fit: as train-retriever's
            "test": test, "test_no": without_outputs(test, 1.0, 0),
            "api": load_toolset_spec("apibank", BENCHMARKS),
            "api_no": load_toolset_spec(str(apibank_no_outputs), BENCHMARKS)}

    computed = FEATURES + COLUMNS
    rows = {}
    for name, ts in sets.items():
        units, x = unit_features(ts.tools, encode)
        ce = cross_encoder_scores(args.cross_encoder, name, ts, args.cache)
        pair_scores = [ce[(ts.tools[c].tool_id, ts.tools[p].tool_id)] for p, c, _ in units]
        col = np.clip(pair_scores, 1e-4, 1 - 1e-4).reshape(-1, 2)
        rows[name] = (units, np.hstack([x, col, np.log(col / (1 - col))]), unit_gold(ts, ts.tools, units))

    def tool_edges(name: str, probs: np.ndarray, cut: float) -> list[float]:
        ts, (units, _, _) = sets[name], rows[name]
        best: dict[tuple[str, str], float] = {}
        for (p, c, _), v in zip(units, probs):
            key = (ts.tools[c].tool_id, ts.tools[p].tool_id)
            best[key] = max(best.get(key, 0.0), float(v))
        predicted, gold = {k for k, v in best.items() if v >= cut}, {(e.dependent, e.prerequisite) for e in ts.edges}
        return prf(len(predicted & gold), len(predicted), len(gold))

    for label, extra in VARIANTS:
        columns = [computed.index(f) for f in HEAD_FEATURES + extra]
        fitted = ("fit", "fit_copy")
        head = fit_param_head(np.vstack([rows[n][1][:, columns] for n in fitted]),
                              np.concatenate([rows[n][2] for n in fitted]),
                              [sets[n].tools[c].group for n in fitted for _, c, _ in rows[n][0]], seed=0)
        out = {"cut": round(head.threshold, 4), "extra_weights": [round(c, 3) for c in head.coef[len(HEAD_FEATURES):]]}
        for name in ("test", "test_no"):
            taken, gold = head.predict(rows[name][1][:, columns]) >= head.threshold, rows[name][2]
            out[f"{name} units P/R/F1"] = prf(int((taken & gold).sum()), int(taken.sum()), int(gold.sum()))
        for name in ("api", "api_no"):
            out[f"{name} tool edges P/R/F1"] = tool_edges(name, head.predict(rows[name][1][:, columns]), head.threshold)
        print(label, json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
