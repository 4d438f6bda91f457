"""Balance + shard throughput for the paper's pretraining size: 92,000 pairs per class = 276,000 rows.

    .venv/bin/python -m bench.bench_balance_shards [--per-class 92000] [--chunks 92]

Two paths over the same synthetic validated pairs: the in-memory one (``balance_pairs`` +
``write_shards``, Python dicts) and the one build-tdi runs since it streams chunks
(``plan_balance`` + ``write_planned_shards``: polars columns read lazily from the chunks'
``validated.parquet`` files, shards assembled 10,000 rows at a time).
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.results import write_section
from schemas.tdi import DependentPair
from tasks.dataset.balance import BalanceConfig, balance_pairs, plan_balance
from tasks.agents.chunks import VALIDATED_SCHEMA, validated_row
from tasks.dataset.shards import ShardConfig, write_planned_shards, write_shards


def _param(name: str) -> dict:
    return {"name": name, "type": "string", "description": f"the {name}"}


def synthetic_pairs(n: int) -> list[DependentPair]:
    out = []
    for i in range(n):
        given = {"name": f"load_record_{i}", "description": f"Loads record {i} from the store by its key.",
                 "input_params": [_param("key"), _param("store")], "output_params": [_param(f"record_{i}")]}
        generated = {"name": f"render_record_{i}", "description": f"Renders record {i} as HTML for display.",
                     "input_params": [_param(f"record_{i}")], "output_params": [_param("html")]}
        out.append(DependentPair(f"rec-{i}", given, generated, 1 + i % 2))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--per-class", type=int, default=92_000)
    p.add_argument("--chunks", type=int, default=92, help="validated.parquet files the columnar path reads")
    a = p.parse_args()
    pairs = synthetic_pairs(a.per_class)
    cfg, shard_cfg = BalanceConfig(per_class=a.per_class, validation_fraction=0.1), ShardConfig(rows_per_shard=50_000)
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        rows = [validated_row(x) for x in pairs]
        step = -(-len(rows) // a.chunks)
        for k in range(a.chunks):
            files.append(Path(tmp) / f"validated-{k}.parquet")
            pq.write_table(pa.Table.from_pylist(rows[k * step:(k + 1) * step], schema=VALIDATED_SCHEMA), files[-1])
        del rows
        t0 = time.perf_counter()
        plan = plan_balance(files, cfg)
        t1 = time.perf_counter()
        col_infos = write_planned_shards(plan, Path(tmp) / "columnar", shard_cfg)
        t2 = time.perf_counter()
        rss_columnar = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        balanced = balance_pairs(pairs, cfg)
        t3 = time.perf_counter()
        infos = write_shards(balanced.rows, Path(tmp) / "memory", shard_cfg)
        t4 = time.perf_counter()
        size = sum((Path(tmp) / "memory" / i.file).stat().st_size for i in infos)
    n = len(balanced.rows)
    assert plan.n_rows == n and [i.rows for i in col_infos] == [i.rows for i in infos]
    res = {"rows": n, "col_balance_rps": n / (t1 - t0), "col_shards_rps": n / (t2 - t1), "col_total_rps": n / (t2 - t0),
           "mem_balance_rps": n / (t3 - t2), "mem_shards_rps": n / (t4 - t3), "mem_total_rps": n / (t4 - t2),
           "rss_after_columnar_mb": rss_columnar}
    print(res)
    load = os.getloadavg()[0]
    write_section(
        "Balance + shards throughput (build-tdi)",
        f"""Command: `.venv/bin/python -m bench.bench_balance_shards --per-class {a.per_class} --chunks {a.chunks}`
Machine: {platform.machine()}, CPU only, {os.cpu_count()} cores shared with other jobs (1-min load average {load:.1f} at the end).
Synthetic validated pairs with realistic doc sizes. Goal (issue 8): >= 1M rows/s end to end.

| path | rows | balance rows/s | shard write rows/s (sort, seeded shuffle, zstd, sha256) | end to end rows/s | shards | size |
|---|---|---|---|---|---|---|
| columnar, from {a.chunks} chunk files (`plan_balance` + `write_planned_shards`, what build-tdi runs) | {n:,} | {res['col_balance_rps']:,.0f} | {res['col_shards_rps']:,.0f} | **{res['col_total_rps']:,.0f}** | {len(col_infos)} | |
| in memory (`balance_pairs` + `write_shards`) | {n:,} | {res['mem_balance_rps']:,.0f} | {res['mem_shards_rps']:,.0f} | **{res['mem_total_rps']:,.0f}** | {len(infos)} | {size / 1e6:.1f} MB |

Rows/s on a shared 2-core machine are indicative only; the two paths ran one after the other in one process.""",
    )


if __name__ == "__main__":
    main()
