"""A rerun of mine-tdi from its pin mines the same pairs; what pinning costs (issue 20 item 7).

Mines a seeded sample of the default corpus (stdlib + site-packages), reruns from the published
``sources.json`` with ``--pin``, and compares the shard sha256s. Then times the pin's own work on the whole
default corpus (every file's sha256 and the package table) beside listing the files, in one process.

    .venv/bin/python -m bench.mine_pin_rerun --limit-files 3000 --workers 2
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from flows.mine_tdi import MineTDIConfig, mine_tdi
from tasks.mining.pin import file_records, package_table
from tasks.mining.sources import default_roots, tree_files


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--limit-files", type=int, default=3000, help="seeded sample of the default corpus (none: -1)")
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args(argv)
    limit = None if a.limit_files < 0 else a.limit_files
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        first = mine_tdi(MineTDIConfig(dataset="sample", output_root=tmp, limit_files=limit, workers=a.workers))
        t1 = time.perf_counter()
        pinned = mine_tdi(MineTDIConfig(dataset="pinned", output_root=tmp, pin=str(Path(tmp) / "sample"), workers=a.workers))
        t2 = time.perf_counter()
    same = [s["sha256"] for s in first["shards"]] == [s["sha256"] for s in pinned["shards"]]
    src = first["sources"]
    print(f"sample: {src['n_files']} files in {len(src['packages'])} packages, corpus sha256 {src['sha256'][:16]}; "
          f"{first['mining']['accepted_pairs']} accepted pairs, {first['total_rows']} rows")
    print(f"rerun from the pin: same shard sha256s {same}; same corpus sha256 {pinned['sources']['sha256'] == src['sha256']}; "
          f"run times {t1 - t0:.0f} s then {t2 - t1:.0f} s")

    t0 = time.perf_counter()
    items = []
    for kind in ("stdlib", "site-packages"):
        for root in default_roots(kind):
            items += tree_files(root, kind)
    items = list({i.path: i for i in items}.values())
    t1 = time.perf_counter()
    records = file_records(items)
    t2 = time.perf_counter()
    table = package_table(records)
    t3 = time.perf_counter()
    versioned = sum(1 for g in table if g["version"] is not None)
    print(f"whole default corpus: {len(items)} files listed in {t1 - t0:.2f} s; sha256 of every file {t2 - t1:.2f} s; "
          f"package table {t3 - t2:.2f} s ({len(table)} packages, {versioned} with a version)")
    if not same:
        raise SystemExit("the rerun from the pin mined other shards")


if __name__ == "__main__":
    main()
