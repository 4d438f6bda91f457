"""``make prefect-up`` / ``make prefect-down``'s services (tasks/common/services.py): what is started is
stopped, children included, within the grace period, even when it ignores SIGTERM; and a real Prefect
worker that retries a server that is gone (what was still running minutes after prefect-down) stops.

The whole ``make prefect-up`` (a Prefect server, ``prefect deploy``, the embedded LLM extra) takes minutes
and the network-free CI machine has no use for it, so the pieces it is made of are tested here: the
Makefile targets call exactly ``python -m tasks.common.services start|stop`` (checked below)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tasks.common.services import alive, read_pid, start, stop
from tests.conftest import REPO_ROOT

# A service that ignores SIGTERM and has a child of its own (as a worker runs a flow run's process).
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(600)
"""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its parent) counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(path: Path, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_stop_kills_a_service_that_ignores_sigterm_and_its_children(tmp_path):
    pidfile, log, child_file = tmp_path / "run" / "svc.pid", tmp_path / "run" / "svc.log", tmp_path / "child.pid"
    pid = start(pidfile, log, [sys.executable, "-c", STUBBORN, str(child_file)])
    wait_for(child_file)
    child = int(child_file.read_text())
    assert read_pid(pidfile) == pid and alive(pidfile) and pid_alive(child)
    assert start(pidfile, log, [sys.executable, "-c", "pass"]) == pid  # already running: left as it is

    started = time.monotonic()
    outcome = stop(pidfile, grace_s=1.0)
    assert outcome.startswith("killed") and time.monotonic() - started < 10
    assert not pid_alive(pid) and not pid_alive(child)  # the whole process group
    assert not pidfile.exists() and not alive(pidfile)
    assert stop(pidfile) == "not running"  # twice is fine


def test_stop_of_a_service_that_exits_on_sigterm_is_quick(tmp_path):
    pidfile = tmp_path / "svc.pid"
    start(pidfile, tmp_path / "svc.log", [sys.executable, "-c", "import time; time.sleep(600)"])
    started = time.monotonic()
    assert stop(pidfile, grace_s=10.0) == "stopped"
    assert time.monotonic() - started < 5


@pytest.mark.slow
def test_make_prefect_down_stops_the_real_worker_and_server_it_started(tmp_path):
    """A real Prefect server and a process worker polling it, started as ``make prefect-up`` starts them, then
    ``make prefect-down``: both are gone within seconds. (The old prefect-down sent SIGTERM to both at once;
    the worker, shutting down against a server that had just gone, was still retrying minutes later.)"""
    prefect = Path(sys.executable).with_name("prefect")
    if not prefect.exists():
        pytest.skip("no prefect console script beside this interpreter")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "home"), "DO_NOT_TRACK": "1",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_API_URL": api}
    run_dir = tmp_path / "prefect"

    def services(*args: str) -> None:
        done = subprocess.run([sys.executable, "-m", "tasks.common.services", *args], cwd=REPO_ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr

    services("start", str(run_dir / "server.pid"), str(run_dir / "server.log"), "--",
             str(prefect), "server", "start", "--host", "127.0.0.1", "--port", str(port))
    server = read_pid(run_dir / "server.pid")
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{api}/health", timeout=2).read()
                break
            except OSError:
                assert time.monotonic() < deadline, (run_dir / "server.log").read_text()[-2000:]
                time.sleep(1)
        subprocess.run([str(prefect), "work-pool", "create", "tgr-test", "--type", "process", "--overwrite"],
                       env=env, capture_output=True, timeout=120, check=True)
        services("start", str(run_dir / "worker.pid"), str(run_dir / "worker.log"), "--",
                 str(prefect), "worker", "start", "--pool", "tgr-test", "--type", "process")
        worker = read_pid(run_dir / "worker.pid")
        deadline = time.monotonic() + 60
        while "started" not in (run_dir / "worker.log").read_text():
            assert time.monotonic() < deadline and pid_alive(worker), (run_dir / "worker.log").read_text()[-2000:]
            time.sleep(0.5)

        started = time.monotonic()
        down = subprocess.run(["make", "prefect-down", f"PREFECT_RUN_DIR={run_dir}"], cwd=REPO_ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert down.returncode == 0, down.stderr
        assert time.monotonic() - started < 30
        time.sleep(2)  # nothing comes back
        assert not pid_alive(worker) and not pid_alive(server)
        assert not (run_dir / "worker.pid").exists() and not (run_dir / "server.pid").exists()
        assert "stopped" in (run_dir / "worker.log").read_text()
    finally:
        for name in ("worker", "server"):
            stop(run_dir / f"{name}.pid", grace_s=2)


def test_the_makefile_starts_and_stops_both_services_through_the_pid_files():
    make = subprocess.run(["make", "-n", "prefect-down"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert make.returncode == 0, make.stderr
    assert "-m tasks.common.services stop artifacts/prefect/$p.pid" in make.stdout
    assert make.stdout.index("worker server") >= 0  # the worker is stopped (and waited for) before the server
    text = (REPO_ROOT / "Makefile").read_text()
    up = text.split("\nprefect-up:", 1)[1].split("\n\n", 1)[0]
    assert up.count("-m tasks.common.services start") == 2 and "nohup" not in up
