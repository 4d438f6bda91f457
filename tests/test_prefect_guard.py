"""Prefect's temporary server dies with the flow process that started it, kill -9 included (issue 12)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHILD = textwrap.dedent("""
    import os, sys, time
    if sys.argv[2] == "guarded":
        from tasks.common.prefect_guard import guard_temporary_server
        guard_temporary_server()
    from prefect import flow

    @flow
    def hold(signal_path: str) -> None:
        open(signal_path, "w").write("running")
        time.sleep(300)

    hold(sys.argv[1])
""")


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status  # a zombie has exited


def _wait(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc to find the server process")
def test_a_killed_flow_process_takes_its_temporary_server_with_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env |= {"PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PYTHONPATH": str(ROOT)}
    signal_file = tmp_path / "running"
    flow_process = subprocess.Popen([sys.executable, "-c", CHILD, str(signal_file), "guarded"], cwd=ROOT, env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    server = None
    try:
        assert _wait(signal_file.exists, 180), f"the flow never started: {flow_process.stderr.read().decode()[-2000:]}"
        servers = [c for c in _children(flow_process.pid)
                   if b"tasks.common.prefect_guard" in Path(f"/proc/{c}/cmdline").read_bytes()]
        assert len(servers) == 1, "the temporary server did not run under the guard"
        server = servers[0]
        assert b"uvicorn" not in Path(f"/proc/{server}/cmdline").read_bytes().split(b"\0")[1:3]
        os.kill(flow_process.pid, signal.SIGKILL)
        flow_process.wait(timeout=30)
        assert _wait(lambda: not _alive(server), 20), "the temporary server outlived its flow process"
    finally:
        for pid in [flow_process.pid] + ([server] if server else []):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
