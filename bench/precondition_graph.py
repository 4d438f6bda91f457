"""Does TGR gain from call-order precondition edges? (issue 22: "+TGR with both kinds >= +TGR with data edges only")

    .venv/bin/python -m bench.precondition_graph [--toolset apibank --toolset ultratool --toolset tmdb]
        [--warehouse /tmp/precondition_graph/tgr.duckdb] [--edges 5]

Builds the warehouse with ``flows.build_graph --no-discriminator`` (the schema rule's edges are the data
graph; the precondition edges come from the training runs' call order, source ``call_order``), runs
``flows.eval_retrieval --no-rerank`` on it, and prints R@5 / NDCG@5 on each set's **test queries** (the
queries whose gold run is in the test split; the edges never saw them): the encoder alone, +TGR over the
data graph (``embedding+TGR-s``; the encoder alone where the schema rule finds no edge, Eq. 3 over an empty
graph being the identity), +TGR over the data graph and the precondition edges (``embedding+TGR-s+order``) and
the same with its graph weight chosen on the validation queries (``embedding+TGR-s+order(val)``).
Then the call-order counts per set and the first ``--edges`` precondition edges with their training support,
and whether the gold graph has the pair. Prints only; bench/RESULTS.md quotes its figures.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from warehouse.build import connect

DATA_ONLY, BOTH, BOTH_VAL = "embedding+TGR-s", "embedding+TGR-s+order", "embedding+TGR-s+order(val)"


def run(module: str, args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{module} failed ({done.returncode}):\n{done.stderr[-3000:]}")


def build_and_evaluate(parser: argparse.ArgumentParser, default_warehouse: str, graph_args, argv=None):
    """Parse the shared options (--toolset, --warehouse, --no-build), build the warehouse with build-graph
    (``graph_args(parsed)``: its options beyond the tool sets and the warehouse) unless --no-build, and run
    eval-retrieval on it; returns (parsed options, tool set names)."""
    parser.add_argument("--toolset", action="append", help="benchmark names (default: apibank, ultratool, tmdb)")
    parser.add_argument("--warehouse", default=default_warehouse)
    parser.add_argument("--no-build", action="store_true", help="evaluate the warehouse as it is")
    a = parser.parse_args(argv)
    toolsets = a.toolset or ["apibank", "ultratool", "tmdb"]
    Path(a.warehouse).parent.mkdir(parents=True, exist_ok=True)
    if not a.no_build:
        run("flows.build_graph", [x for t in toolsets for x in ("--toolset", t)]
            + ["--warehouse", a.warehouse, *graph_args(a)])
    run("flows.eval_retrieval", ["--warehouse", a.warehouse, "--out-dir", str(Path(a.warehouse).parent / "eval"),
                                 "--no-rerank", "--no-sql-check", "--paper-encoder", "none"])
    return a, toolsets


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--edges", type=int, default=5, help="precondition edges listed per set")
    a, toolsets = build_and_evaluate(p, "/tmp/precondition_graph/tgr.duckdb", lambda _: ["--no-discriminator"], argv)
    con = connect(a.warehouse)
    try:
        metric = {(d, m): (r, n, q) for d, m, r, n, q in con.execute(
            "SELECT dataset, method, recall, ndcg, n_queries FROM retrieval_metrics "
            "WHERE k = 5 AND query_split = 'test'").fetchall()}
        print("| set | test queries | call-order edges | schema edges | method | R@5 | NDCG@5 |")
        print("|---|---|---|---|---|---|---|")
        for ds in toolsets:
            n_order, n_schema = con.execute(
                "SELECT count(*) FILTER (source = 'call_order'), count(*) FILTER (source = 'schema') FROM edges "
                "WHERE dataset = ?", [ds]).fetchone()
            base = metric.get((ds, "embedding"))
            if base is None:
                print(f"| {ds} | no test queries (no gold call orders?) | {n_order} | {n_schema} | | | |")
                continue
            rows = [("embedding", base), ("+TGR data only" + ("" if (ds, DATA_ONLY) in metric else " (no edges: = embedding)"),
                                           metric.get((ds, DATA_ONLY), base)),
                    ("+TGR data + precondition", metric[(ds, BOTH)])]
            if (ds, BOTH_VAL) in metric:  # the graph weight chosen on the validation queries
                (w,) = con.execute("SELECT graph_weight FROM retrieval_metrics WHERE dataset = ? AND method = ? AND k = 5 "
                                   "AND query_split = 'test'", [ds, BOTH_VAL]).fetchone()
                rows.append((f"+TGR data + precondition, w = {w:g} chosen on validation", metric[(ds, BOTH_VAL)]))
            for n, (label, (r, nd, q)) in enumerate(rows):
                lead = f"| {ds} | {q} | {n_order} | {n_schema} |" if n == 0 else "| | | | |"
                print(f"{lead} {label} | {r:.3f} | {nd:.3f} |")
        print()
        for ds in toolsets:
            (params,) = con.execute("SELECT params_json FROM edge_lineage WHERE dataset = ? AND source = 'call_order'",
                                    [ds]).fetchone() or (None,)
            if params:
                c = json.loads(params)
                print(f"{ds}: {c['train_runs']} training runs, {c['pairs']} ordered pairs, {c['accepted']} accepted, "
                      f"rejected {c['rejected']}, generic first steps {c['generic_first_steps']}")
            edges = con.execute("""
                SELECT e.prerequisite, e.dependent, o.n_both, e.prob,
                       EXISTS (SELECT 1 FROM edges g WHERE g.dataset = e.dataset AND g.source = 'manual'
                               AND g.dependent = e.dependent AND g.prerequisite = e.prerequisite) AS gold
                FROM edges e JOIN call_order_pairs o ON o.dataset = e.dataset AND o.split = 'train'
                     AND o.tool_a = e.prerequisite AND o.tool_b = e.dependent
                WHERE e.dataset = ? AND e.source = 'call_order' ORDER BY o.n_both DESC, e.prerequisite, e.dependent LIMIT ?""",
                                [ds, a.edges]).fetchall()
            for pre, dep, support, share, gold in edges:
                print(f"  {pre} -> {dep}: {support} training runs, first in {share:.2f}" + (", a gold edge" if gold else ""))
    finally:
        con.close()


if __name__ == "__main__":
    main()
