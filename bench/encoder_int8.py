"""int8 encoders against their fp32 originals (issue 21 item 6): speed and what retrieval loses, in one run.

    python -m bench.encoder_int8 [--sets apibank,toolbench_stable,ultratool,tmdb,nestools] [--limit-texts 600]

For each encoder (offline-minilm = all-MiniLM-L6-v2 and paraphrase-minilm-l3, each fp32 and ``:int8``), on the
benchmarks in ../shared/data/benchmarks: plain embedding retrieval (tool texts as build-graph embeds them, the
queries' own texts) R@5 and NDCG@5; the cosine between each text's int8 and fp32 vector; and the encoding rate in
texts per second, timed on the same texts (the first ``--limit-texts`` tool texts and retrieval-rule texts of
ToolBench, build-graph's two kinds of text) in alternating order, so machine load hits each encoder alike.
Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

DATA_ROOT = Path("../shared/data/benchmarks")
ENCODERS = ("offline-minilm", "offline-minilm:int8", "paraphrase-minilm-l3", "paraphrase-minilm-l3:int8")


def retrieval_scores(toolset, vectors_tools: np.ndarray, vectors_queries: np.ndarray) -> dict:
    from tasks.retrieval.metrics import ndcg_at_k, recall_at_k

    ids = [t.tool_id for t in toolset.tools]
    top = np.argsort(-(vectors_queries @ vectors_tools.T), axis=1, kind="stable")[:, :5]
    r5 = [recall_at_k([ids[i] for i in row], set(q.gold_tools), 5) for q, row in zip(toolset.queries, top)]
    n5 = [ndcg_at_k([ids[i] for i in row], set(q.gold_tools), 5) for q, row in zip(toolset.queries, top)]
    return {"R@5": round(float(np.mean(r5)), 4), "NDCG@5": round(float(np.mean(n5)), 4), "queries": len(r5)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="apibank,toolbench_stable,ultratool,tmdb,nestools")
    ap.add_argument("--limit-texts", type=int, default=600, help="texts of each kind timed per encoder and round")
    ap.add_argument("--rounds", type=int, default=2, help="timing rounds, encoders alternating within each")
    args = ap.parse_args()

    from models.sentence_encoder import EncoderConfig, SentenceEncoder
    from tasks.graph.candidates import retrieval_texts
    from tasks.retrieval.tool_text import embed_text
    from tasks.toolsets.readers import load_benchmark

    encoders = {name: SentenceEncoder(EncoderConfig(name)) for name in ENCODERS}  # int8 files built here, once
    out: dict = {"sets": {}, "rates": {}, "cosine_int8_vs_fp32": {}}
    cosines: dict[str, list[np.ndarray]] = {n: [] for n in ENCODERS if n.endswith(":int8")}
    for name in args.sets.split(","):
        toolset = load_benchmark(name, DATA_ROOT)
        if not toolset.queries:
            continue
        texts = [embed_text(t.doc, "structured") for t in toolset.tools]
        queries = [q.text for q in toolset.queries]
        row, vectors = {}, {}
        for enc_name, enc in encoders.items():
            vectors[enc_name] = (enc.encode(texts), enc.encode(queries))
            row[enc_name] = retrieval_scores(toolset, *vectors[enc_name])
        for int8 in cosines:
            fp32 = int8.removesuffix(":int8")
            cosines[int8].append(np.concatenate([(vectors[int8][i] * vectors[fp32][i]).sum(axis=1) for i in (0, 1)]))
        out["sets"][name] = row
        print(name, json.dumps(row), flush=True)
    for int8, parts in cosines.items():
        c = np.concatenate(parts)
        out["cosine_int8_vs_fp32"][int8] = {"min": round(float(c.min()), 4), "p01": round(float(np.quantile(c, 0.01)), 4),
                                           "mean": round(float(c.mean()), 4), "texts": int(len(c))}

    bench = load_benchmark("toolbench_stable", DATA_ROOT).tools
    kinds = {"tool texts": [embed_text(t.doc, "structured") for t in bench][: args.limit_texts]}
    rt = retrieval_texts(bench)
    kinds["retrieval-rule texts"] = (rt.producers + rt.queries)[: args.limit_texts]
    spent = {(e, k): 0.0 for e in ENCODERS for k in kinds}
    for _ in range(args.rounds):
        for kind, items in kinds.items():
            for enc_name, enc in encoders.items():
                start = time.perf_counter()
                enc.encode(items)
                spent[enc_name, kind] += time.perf_counter() - start
    for enc_name in ENCODERS:
        out["rates"][enc_name] = {kind: round(args.rounds * len(items) / spent[enc_name, kind], 1)
                                  for kind, items in kinds.items()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
