"""What Prefect's walk of a task's arguments costs: a task that does nothing, called on N rows of the mined TDI's
shards (plain dicts, as mine-tdi's write-shards task takes them), with the rows passed as they are and wrapped in
``prefect.utilities.annotations.quote`` (which tells Prefect not to walk them for futures). One flow run, both ways
alternating, so the ratio is measured in one sitting.

    .venv/bin/python -m bench.bench_task_arguments                       # the published mined TDI's rows
    .venv/bin/python -m bench.bench_task_arguments --rows 1000,10000,82173 --rounds 2

Prints, per row count and way, the seconds from the call to the task's body (its body only takes a timestamp).
"""
from __future__ import annotations

import argparse
import glob
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tdi", default="artifacts/tdi/tdi-mined", help="a published TDI dataset folder")
    ap.add_argument("--rows", default="1000,10000,82173", help="comma separated row counts (capped at the rows there are)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    import pyarrow as pa
    import pyarrow.parquet as pq
    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE
    from prefect.utilities.annotations import quote

    files = sorted(glob.glob(str(Path(args.tdi) / "shards" / "*.parquet")))
    if not files:
        raise SystemExit(f"no shards under {args.tdi}/shards: run make mine-tdi first, or pass --tdi")
    rows = pa.concat_tables([pq.read_table(f) for f in files]).to_pylist()
    entered: list[float] = []

    @task(cache_policy=NO_CACHE)
    def body(given: list[dict]) -> int:
        entered.append(time.perf_counter())
        return len(given)

    @flow
    def measure() -> list[tuple[int, str, float]]:
        out = []
        for _ in range(args.rounds):
            for n in (min(int(x), len(rows)) for x in args.rows.split(",")):
                part = rows[:n]
                for way, arg in (("walked", part), ("quoted", quote(part))):
                    t0 = time.perf_counter()
                    assert body(arg) == n
                    out.append((n, way, entered[-1] - t0))
        return out

    results = measure()
    print("| rows | way | seconds from call to body (each round) |")
    print("|---|---|---|")
    for n in sorted({r[0] for r in results}):
        for way in ("walked", "quoted"):
            print(f"| {n} | {way} | {' / '.join(f'{s:.3f}' for m, w, s in results if m == n and w == way)} |")


if __name__ == "__main__":
    main()
