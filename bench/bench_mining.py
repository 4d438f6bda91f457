"""Mined TDI pairs at corpus scale: the mine-tdi flow over the stdlib + this interpreter's site-packages.

    .venv/bin/python -m bench.bench_mining [--write-results] [--dataset tdi-mined]

Runs the real flow settings (2 parser processes, defaults of MineTDIConfig) and reports files parsed,
candidates, accepted distinct (consumer, producer) pairs, rejections by reason, wall time and pairs/s.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time

from bench.results import write_section
from flows.mine_tdi import MineTDIConfig, mine_tdi


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="tdi-mined")
    p.add_argument("--source", default="stdlib,site-packages")
    p.add_argument("--workers", type=int, default=MineTDIConfig().workers)
    p.add_argument("--write-results", action="store_true", help="write the section of bench/RESULTS.md")
    a = p.parse_args()
    cfg = MineTDIConfig(dataset=a.dataset, source=tuple(a.source.split(",")), workers=a.workers)
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    manifest = mine_tdi(cfg)
    wall = time.perf_counter() - t0
    m = manifest["mining"]
    pairs = m["accepted_pairs"]
    result = {"files_read": m["files_read"], "files_parsed": m["files_parsed"], "candidates": m["candidates"], "accepted_pairs": pairs,
              "mine_s": m["mine_seconds"], "flow_s": round(wall, 1), "pairs_per_s_mining": round(pairs / m["mine_seconds"], 1),
              "per_class": manifest["per_class"], "rows": manifest["total_rows"], "rejected": m["rejected_by_reason"],
              "files_rejected": m["files_rejected_by_reason"], "negatives": m["negatives"], "load_1min_before": load_before}
    print(json.dumps(result, indent=2))
    if not a.write_results:
        return
    from_tests = _pairs_from_tests(cfg.out_dir / "records.duckdb")
    reasons = "\n".join(f"| {k} | {v:,} |" for k, v in sorted(m["rejected_by_reason"].items(), key=lambda kv: -kv[1]))
    cmd = ".venv/bin/python -m bench.bench_mining --write-results" + (f" --source {a.source}" if a.source != "stdlib,site-packages" else "")
    write_section(
        "Mined pairs (mine-tdi)",
        f"""Command: `{cmd}`
Machine: {platform.machine()}, CPU only, {os.cpu_count()} cores, {a.workers} parser processes; 1-min load average {load_before:.1f} before the run
Corpus: {a.source} of Python {platform.python_version()} (the project venv).

| files read | parsed | candidates | accepted distinct pairs | mining wall s | pairs/s (mining) | whole flow wall s | pairs per class in the dataset |
|---|---|---|---|---|---|---|---|
| {m['files_read']:,} | {m['files_parsed']:,} | {m['candidates']:,} | **{pairs:,}** | {m['mine_seconds']} | {result['pairs_per_s_mining']} | {result['flow_s']} | {manifest['per_class']:,} |

Target: >= 30,000 distinct pairs in <= 10 minutes: **{"met" if pairs >= 30_000 and result['flow_s'] <= 600 else "missed"}**.
Pairs: {pairs:,} = {pairs / 30_000:.0%} of 30,000 ({"met" if pairs >= 30_000 else f"short by {30_000 - pairs:,}"}).
Time: whole flow {result['flow_s']} s of 600 s ({"met" if result['flow_s'] <= 600 else f"over by {result['flow_s'] - 600:.0f} s"}); wall
times depend on what else runs on the 2 shared cores (load average above). {from_tests:,} of the accepted pairs were
first found in test code (test folders are read for their flows only; their functions are never tools).
Most rejected candidates still call a target static analysis cannot resolve (builtins, methods on locals of
unknown type, C extensions); the resolution rules are in docs/mining.md. Mining = list files, parse in worker
processes, resolve in the parent; the whole flow adds doc building, balancing with hard negatives, shards, the
quality gate and records.duckdb. Files rejected: `{json.dumps(m['files_rejected_by_reason'])}`.
Class 1: `{json.dumps(m['negatives'])}`.

| candidate rejection reason | candidates |
|---|---|
{reasons}""",
    )


def _pairs_from_tests(db: "os.PathLike[str]") -> int:
    """Accepted pairs whose first record is in a test folder (its module path has test/tests/testing)."""
    import duckdb

    from tasks.mining.sources import TEST_DIRS

    con = duckdb.connect(str(db), read_only=True)
    try:
        # every accepted mined pair has one record past mining (in the dataset, or dropped by balancing or the judge)
        ids = con.execute("SELECT record_id FROM record_outcomes WHERE stage NOT IN ('parse', 'resolve')").fetchall()
    finally:
        con.close()
    return sum(1 for (rid,) in ids if TEST_DIRS & set(rid.split(":", 1)[0].split(".")))


if __name__ == "__main__":
    main()
