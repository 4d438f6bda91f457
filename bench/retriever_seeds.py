"""Mean and spread over train-retriever runs that differ only in ``--seed`` (bench/RESULTS.md, "Dependency
retriever"): candidate recall and share per held-out set (the share cap also with the pairs ranked by the
parameter head), and the parameter head's and the parameter reranker's figures (``--reranker`` runs).

    for s in 1 2 3; do python -m flows.train_retriever --seed $s --output /tmp/retriever/s$s; done
    python -m bench.retriever_seeds /tmp/retriever/s1 /tmp/retriever/s2 /tmp/retriever/s3
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

SETTINGS = ((1, None), (3, None), (10, 0.05))  # (k, share cap) rows of the table
TARGETS = {"nestools": (0.95, 0.05), "apibank": (0.90, 0.05), "ultratool": (0.90, 0.05), "tmdb": (0.90, 0.05)}


def spread(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="train-retriever --output folders (metrics.json)")
    args = parser.parse_args()
    runs = [json.loads((r / "metrics.json").read_text()) for r in args.runs]
    seeds = [m["config"]["seed"] for m in runs]
    print(f"{len(runs)} runs, seeds {seeds}; best steps {[m.get('best_step') for m in runs]}; validation recall@3 "
          f"{spread([m.get('untrained_validation') for m in runs])} untrained -> "
          f"{spread([m.get('best_validation') for m in runs])}\n")
    print("| set | k | share cap | untrained recall | trained recall | trained share | target |")
    print("|---|---|---|---|---|---|---|")
    for name in runs[0]["test"]["trained"]:
        for k, cap in SETTINGS:
            def pick(m, which):
                return next(r for r in m["test"][which][name]
                            if r["strategy"] == "retrieval" and r["k"] == k and r["share_cap"] == cap)
            before = [pick(m, "untrained")["recall"] for m in runs]
            after = [pick(m, "trained")["recall"] for m in runs]
            share = [pick(m, "trained")["ordered_share"] for m in runs]
            want, most = TARGETS.get(name, (None, None))
            verdict = "-"
            if want is not None:
                r, s = statistics.mean(after), statistics.mean(share)
                misses = ([f"recall {want - r:.3f} short"] if r < want else []) + (
                    [f"share {s - most:.3f} over"] if s > most + 1e-9 else [])
                verdict = "meets" if not misses else "misses: " + ", ".join(misses)
            print(f"| {name} | {k} | {cap if cap is not None else '-'} | {spread(before)} | {spread(after)} | "
                  f"{spread(share)} | {verdict} |")
    ranked = [m["test"].get("head_ranked") for m in runs]
    if all(ranked):
        print("\nShare cap with the pairs ranked by the parameter head:\n")
        print("| set | k | share cap | recall | share | target |\n|---|---|---|---|---|---|")
        for name in ranked[0]:
            for row in ranked[0][name]:
                if row["strategy"] != "retrieval":
                    continue
                k, cap = row["k"], row["share_cap"]
                rows = [next(r for r in got[name] if r["strategy"] == "retrieval" and r["k"] == k
                             and r["share_cap"] == cap) for got in ranked]
                recall, share = [r["recall"] for r in rows], [r["ordered_share"] for r in rows]
                want, most = TARGETS.get(name, (None, None))
                verdict = "-"
                if want is not None and cap == most:
                    r = statistics.mean(recall)
                    verdict = "meets" if r >= want else f"misses: recall {want - r:.3f} short"
                print(f"| {name} | {k} | {cap} | {spread(recall)} | {spread(share)} | {verdict} |")
    heads = [m.get("parameter_head") for m in runs]
    if all(heads):
        print("\n| set | scorer | P | R | F1 | beyond-rule R | beyond-rule P |\n|---|---|---|---|---|---|---|")
        for name in heads[0]["test"]:
            for label, key in (("retriever head", "model"), ("rule exact", "rule_exact"),
                               ("rule exact or partial", "rule_exact_or_partial")):
                rows = [h["test"][name][key] for h in heads]
                beyond = [h["test"][name]["beyond_rule"] for h in heads]
                extra = (f"{spread([b['recall'] for b in beyond])} | {spread([b['precision'] for b in beyond])}"
                         if key == "model" else "- | -")
                print(f"| {name} | {label} | {spread([r['precision'] for r in rows])} | "
                      f"{spread([r['recall'] for r in rows])} | {spread([r['f1'] for r in rows])} | {extra} |")
            rerankers = [m.get("parameter_reranker") for m in runs]
            if all(rerankers):
                rows = [r["test"][name]["model"] for r in rerankers]
                beyond = [r["test"][name]["beyond_rule"] for r in rerankers]
                print(f"| {name} | reranker + head | {spread([r['precision'] for r in rows])} | "
                      f"{spread([r['recall'] for r in rows])} | {spread([r['f1'] for r in rows])} | "
                      f"{spread([b['recall'] for b in beyond])} | {spread([b['precision'] for b in beyond])} |")


if __name__ == "__main__":
    main()
