"""A flow's command line as a user meets it: Prefect analytics off, ``--help`` and usage errors answered
before any heavy import, and a failure said once, last, with what to do (its traceback in the run's log
file, and on the screen with ``--verbose``)."""
from __future__ import annotations

import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, NoReturn, TypeVar

# Off before Prefect is imported, for the command line, a Python call and a deployment alike: the flows import
# this module first. The server's usage pings and the client's telemetry (DO_NOT_TRACK) are the two switches.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

C = TypeVar("C")
LOG_DIR = Path("artifacts/logs")  # one file per command-line run: every log record, tracebacks included
VERBOSE = "--verbose"
_FAILED_STATE = ("Finished in state Failed", "Finished in state Crashed")


def verbose_requested(argv: Sequence[str]) -> bool:
    """Whether ``argv`` asks for ``--verbose`` (argparse's own rules: a unique prefix counts, ``--`` ends flags)."""
    for arg in argv:
        if arg == "--":
            return False
        if len(arg) > 4 and VERBOSE.startswith(arg):
            return True
    return False


class _Console(logging.Filter):
    """What the console shows. Without ``--verbose``: no tracebacks and no repeated 'Finished in state
    Failed' (the run's log file keeps both). Once the run has failed: nothing more (the temporary server's
    goodbye included), so the cause the runner says is the last line."""

    def __init__(self, quiet: bool):
        super().__init__()
        self.quiet, self.failed = quiet, False

    def filter(self, record: logging.LogRecord) -> bool:
        if self.failed:
            return False
        if self.quiet and (record.exc_info or record.exc_text):
            return False
        return not (self.quiet and str(record.msg).startswith(_FAILED_STATE))


def _console_handlers() -> list[logging.Handler]:
    loggers = [logging.getLogger()] + [logging.getLogger(name) for name in list(logging.Logger.manager.loggerDict)]
    found: list[logging.Handler] = []
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler) \
                    and handler not in found:
                found.append(handler)
    return found


def _log_to_file(path: Path) -> logging.Handler:
    """Every record of the run (root and Prefect loggers) to ``path``, tracebacks included."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)-7s | %(name)s - %(message)s"))
    handler.setLevel(logging.DEBUG)
    logging.getLogger().addHandler(handler)
    for name in ("tasks", "flows", "models", "warehouse"):  # the project's own lines (the LLM preflight and retries)
        if logging.getLogger(name).getEffectiveLevel() > logging.INFO:
            logging.getLogger(name).setLevel(logging.INFO)
    prefect = logging.getLogger("prefect")
    if not prefect.propagate:
        prefect.addHandler(handler)
    return handler


def failure_line(prog: str, exc: BaseException) -> str:
    """The one line a failure is said in: the exception's own message (the project's errors say what to do),
    led by its type where that says more (``FileNotFoundError: ...``, ``KeyError: 'x'``)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if type(exc).__module__ == "builtins" and type(exc) not in (ValueError, RuntimeError) and text != type(exc).__name__:
        text = f"{type(exc).__name__}: {text}"
    return f"{prog}: error: {text}"


def exit_now(status: int) -> NoReturn:
    """Exit at once after Ctrl-C: the log file and the terminal flushed, then ``os._exit``. Python's own exit
    runs Prefect's exit hooks first (its log and event workers drain to the server, the temporary server is
    stopped and waited for): about 1.5 s after the flow had stopped (issue 21 item 6: Ctrl-C within 2 s).
    Nothing is lost by skipping them: every file the flows write is renamed into place whole, the run's log
    file keeps every line, and the temporary server exits by itself once orphaned (tasks/common/prefect_guard.py)."""
    logging.shutdown()  # flushes and closes every handler (the run's log file)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


class FlowCLI(Generic[C]):
    """``python -m flows.<flow>``: the config parsed first (``start``), the flow run later (``run``)."""

    def __init__(self, prog: str, config: C, verbose: bool):
        self.prog, self.config, self.verbose = prog, config, verbose

    @classmethod
    def start(cls, module: str, parse: Callable[[Sequence[str] | None], C], prog: str) -> FlowCLI[C] | None:
        """When ``module`` runs as the program: parse the command line now, so that ``--help`` and a usage
        error answer (and exit) before the flow's heavy imports, which come after this call. Else None."""
        if module != "__main__":
            return None
        argv = sys.argv[1:]
        return cls(prog, parse(argv), verbose_requested(argv))

    def run(self, main: Callable[[C], Any], first: Callable[[C], Any] | None = None) -> NoReturn:
        """Run ``main(config)`` and exit: 0; or 1 with the cause said once, last (the traceback in the log
        file; on screen too with --verbose); 130 on Ctrl-C. ``first(config)``, when given, runs before Prefect
        starts its server (a cheap check, such as the LLM endpoint's preflight), its failure said alike."""
        from tasks.common.prefect_guard import guard_temporary_server

        from prefect.logging.configuration import setup_logging

        guard_temporary_server()  # a temporary Prefect server dies with this process, kill -9 included
        setup_logging()  # Prefect's console handlers, now, so that the console filter below is on them
        name = self.prog.rsplit(".", 1)[-1].replace("_", "-")
        log_file = LOG_DIR / f"{name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{os.getpid()}.log"
        file_handler = _log_to_file(log_file)
        console = _Console(quiet=not self.verbose)
        handlers = _console_handlers()
        for handler in handlers:
            handler.addFilter(console)
        try:
            if first is not None:
                first(self.config)
            main(self.config)
        except BaseException as exc:  # noqa: BLE001 - every failure ends here, said once
            if isinstance(exc, SystemExit):
                raise
            console.failed = True
            interrupted = isinstance(exc, KeyboardInterrupt)
            logging.getLogger(__name__).error("%s %s", self.prog, "interrupted" if interrupted else "failed", exc_info=True)
            file_handler.flush()
            if self.verbose:
                traceback.print_exc()
            if interrupted:
                print(f"{self.prog}: interrupted (log: {log_file})", file=sys.stderr, flush=True)
                exit_now(130)
            where = f"traceback: {log_file}" + ("" if self.verbose else f" (or run again with {VERBOSE})")
            print(f"{failure_line(self.prog, exc)}\n  {where}", file=sys.stderr, flush=True)
            sys.exit(1)
        sys.exit(0)
