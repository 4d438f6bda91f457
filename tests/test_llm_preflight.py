"""The LLM preflight (tasks/llm/preflight.py) and how the client treats an endpoint it cannot reach: one
``GET /models`` that the fake OpenAI server and the embedded llama.cpp server both answer; connection
refused and DNS failure are one clear error, never retried; transient faults keep their backoff and
say so, one log line per retry with the wait and the cause."""
from __future__ import annotations

import asyncio
import logging
import re
import socket
import time

import pytest

from tasks.llm.client import StructuredLLM
from tasks.llm.config import LLMConfig
from tasks.llm.errors import LLMEndpointError, LLMUnavailableError
from tasks.llm.preflight import LLMUnreachableError, preflight, unreachable_cause
from tasks.agents.requests import extract_request
from tests.openai_server import FakeOpenAIServer, FaultPlan

CODE = 'def add_item(cart, item, quantity=1):\n    """Add an item to the cart."""\n    cart[item] = quantity\n    return cart\n'


def closed_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(i: int = 0):
    return extract_request(f"rec-{i}", CODE.replace("add_item", f"add_item_{i}"), "python", 2000)


def cfg(base_url: str, tmp_path, **kw) -> LLMConfig:
    return LLMConfig(**{"model": "fake-model", "base_url": base_url, "cache_dir": str(tmp_path / "cache"), **kw})


def test_preflight_against_the_fake_server_lists_its_models(tmp_path):
    with FakeOpenAIServer() as srv:
        result = preflight(cfg(srv.base_url, tmp_path))
        assert srv.requests == 0  # a GET /models is no chat request
    assert result.status == 200 and result.models == ("fake-model",)
    assert result.base_url == srv.base_url


def test_preflight_warns_of_a_model_the_endpoint_does_not_list_and_remembers_a_pass(tmp_path, caplog):
    with FakeOpenAIServer(models={"model-a", "model-b"}) as srv:
        with caplog.at_level(logging.INFO, logger="tasks.llm.preflight"):
            first = preflight(cfg(srv.base_url, tmp_path, model="model-c"))
            again = preflight(cfg(srv.base_url, tmp_path, model="model-c"))  # the flow's own check, after the CLI's
    assert first.models == ("model-a", "model-b") and again is first
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "does not list the model 'model-c' (it lists model-a, model-b)" in warnings[0]
    assert sum("answered GET /models" in r.getMessage() for r in caplog.records) == 1  # one request


def test_preflight_connection_refused_is_one_clear_error_in_well_under_a_second(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    started = time.monotonic()
    with pytest.raises(LLMUnreachableError, match=r"cannot be reached \(connection refused\).*--base-url") as info:
        preflight(cfg(url, tmp_path))
    assert time.monotonic() - started < 1.0
    assert info.value.base_url == url
    assert isinstance(info.value, LLMUnavailableError)  # what build-tdi's chunk retries already never retry


def test_preflight_dns_failure_is_one_clear_error(tmp_path):
    with pytest.raises(LLMUnreachableError, match="does not resolve"):
        preflight(cfg("http://no-such-host.invalid/v1", tmp_path))


def test_preflight_rejected_key_is_the_fatal_endpoint_error_without_the_key(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAIServer(api_key="sk-right-key-123456") as srv:
        with pytest.raises(LLMEndpointError, match="HTTP 401") as info:
            preflight(cfg(srv.base_url, tmp_path, api_key="sk-wrong-key-abcdef"))
        assert preflight(cfg(srv.base_url, tmp_path, api_key="sk-right-key-123456")).status == 200
    assert "sk-wrong-key-abcdef" not in str(info.value)


def test_preflight_a_server_that_is_up_but_odd_goes_on_with_a_warning(tmp_path, caplog):
    """A 404 on /models (a proxy with chat only) is a server that is up: the run goes on, said once."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    import threading

    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with caplog.at_level(logging.WARNING, logger="tasks.llm.preflight"):
            result = preflight(cfg(f"http://127.0.0.1:{httpd.server_address[1]}/v1", tmp_path))
    finally:
        httpd.shutdown()
    assert result.status == 404
    assert [r.getMessage() for r in caplog.records if "HTTP 404" in r.getMessage() and "/v1" in r.getMessage()]


def test_unreachable_cause_tells_refused_and_dns_from_transient_faults():
    refused = ConnectionRefusedError(111, "Connection refused")
    wrapped = ConnectionError("APIConnectionError")
    wrapped.__cause__ = refused
    assert unreachable_cause(refused) == "connection refused"
    assert unreachable_cause(wrapped) == "connection refused"  # the SDK transport wraps it
    assert "does not resolve" in unreachable_cause(socket.gaierror(-2, "Name or service not known"))
    for transient in (TimeoutError("timed out"), ConnectionResetError(104, "reset"),
                      ConnectionError("connection closed before any byte of the response: EOF")):
        assert unreachable_cause(transient) is None


@pytest.mark.parametrize("transport", ["fast", "openai"])
def test_a_refused_connection_mid_run_is_not_retried(tmp_path, transport):
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    llm = StructuredLLM(cfg(f"http://127.0.0.1:{closed_port()}/v1", tmp_path, transport=transport, max_retries=6),
                        sleep=sleep)
    started = time.monotonic()
    with pytest.raises(LLMUnreachableError, match="connection refused"):
        llm.run([request(i) for i in range(3)])
    assert time.monotonic() - started < 5.0
    assert slept == []  # no backoff at all
    assert llm.stats["unreachable"] >= 1 and llm.stats["requests_sent"] <= 3  # one try per request in flight
    assert {r.outcome for r in llm.ledger} <= {"unreachable", "cancelled"}


def test_transient_faults_keep_their_backoff_and_say_each_retry(tmp_path, caplog):
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    with FakeOpenAIServer(faults=FaultPlan(server_errors=2)) as srv, \
            caplog.at_level(logging.WARNING, logger="tasks.llm.client"):
        llm = StructuredLLM(cfg(srv.base_url, tmp_path, concurrency=1, max_retries=4, backoff_base_s=1.0), sleep=sleep)
        results = llm.run([request()])
    lines = [r.getMessage() for r in caplog.records if r.name == "tasks.llm.client"]
    assert len(slept) == 2 and len(lines) == 2  # one line per retry, as it happens
    for n, (line, wait) in enumerate(zip(lines, slept), start=1):
        assert re.search(rf"http_5xx \(HTTP 500.*\); retry {n} of 4 in {wait:.1f} s", line), line
    assert results[0].ok  # the third try is answered


def test_a_rate_limit_says_its_shared_cool_down(tmp_path, caplog):
    with FakeOpenAIServer(faults=FaultPlan(rate_limited=1, retry_after_s=0.05)) as srv, \
            caplog.at_level(logging.WARNING, logger="tasks.llm.client"):
        llm = StructuredLLM(cfg(srv.base_url, tmp_path, concurrency=1, max_retries=3))
        llm.run([request()])
    lines = [r.getMessage() for r in caplog.records if r.name == "tasks.llm.client"]
    assert len(lines) == 1 and "http_429" in lines[0] and "retry 1 of 3 in 0.1 s" in lines[0]
    assert "cool-down every request waits out" in lines[0]


@pytest.mark.slow
def test_the_embedded_llama_cpp_server_answers_the_preflight(tmp_path):
    """The real packaged server (smollm2-135m, the test suite's model) answers GET /models."""
    pytest.importorskip("xllamacpp", reason="xllamacpp is not installed: `make setup-llm`")
    from models.embedded_llm.fetch import model_path
    from models.embedded_llm.server import EmbeddedLLMServer

    if not model_path("smollm2-135m").is_file():
        pytest.skip("smollm2-135m is not fetched: python -m models.embedded_llm fetch --model smollm2-135m")
    with EmbeddedLLMServer(model="smollm2-135m", log_path=tmp_path / "server.log") as server:
        result = preflight(cfg(server.base_url, tmp_path))
    assert result.status == 200 and "smollm2-135m" in result.models
