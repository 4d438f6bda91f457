"""The discriminator's kind head in the graph (issue 22 item 5 and its retrieval target: "+TGR-d with both kinds
>= +TGR-d with data edges only, on every set").

    .venv/bin/python -m bench.kind_head_graph --discriminator artifacts/discriminator/minilm/best \\
        [--toolset apibank --toolset ultratool --toolset tmdb] [--warehouse /tmp/kind_head_graph/tgr.duckdb]

Builds the warehouse with ``flows.build_graph --discriminator`` (a checkpoint with the kind head labels each of
its edges data or precondition; build-graph adds ``tgr_discriminator_data``, the graph without the precondition
edges, when there are any), runs ``flows.eval_retrieval --no-rerank`` on it, and prints per set the
discriminator's edges by kind and R@5 / NDCG@5 on all queries: the encoder alone, +TGR-d over both kinds,
+TGR-d over the data edges only, and the same two with the graph weight chosen by cross-validation (``(cv)``).
Where the head calls no edge a precondition the two graphs are one. Prints only; bench/RESULTS.md quotes it.
"""
from __future__ import annotations

import argparse

from bench.precondition_graph import build_and_evaluate
from warehouse.build import connect

METHODS = (("embedding", "embedding"), ("+TGR-d, both kinds", "embedding+TGR-d"),
           ("+TGR-d, data edges only", "embedding+TGR-d(data)"), ("+TGR-d(cv), both kinds", "embedding+TGR-d(cv)"),
           ("+TGR-d(cv), data edges only", "embedding+TGR-d(data)(cv)"))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--discriminator", required=True, help="a train-discriminator checkpoint (<run>/best)")
    a, toolsets = build_and_evaluate(p, "/tmp/kind_head_graph/tgr.duckdb",
                                     lambda o: ["--discriminator", o.discriminator, "--no-progress"], argv)
    con = connect(a.warehouse)
    try:
        metric = {(d, m): (r, n, q) for d, m, r, n, q in con.execute(
            "SELECT dataset, method, recall, ndcg, n_queries FROM retrieval_metrics "
            "WHERE k = 5 AND query_split = 'all'").fetchall()}
        print(f"checkpoint: {a.discriminator}")
        print("| set | queries | discriminator edges: data / precondition / unknown | method | R@5 | NDCG@5 |")
        print("|---|---|---|---|---|---|")
        for ds in toolsets:
            data, pre, unknown = con.execute(
                "SELECT count(*) FILTER (kind = 'data'), count(*) FILTER (kind = 'precondition'), "
                "count(*) FILTER (kind IS NULL) FROM edges WHERE dataset = ? AND source = 'discriminator'", [ds]).fetchone()
            rows = [(label, metric.get((ds, m))) for label, m in METHODS]
            if (ds, "embedding+TGR-d(data)") not in metric:  # no precondition edge: the data graph is the whole one
                rows = [(label + (" (= both kinds: no precondition edge)" if "data edges only" in label else ""),
                         value if value is not None else dict(rows)[label.replace("data edges only", "both kinds")])
                        for label, value in rows]
            for n, (label, value) in enumerate(rows):
                if value is None:
                    continue
                r, nd, q = value
                lead = f"| {ds} | {q} | {data} / {pre} / {unknown} |" if n == 0 else "| | | |"
                print(f"{lead} {label} | {r:.3f} | {nd:.3f} |")
    finally:
        con.close()


if __name__ == "__main__":
    main()
