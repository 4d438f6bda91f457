"""Prefect's temporary server dies with the flow process that started it, kill -9 included.

A flow run with no ``PREFECT_API_URL`` starts Prefect's temporary server: a uvicorn subprocess that
Prefect stops when the flow process exits normally. After a kill -9 nothing stops it, and it keeps
a port, a few hundred MB and a SQLite file. ``guard_temporary_server()`` (called by every flow's
command line) makes Prefect start that subprocess through this module instead of ``-m uvicorn``:
``python -m tasks.common.prefect_guard PARENT_PID <uvicorn arguments>`` runs the same uvicorn command with a
thread that exits the server once its parent is gone (``os.getppid()`` changes when it is re-parented).
Only the server module's own ``subprocess`` name is replaced; nothing else in the process changes.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from types import ModuleType
from typing import Any

POLL_S = 1.0  # how often the server checks for its parent


class _GuardedSubprocess:
    """The ``subprocess`` module as Prefect's server module sees it: uvicorn runs under the guard."""

    def __init__(self, real: ModuleType) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def Popen(self, args: Any, *rest: Any, **kwargs: Any) -> Any:  # noqa: N802 (subprocess's name)
        if isinstance(args, (list, tuple)) and list(args[1:3]) == ["-m", "uvicorn"]:
            args = [args[0], "-m", __name__, str(os.getpid()), *args[3:]]
            # its own session: a terminal's Ctrl-C (SIGINT to the foreground process group) stops the flow, not
            # the server the flow then reports its end to (else each report retried for minutes, issue 21 item 6)
            kwargs.setdefault("start_new_session", True)
        return self._real.Popen(args, *rest, **kwargs)


def guard_temporary_server() -> None:
    """Make a temporary server started by this process exit when this process dies (idempotent)."""
    from prefect.server.api import server

    if not isinstance(server.subprocess, _GuardedSubprocess):
        server.subprocess = _GuardedSubprocess(server.subprocess)


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    os._exit(0)  # the flow process is gone: nobody will stop this server


def main() -> None:
    parent = int(sys.argv[1])
    sys.argv = ["uvicorn", *sys.argv[2:]]
    threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True, name="orphan-guard").start()
    from uvicorn.main import main as uvicorn_main

    uvicorn_main()


if __name__ == "__main__":
    main()
