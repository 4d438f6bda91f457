"""The whole build-tdi flow at 10^4, 10^5 (, 10^6) records: wall time and peak RSS.

    .venv/bin/python -m bench.bench_build_tdi_scale --sizes 10000,100000 [--write-results]

Synthetic CodeSearchNet records (one .jsonl.gz, distinct functions) go through the real flow
(lazy chunked read with dedup, the three agents pipelined per record, chunk Parquet + markers,
columnar balance, staged shards, quality gate, publish, records.duckdb) against a fast fake
OpenAI server: an asyncio HTTP/1.1 server in its own process giving tests/openai_server.py's
canned, schema-valid answers with no delay. Each size runs in a fresh process (fresh cache and
dataset folder) reporting to one Prefect test API; the peak RSS is that process's ru_maxrss.
The goal (issue 8): the largest size's peak RSS <= 1.5x the 10^4 one, and time linear.
"""
from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import multiprocessing
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORDS = ("parse", "render", "load", "store", "merge", "split", "score", "index", "fetch", "encode", "decode", "scale")


# -- synthetic records --------------------------------------------------------------------------
def _code(i: int) -> str:
    w, v = WORDS[i % len(WORDS)], WORDS[(i // len(WORDS)) % len(WORDS)]
    return (f"def {w}_{v}_record_{i}(value_{i}, scale_{i % 7}=2, offset=0):\n"
            f'    """{w.capitalize()} the {v} value of record {i} and return its scaled score."""\n'
            f"    result = value_{i} * scale_{i % 7} + offset + {i % 997}\n"
            f"    return result if result > {i % 13} else -result\n")


def write_records(path: Path, n: int) -> None:
    """``n`` distinct CodeSearchNet-schema records in the release layout under ``path``."""
    folder = path / "python" / "final" / "jsonl" / "train"
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / "python_train_0.jsonl.gz", "wb", compresslevel=1) as fh:
        for i in range(n):
            code = _code(i)
            doc = code.split('"""')[1]
            rec = {"repo": "synthetic/bench", "path": f"pkg/mod_{i // 1000}.py", "func_name": code[4:code.index("(")],
                   "original_string": code, "language": "python", "code": code, "code_tokens": code.split(),
                   "docstring": doc, "docstring_tokens": doc.split(), "sha": "0" * 40,
                   "url": f"https://example.invalid/{i}", "partition": "train"}
            fh.write(json.dumps(rec).encode() + b"\n")


# -- a fast fake OpenAI server (its own process) --------------------------------------------------
def _serve(port_out: multiprocessing.Queue) -> None:
    import orjson

    from tests.openai_server import ServerState, _completion

    state = ServerState()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                body = await reader.readexactly(length) if length else b""
                data = orjson.dumps(_completion(state, orjson.loads(body), None))
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        port_out.put(server.sockets[0].getsockname()[1])
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# -- one size, in a fresh process -------------------------------------------------------------
def run_one(a: argparse.Namespace) -> None:
    from flows.build_tdi import build_tdi, config_from_args

    cfg = config_from_args([
        "--source", "codesearchnet", "--source-path", a.records, "--partitions", "train", "--sample-seed", "-1", "--limit", str(a.size),
        "--base-url", a.base_url, "--model", "fake", "--concurrency", str(a.concurrency), "--chunk-size", str(a.chunk_size),
        "--cache-dir", str(Path(a.work) / "cache"), "--output-root", str(Path(a.work) / "out"), "--dataset", f"scale-{a.size}",
        "--task-runner", a.task_runner, "--per-class", str(a.per_class),
    ])
    t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    manifest = build_tdi(cfg)
    wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print("RESULT " + json.dumps({
        "size": a.size, "wall_s": wall, "cpu_s": (ru.ru_utime - c0.ru_utime) + (ru.ru_stime - c0.ru_stime),
        "peak_rss_mb": ru.ru_maxrss / 1024, "read": manifest["accounting"]["read"], "rows": manifest["total_rows"],
        "per_class": manifest["per_class"], "requests": manifest["llm_usage"]["requests_sent"],
        "chunks": manifest["execution"]["chunks"],
    }), flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="10000,100000")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--chunk-size", type=int, default=1000)
    p.add_argument("--task-runner", default="sequential")
    p.add_argument("--per-class", type=int, default=2000,
                   help="dataset size cap: fixed, so the output (and the quality gate over it) is the same at every size")
    p.add_argument("--write-results", action="store_true")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--size", type=int, help=argparse.SUPPRESS)
    p.add_argument("--records", help=argparse.SUPPRESS)
    p.add_argument("--base-url", help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        run_one(a)
        return

    from prefect.settings import get_current_settings
    from prefect.testing.utilities import prefect_test_harness

    sizes = [int(s) for s in a.sizes.split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-tdi-scale-") as tmp:
        t = time.perf_counter()
        write_records(Path(tmp) / "records", max(sizes))
        print(f"wrote {max(sizes)} records in {time.perf_counter() - t:.1f} s", flush=True)
        ports: multiprocessing.Queue = multiprocessing.get_context("spawn").Queue()
        server = multiprocessing.get_context("spawn").Process(target=_serve, args=(ports,), daemon=True)
        server.start()
        base_url = f"http://127.0.0.1:{ports.get(timeout=60)}/v1"
        try:
            with prefect_test_harness(server_startup_timeout=120):
                env = {**os.environ, "PREFECT_API_URL": str(get_current_settings().api.url), "PREFECT_LOGGING_LEVEL": "WARNING"}
                for size in sizes:
                    work = Path(tmp) / f"run-{size}"
                    cmd = [sys.executable, "-m", "bench.bench_build_tdi_scale", "--child", "--size", str(size),
                           "--records", str(Path(tmp) / "records"), "--base-url", base_url, "--work", str(work),
                           "--concurrency", str(a.concurrency), "--chunk-size", str(a.chunk_size), "--task-runner", a.task_runner,
                           "--per-class", str(a.per_class)]
                    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
                    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
                    if proc.returncode or line is None:
                        raise SystemExit(f"size {size} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
                    results.append(json.loads(line[7:]))
                    print(results[-1], flush=True)
        finally:
            server.kill()
    base = results[0]
    table = "\n".join(
        f"| {r['size']:,} | {r['read']:,} | {r['requests']:,} | {r['rows']:,} | {r['chunks']} | {r['wall_s']:.0f} | "
        f"{1e3 * r['wall_s'] / r['size']:.2f} | {1e3 * r['cpu_s'] / r['size']:.2f} | {r['peak_rss_mb']:.0f} | "
        f"{r['peak_rss_mb'] / base['peak_rss_mb']:.2f}x |"
        for r in results)
    load = os.getloadavg()[0]
    print(table)
    if a.write_results:
        from bench.results import write_section

        write_section("build-tdi at scale: streaming chunks (whole flow)", f"""Command: `.venv/bin/python -m bench.bench_build_tdi_scale --sizes {a.sizes} --concurrency {a.concurrency} --chunk-size {a.chunk_size} --per-class {a.per_class} --write-results`
Machine: {platform.machine()}, CPU only, {os.cpu_count()} cores shared with other jobs (1-min load average {load:.1f} at the end),
so read ratios, not absolute times. Synthetic distinct CodeSearchNet records (file order, no limit on
the sample), the flow with task runner `{a.task_runner}`, chunks of {a.chunk_size} records, {a.concurrency} requests in
flight, against a fast fake OpenAI server (asyncio, its own process, canned answers, no delay). Each size
runs in a fresh process with a fresh cache; peak RSS is that process's `ru_maxrss`. Per-class target
{a.per_class:,}: the dataset (and the quality gate over it) is the same size at every input size, so the
table shows how the streaming part scales with the input.

| records | read | requests sent | rows | chunks | wall s | wall ms/record | CPU ms/record | peak RSS MB | RSS vs first |
|---|---|---|---|---|---|---|---|---|---|
{table}
""")


if __name__ == "__main__":
    main()
