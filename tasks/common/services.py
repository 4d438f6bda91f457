"""Background services that ``make prefect-up`` starts and ``make prefect-down`` stops, by pid file: each in
its own process group, so stopping it stops what it started too, and a service that does not stop on
SIGTERM within a grace period is killed (a Prefect worker would otherwise retry a stopped server for minutes).

    python -m tasks.common.services start PIDFILE LOG -- COMMAND...   # no-op when PIDFILE's process is alive
    python -m tasks.common.services stop PIDFILE [--grace-s S]        # SIGTERM the group, then SIGKILL
    python -m tasks.common.services alive PIDFILE                      # exit 0 when it runs
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

GRACE_S = 10.0


def read_pid(pidfile: Path) -> int | None:
    try:
        return int(Path(pidfile).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process of group ``pgid`` is left. A zombie is gone for this purpose: in a
    container whose first process reaps nothing, an orphan that was killed stays one."""
    proc = Path("/proc")
    if proc.is_dir():
        for stat in proc.glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":  # state, ppid, pgrp
                return True
        return False
    try:  # pragma: no cover - no /proc (macOS)
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def alive(pidfile: Path) -> bool:
    """Whether the service of ``pidfile`` (its process group) still runs."""
    pid = read_pid(pidfile)
    return pid is not None and _group_alive(pid)


def start(pidfile: Path, log: Path, command: Sequence[str]) -> int:
    """Start ``command`` in a new session (its pid is its process group id), output to ``log``; returns the pid.
    A service already running from this pid file is left as it is."""
    pidfile, log = Path(pidfile), Path(log)
    pid = read_pid(pidfile)
    if pid is not None and _group_alive(pid):
        return pid
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    pidfile.write_text(f"{proc.pid}\n")
    return proc.pid


def stop(pidfile: Path, grace_s: float = GRACE_S) -> str:
    """Stop the service of ``pidfile`` and all it started: SIGTERM to its process group, SIGKILL after
    ``grace_s``; the pid file is removed. Returns what happened, in words."""
    pidfile = Path(pidfile)
    pid = read_pid(pidfile)
    if pid is None or not _group_alive(pid):
        pidfile.unlink(missing_ok=True)
        return "not running"
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it when it is our own child (tests); harmless otherwise
        if not _group_alive(pid):
            pidfile.unlink(missing_ok=True)
            return "stopped"
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    for _ in range(50):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not _group_alive(pid):
            break
        time.sleep(0.1)
    pidfile.unlink(missing_ok=True)
    return f"killed (still running {grace_s:g} s after SIGTERM)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.common.services", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    p_start = sub.add_parser("start")
    p_start.add_argument("pidfile", type=Path)
    p_start.add_argument("log", type=Path)
    p_start.add_argument("command", nargs=argparse.REMAINDER)
    p_stop = sub.add_parser("stop")
    p_stop.add_argument("pidfile", type=Path)
    p_stop.add_argument("--grace-s", type=float, default=GRACE_S)
    p_alive = sub.add_parser("alive")
    p_alive.add_argument("pidfile", type=Path)
    args = parser.parse_args(argv)
    if args.action == "start":
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            parser.error("start: give the command after --")
        print(f"{args.pidfile.stem}: pid {start(args.pidfile, args.log, command)} (log: {args.log})")
        return 0
    if args.action == "stop":
        print(f"{args.pidfile.stem}: {stop(args.pidfile, args.grace_s)}")
        return 0
    return 0 if alive(args.pidfile) else 1


if __name__ == "__main__":
    sys.exit(main())
