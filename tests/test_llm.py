"""LLM layer against a real local HTTP server speaking the OpenAI protocol, with injected faults."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tasks.agents import Rejection, extract_request, interpret_extract
from tasks.llm import LLMConfig, StructuredLLM, cache_key, parse_answer, retry_delay
from tests.openai_server import FakeOpenAIServer, FaultPlan

CODE = 'def add_item(cart, item, quantity=1):\n    """Add an item to the cart."""\n    cart[item] = quantity\n    return cart\n'


def _llm(server: FakeOpenAIServer, cache: Path, **overrides) -> tuple[StructuredLLM, list[float]]:
    slept: list[float] = []

    async def record_sleep(seconds: float) -> None:
        slept.append(seconds)
        await asyncio.sleep(0)

    cfg = LLMConfig(model="fake", base_url=server.base_url, cache_dir=str(cache), backoff_base_s=0.01, **overrides)
    return StructuredLLM(cfg, sleep=record_sleep), slept


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
    assert isinstance(rejection, Rejection) and rejection.reason == "extract_llm_http_5xx"
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
        llm, _ = _llm(server, tmp_path, concurrency=8, timeout_s=0.5, parse_attempts=3)
        results = asyncio.run(llm.run_many(_requests(40)))
    assert len(results) == 40 and [r.item_id for r in results] == [f"rec-{i}" for i in range(40)]
    for r in results:  # every item either parsed or carries a reason
        assert r.ok or r.reason
    assert sum(r.ok for r in results) == 40  # 3 attempts absorb 6 bad answers spread over 40 items


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
