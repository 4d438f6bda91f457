"""Pair scoring speed: pairs/s of each predict-path variant on the same candidate pairs, and how far the
non-reference variants move the probabilities and the edge decisions (bench/RESULTS.md, "Pair scoring speed").

    python -m bench.bench_scoring --discriminator artifacts/discriminator/<run>/best [--pairs 192] [--rounds 2]

Timed pairs: a seeded sample of ToolBench candidate pairs (params+text pruning). Variants run round-robin,
``--rounds`` times, and each reports its median, so machine load hits all of them alike: quote the ratios.
Agreement: the sample plus every API-Bank candidate pair, scored in both orders as build-graph does, with
the checkpoint's calibrated threshold (calibration.json; argmax without one).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from schemas.name_rule import DEFAULT_MAX_PRODUCERS

os.environ.setdefault("HF_HUB_OFFLINE", "1")

DATA_ROOT = Path("../shared/data/benchmarks")
TARGET = 200.0  # issue 20: pairs/s on 2 CPU cores, both orders as build-graph scores them
SECTION = "## Pair scoring speed"


def candidate_pairs(name: str, root: Path, sample: int | None, seed: int = 0):
    from tasks.graph.pruning import prune_candidates
    from tasks.toolsets.readers import load_benchmark

    ts = load_benchmark(name, root)
    pairs = prune_candidates(ts.tools, None, "params+text").candidates
    if sample is not None and len(pairs) > sample:
        pairs = sorted(random.Random(seed).sample(pairs, sample))
    return ts.tools, pairs


def pair_inputs(tools, pairs, max_producers):
    from schemas.docs import canonical_doc_json
    from tasks.graph.schema_rule import group_common_names, group_common_partial_inputs

    docs = [canonical_doc_json(t.doc) for t in tools]
    common, common_inputs = group_common_names(tools, max_producers), group_common_partial_inputs(tools, max_producers)
    return ([docs[i] for i, _ in pairs], [docs[j] for _, j in pairs],
            [common[tools[i].group] for i, _ in pairs], [common_inputs[tools[i].group] for i, _ in pairs])


def onnx_runners(model, folder: Path, calibration: dict | None = None) -> dict:
    """ONNX Runtime runners of ``model`` by variant name, each over the export build-graph's ``--scoring-precision
    onnx`` runs (``models.onnx_scoring``): that export as it is; with onnxruntime's transformer fusions
    (``onnxruntime.transformers.optimizer``); and three int8 copies: ORT's dynamic quantizer per tensor and per
    channel, and its static quantizer (MatMul weights per channel, activation ranges by MinMax over
    ``calibration``, a tokenized batch list: pairs of another set than the agreement pairs). Empty when the ``onnx``
    package the exporter needs is missing."""
    try:
        import onnx  # noqa: F401  (torch.onnx.export and ORT's quantizers need it)
    except ModuleNotFoundError:
        return {}
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)
    from onnxruntime.transformers import optimizer

    from models.encoder_int8 import quantize_int8
    from models.onnx_scoring import OnnxPairClassifier, onnx_model_path

    export = onnx_model_path(model, folder)
    fused = folder / "model-fused.onnx"
    optimizer.optimize_model(str(export), model_type="bert", num_heads=model.config.num_attention_heads,
                             hidden_size=model.config.hidden_size, opt_level=1, use_gpu=False).save_model_to_file(
        str(fused))
    int8, per_channel, static = (folder / f"model-{n}.onnx" for n in ("int8", "int8-per-channel", "int8-static"))
    quantize_dynamic(str(export), str(int8), weight_type=QuantType.QInt8)
    quantize_int8(export, per_channel)  # the int8 encoders' quantizer: per channel
    runners = {"onnxruntime fp32": OnnxPairClassifier(model, folder),
               "onnxruntime fp32, transformer fusions (ORT's optimizer)": OnnxPairClassifier(model, path=fused),
               "onnxruntime int8 (ORT dynamic quantizer)": OnnxPairClassifier(model, path=int8),
               "onnxruntime int8, per channel (ORT dynamic quantizer)": OnnxPairClassifier(model, path=per_channel)}
    if calibration:
        class Batches(CalibrationDataReader):
            def __init__(self) -> None:
                self.batches = iter(calibration)

            def get_next(self) -> dict | None:
                return next(self.batches, None)

        quantize_static(str(export), str(static), Batches(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax, op_types_to_quantize=["MatMul"])
        runners["onnxruntime int8 static, MatMul per channel (MinMax on UltraTool pairs)"] = OnnxPairClassifier(
            model, path=static)
    return runners


def calibration_batches(tokenizer, max_length: int, root: Path, max_producers: int, n_pairs: int = 256,
                        batch_size: int = 32) -> list[dict]:
    """Tokenized batches of UltraTool candidate pairs in both orders (not the agreement pairs): the activation
    ranges the static int8 variant is calibrated on."""
    from models.discriminator import encode_pairs

    tools, pairs = candidate_pairs("ultratool", root, n_pairs, seed=1)
    a, b, ignore, ignore_inputs = pair_inputs(tools, pairs, max_producers)
    enc = encode_pairs(tokenizer, a + b, b + a, max_length, ignore + ignore,
                       ignore_inputs=ignore_inputs + ignore_inputs)
    out = []
    for start in range(0, len(enc["input_ids"]), batch_size):
        rows = range(start, min(start + batch_size, len(enc["input_ids"])))
        batch = tokenizer.pad({k: [enc[k][i] for i in rows] for k in enc}, return_tensors="np")
        out.append({k: v.astype(np.int64) for k, v in batch.items()})
    return out


def padded_predict(model, tokenizer, docs_a, docs_b, max_length, batch_size, ignore, ignore_inputs):
    """The predict path without dynamic padding: every batch padded to max_length, input order (for the ratio)."""
    import torch

    from models.discriminator import encode_pairs

    enc = encode_pairs(tokenizer, docs_a, docs_b, max_length, ignore, ignore_inputs=ignore_inputs)
    out = torch.empty(len(docs_a), 3)
    with torch.inference_mode():
        for start in range(0, len(docs_a), batch_size):
            idx = list(range(start, min(start + batch_size, len(docs_a))))
            batch = tokenizer.pad({k: [enc[k][i] for i in idx] for k in enc}, padding="max_length",
                                  max_length=max_length, return_tensors="pt")
            out[idx] = model(**batch).logits.float().softmax(-1)
    return out


def one_thread(fn):
    """``fn`` with torch on one thread (restored after)."""
    import torch

    def run(*args):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn(*args)
        finally:
            torch.set_num_threads(threads)
    return run


def nograd_predict(model, tokenizer, docs_a, docs_b, max_length, batch_size, ignore, ignore_inputs):
    """predict_proba as it was before (torch.no_grad instead of inference_mode)."""
    import torch

    from models.discriminator import predict_proba

    with torch.no_grad():
        return predict_proba.__wrapped__(model, tokenizer, docs_a, docs_b, max_length, batch_size,
                                         ignore=ignore, ignore_inputs=ignore_inputs)


def bench(checkpoint: str, root: Path, n_pairs: int, rounds: int, batch_size: int, max_producers: int) -> dict:
    import torch

    from models.discriminator import (decide, load_calibration, load_discriminator, predict_proba, scoring_model,
                                      trained_max_length)
    from tasks.graph.scoring import check_label_order

    model, tokenizer = load_discriminator(checkpoint)
    check_label_order(model.config.id2label, checkpoint)
    model.eval()
    calibration = load_calibration(checkpoint) or {}
    max_length = trained_max_length(calibration) or 256
    threshold = calibration.get("threshold")
    tools, pairs = candidate_pairs("toolbench_stable", root, n_pairs)
    a, b, ignore, ignore_inputs = pair_inputs(tools, pairs, max_producers)
    int8, bf16 = scoring_model(model, "int8"), scoring_model(model, "bf16")
    tmp = Path(tempfile.mkdtemp(prefix="bench-scoring-"))
    onnx_variants = onnx_runners(model, tmp, calibration_batches(tokenizer, max_length, root, max_producers))

    def torch_variant(m, precision="fp32", bs=batch_size):
        return lambda x, y, ig, igi: predict_proba(m, tokenizer, x, y, max_length, bs, ignore=ig, ignore_inputs=igi,
                                                   precision=precision)

    variants = {
        f"reference: torch fp32, no_grad, batch {batch_size} (predict_proba before)":
            lambda x, y, ig, igi: nograd_predict(model, tokenizer, x, y, max_length, batch_size, ig, igi),
        f"torch fp32, padded to max_length {max_length}, unsorted":
            lambda x, y, ig, igi: padded_predict(model, tokenizer, x, y, max_length, batch_size, ig, igi),
        f"torch fp32, inference_mode, batch {batch_size} (predict_proba now)": torch_variant(model),
        "torch fp32, inference_mode, batch 16": torch_variant(model, bs=16),
        "torch fp32, inference_mode, batch 256": torch_variant(model, bs=256),
        "torch fp32, inference_mode, 1 thread": one_thread(torch_variant(model)),
        "torch bf16 weights (--scoring-precision bf16)": torch_variant(bf16, "bf16"),
        "torch int8 dynamic quantization (--scoring-precision int8)": torch_variant(int8, "int8"),
    }
    for name, runner in onnx_variants.items():  # predict_proba's path, another engine
        variants[name] = torch_variant(runner, "onnx")
    reference = next(iter(variants))
    same_arithmetic = {k for k in variants if k.startswith("torch fp32") and "(predict_proba now)" not in k}

    # where the time goes (reference path, one order): pair texts + tokenization vs forward
    from models.discriminator import encode_pairs

    start = time.perf_counter()
    enc = encode_pairs(tokenizer, a, b, max_length, ignore, ignore_inputs=ignore_inputs)
    encode_s = time.perf_counter() - start
    lengths = [len(ids) for ids in enc["input_ids"]]

    variants[reference](a[:16], b[:16], ignore[:16], ignore_inputs[:16])  # warm-up
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            start = time.perf_counter()
            fn(a, b, ignore, ignore_inputs)
            times[name].append(time.perf_counter() - start)
    ref_s = statistics.median(times[reference])

    # agreement, both orders as build-graph scores: the sample and every API-Bank candidate pair
    ab_tools, ab_pairs = candidate_pairs("apibank", root, None)
    sets = [(a, b, ignore, ignore_inputs), pair_inputs(ab_tools, ab_pairs, max_producers)]

    def both_orders(fn):
        out = []
        for x, y, ig, igi in sets:
            p = fn(x, y, ig, igi).double().numpy()
            q = fn(y, x, ig, igi).double().numpy()
            out.append((p + q[:, [2, 1, 0]]) / 2)
        return np.concatenate(out)

    ref_probs = both_orders(variants[reference])
    ref_labels = decide(ref_probs, threshold)
    rows = []
    for name, fn in variants.items():
        forward_per_s = len(pairs) / statistics.median(times[name])
        row = {"variant": name, "median_s": round(statistics.median(times[name]), 3),
               "speedup": round(ref_s / statistics.median(times[name]), 2),
               "pairs_per_s_one_order": round(forward_per_s, 1),
               "pairs_per_s_both_orders": round(forward_per_s / 2, 1)}
        if name in same_arithmetic:  # fp32, only batching or threads differ: agreement not re-checked (saves minutes)
            rows.append(row | {"identical_decisions": None})
            continue
        probs = ref_probs if name == reference else both_orders(fn)
        labels = decide(probs, threshold)
        rows.append({"variant": name, "median_s": round(statistics.median(times[name]), 3),
                     "speedup": round(ref_s / statistics.median(times[name]), 2),
                     "pairs_per_s_one_order": round(forward_per_s, 1),
                     "pairs_per_s_both_orders": round(forward_per_s / 2, 1),
                     "identical_decisions": round(float((labels == ref_labels).mean()), 4),
                     "changed_decisions": int((labels != ref_labels).sum()),
                     "max_prob_diff": float(np.abs(probs - ref_probs).max()),
                     "max_dependency_prob_diff": float(np.abs((probs[:, 0] + probs[:, 2])
                                                              - (ref_probs[:, 0] + ref_probs[:, 2])).max())})
    return {"checkpoint": checkpoint, "layers": model.config.num_hidden_layers, "max_length": max_length,
            "threshold": threshold, "timed_pairs": len(pairs), "rounds": rounds, "agreement_pairs": len(ref_probs),
            "apibank_pairs": len(ab_pairs), "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
            "cpu": platform.processor() or platform.machine(), "onnx_variants": bool(onnx_variants),
            "mean_tokens": round(float(np.mean(lengths)), 1),
            "share_at_max_length": round(float(np.mean(np.array(lengths) == max_length)), 3),
            "encode_share_of_reference": round(encode_s / ref_s, 3), "rows": rows}


def markdown(r: dict, command: str, note: str | None = None) -> str:
    best = max(r["rows"], key=lambda row: row["pairs_per_s_both_orders"])
    exact = [row for row in r["rows"] if row["identical_decisions"] == 1.0]
    best_exact = max(exact, key=lambda row: row["pairs_per_s_both_orders"])
    cut = "argmax (no calibration.json)" if r["threshold"] is None else f"the calibrated threshold {r['threshold']:.3f}"
    lines = [SECTION, "",
             f"`{command}`", "", *([note, ""] if note else []),
             f"{r['timed_pairs']} ToolBench candidate pairs (params+text pruning, seeded sample), checkpoint "
             f"`{r['checkpoint']}` ({r['layers']} layers, max_length {r['max_length']}, mean {r['mean_tokens']} word "
             f"pieces, {r['share_at_max_length']:.0%} of pairs at max_length), {r['threads']} torch threads on "
             f"{r['cpu_count']} cores shared with other jobs: median of {r['rounds']} round-robin rounds, so the "
             "**speedup column is the figure to quote**; absolute pairs/s move with the machine's load. "
             f"Pair texts + tokenization are {r['encode_share_of_reference']:.0%} of the reference's time; the "
             "forward pass is the rest. Agreement: the timed pairs plus all "
             f"{r['apibank_pairs']} API-Bank candidate pairs ({r['agreement_pairs']} in all), both orders averaged "
             f"as build-graph scores them, decisions at {cut}.", "",
             "| variant | speedup | pairs/s one order | pairs/s both orders | identical decisions | max Δp | max Δp(dep) |",
             "|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        if row["identical_decisions"] is None:
            lines.append(f"| {row['variant']} | {row['speedup']:.2f}x | {row['pairs_per_s_one_order']} | "
                         f"{row['pairs_per_s_both_orders']} | not re-checked (fp32, same arithmetic) | | |")
            continue
        lines.append(f"| {row['variant']} | {row['speedup']:.2f}x | {row['pairs_per_s_one_order']} | "
                     f"{row['pairs_per_s_both_orders']} | {row['identical_decisions']:.2%} "
                     f"({row['changed_decisions']} changed) | {row['max_prob_diff']:.2g} | "
                     f"{row['max_dependency_prob_diff']:.2g} |")
    met = best["pairs_per_s_both_orders"] >= TARGET
    lines += ["", f"Target ≥ {TARGET:.0f} pairs/s (both orders, as build-graph scores): "
              + (f"met by {best['variant']} ({best['pairs_per_s_both_orders']} pairs/s)." if met else
                 f"**not met**: the fastest variant, {best['variant']}, gives {best['pairs_per_s_both_orders']} pairs/s, "
                 f"{TARGET - best['pairs_per_s_both_orders']:.0f} short ({best['pairs_per_s_both_orders'] / TARGET:.0%} of it)"
                 f"; the fastest with identical decisions, {best_exact['variant']}, "
                 f"{best_exact['pairs_per_s_both_orders']} pairs/s.")]
    if not r["onnx_variants"]:
        lines.append("ONNX Runtime rows need the `onnx` package for torch.onnx.export (a project dependency: "
                     "`make setup` installs it).")
    return "\n".join(lines) + "\n"


HAND_NOTES = "What this says"  # where the lines written by hand begin: a rerun keeps them


def write_section(text: str, path: Path = Path(__file__).with_name("RESULTS.md")) -> None:
    """Replace this benchmark's lines of bench/RESULTS.md (or append them): from its heading to the notes written by
    hand (``HAND_NOTES``), a subsection or the next section, whichever comes first; those are kept."""
    old = path.read_text() if path.exists() else ""
    start = old.find(SECTION + "\n")
    if start < 0:
        path.write_text(old.rstrip("\n") + "\n\n" + text)
        return
    ends = [at for at in (old.find(mark, start + len(SECTION)) for mark in ("\n## ", "\n### ", "\n" + HAND_NOTES))
            if at >= 0]
    path.write_text(old[:start] + text + ("\n" + old[min(ends) + 1:] if ends else ""))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.bench_scoring", description=__doc__.splitlines()[0])
    p.add_argument("--discriminator", required=True, help="checkpoint folder (…/best)")
    p.add_argument("--data-root", default=str(DATA_ROOT))
    p.add_argument("--pairs", type=int, default=192, help="ToolBench candidate pairs timed")
    p.add_argument("--rounds", type=int, default=2, help="round-robin timing rounds (median)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-producers", type=int, default=DEFAULT_MAX_PRODUCERS)
    p.add_argument("--note", default=None, help="how the checkpoint was made (a line in the RESULTS.md section)")
    p.add_argument("--out", default=None, help="also write the JSON here")
    p.add_argument("--no-results", action="store_true", help="do not rewrite the section in bench/RESULTS.md")
    args = p.parse_args(argv)
    result = bench(args.discriminator, Path(args.data_root), args.pairs, args.rounds, args.batch_size,
                   args.max_producers)
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    if not args.no_results:
        given = list(argv if argv is not None else sys.argv[1:])
        if "--note" in given:  # the note is printed beside the command, not inside it
            del given[given.index("--note"):given.index("--note") + 2]
        command = "python -m bench.bench_scoring " + shlex.join(given)
        write_section(markdown(result, command, args.note))
    return result


if __name__ == "__main__":
    main()
