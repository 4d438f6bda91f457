"""Dependencies the tools' own docs state (tasks/graph/stated.py) in the shared tool sets: how many, how many the
gold edges hold (where a set has gold), how many a built warehouse's discriminator graph had without them, and a
seeded sample to read by hand (bench/RESULTS.md, "Dependencies the docs state").

    .venv/bin/python -m bench.bench_stated_edges                                   # counts per set
    .venv/bin/python -m bench.bench_stated_edges --sets toolbench_stable --sample 50 --seed 46 \\
        --sample-out bench/stated_sample.md --warehouse <w>.duckdb                # + a sample, + a built graph
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

DATA_ROOT = Path("../shared/data/benchmarks")
SETS = ("apibank", "nestools", "ultratool", "tmdb", "toolbench_stable")


def warehouse_edges(path: str | None, dataset: str) -> dict[tuple[str, str], list[str]]:
    """(dependent, prerequisite) -> the sources of a built warehouse that hold the edge (not 'stated')."""
    if not path:
        return {}
    from warehouse.build import connect

    con = connect(Path(path))
    try:
        rows = con.execute("SELECT dependent, prerequisite, list(DISTINCT source ORDER BY source) FROM edges "
                           "WHERE dataset = ? AND source IN ('discriminator', 'schema', 'fused') GROUP BY ALL",
                           [dataset]).fetchall()
    finally:
        con.close()
    return {(d, p): s for d, p, s in rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sets", default=",".join(SETS))
    p.add_argument("--data-root", default=str(DATA_ROOT))
    p.add_argument("--warehouse", default=None, help="a build-graph warehouse built with --no-stated-edges: which "
                                                      "stated dependencies its graphs already had")
    p.add_argument("--sample", type=int, default=0, help="draw this many stated dependencies to read by hand")
    p.add_argument("--seed", type=int, default=46)
    p.add_argument("--sample-out", default=None, help="write the sample table here (markdown)")
    args = p.parse_args()

    from tasks.graph.stated import stated_dependencies
    from tasks.toolsets.readers import load_benchmark

    out, drawn = {}, []
    for name in args.sets.split(","):
        ts = load_benchmark(name, Path(args.data_root))
        tools, stated = ts.tools, stated_dependencies(ts.tools)
        gold = {(e.dependent, e.prerequisite) for e in ts.edges}
        built = warehouse_edges(args.warehouse, name)
        pairs = [(tools[s.dependent].tool_id, tools[s.prerequisite].tool_id) for s in stated]
        out[name] = {
            "tools": len(tools), "stated": len(stated), "in_an_input": sum(s.param is not None for s in stated),
            "kinds": {k: sum(s.kind == k for s in stated) for k in ("data", "precondition")},
            "gold_edges": len(gold), "stated_in_gold": sum(pair in gold for pair in pairs),
            "stated_reversed_in_gold": sum(pair[::-1] in gold for pair in pairs)}
        if args.warehouse:
            out[name] |= {"in_the_built_graphs": sum(pair in built for pair in pairs),
                          "reversed_in_the_built_graphs": sum(pair[::-1] in built for pair in pairs)}
        drawn += [(name, tools[s.dependent].tool_id, tools[s.prerequisite].tool_id, s) for s in stated]
    print(json.dumps(out, indent=2))
    if args.sample:
        rows = random.Random(args.seed).sample(drawn, min(args.sample, len(drawn)))
        lines = ["| # | set | dependent | needs first | input | kind | the docs say | verdict |",
                 "|---|---|---|---|---|---|---|---|"]
        for n, (name, dep, pre, s) in enumerate(rows, 1):
            said = s.sentence.replace("|", "\\|").replace("\n", " ")[:240]
            dep, pre = (t.replace("|", "\\|") for t in (dep, pre))
            lines.append(f"| {n} | {name} | {dep} | {pre} | {s.param or ''} | {s.kind} | {said} | |")
        table = "\n".join(lines)
        if args.sample_out:
            Path(args.sample_out).write_text(table + "\n")
        print(table)


if __name__ == "__main__":
    main()
