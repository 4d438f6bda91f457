"""Ctrl-C during build-graph (issue 21 item 6): seconds from SIGINT to exit, and what is left on disk.

    python -m bench.bench_graph_sigint --toolset /tmp/graph-scale/synthetic2000 [--after encoded] [--repeat 3]

Runs ``python -m flows.build_graph --toolset X --no-discriminator`` in its own process group, waits for the first
log line containing ``--after`` (default: the first progress line of the encoder, so the model is mid-batch),
sends SIGINT to the whole group as a terminal's Ctrl-C does (Prefect's temporary server included), and times
the flow process's exit. An existing warehouse must be left byte for byte; no build folder, temp file or lock.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one_run(toolset: str, work: Path, after: str) -> dict:
    target = work / "wh" / "tgr.duckdb"
    before = target.read_bytes() if target.exists() else None
    proc = subprocess.Popen([sys.executable, "-m", "flows.build_graph", "--toolset", toolset, "--no-discriminator",
                             "--warehouse", str(target), "--embedding-cache", str(work / "cache"), "--no-transitions"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if after in line:
            break
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    rest = proc.stdout.read()
    proc.wait()
    exited = time.monotonic() - sent
    left = sorted(p.name for p in target.parent.iterdir()) if target.parent.exists() else []
    return {"after_line": seen[-1].strip()[-120:], "exit_s": round(exited, 2), "returncode": proc.returncode,
            "last_lines": [line for line in rest.splitlines() if line.strip()][-2:],
            "warehouse_unchanged": before is None and not target.exists() or (
                before is not None and target.read_bytes() == before),
            "left_in_warehouse_folder": left,
            "cache_temp_files": [p.name for p in (work / "cache").rglob(".*")] if (work / "cache").exists() else []}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--toolset", required=True)
    ap.add_argument("--after", default="encoded (")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--warehouse-first", action="store_true",
                    help="build a small warehouse (apibank) first, so the interrupted run has an old file to keep")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="graph-sigint-"))
    if args.warehouse_first:
        subprocess.run([sys.executable, "-m", "flows.build_graph", "--toolset", "apibank", "--no-discriminator",
                        "--warehouse", str(work / "wh" / "tgr.duckdb"), "--embedding-cache", str(work / "cache-apibank")],
                       check=True, capture_output=True)
    print(json.dumps([one_run(args.toolset, work, args.after) for _ in range(args.repeat)], indent=1))


if __name__ == "__main__":
    main()
