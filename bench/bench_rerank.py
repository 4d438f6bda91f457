"""Latency of ToolRerank (tasks/retrieval/rerank/) on 100 first-stage candidates per query, against the first stage.

    python -m bench.bench_rerank [--warehouse artifacts/warehouse/tgr.duckdb] [--dataset toolbench_stable]

Reads the library and queries of a built warehouse (``make graph``), trains the reranker on the
seeded training split as ``eval-retrieval`` does (pair-model C and the parameters from
``artifacts/eval/rerank.json`` when present, else C 0.1 and the paper's m_s 10, m_u 50 with
tau 0.75, n 3), then times per test query:

- first stage: encoding the query with the warehouse's encoder, cosine top-100 over the library
  (numpy), and BM25 top-100;
- reranking the 100 candidates: ``ToolReranker.rerank_query`` with all of ToolRerank (pair features
  and scores, classifier, adaptive truncation, Alg. 1 with its extended list / Alg. 2), and the
  pair-model sort alone;
- for scale, one transformer cross-encoder forward over the same 100 (query, API) pairs: the packaged
  all-MiniLM-L6-v2 (torch) and the paraphrase-MiniLM-L3-v2 ONNX graph, which is why the reranker's
  pair model is a logistic regression (the issue's budget: 50 ms p50 per query on CPU).

Writes its section of bench/RESULTS.md (``--no-results``: print only).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SECTION = "ToolRerank reranking latency"


def percentiles(ms: list[float]) -> dict[str, float]:
    return {"p50": round(float(np.percentile(ms, 50)), 3), "p95": round(float(np.percentile(ms, 95)), 3)}


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, (time.perf_counter() - start) * 1000.0


def chosen(dataset: str, path: Path) -> tuple[float, dict]:
    from tasks.retrieval.rerank.query import RerankParams

    default = (0.1, RerankParams(m=50, m_s=10, m_u=50, tau_s=0.75, tau_m=0.75, n=3).__dict__, "defaults")
    if not path.exists():
        return default
    for r in json.loads(path.read_text()):
        if r["dataset"] == dataset and "embedding" in r["params"]:
            p = r["params"]["embedding"]
            return r["pair_model"]["C"], {k: p[k] for k in ("m", "m_s", "m_u", "tau_s", "tau_m", "n")}, str(path)
    return default


def cross_encoder_ms(query: str, docs: list[str], reps: int) -> dict[str, float]:
    """One forward over len(docs) (query, doc) pairs, max 256 tokens: MiniLM-L6 torch, L3 ONNX."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from models.encoder_path import offline_default_path
    from models.sentence_encoder import EncoderConfig, SentenceEncoder

    path = str(offline_default_path())
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1).eval()
    batch = tokenizer([query] * len(docs), docs, padding=True, truncation=True, max_length=256, return_tensors="pt")
    out = {}
    with torch.no_grad():
        model(**batch)
        out["minilm_l6_torch"] = float(np.median([timed(model, **batch)[1] for _ in range(reps)]))
    try:
        l3 = SentenceEncoder(EncoderConfig("paraphrase-minilm-l3"))
    except ModuleNotFoundError:
        return out
    pairs = l3.tokenizer([query] * len(docs), docs, padding=True, truncation=True, max_length=256, return_tensors="np")
    l3.backend.run(pairs["input_ids"], pairs["attention_mask"])
    out["paraphrase_l3_onnx"] = float(np.median(
        [timed(l3.backend.run, pairs["input_ids"], pairs["attention_mask"])[1] for _ in range(reps)]))
    out["tokens_per_pair"] = int(pairs["attention_mask"].sum(1).mean())
    return out


def run(warehouse: str, dataset: str, n_queries: int, candidates: int, seed: int, rerank_json: Path, reps: int) -> dict:
    import torch

    from models.sentence_encoder import EncoderConfig, SentenceEncoder
    from tasks.retrieval.inputs import load_inputs
    from tasks.retrieval.lexical import BM25
    from tasks.retrieval.ranking import cosine_scores, top_k_from_scores
    from tasks.retrieval.rerank.classifier import QueryTypeClassifier, is_single_tool
    from tasks.retrieval.rerank.hierarchy import tool_parents
    from tasks.retrieval.rerank.library import Library
    from tasks.retrieval.rerank.pair_model import pair_training_set
    from tasks.retrieval.rerank.query import RerankParams, ToolReranker
    from tasks.retrieval.rerank.split import seeded_split

    inputs = load_inputs.fn(warehouse, dataset)
    lib = Library(dataset, inputs.tool_ids, inputs.texts,
                  tool_parents(dataset, inputs.tool_ids, inputs.groups, inputs.descriptions), inputs.groups,
                  inputs.embeddings["base"])
    golds = [{lib.index[t] for t in g} for g in inputs.golds]
    split = seeded_split([{lib.parents[g] for g in gold} for gold in golds], seed)
    bm25 = BM25(lib.texts)
    dense = top_k_from_scores(cosine_scores(inputs.query_embeddings, lib.embeddings), 50)
    hard = [[dense[q].tolist()] for q in range(len(golds))]
    c, params, source = chosen(dataset, rerank_json)
    model, feats, labels = pair_training_set(lib, inputs.query_texts, inputs.query_embeddings, golds, split, hard, seed)
    model = model.with_c(c).fit(feats, labels)
    classifier = QueryTypeClassifier().fit(inputs.query_embeddings[split.train],
                                           [is_single_tool(golds[q], lib.parents) for q in split.train])
    reranker = ToolReranker(lib, model, classifier, split.seen_tools, RerankParams(**params))
    encoder = SentenceEncoder(EncoderConfig(inputs.encoder or "offline-minilm", batch_size=1))
    queries = split.test[:n_queries]
    t = {k: [] for k in ("encode", "dense_top", "bm25_top", "rerank_both", "rerank_sort")}
    for q in queries:
        text = inputs.query_texts[q]
        emb, ms = timed(encoder.encode, [text])
        t["encode"].append(ms)
        top, ms = timed(lambda: top_k_from_scores(cosine_scores(emb, lib.embeddings), candidates)[0].tolist())
        t["dense_top"].append(ms)
        _, ms = timed(lambda: top_k_from_scores(bm25.scores(text), candidates)[0])
        t["bm25_top"].append(ms)
        _, ms = timed(reranker.rerank_query, text, emb[0], top, "both")
        t["rerank_both"].append(ms)
        _, ms = timed(reranker.rerank_query, text, emb[0], top, "rerank")
        t["rerank_sort"].append(ms)
    stats = {k: percentiles(v) for k, v in t.items()}
    dense_total = [a + b for a, b in zip(t["encode"], t["dense_top"])]
    stats["dense_first_stage"] = percentiles(dense_total)
    both = stats["rerank_both"]["p50"]
    cross = cross_encoder_ms(inputs.query_texts[queries[0]],
                             [lib.texts[i] for i in top_k_from_scores(
                                 cosine_scores(inputs.query_embeddings[queries[0]], lib.embeddings), candidates)[0]],
                             reps)
    return {"dataset": dataset, "tools": len(lib.tool_ids), "queries": len(queries), "candidates": candidates,
            "encoder": inputs.encoder, "pair_model_C": c, "params": params, "params_from": source,
            "torch_threads": torch.get_num_threads(), "ms": stats,
            "ratio_rerank_to_dense_first_stage": round(both / stats["dense_first_stage"]["p50"], 3),
            "ratio_rerank_to_dense_top_k_only": round(both / stats["dense_top"]["p50"], 3),
            "ratio_rerank_to_bm25": round(both / stats["bm25_top"]["p50"], 3),
            "cross_encoder_100_pairs_ms": cross, "load_avg_1min": round(os.getloadavg()[0], 2)}


def markdown(r: dict) -> str:
    ms = r["ms"]
    cross = r["cross_encoder_100_pairs_ms"]
    rows = [("first stage: encode the query", "encode"), ("first stage: cosine top-100 (numpy)", "dense_top"),
            ("first stage: encode + cosine top-100", "dense_first_stage"), ("first stage: BM25 top-100", "bm25_top"),
            ("rerank 100: pair-model sort only", "rerank_sort"),
            ("rerank 100: ToolRerank (truncation + scores + classifier + Alg. 1/2)", "rerank_both")]
    lines = [f"Command: `{r.get('command') or 'python -m bench.bench_rerank'}`",
             f"Machine: {platform.machine()} {os.cpu_count()} cpus, CPU only ({r['torch_threads']} torch threads), "
             f"1-min load average {r['load_avg_1min']}: other jobs shared the CPU, so read ratios, not absolute numbers.",
             f"{r['dataset']}: {r['tools']} APIs, {r['queries']} test queries, {r['candidates']} candidates per query "
             f"from the dense first stage (encoder `{r['encoder']}`); pair model C {r['pair_model_C']}, parameters "
             f"{r['params']} ({r['params_from']}).", "",
             "| step | p50 ms | p95 ms |", "|---|---|---|"]
    lines += [f"| {label} | {ms[k]['p50']:.3f} | {ms[k]['p95']:.3f} |" for label, k in rows]
    lines += ["", f"ToolRerank p50 / first-stage p50: **{r['ratio_rerank_to_dense_first_stage']}x** the dense first "
                  f"stage with query encoding, {r['ratio_rerank_to_dense_top_k_only']}x its top-k alone, "
                  f"{r['ratio_rerank_to_bm25']}x BM25. Budget: 50 ms p50 per query.",
              "", "For scale, one transformer cross-encoder forward over the same 100 (query, API) pairs "
                  f"(about {cross.get('tokens_per_pair', '?')} tokens per pair, median of runs): all-MiniLM-L6-v2 "
                  f"torch {cross['minilm_l6_torch']:.0f} ms"
              + (f", paraphrase-MiniLM-L3-v2 ONNX {cross['paraphrase_l3_onnx']:.0f} ms" if "paraphrase_l3_onnx" in cross else "")
              + ": far over the budget on these cores, hence the logistic-regression pair model."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.bench_rerank", description=__doc__.split("\n")[0])
    p.add_argument("--warehouse", default="artifacts/warehouse/tgr.duckdb")
    p.add_argument("--dataset", default="toolbench_stable")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--candidates", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rerank-json", default="artifacts/eval/rerank.json")
    p.add_argument("--reps", type=int, default=3, help="cross-encoder forwards timed")
    p.add_argument("--no-results", action="store_true", help="print only, leave bench/RESULTS.md alone")
    a = p.parse_args(argv)
    r = run(a.warehouse, a.dataset, a.queries, a.candidates, a.seed, Path(a.rerank_json), a.reps)
    r["command"] = "python -m bench.bench_rerank " + " ".join(argv if argv is not None else sys.argv[1:])
    print(json.dumps(r, indent=1))
    text = markdown(r)
    print(text)
    if not a.no_results:
        from bench.results import write_section

        write_section(SECTION, text)


if __name__ == "__main__":
    main()
