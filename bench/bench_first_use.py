"""First use (issue 21 items 3, 7, 8): seconds of ``--help``, and what a failing run prints (lines, how often
the cause, tracebacks, telemetry), for this tree or, with ``--tree DIR``, for another checkout run with this
venv (a "before": ``git archive REV | tar -x -C DIR``).

    python -m bench.bench_first_use
    mkdir -p /tmp/before && git archive e11422f | tar -x -C /tmp/before && python -m bench.bench_first_use --tree /tmp/before
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLOWS = ("build_graph", "build_tdi", "mine_tdi", "train_discriminator", "eval_retrieval", "gtool")
SOURCE = 'def add_item(cart, item, quantity=1):\n    """Add an item to the cart and return the cart."""\n    cart[item] = quantity\n    return cart\n'


def command(module: str) -> list[str]:
    return [sys.executable, "-m", f"flows.{module}"]


def user_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PREFECT_SERVER_ANALYTICS_ENABLED", "DO_NOT_TRACK")}


def failing_run(tree: Path, cmd: list[str], args: list[str], cause: str) -> dict:
    started = time.monotonic()
    done = subprocess.run(cmd + args, cwd=tree, env=user_env(), capture_output=True, text=True, timeout=900)
    text = done.stdout + done.stderr
    lines = [line for line in text.splitlines() if line.strip()]
    return {"exit": done.returncode, "seconds": round(time.monotonic() - started, 1), "lines": len(lines),
            "lines_with_cause": sum(cause in line for line in lines), "tracebacks": text.count("Traceback (most recent"),
            "telemetry_lines": sum("telemetry" in line.lower() for line in lines), "last": lines[-2:] if lines else []}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout whose flows are run (default: this one)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from tests.openai_server import FakeOpenAIServer

    out: dict = {"tree": str(args.tree)}
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        out["help_s"] = {}
        for module in FLOWS:
            cmd = command(module)
            times = []
            for _ in range(args.repeats):
                started = time.monotonic()
                subprocess.run(cmd + ["--help"], cwd=args.tree, env=user_env(), capture_output=True, check=True, timeout=300)
                times.append(time.monotonic() - started)
            out["help_s"][module] = round(statistics.median(times), 2)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        out["unreachable_endpoint"] = failing_run(
            args.tree, command("build_tdi"),
            ["--base-url", f"http://127.0.0.1:{port}/v1", "--limit", "3", "--output-root", str(scratch / "out1"),
             "--cache-dir", str(scratch / "cache")], "127.0.0.1")
        (scratch / "src").mkdir()
        (scratch / "src" / "shop.py").write_text(SOURCE)
        with FakeOpenAIServer(models={"another-model"}) as server:
            out["flow_failure_http_404"] = failing_run(
                args.tree, command("build_tdi"),
                ["--source", "tree", "--source-path", str(scratch / "src"), "--base-url", server.base_url, "--model",
                 "fake", "--output-root", str(scratch / "out2"), "--cache-dir", str(scratch / "cache")], "HTTP 404")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
