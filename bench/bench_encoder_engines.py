"""The sentence encoders in ONNX Runtime: texts/s of each encoder build-graph runs, in torch and in its fp32 ONNX
export (``EncoderConfig.engine``), on the same texts, and how far the vectors move (bench/RESULTS.md, "The
sentence encoders in ONNX Runtime").

    python -m bench.bench_encoder_engines [--discriminator artifacts/discriminator/minilm/best] [--texts 1000]

Variants: torch at the build's batch of 64 texts (the reference), torch at 16 (its best on 2 cores), and the fp32
export in ONNX Runtime, which runs 16 texts at a time whatever the batch (``ONNX_MAX_BATCH``). Texts: ToolBench's tool
texts as build-graph embeds them (``embed_text``, its default style) for the tool encoder
(``offline-minilm``); and, with ``--discriminator``, the retrieval rule's texts (consumer inputs and producer docs)
for its parameter scorer's retriever (``parameter_scorer/``: the retrieval rule's and the parameter level's
encoder). Engines run round-robin, ``--rounds`` times, median each: quote the ratios. Agreement: the largest |difference| of a vector coordinate,
the lowest cosine between a text's two vectors, and the share of texts whose 10 nearest texts are the same.
``--peak-rss N`` also encodes N tool texts in a fresh process per variant (``MEMORY_VARIANTS``), for the peak RSS.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

DATA_ROOT = Path("../shared/data/benchmarks")


def tool_texts(root: Path, n: int) -> list[str]:
    from tasks.retrieval.tool_text import embed_style_for, embed_text
    from tasks.toolsets.readers import load_benchmark

    tools = load_benchmark("toolbench_stable", root).tools[:n]
    return [embed_text(t.doc, embed_style_for("toolbench_stable")) for t in tools]


def retrieval_rule_texts(root: Path, n: int) -> list[str]:
    """The retrieval rule's texts of ToolBench (``retrieval_texts``): its consumer-input queries and producer docs,
    half and half."""
    from tasks.graph.candidates import retrieval_texts
    from tasks.toolsets.readers import load_benchmark

    texts = retrieval_texts(load_benchmark("toolbench_stable", root).tools)
    return texts.queries[:n // 2] + texts.producers[:n - min(n // 2, len(texts.queries))]


def neighbours_same(a: np.ndarray, b: np.ndarray, k: int = 10) -> float:
    sa, sb = a @ a.T, b @ b.T
    return float(np.mean([set(np.argsort(-sa[i])[:k + 1]) == set(np.argsort(-sb[i])[:k + 1]) for i in range(len(a))]))


VARIANTS = {  # name: (engine, batch size); the first is the reference the others are compared with
    "torch, batch 64 (before)": ("torch", 64),
    "torch, batch 16": ("torch", 16),
    "ONNX Runtime (16 texts a run)": ("onnx", 64),
}


def bench(encoders: dict[str, tuple[str, list[str]]], rounds: int) -> list[dict]:
    from models.sentence_encoder import EncoderConfig, SentenceEncoder

    rows = []
    for label, (name, texts) in encoders.items():
        runners = {v: SentenceEncoder(EncoderConfig(name, engine=e, batch_size=b)) for v, (e, b) in VARIANTS.items()}
        for enc in runners.values():
            enc.encode(texts[:32])  # warm-up
        times: dict[str, list[float]] = {v: [] for v in runners}
        vectors = {}
        for _ in range(rounds):
            for v, enc in runners.items():
                start = time.perf_counter()
                vectors[v] = enc.encode(texts)
                times[v].append(time.perf_counter() - start)
        reference = next(iter(VARIANTS))
        ref_s = statistics.median(times[reference])
        for v in runners:
            cos = np.sum(vectors[reference] * vectors[v], axis=1)
            rows.append({"encoder": label, "model": name, "texts": len(texts), "max_length": runners[v].max_length,
                         "variant": v, "texts_per_s": round(len(texts) / statistics.median(times[v]), 1),
                         "speedup": round(ref_s / statistics.median(times[v]), 2),
                         "max_abs_diff": float(np.abs(vectors[reference] - vectors[v]).max()),
                         "min_cosine": float(cos.min()),
                         "same_10_nearest": neighbours_same(vectors[reference], vectors[v])})
    return rows


def markdown(rows: list[dict], command: str) -> str:
    lines = [f"`{command}`", "",
             "| encoder | texts (max length) | variant | texts/s | speedup | max abs diff | lowest cosine | "
             "same 10 nearest |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['encoder']} | {r['texts']} ({r['max_length']}) | {r['variant']} | {r['texts_per_s']} | "
                     f"{r['speedup']:.2f}x | {r['max_abs_diff']:.1e} | {r['min_cosine']:.7f} | "
                     f"{r['same_10_nearest']:.1%} |")
    return "\n".join(lines) + "\n"


MEMORY_VARIANTS = {  # name: (engine, batch size, texts per ONNX Runtime run)
    "torch, batch 64": ("torch", 64, None),
    "torch, batch 16": ("torch", 16, None),
    "ONNX Runtime, 64 texts a run": ("onnx", 64, 64),
    "ONNX Runtime, 16 texts a run (the default)": ("onnx", 64, 16),
}


def encode_alone(root: Path, n: int, engine: str, batch: int, per_run: int | None) -> dict:
    """Run in a process of its own (``--alone``): encode ``n`` tool texts; seconds and the process's peak RSS."""
    import resource

    import models.sentence_encoder as sentence_encoder

    if per_run is not None:
        sentence_encoder.ONNX_MAX_BATCH = per_run
    texts = tool_texts(root, n)
    encoder = sentence_encoder.SentenceEncoder(sentence_encoder.EncoderConfig("offline-minilm", engine=engine,
                                                                              batch_size=batch))
    start = time.perf_counter()
    encoder.encode(texts)
    return {"seconds": round(time.perf_counter() - start, 1),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def peak_rss(root: Path, n: int) -> list[dict]:
    """Each MEMORY_VARIANTS row in a fresh process (a peak RSS is per process)."""
    import subprocess
    import sys

    rows = []
    for name, (engine, batch, per_run) in MEMORY_VARIANTS.items():
        out = subprocess.run([sys.executable, "-m", "bench.bench_encoder_engines", "--data-root", str(root), "--alone",
                              engine, str(batch), str(per_run or 0), str(n)], capture_output=True, text=True,
                             check=True).stdout
        rows.append({"variant": name, "texts": n, **json.loads(out.strip().splitlines()[-1])})
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(prog="python -m bench.bench_encoder_engines", description=__doc__.splitlines()[0])
    p.add_argument("--discriminator", default=None, help="a checkpoint whose parameter_scorer/ is timed too")
    p.add_argument("--data-root", default=str(DATA_ROOT))
    p.add_argument("--texts", type=int, default=1000, help="texts per encoder")
    p.add_argument("--rounds", type=int, default=2, help="round-robin timing rounds (median)")
    p.add_argument("--out", default=None, help="also write the JSON here")
    p.add_argument("--peak-rss", type=int, default=0, metavar="N",
                   help="also encode N tool texts once per MEMORY_VARIANTS row, each in a process of its own: seconds "
                        "and peak RSS")
    p.add_argument("--alone", nargs=4, default=None, help=argparse.SUPPRESS)  # one --peak-rss row (its own process)
    args = p.parse_args(argv)
    root = Path(args.data_root)
    if args.alone:
        engine, batch, per_run, n = args.alone
        print(json.dumps(encode_alone(root, int(n), engine, int(batch), int(per_run) or None)))
        return []
    encoders = {"tool texts": ("offline-minilm", tool_texts(root, args.texts))}
    if args.discriminator:
        encoders["retrieval-rule texts (the parameter scorer's retriever)"] = (
            str(Path(args.discriminator) / "parameter_scorer"), retrieval_rule_texts(root, args.texts))
    rows = bench(encoders, args.rounds)
    if args.peak_rss:
        memory = peak_rss(root, args.peak_rss)
        print("| variant | tool texts | seconds | peak RSS |\n|---|---|---|---|\n" + "\n".join(
            f"| {m['variant']} | {m['texts']} | {m['seconds']} | {m['peak_rss_mb']} MB |" for m in memory))
        rows = rows + [{"memory": memory}]
    print(json.dumps(rows, indent=2))
    print(markdown(rows, "python -m bench.bench_encoder_engines " + " ".join(argv if argv is not None else
                                                                              __import__("sys").argv[1:])))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
