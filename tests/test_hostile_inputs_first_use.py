"""Hostile inputs, first use (issue 21 items 3, 7, 8): what a new user meets running a flow as the README shows.

Each case runs the real surface (the command line through a subprocess, or the flow's Python call) and asserts
the one clear outcome and that nothing was started or written:

* an LLM endpoint that cannot be reached (connection refused, a host that does not resolve): one error line
  within seconds, before the first stage, no output folder, no lock;
* a failure is said once, last, with what to do; the traceback is in the run's log file, and on the screen
  only with ``--verbose``; no Prefect telemetry ERROR on the way;
* ``--help`` and a usage error answer without importing Prefect, torch or transformers;
* the warehouse opens in ``make sql``'s shell; a missing warehouse is one line, no file made.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from tests.conftest import REPO_ROOT

FLOWS = sorted(p.stem for p in (REPO_ROOT / "flows").glob("*.py") if p.stem != "__init__")  # every flow, new ones too
HEAVY = ("prefect", "torch", "transformers")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def user_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a user who ran none of the Makefile: no analytics switches, no endpoint."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PREFECT_SERVER_ANALYTICS_ENABLED", "DO_NOT_TRACK", "OPENAI_BASE_URL", "PREFECT_API_URL")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    return env


def run_flow(module: str, args: list[str], tmp_path: Path, timeout: float = 240) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", f"flows.{module}", *args], cwd=tmp_path, env=user_env(tmp_path),
                          capture_output=True, text=True, timeout=timeout)
    return done, time.monotonic() - started


def output_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]


def assert_said_once_last(done: subprocess.CompletedProcess, prog: str, cause: str) -> Path:
    """Exit 1; the cause (a regex) on exactly one line, the error line second to last, the log file's path last;
    no traceback and no telemetry on the screen. Returns the log file."""
    lines = output_lines(done)
    assert done.returncode == 1, lines
    assert sum(bool(re.search(cause, line)) for line in lines) == 1, lines
    assert re.search(cause, lines[-2]) and lines[-2].startswith(f"python -m flows.{prog}: error: "), lines
    assert "Traceback" not in done.stdout + done.stderr
    assert "telemetry" not in (done.stdout + done.stderr).lower()
    match = re.match(r"\s*traceback: (\S+) \(or run again with --verbose\)$", lines[-1])
    assert match, lines
    return Path(match.group(1))


# ------------------------------------------------------------------ item 3: an endpoint that cannot be reached
UNREACHABLE = [
    pytest.param("build_tdi", lambda url, tmp: ["--base-url", url, "--limit", "3", "--output-root", str(tmp / "out"),
                                                "--cache-dir", str(tmp / "cache")], id="build-tdi"),
    pytest.param("mine_tdi", lambda url, tmp: ["--base-url", url, "--judge-sample", "3", "--output-root",
                                               str(tmp / "out"), "--cache-dir", str(tmp / "cache")], id="mine-tdi review"),
]
HOSTS = [pytest.param(lambda: f"http://127.0.0.1:{closed_port()}/v1", "connection refused", id="refused"),
         pytest.param(lambda: "http://no-such-host.invalid/v1", "the host name does not resolve", id="dns")]


@pytest.mark.parametrize("module, args", UNREACHABLE)
@pytest.mark.parametrize("url, cause", HOSTS)
def test_an_unreachable_llm_endpoint_is_one_error_within_seconds_and_nothing_is_written(tmp_path, module, args, url, cause):
    endpoint = url()
    done, seconds = run_flow(module, args(endpoint, tmp_path), tmp_path)
    log = assert_said_once_last(done, module, rf"LLM endpoint {re.escape(endpoint)} cannot be reached \({cause}")
    assert seconds < 30  # the issue: 168 s of silent retries
    assert "Start the server or fix --base-url" in done.stderr
    assert not (tmp_path / "out").exists()  # no output folder, no lock, no records.duckdb
    assert not (tmp_path / "cache").exists()
    assert "Beginning flow run" not in done.stdout + done.stderr  # refused before Prefect ran anything
    assert "LLMUnreachableError" in (tmp_path / log).read_text()


def test_a_python_call_of_build_tdi_is_refused_by_the_preflight_before_the_lock(tmp_path):
    """A Python call (or a deployment run) gets the same error from the flow itself, before its lock or folder."""
    from flows.build_tdi import BuildTDIConfig, build_tdi
    from tasks.llm.config import LLMConfig
    from tasks.llm.preflight import LLMUnreachableError

    cfg = BuildTDIConfig(output_root=str(tmp_path / "out"), limit=3,
                         llm=LLMConfig(model="m", base_url=f"http://127.0.0.1:{closed_port()}/v1",
                                       cache_dir=str(tmp_path / "cache")))
    with pytest.raises(LLMUnreachableError, match="connection refused"):
        build_tdi.fn(cfg)
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_build_graph_with_the_llm_evaluator_is_refused_before_any_work(tmp_path):
    from flows.build_graph import GraphConfig, build_graph
    from tasks.llm.preflight import LLMUnreachableError

    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "tools.jsonl").write_text("")
    cfg = GraphConfig(toolsets=(str(tmp_path / "set"),), evaluator="llm",
                      evaluator_base_url=f"http://127.0.0.1:{closed_port()}/v1", warehouse=str(tmp_path / "wh" / "t.duckdb"),
                      evaluator_cache_dir=str(tmp_path / "cache"))
    started = time.monotonic()
    with pytest.raises(LLMUnreachableError, match="connection refused"):
        build_graph.fn(cfg)
    assert time.monotonic() - started < 5
    assert not (tmp_path / "wh").exists() and not (tmp_path / "cache").exists()


def test_mine_tdi_review_never_retries_an_endpoint_that_cannot_be_reached():
    """Mid-run (the endpoint went away after the preflight): the review task is not retried by Prefect either
    (it was: twice, 10 s apart, each try with its own transport retries)."""
    from flows.mine_tdi import _retry_unless_fatal, run_agent
    from tasks.llm.errors import LLMEndpointError
    from tasks.llm.preflight import LLMUnreachableError

    class State:
        def __init__(self, exc):
            self.exc = exc

        def result(self):
            raise self.exc

    assert run_agent.retry_condition_fn is _retry_unless_fatal and run_agent.retries == 2
    assert _retry_unless_fatal(None, None, State(LLMUnreachableError("http://x/v1", "connection refused"))) is False
    assert _retry_unless_fatal(None, None, State(LLMEndpointError(401, "http://x/v1", "m", "bad key"))) is False
    assert _retry_unless_fatal(None, None, State(TimeoutError("slow"))) is True  # transient: retried as before


# ------------------------------------------------------------------ item 7: one error, said once
SOURCE = '''def add_item(cart, item, quantity=1):
    """Add an item to the cart and return the cart."""
    cart[item] = quantity
    return cart


def cart_total(cart, prices):
    """Sum the price of every item in the cart."""
    return sum(prices[item] * n for item, n in cart.items())
'''


@pytest.mark.slow
def test_a_flow_failure_is_said_once_last_with_the_traceback_in_the_log_file(tmp_path):
    """A failure inside a running flow (the endpoint is up but has no such model: HTTP 404, fatal): the issue
    counted 140-200 lines with the cause 3-4 times; now the cause is one line, last, with what to do, and the
    traceback is in the log file (and on the screen with --verbose)."""
    from tests.openai_server import FakeOpenAIServer

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "shop.py").write_text(SOURCE)
    with FakeOpenAIServer(models={"another-model"}) as server:
        args = ["--source", "tree", "--source-path", str(tmp_path / "src"), "--base-url", server.base_url,
                "--model", "fake", "--output-root", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")]
        done, _ = run_flow("build_tdi", args, tmp_path)
        verbose, _ = run_flow("build_tdi", [*args, "--verbose"], tmp_path)
    lines = output_lines(done)
    log = assert_said_once_last(done, "build_tdi", r"HTTP 404 \(the endpoint or model does not exist\)")
    assert "Check --base-url, --model and OPENAI_API_KEY" in lines[-2]  # what to do
    assert len(lines) <= 12, lines  # the temporary server's lines, the flow's progress, the cause, the log's path
    text = (tmp_path / log).read_text()
    assert "Traceback (most recent call last)" in text and "LLMEndpointError" in text

    vlines = output_lines(verbose)
    assert verbose.returncode == 1 and "Traceback (most recent call last)" in verbose.stdout + verbose.stderr
    assert vlines[-2] == lines[-2] and re.match(r"\s*traceback: \S+$", vlines[-1]), vlines[-3:]


@pytest.fixture
def logging_restored():
    """FlowCLI.run in process leaves what a command line's process keeps until it exits (its console filter on
    every stream handler, pytest's capture handlers included, and its log file handler): undo it after the test,
    so later tests in this worker still capture log records."""
    import logging

    loggers = [logging.getLogger()] + [logging.getLogger(n) for n in list(logging.Logger.manager.loggerDict)]
    before = {id(lg): (lg, list(lg.handlers), {id(h): list(h.filters) for h in lg.handlers}) for lg in loggers}
    levels = {name: logging.getLogger(name).level for name in ("tasks", "flows", "models", "warehouse")}
    yield
    for lg in [logging.getLogger()] + [logging.getLogger(n) for n in list(logging.Logger.manager.loggerDict)]:
        _, handlers, filters = before.get(id(lg), (lg, [], {}))
        for h in list(lg.handlers):
            if h not in handlers:
                lg.removeHandler(h)
                h.close()
        for h in lg.handlers:
            h.filters[:] = filters.get(id(h), h.filters)
    for h in logging.getLogger().handlers:  # pytest's own capture handlers, attached per test phase
        h.filters[:] = [f for f in h.filters if type(f).__name__ != "_Console"]
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def test_flow_cli_says_a_failure_once_and_keeps_the_traceback(tmp_path, monkeypatch, capsys, logging_restored):
    """The runner itself, in process: one line, last, the log file has the traceback; ``--verbose`` prints it."""
    from tasks.common import flow_cli

    monkeypatch.setattr(flow_cli, "LOG_DIR", tmp_path / "logs")

    def fails(_cfg):
        raise ValueError("--thing 3: the cause, and what to do about it")

    for verbose in (False, True):
        with pytest.raises(SystemExit) as exited:
            flow_cli.FlowCLI("python -m flows.demo", object(), verbose).run(fails)
        assert exited.value.code == 1
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines[-2] == "python -m flows.demo: error: --thing 3: the cause, and what to do about it"
        assert ("Traceback" in err) == verbose
        if not verbose:
            assert sum("the cause" in line for line in lines) == 1  # (with --verbose, the traceback names it too)
    logs = sorted((tmp_path / "logs").glob("demo-*.log"))
    assert logs and all("Traceback (most recent call last)" in p.read_text() for p in logs)


def test_ctrl_c_is_one_line_and_exit_130(tmp_path, monkeypatch, capsys, logging_restored):
    from tasks.common import flow_cli

    monkeypatch.setattr(flow_cli, "LOG_DIR", tmp_path / "logs")
    monkeypatch.setattr(flow_cli, "exit_now", sys.exit)  # the real one is os._exit: it would end pytest too

    def interrupted(_cfg):
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as exited:
        flow_cli.FlowCLI("python -m flows.demo", object(), False).run(interrupted)
    assert exited.value.code == 130
    assert [line for line in capsys.readouterr().err.splitlines() if line.strip()][-1].startswith(
        "python -m flows.demo: interrupted (log: ")


def test_ctrl_c_exit_flushes_the_log_file_and_skips_the_exit_hooks(tmp_path):
    """The real ``exit_now`` (os._exit) in a process of its own: status 130, the run's log file has the
    interruption and its traceback, and an atexit hook (where Prefect drains to its server) never runs."""
    script = tmp_path / "interrupted.py"
    script.write_text(
        "import atexit, sys\n"
        f"sys.path.insert(0, {str(REPO_ROOT)!r})\n"
        "from pathlib import Path\n"
        "from tasks.common import flow_cli\n"
        f"flow_cli.LOG_DIR = Path({str(tmp_path / 'logs')!r})\n"
        f"atexit.register(lambda: Path({str(tmp_path / 'hook-ran')!r}).write_text('x'))\n"
        "def main(_cfg):\n"
        "    raise KeyboardInterrupt\n"
        "flow_cli.FlowCLI('python -m flows.demo', object(), False).run(main)\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("python -m flows.demo: interrupted (log: ")
    (log,) = (tmp_path / "logs").glob("demo-*.log")
    assert "python -m flows.demo interrupted" in log.read_text() and "KeyboardInterrupt" in log.read_text()
    assert not (tmp_path / "hook-ran").exists()


# ------------------------------------------------------------------ item 8: first use
@pytest.mark.parametrize("module", FLOWS)
@pytest.mark.parametrize("argv, status", [(["--help"], 0), (["--no-such-flag"], 2)], ids=["help", "usage-error"])
def test_help_and_usage_errors_answer_without_heavy_imports(tmp_path, module, argv, status):
    probe = (
        "import runpy, sys, json\n"
        f"sys.argv = ['python -m flows.{module}', *{argv!r}]\n"
        "try:\n"
        f"    runpy.run_module('flows.{module}', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "else:\n"
        "    code = 'ran'\n"
        f"print(json.dumps({{'code': code, 'heavy': [m for m in {HEAVY!r} if m in sys.modules]}}), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, env=user_env(tmp_path), capture_output=True,
                          text=True, timeout=120)
    result = json.loads(done.stderr.strip().splitlines()[-1])
    assert result == {"code": status, "heavy": []}, done.stderr[-2000:]
    if status == 0:
        assert "--verbose" in done.stdout  # every flow's command line has it (tasks/common/cli.py)
    else:
        assert f"python -m flows.{module}: error: " in done.stderr and "Traceback" not in done.stderr


def test_the_flows_turn_prefect_analytics_off_themselves(tmp_path):
    probe = "import os, flows.build_tdi; print(os.environ.get('PREFECT_SERVER_ANALYTICS_ENABLED'), os.environ.get('DO_NOT_TRACK'))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, env=user_env(tmp_path), capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.split() == ["false", "1"], done.stderr[-2000:]
    # a user's own choice stands
    env = {**user_env(tmp_path), "PREFECT_SERVER_ANALYTICS_ENABLED": "true"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["true", "1"]


@pytest.fixture
def warehouse_file(tmp_path: Path) -> Path:
    path = tmp_path / "wh" / "tgr.duckdb"
    path.parent.mkdir()
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE edges AS SELECT 'apibank' AS dataset, 'B' AS dependent, 'A' AS prerequisite")
    con.execute("CREATE MACRO prerequisites_of(ds, t) AS TABLE SELECT prerequisite FROM edges "
                "WHERE dataset = ds AND dependent = t")
    con.close()
    return path


def test_make_sql_opens_the_warehouse_the_project_wrote(warehouse_file):
    # -o: the venv this test runs in is the setup (not remade here when pyproject.toml is newer than it)
    make = subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", "sql", f"WAREHOUSE={warehouse_file}",
                           "SQL_ARGS=-c \"SELECT * FROM prerequisites_of('apibank', 'B');\""],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert make.returncode == 0, make.stderr[-2000:]
    assert "prerequisite" in make.stdout and "│ A " in make.stdout


def test_the_sql_shell_reads_statements_from_stdin_and_refuses_writes(warehouse_file):
    shell = [sys.executable, "-m", "warehouse.shell", str(warehouse_file)]
    done = subprocess.run(shell, cwd=REPO_ROOT, input=".tables\nSELECT count(*)\n  AS n FROM edges;\n", capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "edges" in done.stdout and re.search(r"│\s+1 │", done.stdout), done.stdout
    done = subprocess.run([*shell, "-c", "DELETE FROM edges"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "read-only" in done.stderr
    assert duckdb.connect(str(warehouse_file), read_only=True).execute("SELECT count(*) FROM edges").fetchone() == (1,)


def test_the_sql_shell_on_a_missing_warehouse_is_one_line_and_makes_no_file(tmp_path):
    missing = tmp_path / "nope" / "tgr.duckdb"
    done = subprocess.run([sys.executable, "-m", "warehouse.shell", str(missing)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no warehouse file there" in done.stderr
    assert "make graph" in done.stderr and not missing.parent.exists()
