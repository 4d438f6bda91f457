"""Benchmarks of the tool graph stage (CPU unless a GPU is present; results go to bench/RESULTS.md).

    python -m bench.bench_graph [--discriminator artifacts/discriminator/<run>/best] [--pairs 512]

1. Pair-scoring throughput (pairs/s) of the discriminator on ToolBench candidate pairs. Without
   --discriminator a MiniLM pair classifier with an untrained head is timed: the same compute as a
   MiniLM-based discriminator (the head's weights do not change the cost).
2. Candidate pruning on ToolBench stable: pairs kept per strategy; edge recall against the
   discriminator's edges on *all* same-category pairs of the smallest categories (needs
   --discriminator; ToolBench ships no gold edges), and against API-Bank's gold edges.
2b. Gold-edge recall of every pruning strategy on the sets with gold edges (API-Bank, UltraTool,
   TMDB): ``python -m bench.bench_graph --pruning-only`` (seconds; no scoring).
3. Latency p50/p95 of one query's top-10 over all 2,479 ToolBench tools: numpy vs the SQL macro
   ``tool_top_k`` on a warehouse file (random unit embeddings: the cost does not depend on values).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

DATA_ROOT = Path("../shared/data/benchmarks")


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


def bench_scoring(tools, pairs, checkpoint: str | None, batch_sizes=(16, 64)) -> dict:
    import torch

    from models.discriminator import load_discriminator, load_model, load_tokenizer, predict_proba
    from schemas.docs import canonical_doc_json

    if checkpoint:
        model, tokenizer = load_discriminator(checkpoint)
    else:
        model, tokenizer = load_model(None), load_tokenizer(None)
    docs = [canonical_doc_json(t.doc) for t in tools]
    a, b = [docs[i] for i, _ in pairs], [docs[j] for _, j in pairs]
    predict_proba(model, tokenizer, a[:16], b[:16], batch_size=16)  # warm-up
    out = {"model": checkpoint or "offline-minilm (untrained head)", "pairs": len(pairs),
           "device": "cuda" if torch.cuda.is_available() else "cpu", "threads": torch.get_num_threads()}
    for bs in batch_sizes:
        start = time.perf_counter()
        predict_proba(model, tokenizer, a, b, batch_size=bs)
        out[f"pairs_per_s_batch{bs}"] = round(len(pairs) / (time.perf_counter() - start), 1)
    return out


def bench_pruning(toolbench, apibank, checkpoint: str | None, max_reference_pairs: int) -> dict:
    from models.sentence_encoder import SentenceEncoder
    from tasks.graph.pruning import PRUNING_STRATEGIES, prune_candidates
    from tasks.graph.scoring import edges_from_probabilities, score_pairs
    from tasks.retrieval.tool_text import embed_style_for, embed_text

    encoder = SentenceEncoder()
    result: dict = {"strategies": {}}
    emb = {}
    for ts in (toolbench, apibank):
        emb[ts.name] = encoder.encode([embed_text(t.doc, embed_style_for(ts.name)) for t in ts.tools])
    configs = [("params", 0), ("neighbours", 5), ("neighbours", 10), ("params+neighbours", 5),
               ("params+neighbours", 10)]
    assert {s for s, _ in configs} < set(PRUNING_STRATEGIES)
    pruned = {}
    for strategy, m in configs:
        key = f"{strategy}" + (f" m={m}" if m else "")
        tb = prune_candidates(toolbench.tools, emb[toolbench.name], strategy, m or 5)
        ab = prune_candidates(apibank.tools, emb[apibank.name], strategy, m or 5, apibank.edges)
        pruned[key] = set(tb.candidates)
        result["strategies"][key] = {
            "toolbench_pairs_in_categories": tb.pairs_in_groups, "toolbench_pairs_kept": len(tb.candidates),
            "toolbench_kept_share": round(len(tb.candidates) / tb.pairs_in_groups, 4),
            "apibank_pairs_kept": f"{len(ab.candidates)}/{ab.pairs_in_groups}",
            "apibank_gold_edges_kept": f"{ab.known_edges_kept}/{ab.known_edges_in_groups}",
        }
    if checkpoint:
        # Reference: the discriminator on every same-category pair of the smallest categories.
        sizes: dict[str, list[int]] = {}
        for i, t in enumerate(toolbench.tools):
            sizes.setdefault(t.group, []).append(i)
        chosen, total = [], 0
        for group, idx in sorted(sizes.items(), key=lambda kv: (len(kv[1]), kv[0])):
            n = len(idx) * (len(idx) - 1) // 2
            if total + n > max_reference_pairs:
                break
            chosen.append(group)
            total += n
        full = prune_candidates(toolbench.tools, None, "none")
        ref_pairs = [p for p in full.candidates if toolbench.tools[p[0]].group in chosen]
        probs = score_pairs(checkpoint, toolbench.tools, ref_pairs)
        index = {t.tool_id: i for i, t in enumerate(toolbench.tools)}
        ref = set()
        for edge, _, _ in edges_from_probabilities(toolbench.tools, ref_pairs, probs):
            i, j = index[edge.dependent], index[edge.prerequisite]
            ref.add((min(i, j), max(i, j)))
        result["reference"] = {"categories": len(chosen), "pairs_scored": len(ref_pairs), "edges": len(ref)}
        ref_pair_set = set(ref_pairs)
        for key, kept in pruned.items():
            in_ref = kept & ref_pair_set
            result["strategies"][key]["toolbench_ref_pairs_kept_share"] = round(len(in_ref) / max(len(ref_pairs), 1), 4)
            result["strategies"][key]["toolbench_ref_edge_recall"] = round(len(ref & kept) / max(len(ref), 1), 4)
    return result


def bench_gold_recall(root: Path, neighbours=(5, 10)) -> dict:
    """Pairs kept and gold-edge recall (kept / in groups) per strategy on the gold-edge tool sets."""
    from models.sentence_encoder import SentenceEncoder
    from tasks.graph.pruning import PRUNING_STRATEGIES, prune_candidates
    from tasks.retrieval.tool_text import embed_style_for, embed_text
    from tasks.toolsets.readers import load_benchmark

    encoder = SentenceEncoder()
    out: dict = {}
    for name in ("apibank", "ultratool", "tmdb"):
        ts = load_benchmark(name, root)
        emb = encoder.encode([embed_text(t.doc, embed_style_for(name)) for t in ts.tools])
        for strategy in PRUNING_STRATEGIES:
            for m in (neighbours if "neighbours" in strategy else (0,)):
                r = prune_candidates(ts.tools, emb, strategy, m or 5, ts.edges)
                key = strategy + (f" m={m}" if m else "")
                out.setdefault(key, {})[name] = {"pairs_kept": len(r.candidates), "pairs": r.pairs_in_groups,
                                                 "kept_share": round(r.kept_share, 3),
                                                 "gold_kept": r.known_edges_kept, "gold": r.known_edges_in_groups,
                                                 "recall": round(r.known_edge_recall, 3)}
    return out


def gold_recall_markdown(r: dict) -> str:
    names = ("apibank", "ultratool", "tmdb")
    lines = ["**Pruning recall on gold edges** (`python -m bench.bench_graph --pruning-only`; recall = gold edges "
             "kept / gold edges inside a group; share = pairs kept / same-group pairs):", "",
             "| strategy | " + " | ".join(f"{n} recall | {n} share" for n in names) + " |",
             "|---|" + "---|---|" * len(names)]
    for key, per in r.items():
        lines.append(f"| {key} | " + " | ".join(
            f"{per[n]['recall']:.3f} ({per[n]['gold_kept']}/{per[n]['gold']}) | {per[n]['kept_share']:.3f}"
            for n in names) + " |")
    return "\n".join(lines)


def bench_latency(toolbench, repeats: int) -> dict:
    from tasks.retrieval.ranking import cosine_top_k
    from warehouse.build import DatasetTables, build_warehouse, connect

    rng = np.random.default_rng(0)
    dim = 384
    emb = rng.normal(size=(len(toolbench.tools), dim)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    ds = "toolbench_stable"
    rows = {
        "datasets": [{"dataset": ds, "embed_style": "structured", "encoder": "random", "discriminator": None,
                      "built_at": datetime(2024, 1, 1)}],
        "tools": [{"dataset": ds, "tool_id": t.tool_id, "name": t.doc["name"], "tool_group": t.group,
                   "doc_json": "{}", "embed_text": ""} for t in toolbench.tools],
        "tool_embeddings": [{"dataset": ds, "tool_id": t.tool_id, "kind": "base", "embedding": emb[i].tolist()}
                            for i, t in enumerate(toolbench.tools)],
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.duckdb"
        build_warehouse(path, [DatasetTables(ds, rows)], dim)
        con = connect(path)
        queries = rng.normal(size=(repeats, dim)).astype(np.float32)
        sql_ms, np_ms = [], []
        con.execute("SELECT * FROM tool_top_k(?, 'base', ?, 10)", [ds, queries[0].tolist()]).fetchall()  # warm-up
        for q in queries:
            ql = q.tolist()
            start = time.perf_counter()
            con.execute("SELECT * FROM tool_top_k(?, 'base', ?, 10)", [ds, ql]).fetchall()
            sql_ms.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            cosine_top_k(q, emb, 10)
            np_ms.append((time.perf_counter() - start) * 1000)
        con.close()
    return {"tools": len(toolbench.tools), "repeats": repeats,
            "sql_ms_p50": round(statistics.median(sql_ms), 3), "sql_ms_p95": round(percentile(sql_ms, 95), 3),
            "numpy_ms_p50": round(statistics.median(np_ms), 3), "numpy_ms_p95": round(percentile(np_ms, 95), 3),
            "sql_over_numpy_p50": round(statistics.median(sql_ms) / statistics.median(np_ms), 1)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.bench_graph")
    p.add_argument("--discriminator", default=None)
    p.add_argument("--data-root", default=str(DATA_ROOT))
    p.add_argument("--pairs", type=int, default=512, help="pairs timed for throughput")
    p.add_argument("--reference-pairs", type=int, default=3000, help="max all-pairs scored for the recall reference")
    p.add_argument("--repeats", type=int, default=200)
    p.add_argument("--out", default=None, help="also write the JSON here")
    p.add_argument("--no-results", action="store_true", help="do not rewrite the section in bench/RESULTS.md")
    p.add_argument("--pruning-only", action="store_true",
                   help="only the gold-edge recall of pruning on API-Bank, UltraTool, TMDB (seconds)")
    a = p.parse_args(argv)
    if a.pruning_only:
        recall = bench_gold_recall(Path(a.data_root))
        print(gold_recall_markdown(recall))
        if a.out:
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            Path(a.out).write_text(json.dumps(recall, indent=2) + "\n")
        if not a.no_results:
            from bench.results import write_section

            write_section("Pruning recall on gold edges", gold_recall_markdown(recall))
        return recall

    from tasks.graph.pruning import prune_candidates
    from tasks.toolsets.readers import load_benchmark

    root = Path(a.data_root)
    if not (root / "toolbench_stable" / "tools.jsonl").exists():
        raise SystemExit(f"ToolBench stable not found under {root} (../shared/data/benchmarks)")
    toolbench = load_benchmark("toolbench_stable", root)
    apibank = load_benchmark("apibank", root)
    candidates = prune_candidates(toolbench.tools, None, "params").candidates
    sample = [candidates[i] for i in np.random.default_rng(0).permutation(len(candidates))[: a.pairs]]
    result = {"machine": f"{platform.machine()} {os.cpu_count()} cpus", "python": platform.python_version(),
              "load_avg_1min_at_start": round(os.getloadavg()[0], 1),
              "scoring": bench_scoring(toolbench.tools, sample, a.discriminator),
              "pruning": bench_pruning(toolbench, apibank, a.discriminator, a.reference_pairs),
              "latency": bench_latency(toolbench, a.repeats)}
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n")
    if not a.no_results:
        from bench.results import write_section

        write_section("Graph and retrieval", results_markdown(result, argv))
    return result


def results_markdown(r: dict, argv: list[str] | None) -> str:
    sc, lat, pr = r["scoring"], r["latency"], r["pruning"]
    cmd = " ".join(["python -m bench.bench_graph", *(argv or [])])
    rates = {k: v for k, v in sc.items() if k.startswith("pairs_per_s")}
    lines = [f"Command: `{cmd}`",
             f"Machine: {r['machine']}, {sc['device']} ({sc['threads']} torch threads), 1-min load average "
             f"{r.get('load_avg_1min_at_start', 'n/a')}: other jobs shared the CPU, so read ratios, not absolute numbers.", "",
             f"**Pair scoring** ({sc['model']}, {sc['pairs']} ToolBench candidate pairs, max length 256): "
             + ", ".join(f"{v} pairs/s at batch {k.split('batch')[1]}" for k, v in rates.items()) + ". "
             "Scoring time scales with the number of pairs, so the kept share below is the saving factor of "
             "pruning.", "",
             "**Candidate pruning** (unordered pairs inside a category / API-Bank level group):", "",
             "| strategy | ToolBench pairs kept | kept share | API-Bank pairs kept | API-Bank gold edges kept |"
             + (" ToolBench ref. edge recall |" if "reference" in pr else ""),
             "|---|---|---|---|---|" + ("---|" if "reference" in pr else "")]
    for key, v in pr["strategies"].items():
        row = (f"| {key} | {v['toolbench_pairs_kept']:,} / {v['toolbench_pairs_in_categories']:,} | "
               f"{v['toolbench_kept_share']:.3f} | {v['apibank_pairs_kept']} | {v['apibank_gold_edges_kept']} |")
        if "reference" in pr:
            row += f" {v['toolbench_ref_edge_recall']:.3f} |"
        lines.append(row)
    if "reference" in pr:
        ref = pr["reference"]
        lines += ["", f"ToolBench has no gold edges: the reference is the discriminator's own edges on all "
                      f"{ref['pairs_scored']:,} pairs of the {ref['categories']} smallest categories "
                      f"({ref['edges']} edges)."]
    else:
        lines += ["", "ToolBench edge recall needs `--discriminator` (reference: the discriminator on all pairs of "
                      "the smallest categories; ToolBench ships no gold edges)."]
    lines += ["", f"**Retrieval latency**, one query, top 10 over {lat['tools']:,} tools x 384 dims, "
                  f"{lat['repeats']} queries:", "",
              "| path | p50 ms | p95 ms |", "|---|---|---|",
              f"| numpy (`tasks.retrieval.ranking.cosine_top_k`) | {lat['numpy_ms_p50']} | {lat['numpy_ms_p95']} |",
              f"| SQL (`tool_top_k` macro, DuckDB file) | {lat['sql_ms_p50']} | {lat['sql_ms_p95']} |", "",
              f"SQL / numpy at p50: {lat['sql_over_numpy_p50']}x (the SQL path includes query parsing and the "
              "result round trip)."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
