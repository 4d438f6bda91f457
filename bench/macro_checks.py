"""What the warehouse macros' argument checks cost: each macro before and after (issue 21 item 5), timed in one
process on one ToolBench-sized warehouse (random unit embeddings; the cost does not depend on their values).

    git show e11422f:warehouse/sql/030_marts.sql > /tmp/marts-before.sql
    .venv/bin/python -m bench.macro_checks --baseline /tmp/marts-before.sql
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

import duckdb
import numpy as np

MACROS = ("tool_top_k", "query_top_k", "prerequisites_of")


def warehouse_rows(n_tools: int, n_queries: int, dim: int, seed: int = 0) -> dict[str, list[dict]]:
    rng = np.random.default_rng(seed)
    unit = lambda n: (lambda m: m / np.linalg.norm(m, axis=1, keepdims=True))(  # noqa: E731
        rng.normal(size=(n, dim)).astype(np.float32))
    tools, queries = unit(n_tools), unit(n_queries)
    ids = [f"t{i:05d}" for i in range(n_tools)]
    ds = "toolbench_stable"
    chain = [{"dataset": ds, "tool_group": "g", "dependent": ids[i], "prerequisite": ids[i + 1], "prob": 1.0,
              "predicted_class": 0, "source": "manual"} for i in range(0, min(n_tools, 200) - 1)]
    return {
        "datasets": [{"dataset": ds, "embed_style": "structured", "encoder": "random", "discriminator": None,
                      "built_at": datetime(2024, 1, 1)}],
        "tools": [{"dataset": ds, "tool_id": t, "name": t, "tool_group": "g", "doc_json": "{}", "embed_text": ""}
                  for t in ids],
        "queries": [{"dataset": ds, "query_id": f"q{i}", "query_text": "", "query_group": None} for i in range(n_queries)],
        "edges": chain,
        "edge_lineage": [{"dataset": ds, "source": "manual", "producer": "bench", "built_at": datetime(2024, 1, 1)}],
        "tool_embeddings": [{"dataset": ds, "tool_id": t, "kind": kind, "embedding": tools[i].tolist()}
                            for kind in ("base", "tgr_manual") for i, t in enumerate(ids)],
        "query_embeddings": [{"dataset": ds, "query_id": f"q{i}", "embedding": queries[i].tolist()}
                             for i in range(n_queries)],
    }


def baseline_macros(sql_text: str, dim: int) -> list[str]:
    """The baseline file's CREATE MACRO statements of ``MACROS``, renamed ``before_<name>``."""
    out = []
    for name in MACROS:
        match = re.search(rf"CREATE MACRO {name}\(.*?;\n", sql_text, re.S)
        if match is None:
            raise SystemExit(f"no macro {name} in the baseline file")
        out.append(match.group(0).replace(f"CREATE MACRO {name}(", f"CREATE MACRO before_{name}(", 1)
                   .replace("{dim}", str(dim)))
    return out


def timed(con: duckdb.DuckDBPyConnection, sql: str, params: list, repeats: int) -> list[float]:
    con.execute(sql, params).fetchall()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        con.execute(sql, params).fetchall()
        times.append((time.perf_counter() - start) * 1000)
    return times


def main(argv: list[str] | None = None) -> dict:
    from warehouse.build import DatasetTables, build_warehouse

    p = argparse.ArgumentParser(prog="python -m bench.macro_checks")
    p.add_argument("--baseline", required=True, help="030_marts.sql before the checks (git show REV:warehouse/sql/030_marts.sql)")
    p.add_argument("--tools", type=int, default=2479, help="tools (ToolBench: 2,479)")
    p.add_argument("--queries", type=int, default=100, help="stored queries (ToolBench has 765: query_top_k ranks all tools for each)")
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args(argv)
    rng = np.random.default_rng(1)
    calls = {
        "tool_top_k": ("SELECT * FROM {m}('toolbench_stable', 'base', ?, 10)", lambda: [rng.normal(size=args.dim).tolist()]),
        "query_top_k": ("SELECT * FROM {m}('toolbench_stable', 'tgr_manual', 10)", lambda: []),
        "prerequisites_of": ("SELECT * FROM {m}('toolbench_stable', 'manual', 't00000')", lambda: []),
    }
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.duckdb"
        build_warehouse(path, [DatasetTables("toolbench_stable", warehouse_rows(args.tools, args.queries, args.dim))],
                        args.dim)
        con = duckdb.connect(str(path))
        for statement in baseline_macros(Path(args.baseline).read_text(), args.dim):
            con.execute(statement)
        for name, (sql, params) in calls.items():
            given = params()
            before, after = [], []
            for _ in range(2):  # interleaved halves: drift on a shared machine hits both alike
                before += timed(con, sql.format(m=f"before_{name}"), given, args.repeats // 2)
                after += timed(con, sql.format(m=name), given, args.repeats // 2)
            assert con.execute(sql.format(m=name), given).fetchall() == con.execute(sql.format(m=f"before_{name}"),
                                                                                     given).fetchall()
            b, a = statistics.median(before), statistics.median(after)
            results[name] = {"before_ms_p50": round(b, 3), "after_ms_p50": round(a, 3), "after_over_before": round(a / b, 2)}
            print(name, results[name], flush=True)
        con.close()
    out = {"tools": args.tools, "queries": args.queries, "dim": args.dim, "repeats": args.repeats, "macros": results}
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
