"""A small local HTTP server speaking the OpenAI chat-completions protocol, for tests and benches.

It answers the three agents with canned, schema-valid JSON derived from the request (so answers
are deterministic), after an optional fixed delay, and injects faults on request: 429 with
Retry-After, 500, a stall past the client's timeout, a truncated answer (finish_reason "length")
and invalid JSON. Every request is counted, so tests can prove a resume makes no calls.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _h(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def _param(name: str, typ: str = "string") -> dict[str, str]:
    return {"name": name, "type": typ, "description": f"the {name.replace('_', ' ')}"}


def canned_answer(agent: str, user_text: str) -> dict[str, Any]:
    """A deterministic, schema-valid answer for the agent that sent ``user_text``."""
    if agent == "api_doc":
        match = re.search(r"def\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(([^)]*)\)", user_text)
        name = match.group(1) if match else f"function_{_h(user_text) % 10_000}"
        args = [a.split(":")[0].split("=")[0].strip() for a in (match.group(2) if match else "").split(",")]
        args = [a for a in args if a and a not in ("self", "cls") and not a.startswith("*")][:5]
        return {
            "name": name,
            "description": f"Runs {name} and returns its result.",
            "input_params": [_param(a) for a in args],
            "output_params": [_param(f"{name}_result")],
        }
    if agent == "dependent_api_doc":
        doc = json.loads(user_text[user_text.index("{") : user_text.index("\n\nStudy")])
        satisfied = 1 + _h(doc["name"]) % 2
        if satisfied == 1:  # consumes the given API's output
            return {"satisfied": 1, "name": f"consume_{doc['name']}", "description": f"Uses the output of {doc['name']}.",
                    "input_params": doc["output_params"][:3] or [_param("value")], "output_params": [_param("report")]}
        return {"satisfied": 2, "name": f"prepare_{doc['name']}", "description": f"Produces the inputs of {doc['name']}.",
                "input_params": [_param("request")], "output_params": doc["input_params"][:3] or [_param("value")]}
    if agent == "dependency_verdict":
        # Reject a deterministic share of pairs so tests see judge rejections.
        rejected = _h(user_text) % 5 == 0
        return {"result": 0 if rejected else 1, "reason": "no shared parameter" if rejected else "output feeds input"}
    raise ValueError(f"unknown schema name {agent!r}")


@dataclass
class FaultPlan:
    """Faults served to the first requests that reach the server, in this order."""

    rate_limited: int = 0  # 429 with Retry-After
    retry_after_s: float = 0.05
    server_errors: int = 0  # 500
    stalls: int = 0  # sleep past the client's timeout
    stall_s: float = 2.0
    truncated: int = 0  # cut-off JSON with finish_reason "length"
    invalid_json: int = 0  # finish_reason "stop" but not JSON

    def queue(self) -> list[str]:
        return (["429"] * self.rate_limited + ["500"] * self.server_errors + ["stall"] * self.stalls
                + ["truncated"] * self.truncated + ["invalid"] * self.invalid_json)


@dataclass
class ServerState:
    delay_s: float = 0.0
    plan: FaultPlan = field(default_factory=FaultPlan)
    faults: list[str] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_fault(self) -> str | None:
        with self.lock:
            self.counts["requests"] += 1
            return self.faults.pop(0) if self.faults else None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: ServerState  # set on the subclass per server

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        request = json.loads(self.rfile.read(length))
        self.state.counts["body:" + hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()] += 1
        fault = self.state.next_fault()
        self.state.counts[f"fault:{fault}"] += fault is not None
        if fault == "429":
            self._send(429, {"error": {"message": "rate limited", "type": "rate_limit"}}, {"Retry-After": str(self.state.plan.retry_after_s)})
            return
        if fault == "500":
            self._send(500, {"error": {"message": "internal error", "type": "server_error"}})
            return
        if fault == "stall":
            time.sleep(self.state.plan.stall_s)
        if self.state.delay_s:
            time.sleep(self.state.delay_s)
        schema_name = request.get("response_format", {}).get("json_schema", {}).get("name", "")
        user_text = next(m["content"] for m in request["messages"] if m["role"] == "user")
        self.state.counts[schema_name] += 1
        text = json.dumps(canned_answer(schema_name, user_text))
        finish = "stop"
        if fault == "truncated":
            text, finish = text[: len(text) // 2], "length"
        elif fault == "invalid":
            text = "Sure! Here is the JSON you asked for: {name: oops"
        self._send(200, {
            "id": f"chatcmpl-{self.state.counts['requests']}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", "fake-model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {"prompt_tokens": len(user_text) // 4, "completion_tokens": len(text) // 4, "total_tokens": (len(user_text) + len(text)) // 4},
        })


class FakeOpenAIServer:
    """``with FakeOpenAIServer(delay_s=0.1, faults=FaultPlan(rate_limited=2)) as srv: srv.base_url``"""

    def __init__(self, delay_s: float = 0.0, faults: FaultPlan | None = None):
        plan = faults or FaultPlan()
        self.state = ServerState(delay_s=delay_s, plan=plan, faults=plan.queue())
        handler = type("Handler", (_Handler,), {"state": self.state})
        server_cls = type("Server", (ThreadingHTTPServer,), {"request_queue_size": 256})  # bench runs 64+ in flight
        self.httpd = server_cls(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @property
    def requests(self) -> int:
        return self.state.counts["requests"]

    def repeated_bodies(self) -> int:
        """Requests whose exact body had been sent before."""
        return sum(n - 1 for k, n in self.state.counts.items() if k.startswith("body:"))

    def __enter__(self) -> "FakeOpenAIServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
