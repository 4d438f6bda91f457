"""Balance + shard throughput for the paper's pretraining size: 92,000 pairs per class = 276,000 rows.

    .venv/bin/python -m bench.bench_balance_shards [--per-class 92000]
"""
from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

from bench.results import write_section
from tasks.agents import DependentPair
from tasks.balance import BalanceConfig, balance_pairs
from tasks.shards import ShardConfig, write_shards


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
    a = p.parse_args()
    pairs = synthetic_pairs(a.per_class)
    t0 = time.perf_counter()
    balanced = balance_pairs(pairs, BalanceConfig(per_class=a.per_class, validation_fraction=0.1))
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        infos = write_shards(balanced.rows, Path(tmp), ShardConfig(rows_per_shard=50_000))
        t2 = time.perf_counter()
        size = sum((Path(tmp) / i.file).stat().st_size for i in infos)
    rows = len(balanced.rows)
    result = {"rows": rows, "balance_s": t1 - t0, "shards_s": t2 - t1, "balance_rps": rows / (t1 - t0),
              "shards_rps": rows / (t2 - t1), "total_rps": rows / (t2 - t0), "shards": len(infos), "mb": size / 1e6}
    print(result)
    write_section(
        "Balance + shards throughput (build-tdi)",
        f"""Command: `.venv/bin/python -m bench.bench_balance_shards --per-class {a.per_class}`
Machine: {platform.machine()}, CPU only, {os.cpu_count()} cores. Synthetic validated pairs with realistic doc sizes.

| rows | balance rows/s | shard write rows/s (sort, seeded shuffle, zstd, sha256) | end to end rows/s | shards | size |
|---|---|---|---|---|---|
| {rows:,} | {result['balance_rps']:,.0f} | {result['shards_rps']:,.0f} | **{result['total_rps']:,.0f}** | {len(infos)} | {result['mb']:.1f} MB |

Rows/s on a shared 2-core machine are indicative only; the ratio balance : write shows where time goes.""",
    )


if __name__ == "__main__":
    main()
