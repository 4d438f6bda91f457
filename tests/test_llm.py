"""LLM layer against a real local HTTP server speaking the OpenAI protocol, with injected faults."""
from __future__ import annotations

import asyncio
import gzip
import json
import multiprocessing as mp
import sqlite3
import time
from pathlib import Path

import pytest

from tasks.agents.requests import extract_request, interpret_extract
from tasks.llm.cache import ResponseCache, cache_key, fast_cache_key, migrate_legacy_cache, request_key_parts
from tasks.llm.client import StructuredLLM
from tasks.llm.config import LLMConfig
from tasks.llm.errors import LLMEndpointError, LLMStageFailed, LLMUnavailableError, raise_if_all_failed
from tasks.llm.limits import estimate_tokens, parse_duration, rate_limit_delay, retry_delay
from tasks.llm.structured import StructuredResult, parse_answer
from tasks.common.outcome import Outcome
from tests.openai_server import FakeOpenAIServer, FaultPlan, RateLimitPlan

CODE = 'def add_item(cart, item, quantity=1):\n    """Add an item to the cart."""\n    cart[item] = quantity\n    return cart\n'


class VirtualClock:
    """Sleeps that return at once and advance a clock: rate limits and cool-downs without waiting."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def _llm(server: FakeOpenAIServer, cache: Path, **overrides) -> tuple[StructuredLLM, list[float]]:
    clock = VirtualClock()
    cfg = LLMConfig(**{"model": "fake", "base_url": server.base_url, "cache_dir": str(cache), "backoff_base_s": 0.01, **overrides})
    return StructuredLLM(cfg, sleep=clock.sleep, clock=clock), clock.slept


def _requests(n: int):
    return [extract_request(f"rec-{i}", CODE.replace("add_item", f"add_item_{i}"), "python", 2000) for i in range(n)]


def test_clean_run_parses_every_answer(tmp_path):
    with FakeOpenAIServer() as server:
        llm, _ = _llm(server, tmp_path)
        results = asyncio.run(llm.run_many(_requests(5)))
    assert [r.ok for r in results] == [True] * 5
    assert [r.value["name"] for r in results] == [f"add_item_{i}" for i in range(5)]
    assert {c.outcome for c in llm.ledger} == {"ok"}
    assert all(c.tokens_in > 0 and c.tokens_out > 0 for c in llm.ledger)


def test_429_honours_retry_after_then_succeeds(tmp_path):
    with FakeOpenAIServer(faults=FaultPlan(rate_limited=2, retry_after_s=0.25)) as server:
        llm, slept = _llm(server, tmp_path)
        [result] = asyncio.run(llm.run_many(_requests(1)))
        assert server.requests == 3
    assert result.ok
    assert slept == [0.25, 0.25]  # the server's Retry-After, not our own backoff
    assert [c.outcome for c in llm.ledger] == ["http_429", "http_429", "ok"]


def test_500_and_timeout_are_retried_with_backoff(tmp_path):
    with FakeOpenAIServer(faults=FaultPlan(server_errors=1, stalls=1, stall_s=1.5)) as server:
        llm, slept = _llm(server, tmp_path, timeout_s=0.5)
        [result] = asyncio.run(llm.run_many(_requests(1)))
    assert result.ok
    assert [c.outcome for c in llm.ledger] == ["http_5xx", "timeout", "ok"]
    assert len(slept) == 2 and slept[1] > 0  # exponential backoff, jittered


def test_exhausted_retries_end_as_a_reason_not_a_crash(tmp_path):
    with FakeOpenAIServer(faults=FaultPlan(server_errors=10)) as server:
        llm, slept = _llm(server, tmp_path, max_retries=3)
        [result] = asyncio.run(llm.run_many(_requests(1)))
        assert server.requests == 4
    assert not result.ok and result.reason == "llm_http_5xx"
    rejection = interpret_extract(result)
    assert isinstance(rejection, Outcome) and rejection.reason == "extract_llm_http_5xx"
    assert len(slept) == 3 and all(0 < s <= llm.cfg.backoff_max_s for s in slept)  # bounded backoff


def test_truncated_then_invalid_json_keeps_the_raw_text(tmp_path):
    with FakeOpenAIServer(faults=FaultPlan(truncated=1, invalid_json=1)) as server:
        llm, _ = _llm(server, tmp_path, parse_attempts=2)
        [result] = asyncio.run(llm.run_many(_requests(1)))
    assert not result.ok and result.reason == "invalid_json"
    assert result.raw_text.startswith("Sure! Here is the JSON")
    assert [c.outcome for c in llm.ledger] == ["truncated", "invalid_json"]
    rejection = interpret_extract(result)
    assert rejection.reason == "extract_invalid_json" and rejection.raw_text == result.raw_text


def test_one_bad_answer_is_asked_again_and_recovers(tmp_path):
    with FakeOpenAIServer(faults=FaultPlan(invalid_json=1)) as server:
        llm, _ = _llm(server, tmp_path, parse_attempts=2)
        [result] = asyncio.run(llm.run_many(_requests(1)))
    assert result.ok and [c.outcome for c in llm.ledger] == ["invalid_json", "ok"]


def test_many_faults_under_concurrency_lose_nothing(tmp_path):
    plan = FaultPlan(rate_limited=5, retry_after_s=0.01, server_errors=5, stalls=2, stall_s=1.0, truncated=3, invalid_json=3)
    with FakeOpenAIServer(faults=plan) as server:
        # Enough tries for all 12 transport faults or all 6 bad answers to meet one item: which items
        # meet them depends on the arrival order (on a busy machine one worker's retries can take a
        # run of faults before the others' first requests arrive).
        llm, _ = _llm(server, tmp_path, concurrency=8, timeout_s=0.5, max_retries=12, parse_attempts=7)
        results = asyncio.run(llm.run_many(_requests(40)))
    assert len(results) == 40 and [r.item_id for r in results] == [f"rec-{i}" for i in range(40)]
    for r in results:  # every item either parsed or carries a reason
        assert r.ok or r.reason
    assert sum(r.ok for r in results) == 40


def test_cache_makes_a_rerun_send_nothing(tmp_path):
    with FakeOpenAIServer() as server:
        llm, _ = _llm(server, tmp_path)
        first = asyncio.run(llm.run_many(_requests(6)))
        sent = server.requests
        llm2, _ = _llm(server, tmp_path)
        second = asyncio.run(llm2.run_many(_requests(6)))
        assert server.requests == sent == 6
    assert [r.value for r in first] == [r.value for r in second]
    assert {c.outcome for c in llm2.ledger} == {"cache_hit"}


def test_cache_key_covers_request_content_only(tmp_path):
    cfg = LLMConfig(model="m", cache_dir=str(tmp_path))
    [req] = _requests(1)
    key = cache_key(cfg, req, 0)
    assert key == cache_key(LLMConfig(model="m", cache_dir="/elsewhere", concurrency=99), req, 0)  # not run settings
    assert key != cache_key(LLMConfig(model="m2", cache_dir=str(tmp_path)), req, 0)
    assert key != cache_key(LLMConfig(model="m", temperature=0.7, cache_dir=str(tmp_path)), req, 0)
    assert key != cache_key(cfg, req, 1)
    other = extract_request("rec-0", CODE + "\n", "python", 2000)
    assert key != cache_key(cfg, other, 0)


def test_parse_answer_reasons():
    schema = {"type": "object", "required": ["result"], "properties": {"result": {"enum": [0, 1]}}}
    assert parse_answer('{"result": 1}', schema)[0] == {"result": 1}
    assert parse_answer("", schema)[1] == "invalid_json"
    assert parse_answer("{'result': 1}", schema)[1] == "invalid_json"
    assert parse_answer("[1]", schema)[1] == "schema_invalid"
    value, reason, detail = parse_answer('{"result": 7}', schema)
    assert value is None and reason == "schema_invalid" and "result" in detail
    assert parse_answer('```json\n{"result": 0}\n```', schema)[0] == {"result": 0}


def test_retry_delay_uses_retry_after_and_caps_backoff():
    cfg = LLMConfig(model="m", backoff_base_s=1.0, backoff_max_s=8.0)
    assert retry_delay(cfg, 0, "3") == 3.0
    assert retry_delay(cfg, 0, "999") == 8.0
    assert all(0.5 * min(2**i, 8) <= retry_delay(cfg, i, None) <= min(2**i, 8) for i in range(6))


def test_requests_send_the_standard_json_schema_response_format(tmp_path):
    seen: list[dict] = []
    with FakeOpenAIServer() as server:
        original = server.httpd.RequestHandlerClass.do_POST

        def spy(handler):
            length = int(handler.headers.get("Content-Length", 0))
            body = handler.rfile.read(length)
            seen.append(json.loads(body))
            handler.rfile = __import__("io").BytesIO(body)
            handler.headers.replace_header("Content-Length", str(len(body)))
            original(handler)

        server.httpd.RequestHandlerClass.do_POST = spy
        llm, _ = _llm(server, tmp_path)
        asyncio.run(llm.run_many(_requests(1)))
    rf = seen[0]["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["name"] == "api_doc"
    assert rf["json_schema"]["schema"]["required"] == ["name", "description", "input_params", "output_params"]
    assert "maxLength" not in json.dumps(rf)  # llama.cpp's grammar compiler dies on long string bounds
    assert rf["json_schema"]["schema"]["properties"]["input_params"]["maxItems"] == 12


# -- the SQLite response store ------------------------------------------------------------------
def test_fast_cache_key_equals_the_reference_key():
    for overrides in ({}, {"temperature": 0.7, "max_tokens": 11, "strict_schema": True}, {"model": "ünï/cödé"}):
        cfg = LLMConfig(**{"model": "m", **overrides})
        for req in _requests(3) + [extract_request("x", 'def f():\n    "\\u00e9 \\"quoted\\" \\t"\n', "python", 2000)]:
            parts = request_key_parts(cfg, req)
            assert [fast_cache_key(parts, a) for a in range(3)] == [cache_key(cfg, req, a) for a in range(3)]


def test_cache_is_one_sqlite_file_in_wal_mode(tmp_path):
    with FakeOpenAIServer() as server:
        llm, _ = _llm(server, tmp_path)
        asyncio.run(llm.run_many(_requests(5)))
    assert not list(tmp_path.rglob("*.json"))  # no file per request any more
    cache = ResponseCache(tmp_path)
    assert cache.count() == len(cache) == 5
    con = sqlite3.connect(tmp_path / ResponseCache.DB_NAME)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    entry = cache.get(llm.ledger[0].cache_key)
    assert entry["agent"] == "extract" and entry["finish_reason"] == "stop" and entry["tokens_out"] > 0


def _writer(directory: str, worker: int, n: int, shared: int) -> None:
    cache = ResponseCache(directory)  # opened after the fork: one connection per process
    for i in range(n):
        key = f"shared-{i:05d}" if i < shared else f"w{worker}-{i:05d}"
        cache.put(key, {"key": key, "text": "x" * (i % 300), "writer": worker if i >= shared else "any"})
    cache.close()


def test_cache_concurrent_writer_processes_lose_and_corrupt_nothing(tmp_path):
    parent = ResponseCache(tmp_path)
    parent.put("from-parent", {"key": "from-parent", "text": "", "writer": "parent"})  # a connection the children inherit
    # spawn, as Dask's process workers do: forking the whole pytest process (Prefect's threads
    # included) is not what a worker does, and made a child die under the full suite
    ctx = mp.get_context("spawn")
    workers, n, shared = 4, 400, 100
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, n, shared)) for w in range(workers)]
    for proc in procs:
        proc.start()
    seen = 0
    while any(proc.is_alive() for proc in procs):  # read while they write: never a torn entry
        for key in ("shared-00001", "w0-00399", "w3-00200"):
            entry = parent.get(key)
            if entry is not None:
                assert entry["key"] == key
                seen += 1
        time.sleep(0.005)
    assert all(proc.exitcode == 0 for proc in procs)
    assert parent.count() == 1 + shared + workers * (n - shared)
    con = sqlite3.connect(tmp_path / ResponseCache.DB_NAME)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for w in range(workers):
        for i in range(shared, n):
            entry = parent.get(f"w{w}-{i:05d}")
            assert entry == {"key": f"w{w}-{i:05d}", "text": "x" * (i % 300), "writer": w}
    assert all(parent.get(f"shared-{i:05d}")["writer"] == "any" for i in range(shared))


def _legacy_put(directory: Path, key: str, entry: dict) -> None:
    """How the one-file-per-request cache wrote an entry."""
    path = directory / key[:2] / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entry))


def test_a_legacy_cache_folder_is_read_then_migrated(tmp_path):
    with FakeOpenAIServer() as server:
        llm, _ = _llm(server, tmp_path / "old")
        first = asyncio.run(llm.run_many(_requests(4)))
        sent = server.requests
        legacy = tmp_path / "legacy"
        cache = ResponseCache(tmp_path / "old")
        for c in llm.ledger:
            _legacy_put(legacy, c.cache_key, cache.get(c.cache_key))
        (legacy / "ab").mkdir(exist_ok=True)
        (legacy / "ab" / ("ab" + "0" * 62 + ".json")).write_text('{"torn')  # a crash under the old layout

        llm2, _ = _llm(server, legacy)  # reads the old files: nothing sent
        second = asyncio.run(llm2.run_many(_requests(4)))
        assert server.requests == sent
        assert [r.value for r in second] == [r.value for r in first] and {c.outcome for c in llm2.ledger} == {"cache_hit"}

        assert migrate_legacy_cache(legacy, remove=True) == 4
        assert not list(legacy.rglob("*.json")) or list(legacy.rglob("*.json")) == [legacy / "ab" / ("ab" + "0" * 62 + ".json")]
        llm3, _ = _llm(server, legacy)
        asyncio.run(llm3.run_many(_requests(4)))
        assert server.requests == sent and ResponseCache(legacy).count() == 4


# -- rate limits --------------------------------------------------------------------------------
def test_local_rpm_limit_paces_requests(tmp_path):
    with FakeOpenAIServer() as server:
        llm, slept = _llm(server, tmp_path, rpm_limit=60, concurrency=5)
        results = asyncio.run(llm.run_many(_requests(5)))
        assert server.requests == 5
    assert all(r.ok for r in results)
    assert sum(slept) == pytest.approx(4.0, abs=0.01)  # 60/min = one a second, a burst of one


def test_local_tpm_limit_paces_requests(tmp_path):
    reqs = _requests(4)
    cfg = LLMConfig(model="fake")
    per_request = estimate_tokens(cfg, reqs[0])
    assert per_request > cfg.max_tokens  # prompt estimate + max_tokens, as OpenAI counts
    with FakeOpenAIServer() as server:
        llm, slept = _llm(server, tmp_path, tpm_limit=60 * per_request, concurrency=4)
        results = asyncio.run(llm.run_many(reqs))
    assert all(r.ok for r in results)
    assert sum(slept) == pytest.approx(3.0, rel=0.05)


@pytest.mark.parametrize("kind", ["requests", "tokens"])
def test_server_rate_limit_headers_pace_the_client_without_429(tmp_path, kind):
    reqs = _requests(9)
    tokens = estimate_tokens(LLMConfig(model="fake"), reqs[0])
    plan = RateLimitPlan(requests=3, window_s=0.4) if kind == "requests" else RateLimitPlan(tokens=3 * tokens + 10, window_s=0.4)
    with FakeOpenAIServer(rate_limit=plan) as server:
        llm = StructuredLLM(LLMConfig(model="fake", base_url=server.base_url, cache_dir=str(tmp_path), concurrency=2))
        started = time.monotonic()
        results = asyncio.run(llm.run_many(reqs))
        elapsed = time.monotonic() - started
        assert server.state.counts["rate_limited"] == 0  # never over the server's budget
    assert all(r.ok for r in results)
    assert elapsed >= 0.8  # 9 requests at 3 per 0.4 s window: the third window at least


def test_a_429_cools_down_every_request_in_flight(tmp_path):
    with FakeOpenAIServer(delay_s=0.15, faults=FaultPlan(rate_limited=1, retry_after_s=0.5)) as server:
        llm = StructuredLLM(LLMConfig(model="fake", base_url=server.base_url, cache_dir=str(tmp_path), concurrency=4))
        results = asyncio.run(llm.run_many(_requests(12)))
        log = list(server.state.log)
    assert all(r.ok for r in results) and len(log) == 13
    arrivals = sorted(log)
    [t429] = [t for t, _, status in arrivals[:4] if status == 429]  # one of the first wave of 4
    # The three others in flight finish after 0.15 s; without the shared cool-down their workers
    # would send at once. With it, nothing more arrives until the 429's Retry-After has passed.
    assert all(t >= t429 + 0.5 for t, _, _ in arrivals[4:])
    assert llm.limiter.cooldowns == 1


def test_429_without_retry_after_waits_for_the_exhausted_budget():
    cfg = LLMConfig(model="m", backoff_max_s=30)
    assert rate_limit_delay(cfg, {"retry-after-ms": "250"}, 0) == 0.25
    assert rate_limit_delay(cfg, {"retry-after": "2"}, 0) == 2.0
    exhausted = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1.5s",
                 "x-ratelimit-remaining-tokens": "900", "x-ratelimit-reset-tokens": "6m0s"}
    assert rate_limit_delay(cfg, exhausted, 0) == 1.5  # tokens left: only the request budget counts
    assert rate_limit_delay(cfg, {**exhausted, "x-ratelimit-remaining-tokens": "0"}, 0) == 30  # 6 min, capped
    assert 0 < rate_limit_delay(cfg, {}, 0) <= 1.0  # nothing said: backoff
    assert [parse_duration(v) for v in ("1s", "6m0s", "20ms", "1h2m3.5s", "0.25", "soon")] == [1.0, 360.0, 0.02, 3723.5, 0.25, None]


# -- fail fast ----------------------------------------------------------------------------------
def test_a_401_raises_at_once_without_retries(tmp_path):
    with FakeOpenAIServer(api_key="sk-right") as server:
        llm, slept = _llm(server, tmp_path, api_key="sk-wrong", concurrency=4)
        with pytest.raises(LLMEndpointError, match="HTTP 401.*API key was rejected.*Incorrect API key") as info:
            asyncio.run(llm.run_many(_requests(40)))
        assert server.requests <= 4  # the first wave in flight, nothing after
    assert info.value.status == 401 and info.value.base_url == server.base_url and slept == []


def test_an_unknown_model_404_raises_at_once(tmp_path):
    with FakeOpenAIServer(models={"fake"}) as server:
        llm, slept = _llm(server, tmp_path, model="no-such-model", concurrency=2)
        with pytest.raises(LLMEndpointError, match="HTTP 404.*'no-such-model'.*does not exist") as info:
            asyncio.run(llm.run_many(_requests(10)))
        assert server.requests <= 2
    assert info.value.status == 404 and slept == []


def test_consecutive_failures_abort_the_run(tmp_path):
    with FakeOpenAIServer(faults=FaultPlan(server_errors=10_000)) as server:
        llm, _ = _llm(server, tmp_path, max_retries=1, max_consecutive_failures=5, concurrency=2)
        with pytest.raises(LLMUnavailableError, match="5 LLM requests in a row failed"):
            asyncio.run(llm.run_many(_requests(100)))
        assert server.requests <= 2 * (5 + 2)  # not 200
    assert llm.stats["http_5xx"] >= 10


def test_raise_if_all_failed_names_the_reasons():
    raise_if_all_failed([], "extract")
    raise_if_all_failed([StructuredResult("a", True, value={}), StructuredResult("b", False, reason="llm_timeout")], "extract")
    failed = [StructuredResult(str(i), False, reason="llm_connection", detail="refused") for i in range(3)]
    with pytest.raises(LLMStageFailed, match=r"extract: all 3 requests failed.*llm_connection.*refused"):
        raise_if_all_failed(failed, "extract")


# -- transports ---------------------------------------------------------------------------------
def test_the_sdk_transport_gives_the_same_answers_and_errors(tmp_path):
    with FakeOpenAIServer(faults=FaultPlan(rate_limited=1, retry_after_s=0.25), api_key="k") as server:
        fast, _ = _llm(server, tmp_path / "fast", api_key="k")
        sdk, slept = _llm(server, tmp_path / "sdk", api_key="k", transport="openai")
        a = asyncio.run(sdk.run_many(_requests(3)))
        b = asyncio.run(fast.run_many(_requests(3)))
        bad, _ = _llm(server, tmp_path / "bad", api_key="nope", transport="openai")
        with pytest.raises(LLMEndpointError, match="HTTP 401"):
            asyncio.run(bad.run_many(_requests(1)))
    assert [r.value for r in a] == [r.value for r in b] and all(r.ok for r in a)
    assert slept == [0.25] and sorted(c.outcome for c in sdk.ledger) == ["http_429", "ok", "ok", "ok"]


def test_fast_transport_handles_chunked_gzip_and_closed_idle_connections(tmp_path):
    """A hand-written server: chunked + gzip answers, closing each connection after one answer."""
    answer = json.dumps({"choices": [{"message": {"content": json.dumps(
        {"name": "f", "description": "d", "input_params": [], "output_params": []})}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4}}).encode()
    body = gzip.compress(answer)
    served: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int([line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")][0].split(b":")[1])
        await reader.readexactly(length)
        served.append(1)
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7]) for i in range(0, len(body), 7))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()  # keep-alive said yes, then the server drops the idle connection

    async def main() -> list:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        llm = StructuredLLM(LLMConfig(model="m", base_url=f"http://127.0.0.1:{port}/v1", cache_dir=str(tmp_path), concurrency=1))
        out = []
        for req in _requests(3):
            out.append(await llm.run_one(req))
            await asyncio.sleep(0.1)  # the pooled connection is closed by now
        await llm._close()
        server.close()
        return out

    results = asyncio.run(main())
    assert [r.ok for r in results] == [True] * 3 and len(served) == 3
    assert {c.outcome for r in results for c in r.calls} == {"ok"}  # a stale connection is not a failure


# -- batch API ----------------------------------------------------------------------------------
def test_batch_mode_goes_through_files_and_batches_into_the_same_cache(tmp_path):
    reqs = _requests(6)
    reqs.append(reqs[0])  # the same request twice: one line in the batch
    with FakeOpenAIServer(batch_polls=3) as server:
        llm, slept = _llm(server, tmp_path, batch=True, batch_poll_s=5.0, price_in_per_mtok=1.0, price_out_per_mtok=2.0)
        results = asyncio.run(llm.run_many(reqs))
        counts = dict(server.state.counts)
        assert counts.get("requests", 0) == 0  # no online chat call
        assert counts["files_uploaded"] == 1 and counts["batches_created"] == 1 and counts["batch_lines"] == 6
        assert slept == [5.0, 5.0]  # polled three times

        online, _ = _llm(server, tmp_path / "online")
        expected = asyncio.run(online.run_many(reqs))
        again, _ = _llm(server, tmp_path, batch=True)
        asyncio.run(again.run_many(reqs))
        assert server.state.counts["batches_created"] == 1  # a rerun is all cache hits
    assert [r.value for r in results] == [r.value for r in expected] and all(r.ok for r in results)
    sent = [c for c in llm.ledger if c.outcome == "ok"]
    assert len(sent) == 6 and all(c.detail == "batch batch_1" and c.tokens_in > 0 for c in sent)
    assert sent[0].cost_usd == pytest.approx((sent[0].tokens_in + 2 * sent[0].tokens_out) / 1e6 * 0.5)
    assert {c.outcome for c in again.ledger} == {"cache_hit"}
    assert ResponseCache(tmp_path).batches()[0]["ingested"] == 1


class Crash(Exception):
    pass


def test_a_resumed_batch_run_polls_the_stored_batch_instead_of_resubmitting(tmp_path):
    reqs = _requests(5)
    with FakeOpenAIServer(batch_polls=3) as server:
        cfg = LLMConfig(model="fake", base_url=server.base_url, cache_dir=str(tmp_path), batch=True, batch_poll_s=1.0)

        async def crash(_seconds: float) -> None:
            raise Crash  # the process dies while waiting for the batch

        with pytest.raises(Crash):
            asyncio.run(StructuredLLM(cfg, sleep=crash).run_many(reqs))
        [stored] = ResponseCache(tmp_path).batches()
        assert stored["ingested"] == 0 and stored["n_requests"] == 5

        clock = VirtualClock()
        resumed = StructuredLLM(cfg, sleep=clock.sleep, clock=clock)
        results = asyncio.run(resumed.run_many(reqs))
        counts = server.state.counts
        assert counts["batches_created"] == 1 and counts["files_uploaded"] == 1  # polled, not resubmitted
    assert all(r.ok for r in results) and resumed.stats["batches_submitted"] == 0


def test_batch_mode_reasks_bad_answers_and_retries_failed_lines(tmp_path):
    with FakeOpenAIServer(faults=FaultPlan(server_errors=1, invalid_json=1)) as server:
        llm, _ = _llm(server, tmp_path, batch=True)
        results = asyncio.run(llm.run_many(_requests(6)))
        assert server.state.counts["batches_created"] == 2  # a second round: the 500 line and the re-ask
        assert server.state.counts["batch_lines"] == 8
    assert all(r.ok for r in results)
    assert sorted(c.outcome for c in llm.ledger) == sorted(["http_5xx", "invalid_json"] + ["ok"] * 6)


@pytest.mark.parametrize("status,reason", [("expired", "llm_batch_expired"), ("failed", "llm_batch_failed")])
def test_expired_or_failed_batches_end_as_reasons_and_a_rerun_resubmits(tmp_path, status, reason):
    with FakeOpenAIServer(batch_status=status) as server:
        llm, _ = _llm(server, tmp_path, batch=True)
        results = asyncio.run(llm.run_many(_requests(4)))
        server.state.batch_status = "completed"
        rerun, _ = _llm(server, tmp_path, batch=True)
        again = asyncio.run(rerun.run_many(_requests(4)))
        assert server.state.counts["batches_created"] == 2
    failed = [r for r in results if not r.ok]
    assert len(failed) == (2 if status == "expired" else 4) and {r.reason for r in failed} == {reason}
    assert all(r.ok for r in again)


def test_batch_mode_fails_fast_on_a_wrong_key(tmp_path):
    with FakeOpenAIServer(api_key="right") as server:
        llm, _ = _llm(server, tmp_path, batch=True, api_key="wrong")
        with pytest.raises(LLMEndpointError, match="HTTP 401"):
            asyncio.run(llm.run_many(_requests(2)))
        assert server.state.counts["files_uploaded"] == 0


@pytest.mark.parametrize("keep_alive,connections", [("timeout=5", 1), ("timeout=1", 3), (None, 1)])
def test_fast_transport_drops_idle_connections_before_the_server_does(keep_alive, connections):
    """An idle connection is reused only until a second before the server's Keep-Alive timeout."""
    from tasks.llm.transport import FastHTTPTransport

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = int([line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")][0].split(b":")[1])
            await reader.readexactly(length)
            extra = f"Keep-Alive: {keep_alive}\r\n".encode() if keep_alive else b""
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n" + extra + b"\r\n{}")
            await writer.drain()
        writer.close()

    async def main() -> int:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        transport = FastHTTPTransport(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", {})
        for _ in range(3):
            assert (await transport.request("POST", "/chat/completions", b"{}"))[0] == 200
        await transport.close()
        server.close()
        return transport.connections_opened

    assert asyncio.run(main()) == connections


def test_a_cache_write_error_ends_the_run_and_run_one_callers_get_it_from_aclose(tmp_path, monkeypatch):
    def broken(self, *args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(ResponseCache, "put", broken)
    monkeypatch.setattr(ResponseCache, "put_many", broken)
    with FakeOpenAIServer() as server:
        llm, _ = _llm(server, tmp_path, concurrency=2)
        with pytest.raises(sqlite3.OperationalError, match="disk is full"):
            asyncio.run(llm.run_many(_requests(4)))

        async def drive() -> None:  # a caller with its own worker loop over run_one
            own, _ = _llm(server, tmp_path / "own")
            await own.run_one(_requests(1)[0])
            await own.aclose()

        with pytest.raises(sqlite3.OperationalError, match="disk is full"):
            asyncio.run(drive())
