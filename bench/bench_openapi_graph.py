"""A real HTTP API nobody tuned on, as a tool set: Prefect's own server API (its OpenAPI 3.1 description, made by
the Prefect installed in this venv), built into a graph by the default checkpoint twice, with the operations that
return nothing marked as the reader marks them (a 204 answer: ``Tool.returns_nothing``) and with that mark
cleared (what build-graph did before it read the mark); the edges that differ, and a seeded sample of each graph's
discriminator edges to read by hand (bench/RESULTS.md, "A real API's graph: operations that return nothing").

    .venv/bin/python -m bench.bench_openapi_graph --out /tmp/openapi_graph               # two builds, about 1 min
    .venv/bin/python -m bench.bench_openapi_graph --out /tmp/openapi_graph --sample 40 --seed 7 \\
        --sample-out /tmp/openapi_graph/sample.md                                         # + samples to read
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
import subprocess
import sys
import time
from pathlib import Path

CHECKPOINT = "artifacts/discriminator/minilm/best"


def prefect_openapi(path: Path) -> Path:
    """Prefect's server API description, as its FastAPI app serves it at /openapi.json (no server started)."""
    from prefect.server.api.server import create_app

    path.write_text(json.dumps(create_app(ephemeral=True).openapi()))
    return path


def discriminator_edges(warehouse: Path) -> dict[tuple[str, str], tuple[str | None, str | None]]:
    """(prerequisite, dependent) -> (kind, the consumer input of its parameter edge) of the discriminator graph."""
    from warehouse.build import connect

    con = connect(warehouse)
    try:
        params = dict(((p, d), q) for p, d, q in con.execute(
            "SELECT prerequisite, dependent, consumer_param FROM parameter_edges WHERE source = 'discriminator'"
        ).fetchall())
        return {(p, d): (k, params.get((p, d))) for p, d, k in con.execute(
            "SELECT prerequisite, dependent, kind FROM edges WHERE source = 'discriminator'").fetchall()}
    finally:
        con.close()


def build(toolset: Path, warehouse: Path, checkpoint: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "flows.build_graph", "--toolset", str(toolset), "--discriminator",
                    checkpoint, "--warehouse", str(warehouse), "--no-progress"], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def sample_rows(edges: dict, tools: dict, n: int, seed: int) -> list[str]:
    drawn = sorted(edges)
    random.Random(seed).shuffle(drawn)
    rows = []
    for k, (p, d) in enumerate(drawn[:n], 1):
        kind, param = edges[p, d]
        said = next((x["description"] for x in tools[d].doc["input_params"] if x["name"] == param), "")
        outputs = ", ".join(o["name"] for o in tools[p].doc["output_params"][:6]) or "(none)"
        rows.append(f"| {k} | `{p}` ({outputs}) | `{d}` | {kind} | {param or ''} {('— ' + said[:60]) if said else ''} | |")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="a folder for the description, the tool sets and the warehouses")
    p.add_argument("--checkpoint", default=CHECKPOINT)
    p.add_argument("--sample", type=int, default=0, help="draw this many discriminator edges of each graph to read")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--sample-out", default=None, help="write the samples here (markdown, a verdict column to fill)")
    args = p.parse_args()

    from tasks.toolsets.readers import write_toolset_dir
    from tasks.toolsets.tool_specs import read_tool_specs

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = prefect_openapi(out / "prefect_api.json")
    toolset, _ = read_tool_specs(spec)
    cleared = dataclasses.replace(toolset, tools=[dataclasses.replace(t, returns_nothing=False)
                                                  for t in toolset.tools])
    marked_dir = write_toolset_dir(toolset, out / "marked" / "prefect_api")
    cleared_dir = write_toolset_dir(cleared, out / "cleared" / "prefect_api")
    seconds = {"cleared": build(cleared_dir, out / "cleared.duckdb", args.checkpoint),
               "marked": build(marked_dir, out / "marked.duckdb", args.checkpoint)}
    before, after = discriminator_edges(out / "cleared.duckdb"), discriminator_edges(out / "marked.duckdb")
    tools = {t.tool_id: t for t in toolset.tools}
    silent = {t.tool_id for t in toolset.tools if t.returns_nothing}
    gone = set(before) - set(after)
    report = {
        "operations": len(toolset.tools), "returning_nothing": len(silent),
        "without_outputs": sum(not t.doc["output_params"] for t in toolset.tools),
        "discriminator_edges": {"cleared": len(before), "marked": len(after)},
        "of_them_from_an_operation_returning_nothing": {
            "cleared": sum(p in silent for p, _ in before), "marked": sum(p in silent for p, _ in after)},
        "gone": len(gone), "gone_from_one_returning_nothing": sum(p in silent for p, _ in gone),
        "new": len(set(after) - set(before)), "in_both": len(set(before) & set(after)),
        "build_seconds": {k: round(v, 1) for k, v in seconds.items()},
    }
    print(json.dumps(report, indent=2))
    if args.sample:
        head = ["| # | prerequisite (its first outputs) | dependent | kind | input it feeds | verdict |",
                "|---|---|---|---|---|---|"]
        text = [f"# Prefect's server API: {args.sample} discriminator edges per graph (seed {args.seed})", ""]
        for name, edges in (("cleared (before the mark was read)", before), ("marked (default)", after)):
            text += [f"## {name}", "", *head, *sample_rows(edges, tools, args.sample, args.seed), ""]
        gone_edges = {e: before[e] for e in gone}
        text += ["## gone with the mark", "", *head, *sample_rows(gone_edges, tools, args.sample, args.seed), ""]
        Path(args.sample_out).write_text("\n".join(text))
        print(f"samples: {args.sample_out}")


if __name__ == "__main__":
    main()
