"""Hostile replies and faults (issue 12): a 200 that is not a chat completion is one retried request
and at worst one rejected record; every request sent has a ledger row, whatever ends the run; an
answer damaged by a fault is never cached."""
from __future__ import annotations

import asyncio
import json
import re
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest

from tasks.dataset.accounting import write_records_db_from_parquet
from tasks.agents.requests import interpret_extract
from tasks.agents.chunks import ChunkJob, iter_record_chunks, run_chunk
from tasks.llm.cache import ResponseCache, cache_key
from tasks.llm.client import StructuredLLM
from tasks.llm.config import LLMConfig
from tasks.llm.errors import LLMEndpointError, LLMUnavailableError
from tasks.common.outcome import Outcome
from tasks.sources.filters import SourceFilter
from tasks.sources.spec import SourceSpec
from tests.conftest import REPO_ROOT
from tests.openai_server import CANNED, JUNK_USAGE, FakeOpenAIServer, FaultPlan
from tests.test_llm import _llm, _requests

NOT_COMPLETIONS = sorted(name for name, (status, _, _) in CANNED.items() if status == 200)
TRANSPORTS = ("fast", "openai")


def write_tree(root: Path, n: int) -> Path:
    """A source tree of ``n`` distinct documented functions (``--source tree``)."""
    funcs = [textwrap.dedent(f'''
        def fetch_item_{i}(store, key_{i}, default=None):
            """Fetch item {i} from the store, or the default when it is missing."""
            value = store.get(key_{i}, default)
            return value
        ''') for i in range(n)]
    (root / "pkg").mkdir(parents=True, exist_ok=True)
    (root / "pkg" / "items.py").write_text("\n".join(funcs))
    return root


def sent(llm: StructuredLLM) -> int:
    """Ledger rows of requests sent (cache hits aside)."""
    return sum(c.outcome != "cache_hit" for c in llm.ledger)


# -- a 200 that is not a completion ------------------------------------------------------------------
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("reply", NOT_COMPLETIONS)
def test_a_200_that_is_not_a_completion_is_one_retried_request(tmp_path, reply, transport):
    with FakeOpenAIServer(faults=FaultPlan(canned=(reply,))) as server:
        llm, slept = _llm(server, tmp_path, transport=transport)
        [result] = asyncio.run(llm.run_many(_requests(1)))
        assert server.requests == 2
    assert result.ok and result.value["name"] == "add_item_0"
    assert [c.outcome for c in llm.ledger] == ["bad_response", "ok"] and len(slept) == 1  # backed off, then asked again
    assert "without a chat completion" in llm.ledger[0].detail
    assert ResponseCache(tmp_path).count() == 1  # the answer, not the bad reply


@pytest.mark.parametrize("reply", NOT_COMPLETIONS)
def test_a_server_that_never_sends_a_completion_rejects_each_record_with_a_reason(tmp_path, reply):
    with FakeOpenAIServer(faults=FaultPlan(canned=(reply,) * 100)) as server:
        llm, _ = _llm(server, tmp_path, max_retries=1, concurrency=2)
        results = asyncio.run(llm.run_many(_requests(3)))  # returns: nothing escapes run_many
        assert server.requests == 6
    assert [r.reason for r in results] == ["llm_bad_response"] * 3
    assert all("without a chat completion" in r.detail for r in results)
    rejection = interpret_extract(results[0])
    assert isinstance(rejection, Outcome) and rejection.reason == "extract_llm_bad_response"
    assert sent(llm) == 6 and ResponseCache(tmp_path).count() == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("reply", sorted(JUNK_USAGE))
def test_a_completion_with_junk_usage_is_an_answer_with_zero_tokens(tmp_path, reply, transport):
    with FakeOpenAIServer(faults=FaultPlan(canned=(reply,))) as server:
        llm, _ = _llm(server, tmp_path, transport=transport)
        [result] = asyncio.run(llm.run_many(_requests(1)))
        assert server.requests == 1
    assert result.ok and [(c.outcome, c.tokens_in, c.tokens_out) for c in llm.ledger] == [("ok", 0, 0)]


def test_non_completions_in_a_chunk_reject_one_record_not_the_chunk(tmp_path):
    """The agents' pipeline over a chunk: records that met bad replies are retried or rejected with
    a reason; the chunk ends with every record accounted for."""
    chunk = next(iter_record_chunks(SourceSpec(kind="tree", path=write_tree(tmp_path / "src", 6)), None, SourceFilter(), 100))
    faults = FaultPlan(canned=("html_page", "empty_choices", "no_message", "json_null"))
    with FakeOpenAIServer(faults=faults) as server:
        llm = LLMConfig(model="fake", base_url=server.base_url, concurrency=1, max_retries=1, backoff_base_s=0.01,
                        cache_dir=str(tmp_path / "cache"))
        marker = run_chunk(ChunkJob(chunk, str(tmp_path / "chunk"), llm, 1800, "fp"))
    assert marker["validated"] + marker["rejected"] == chunk.n_read == 6
    assert marker["stages"]["extract"]["failed_by_reason"] == {"llm_bad_response": 2}  # two records, two bad replies each
    assert marker["stages"]["generate"]["requests"] == 4 and marker["transient_failures"] == 2  # a rerun redoes the chunk
    con = duckdb.connect()
    reasons = con.execute(f"SELECT reason, detail FROM '{tmp_path / 'chunk' / 'outcomes.parquet'}' WHERE stage = 'extract'").fetchall()
    assert sorted(r for r, _ in reasons) == ["extract_llm_bad_response"] * 2 and all("without a chat completion" in d for _, d in reasons)


# -- a ledger row for every request sent ---------------------------------------------------------------
@pytest.mark.parametrize("resets", [1, 3])
def test_a_request_the_server_reads_then_closes_without_answering_is_a_ledger_row_and_a_backed_off_retry(tmp_path, resets):
    """Found by the fault soak: on a pooled keep-alive connection, a close before any byte of the
    response was resent at once on another connection, with no ledger row and no backoff (once per
    idle connection: a request that kills the server's worker each time went out that often)."""
    with FakeOpenAIServer(faults=FaultPlan(canned=("pass",), resets=resets)) as server:  # one answer pools the connection
        llm, slept = _llm(server, tmp_path, concurrency=1, max_retries=resets)
        results = asyncio.run(llm.run_many(_requests(2)))
        assert sent(llm) == server.requests == 2 + resets
    assert all(r.ok for r in results)
    assert [c.outcome for c in llm.ledger] == ["ok"] + ["connection"] * resets + ["ok"] and len(slept) == resets
    assert "before any byte of the response" in llm.ledger[1].detail


@pytest.mark.parametrize("plan,settings,error", [
    # the 401 is the third request to arrive: the other two are in flight (the server holds them 0.3 s)
    (FaultPlan(canned=("pass", "pass", "echo_auth_401")), {"concurrency": 3}, LLMEndpointError),
    # the endpoint goes down: one worker's request is held, the other's fail until the run stops
    (FaultPlan(canned=("pass",) + ("error_500",) * 100), {"concurrency": 2, "max_retries": 0, "max_consecutive_failures": 4},
     LLMUnavailableError),
], ids=["endpoint-error", "endpoint-down"])
def test_a_run_that_is_aborted_has_a_ledger_row_for_every_request_sent(tmp_path, plan, settings, error):
    with FakeOpenAIServer(delay_s=0.3, faults=plan) as server:
        llm, _ = _llm(server, tmp_path, ledger_journal=str(tmp_path / "calls.jsonl"), **settings)
        with pytest.raises(error):
            asyncio.run(llm.run_many(_requests(20)))
        assert sent(llm) == server.requests
    expected = ["cancelled", "cancelled", "http_401"] if error is LLMEndpointError else ["cancelled"] + ["http_5xx"] * 4
    assert sorted(c.outcome for c in llm.ledger) == expected
    journal = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [(r["item_id"], r["outcome"]) for r in journal] == [(c.item_id, c.outcome) for c in llm.ledger]


def test_the_books_read_every_journal_row_and_skip_a_line_torn_by_a_kill(tmp_path):
    with FakeOpenAIServer(faults=FaultPlan(server_errors=2, invalid_json=1)) as server:
        llm, _ = _llm(server, tmp_path, ledger_journal=str(tmp_path / "a.jsonl"))
        asyncio.run(llm.run_many(_requests(4)))
    journal = tmp_path / "a.jsonl"
    with journal.open("a") as fh:
        fh.write('{"agent": "extract", "item_id": "torn", "cache')  # a kill in the middle of a line
    summary = write_records_db_from_parquet(tmp_path / "records.duckdb", [], [journal], 0)
    assert summary.read == 0
    con = duckdb.connect(str(tmp_path / "records.duckdb"), read_only=True)
    rows = con.execute("SELECT item_id, outcome FROM llm_calls").fetchall()
    assert rows == [(c.item_id, c.outcome) for c in llm.ledger] and len(rows) == server.requests == 7


_KILLED_CHILD = """
import asyncio, sys
from tasks.llm.client import StructuredLLM
from tasks.llm.config import LLMConfig
from tests.test_llm import _requests
cfg = LLMConfig(model="fake", base_url=sys.argv[1], cache_dir=sys.argv[2], concurrency=4, ledger_journal=sys.argv[3])
asyncio.run(StructuredLLM(cfg).run_many(_requests(200)))
"""


def test_a_killed_run_leaves_a_journal_row_for_every_request_answered(tmp_path):
    journal = tmp_path / "calls.jsonl"
    with FakeOpenAIServer(delay_s=0.05) as server:
        child = subprocess.Popen([sys.executable, "-c", _KILLED_CHILD, server.base_url, str(tmp_path / "cache"), str(journal)],
                                 cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, start_new_session=True)
        deadline = time.time() + 60
        while server.requests < 20 and time.time() < deadline and child.poll() is None:
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        arrived = server.requests
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    assert 20 <= arrived < 200
    assert arrived - 4 <= len(rows) <= arrived  # only the requests in flight at the kill have no row
    assert {r["outcome"] for r in rows} == {"ok"}


@pytest.mark.slow
def test_the_books_count_the_requests_of_a_failed_chunk_attempt_that_was_retried(tmp_path, prefect_harness, monkeypatch):
    import flows.build_tdi as bt
    import tasks.agents.chunks

    real_write = tasks.agents.chunks.write_chunk_outputs
    failures = []

    def fail_once(*args, **kwargs):  # every LLM call of the attempt was made; then the disk fails
        if not failures:
            failures.append(1)
            raise OSError("No space left on device")
        return real_write(*args, **kwargs)

    monkeypatch.setattr(tasks.agents.chunks, "write_chunk_outputs", fail_once)
    monkeypatch.setattr(bt, "process_chunk", bt.process_chunk.with_options(retry_delay_seconds=0))
    src = write_tree(tmp_path / "src", 12)
    with FakeOpenAIServer() as server:
        manifest = bt.build_tdi(bt.config_from_args(_cli(src, server, tmp_path, "retried")))
        requests = server.requests
    assert failures and requests > 12
    con = duckdb.connect(str(tmp_path / "out" / "retried" / "records.duckdb"), read_only=True)
    by_outcome = dict(con.execute("SELECT outcome, count(*) FROM llm_calls GROUP BY outcome").fetchall())
    assert by_outcome == {"ok": requests, "cache_hit": requests}  # the failed attempt's calls, then the retry's cache hits
    assert manifest["llm_usage"]["requests_sent"] == requests and manifest["llm_usage"]["cache_hits"] == requests


def _cli(src: Path, server: FakeOpenAIServer, tmp: Path, name: str, *extra: str) -> list[str]:
    return ["--source", "tree", "--source-path", str(src), "--sample-seed", "-1", "--limit", "-1", "--base-url", server.base_url,
            "--model", "fake", "--concurrency", "2", "--cache-dir", str(tmp / "cache"), "--output-root", str(tmp / "out"),
            "--dataset", name, "--rows-per-shard", "40", "--per-class", "1000", "--chunk-size", "100", *extra]


# -- nothing damaged is cached -------------------------------------------------------------------------
@pytest.mark.parametrize("plan", [
    FaultPlan(canned=("empty_choices",) * 100),
    FaultPlan(canned=("no_message",) * 100),
    FaultPlan(canned=("html_page",) * 100),
    FaultPlan(truncated=100),
    FaultPlan(invalid_json=100),
], ids=["empty-choices", "no-message", "html-page", "truncated", "invalid-json"])
def test_a_run_against_a_broken_server_caches_nothing_and_a_rerun_asks_again(tmp_path, plan):
    with FakeOpenAIServer(faults=plan) as broken:
        llm, _ = _llm(broken, tmp_path, max_retries=1, parse_attempts=2)
        first = asyncio.run(llm.run_many(_requests(3)))
    assert not any(r.ok for r in first) and ResponseCache(tmp_path).count() == 0
    with FakeOpenAIServer() as healthy:
        again, _ = _llm(healthy, tmp_path)
        second = asyncio.run(again.run_many(_requests(3)))
        assert healthy.requests == 3
    assert all(r.ok for r in second) and {c.outcome for c in again.ledger} == {"ok"}


def test_a_rerun_reuses_the_answer_of_a_later_attempt_without_asking_the_bad_one_again(tmp_path):
    with FakeOpenAIServer(faults=FaultPlan(invalid_json=1)) as server:
        llm, _ = _llm(server, tmp_path)
        asyncio.run(llm.run_many(_requests(1)))
        assert [c.outcome for c in llm.ledger] == ["invalid_json", "ok"]
        rerun, _ = _llm(server, tmp_path)
        [result] = asyncio.run(rerun.run_many(_requests(1)))
        assert server.requests == 2
    assert result.ok and [(c.outcome, c.attempt) for c in rerun.ledger] == [("cache_hit", 1)]


def test_a_damaged_entry_left_by_an_older_version_is_dropped_and_asked_again(tmp_path):
    [req] = _requests(1)
    with FakeOpenAIServer() as server:
        llm, _ = _llm(server, tmp_path)
        key = cache_key(llm.cfg, req, 0)
        cache = ResponseCache(tmp_path)
        cache.put(key, {"format": "tgr-llm-cache-v1", "text": None, "finish_reason": "empty", "tokens_in": 0, "tokens_out": 0})
        cache.close()
        [result] = asyncio.run(llm.run_many([req]))
        assert server.requests == 1
    assert result.ok and [(c.outcome, c.attempt) for c in llm.ledger] == [("ok", 0)]
    assert ResponseCache(tmp_path).get(key)["text"] is not None  # replaced by the answer


def test_batch_mode_caches_only_the_answers_that_validate(tmp_path):
    with FakeOpenAIServer(faults=FaultPlan(invalid_json=1)) as server:
        llm, _ = _llm(server, tmp_path, batch=True)
        results = asyncio.run(llm.run_many(_requests(6)))
    assert all(r.ok for r in results)
    bad = next(c for c in llm.ledger if c.outcome == "invalid_json")
    cache = ResponseCache(tmp_path)
    assert cache.count() == 6 and cache.get(bad.cache_key) is None


@pytest.mark.slow
def test_a_build_against_empty_choices_then_a_healthy_server_sends_again_and_succeeds(tmp_path, prefect_harness):
    from flows.build_tdi import build_tdi, config_from_args
    from tasks.llm.errors import LLMStageFailed

    src = write_tree(tmp_path / "src", 12)
    with FakeOpenAIServer(faults=FaultPlan(canned=("empty_choices",) * 10_000)) as broken:
        cfg = config_from_args(_cli(src, broken, tmp_path, "recovers"))
        with pytest.raises(LLMStageFailed, match="extract: all 12 LLM requests failed.*llm_bad_response"):
            build_tdi(replace(cfg, llm=replace(cfg.llm, max_retries=1, backoff_base_s=0.01)))
    assert ResponseCache(tmp_path / "cache").count() == 0
    with FakeOpenAIServer() as healthy:
        manifest = build_tdi(config_from_args(_cli(src, healthy, tmp_path, "recovers")))
        assert healthy.requests >= 12 * 2  # every record asked again: extract, generate, ...
    assert manifest["accounting"]["accepted"] > 0 and manifest["execution"]["chunks_reused"] == 0


# -- hostile inputs: a missing or empty source ----------------------------------------------------------
def _empty_file(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "empty.py").write_text("")
    return root


def _empty_csn(root: Path) -> Path:
    (root / "python" / "final" / "jsonl" / "train").mkdir(parents=True)
    (root / "python" / "final" / "jsonl" / "train" / "part-0.jsonl").write_text("\n\n")  # blank lines only
    return root


@pytest.mark.parametrize("source,make,message", [
    ("tree", lambda p: p / "missing", "source tree .*missing is not a directory"),
    ("codesearchnet", lambda p: p / "missing", "CodeSearchNet root .*missing is not a directory"),
    ("tree", lambda p: p.mkdir() or p, "nothing was read from tree:.*no function in any \\*.py file"),
    ("tree", _empty_file, "nothing was read from tree:"),
    ("codesearchnet", _empty_csn, "nothing was read from codesearchnet:.*no line in any"),
], ids=["missing-tree", "missing-csn", "empty-folder", "empty-file", "empty-csn-file"])
def test_a_missing_or_empty_source_is_one_usage_error_before_any_work(tmp_path, capsys, source, make, message):
    from flows.build_tdi import config_from_args

    path = make(tmp_path / "src")
    with pytest.raises(SystemExit) as info:
        config_from_args(["--source", source, "--source-path", str(path), "--partitions", "train", "--base-url", "http://127.0.0.1:9/v1"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and re.search(f"error: {message}", err), err


def test_the_cli_reports_a_missing_path_in_two_lines_not_a_traceback(tmp_path):
    run = subprocess.run([sys.executable, "-m", "flows.build_tdi", "--source", "tree", "--source-path", str(tmp_path / "nope")],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == f"python -m flows.build_tdi: error: source tree {tmp_path / 'nope'} is not a directory\n"  # one line


@pytest.mark.slow
def test_a_flow_run_on_an_empty_source_says_nothing_was_read(tmp_path, prefect_harness):
    from flows.build_tdi import BuildTDIConfig, build_tdi
    from tasks.sources.spec import EmptySourceError

    (tmp_path / "src").mkdir()
    cfg = BuildTDIConfig(source=SourceSpec(kind="tree", path=str(tmp_path / "src")), output_root=str(tmp_path / "out"),
                         llm=LLMConfig(model="fake", base_url="http://127.0.0.1:9/v1"))
    with pytest.raises(EmptySourceError, match="nothing was read from tree:"):
        build_tdi(cfg)  # a deployment's run: the same message as the CLI's, before any LLM call
