"""A small local HTTP server speaking the OpenAI chat-completions protocol, for tests and benches.

It answers the three agents (agents 2 and 3 in both modes, data flow and precondition) with canned,
schema-valid JSON derived from the request (so answers are deterministic), after an optional fixed delay, and injects faults on request: 429 with
Retry-After, 500, a stall past the client's timeout, a truncated answer (finish_reason "length"),
invalid JSON, a connection dropped mid-response and one closed with no response at all. Every
request is counted, so tests can prove a resume makes no calls.

Faults come from a queue (the first requests to arrive get them, in order) and then, with
``FaultPlan.mix``, from a seeded random mix by probability: the draw is keyed by the request's body
and how often that body arrived before, not by the arrival order, so the same requests meet the same
faults at any concurrency and a soak's figures are reproducible (``bench/bench_fault_soak.py``).

Canned replies (``FaultPlan.canned``, names in :data:`CANNED`) cover what a proxy or a broken
server may send instead: a 200 that is not a chat completion (an HTML page, an error object, empty
``choices``, a choice without a message...), completions with junk usage fields, and error bodies
that echo the request's Authorization header.

It also checks an API key (401) and a model list (404), reports and enforces a fixed-window
rate limit with OpenAI's ``x-ratelimit-*`` headers, logs each request's arrival time and status,
and serves the Batch API: ``POST /v1/files`` (multipart), ``POST /v1/batches``,
``GET /v1/batches/{id}`` (a batch completes after ``batch_polls`` polls), ``GET /v1/files/{id}/content``.
"""
from __future__ import annotations

import contextlib
import email.parser
import email.policy
import hashlib
import json
import math
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _h(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def _param(name: str, typ: str = "string") -> dict[str, str]:
    return {"name": name, "type": typ, "description": f"the {name.replace('_', ' ')}"}


GIVEN_API = "The given API:\n"  # agent 2's prompts end with this and the given doc (tasks/agents/prompts.py)


def given_doc(user_text: str) -> dict[str, Any]:
    """The given API's doc in one of agent 2's prompts (its last part; a repair request's text may follow)."""
    return json.JSONDecoder().raw_decode(user_text, user_text.rindex(GIVEN_API) + len(GIVEN_API))[0]


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
    if agent == "consumer_api_doc":  # consumes the given API's first output, through its first input
        doc = given_doc(user_text)
        taken = (doc["output_params"] or [_param(f"{doc['name']}_result")])[0]
        return {"producer_output": taken["name"], "name": f"consume_{doc['name']}",
                "description": f"Uses the output of {doc['name']}.", "fed_input": {**taken, "description": "the value used"},
                "other_input_params": doc["output_params"][1:3], "output_params": [_param("report")]}
    if agent == "producer_api_doc":  # produces the given API's first input (the receiver aside)
        doc = given_doc(user_text)
        fed = next(p for p in doc["input_params"] if p["name"] not in ("self", "cls") and not p["name"].startswith("*"))
        return {"consumer_param": fed["name"], "name": f"prepare_{doc['name']}",
                # its own input is named apart from the given API's: a producer that takes the value it supplies is an echo
                "description": f"Produces the inputs of {doc['name']}.", "input_params": [_param(f"{doc['name']}_request")],
                "fed_output": fed, "other_output_params": [p for p in doc["input_params"] if p is not fed][:2]}
    if agent == "precondition_api_doc":
        doc = given_doc(user_text)
        # no value passes: the new API's parameters are named apart from the given API's
        if _h(doc["name"]) % 3:  # a check called before the given API
            return {"called_first": "new", "name": f"check_{doc['name']}_allowed", "description": f"Checks that {doc['name']} may run now.",
                    "input_params": [_param("caller")], "output_params": [_param("allowed", "boolean")],
                    "reason": f"{doc['name']} fails for a caller that was not checked."}
        return {"called_first": "given", "name": f"confirm_{doc['name']}", "description": f"Confirms what {doc['name']} did.",
                "input_params": [_param("confirmation_code")], "output_params": [_param("confirmed", "boolean")],
                "reason": f"There is nothing to confirm before {doc['name']} ran."}
    if agent == "dependency_verdict":
        # Reject a deterministic share of pairs so tests see judge rejections.
        rejected = _h(user_text) % 5 == 0
        return {"result": 0 if rejected else 1, "reason": "no shared parameter" if rejected else "output feeds input"}
    if agent == "precondition_verdict":
        rejected = _h(user_text) % 5 == 0
        return {"result": 0 if rejected else 1, "reason": "the order is usual, not required" if rejected else "B needs what A sets up"}
    raise ValueError(f"unknown schema name {agent!r}")


def _chat_body(choices: Any, usage: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"id": "chatcmpl-canned", "object": "chat.completion", "created": 0, "model": "fake", "choices": choices}
    if usage is not None:
        body["usage"] = usage
    return body


def _choice(message: Any, finish: str = "stop") -> dict[str, Any]:
    return {"index": 0, "message": message, "finish_reason": finish}


def _echo(headers: Any) -> str:
    return f"Invalid request. Received headers: Authorization: {headers.get('Authorization')}; Host: {headers.get('Host')}"


# name -> (status, content type, body: bytes, or a function of the request headers returning bytes)
CANNED: dict[str, tuple[int, str, Any]] = {
    # 200s that are not chat completions: one retried request each
    "html_page": (200, "text/html", b"<html><head><title>Sign in</title></head><body>Proxy login required</body></html>"),
    "error_object": (200, "application/json", json.dumps({"error": {"message": "upstream timed out", "type": "server_error"}}).encode()),
    "not_completion": (200, "application/json", json.dumps({"object": "list", "data": []}).encode()),
    "empty_choices": (200, "application/json", json.dumps(_chat_body([])).encode()),
    "no_message": (200, "application/json", json.dumps(_chat_body([{"index": 0, "finish_reason": "stop"}])).encode()),
    "message_not_object": (200, "application/json", json.dumps(_chat_body([_choice("hello")])).encode()),
    "choice_not_object": (200, "application/json", json.dumps(_chat_body(["hello"])).encode()),
    "content_not_text": (200, "application/json", json.dumps(_chat_body([_choice({"role": "assistant", "content": 42})])).encode()),
    "json_array": (200, "application/json", b"[1, 2, 3]"),
    "json_null": (200, "application/json", b"null"),
    "empty_body": (200, "application/json", b""),
    # error bodies that echo the caller's credentials (some proxies and debug servers do)
    "error_500": (500, "application/json", json.dumps({"error": {"message": "internal error", "type": "server_error"}}).encode()),
    "echo_auth_400": (400, "application/json", lambda h: json.dumps({"error": {"message": _echo(h), "type": "invalid_request_error"}}).encode()),
    "echo_auth_500": (500, "text/plain", lambda h: _echo(h).encode()),
    "echo_auth_401": (401, "application/json", lambda h: json.dumps({"error": {"message": _echo(h), "type": "invalid_request_error"}}).encode()),
    "pass": (0, "", b""),  # no fault: a normal answer (to place a canned reply after some good ones)
}
# A well-formed completion whose usage is junk: still an answer (the tokens count as 0).
JUNK_USAGE = {"usage_not_object": "n/a", "usage_not_numbers": {"prompt_tokens": "many", "completion_tokens": None}}


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
    canned: tuple[str, ...] = ()  # then these replies, by name: CANNED or JUNK_USAGE
    drops: int = 0  # then: the head and half the body of an answer, and the connection closes
    resets: int = 0  # then: the request is read, and the connection closes without a byte of response
    # Once the queue is empty: every chat request draws a fault from this mix, {fault name: probability}
    # (names of MIX_FAULTS, CANNED or JUNK_USAGE; the rest of the probability is a normal answer).
    # Batch lines take queued faults only.
    mix: Mapping[str, float] = field(default_factory=dict)
    seed: int = 0  # of the mix's draws

    def queue(self) -> list[str]:
        unknown = [c for c in self.canned if c not in CANNED and c not in JUNK_USAGE]
        if unknown:
            raise ValueError(f"unknown canned replies {unknown}")
        unknown = [c for c in self.mix if c not in MIX_FAULTS and c not in CANNED and c not in JUNK_USAGE]
        if unknown or any(p < 0 for p in self.mix.values()) or sum(self.mix.values()) > 1 + 1e-9:
            raise ValueError(f"a fault mix needs known names and probabilities summing to at most 1, not {dict(self.mix)}")
        return (["429"] * self.rate_limited + ["500"] * self.server_errors + ["stall"] * self.stalls
                + ["truncated"] * self.truncated + ["invalid"] * self.invalid_json + list(self.canned) + ["drop"] * self.drops
                + ["reset"] * self.resets)

    def draw(self, digest: str, occurrence: int) -> str | None:
        """The mix's fault for the ``occurrence``-th arrival of the request body whose sha256 is
        ``digest`` (None: a normal answer). Keyed by the request, not by the arrival order: a retry
        is a new occurrence, so it draws again."""
        if not self.mix:
            return None
        u = int(hashlib.sha256(f"{self.seed}:{digest}:{occurrence}".encode()).hexdigest()[:16], 16) / 2**64
        for name, p in self.mix.items():
            if u < p:
                return name
            u -= p
        return None


# Faults a mix may name besides the canned replies.
MIX_FAULTS = frozenset({"429", "500", "stall", "truncated", "invalid", "drop", "reset"})


@dataclass
class RateLimitPlan:
    """A fixed-window limit, reported in ``x-ratelimit-*`` headers and enforced with 429s (no Retry-After:
    the client must read the reset headers). Tokens are counted as OpenAI does: prompt estimate + max_tokens."""

    requests: int | None = None  # per window
    tokens: int | None = None
    window_s: float = 60.0


def _duration(seconds: float) -> str:
    """OpenAI's reset format: 20ms, 1.5s, 6m0s."""
    if seconds < 1:
        return f"{max(1, math.ceil(seconds * 1000))}ms"  # rounded up: a client that waits this long is in the next window
    if seconds < 60:
        return f"{math.ceil(seconds * 1000) / 1000:.3f}s"
    return f"{int(seconds // 60)}m{seconds % 60:.0f}s"


@dataclass
class ServerState:
    delay_s: float = 0.0
    plan: FaultPlan = field(default_factory=FaultPlan)
    faults: list[str] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    api_key: str | None = None  # when set, other keys get 401
    models: frozenset[str] | None = None  # when set, other models get 404
    rate_limit: RateLimitPlan | None = None
    window_start: float = 0.0
    window_requests: int = 0
    window_tokens: int = 0
    log: list[tuple[float, str, int]] = field(default_factory=list)  # (monotonic arrival, path, status)
    timings: list[tuple[int, float, float]] = field(default_factory=list)  # (client port, arrival, answer sent)
    batch_polls: int = 1  # GETs of a batch before it completes
    batch_status: str = "completed"  # or failed / expired (half the requests answered)
    files: dict[str, bytes] = field(default_factory=dict)
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)

    def next_fault(self) -> str | None:
        with self.lock:
            self.counts["requests"] += 1
            return self.faults.pop(0) if self.faults else None

    def charge(self, tokens: int) -> tuple[bool, dict[str, str]]:
        """Count a request against the window: (allowed, rate-limit headers)."""
        plan = self.rate_limit
        if plan is None:
            return True, {}
        with self.lock:
            now = time.monotonic()
            if now >= self.window_start + plan.window_s:
                self.window_start, self.window_requests, self.window_tokens = now, 0, 0
            allowed = (plan.requests is None or self.window_requests + 1 <= plan.requests) and (
                plan.tokens is None or self.window_tokens + tokens <= plan.tokens)
            if allowed:
                self.window_requests += 1
                self.window_tokens += tokens
            reset = _duration(self.window_start + plan.window_s - now)
            headers = {}
            if plan.requests is not None:
                headers |= {"x-ratelimit-limit-requests": str(plan.requests), "x-ratelimit-remaining-requests": str(plan.requests - self.window_requests),
                            "x-ratelimit-reset-requests": reset}
            if plan.tokens is not None:
                headers |= {"x-ratelimit-limit-tokens": str(plan.tokens), "x-ratelimit-remaining-tokens": str(plan.tokens - self.window_tokens),
                            "x-ratelimit-reset-tokens": reset}
            return allowed, headers


def _error(message: str, type_: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def _completion(state: ServerState, request: dict[str, Any], fault: str | None) -> dict[str, Any]:
    """The chat completion for ``request`` (answer faults "truncated" and "invalid" applied)."""
    schema_name = request.get("response_format", {}).get("json_schema", {}).get("name", "")
    # the user turns in order: one for a first request, then the repair request of agent 2 asked again
    user_text = "\n\n".join(m["content"] for m in request["messages"] if m["role"] == "user")
    text = json.dumps(canned_answer(schema_name, user_text))
    finish = "stop"
    if fault == "truncated":
        text, finish = text[: len(text) // 2], "length"
    elif fault == "invalid":
        text = "Sure! Here is the JSON you asked for: {name: oops"
    with state.lock:
        state.counts[schema_name] += 1
        state.counts["completions"] += 1
        serial = state.counts["completions"]
    usage = JUNK_USAGE.get(fault or "", {"prompt_tokens": len(user_text) // 4, "completion_tokens": len(text) // 4,
                                         "total_tokens": (len(user_text) + len(text)) // 4})
    return {
        "id": f"chatcmpl-{serial}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "fake-model"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": usage,
    }


def _model_missing(state: ServerState, request: dict[str, Any]) -> dict[str, Any] | None:
    model = request.get("model")
    if state.models is None or model in state.models:
        return None
    return _error(f"The model `{model}` does not exist or you do not have access to it.", "invalid_request_error", "model_not_found")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: ServerState  # set on the subclass per server

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def _send(self, status: int, body: dict[str, Any] | bytes, headers: dict[str, str] | None = None, content_type: str | None = None,
              drop: bool = False) -> None:
        """Send a response; ``drop``: only the head and half the body, then close the connection."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type or ("application/octet-stream" if isinstance(body, bytes) else "application/json"))
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        # Head and body in one write, as production servers do: two writes would cost the client
        # a second wakeup per answer (and can meet Nagle + delayed ACK).
        self._headers_buffer.append(b"\r\n")
        self.wfile.write(b"".join(self._headers_buffer) + (data[: len(data) // 2] if drop else data))
        self._headers_buffer = []
        if drop:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        sent = time.monotonic()
        with self.state.lock:
            arrived = getattr(self, "_arrived", sent)
            self.state.log.append((arrived, self.path, status))
            self.state.timings.append((self.client_address[1], arrived, sent))

    def _authorized(self) -> bool:
        key = self.state.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._send(401, _error("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"))
        return False

    def do_GET(self) -> None:
        self._arrived = time.monotonic()
        path = self.path.split("?", 1)[0].rstrip("/")
        if not self._authorized():  # as OpenAI: GET /models wants the key too (the LLM preflight's request)
            return
        if path.endswith("/models"):
            names = sorted(self.state.models) if self.state.models is not None else ["fake-model"]
            self._send(200, {"object": "list", "data": [{"id": name, "object": "model"} for name in names]})
            return
        if match := re.search(r"/batches/([^/]+)$", path):
            batch = self._poll_batch(match.group(1))
            self._send(200, batch) if batch else self._send(404, _error("No such batch", "invalid_request_error"))
        elif match := re.search(r"/files/([^/]+)/content$", path):
            data = self.state.files.get(match.group(1))
            self._send(200, data) if data is not None else self._send(404, _error("No such file", "invalid_request_error"))
        else:
            self._send(404, _error("not found", "invalid_request_error"))

    def do_POST(self) -> None:
        self._arrived = time.monotonic()
        length = int(self.headers.get("Content-Length", 0))
        raw = self.rfile.read(length)
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.endswith("/chat/completions"):
            self._chat(json.loads(raw))
        elif not self._authorized():
            return
        elif path.endswith("/files"):
            self._upload(raw)
        elif path.endswith("/batches"):
            self._create_batch(json.loads(raw))
        else:
            self._send(404, _error("not found", "invalid_request_error"))

    # chat completions -------------------------------------------------------------------------
    def _chat(self, request: dict[str, Any]) -> None:
        state = self.state
        digest = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
        with state.lock:
            state.counts["body:" + digest] += 1
            occurrence = state.counts["body:" + digest]
            state.counts["requests"] += 1
        if not self._authorized():
            return
        if (missing := _model_missing(state, request)) is not None:
            self._send(404, missing)
            return
        tokens = sum(len(m.get("content") or "") for m in request["messages"]) // 4 + int(request.get("max_tokens") or 0)
        allowed, limit_headers = state.charge(tokens)
        if not allowed:
            with state.lock:
                state.counts["rate_limited"] += 1
            self._send(429, _error("Rate limit reached for requests", "requests", "rate_limit_exceeded"), limit_headers)
            return
        with state.lock:
            fault = state.faults.pop(0) if state.faults else state.plan.draw(digest, occurrence)
            if fault is not None:
                state.counts[f"fault:{fault}"] += 1
        if fault == "reset":  # read, maybe processed, never answered: the connection just closes
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            with state.lock:
                state.log.append((self._arrived, self.path, 0))
            return
        if fault == "429":
            self._send(429, _error("rate limited", "rate_limit"), {"Retry-After": str(state.plan.retry_after_s), **limit_headers})
            return
        if fault == "500":
            self._send(500, _error("internal error", "server_error"), limit_headers)
            return
        if fault in CANNED and fault != "pass":
            status, content_type, body = CANNED[fault]
            self._send(status, body(self.headers) if callable(body) else body, limit_headers, content_type)
            return
        if fault == "stall":
            time.sleep(state.plan.stall_s)
        if state.delay_s:
            time.sleep(state.delay_s)
        self._send(200, _completion(state, request, fault), limit_headers, drop=fault == "drop")

    # files and batches ------------------------------------------------------------------------
    def _upload(self, raw: bytes) -> None:
        content_type = self.headers.get("Content-Type", "")
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw)
        fields: dict[str, str] = {}
        content, filename = b"", "upload"
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True) or b""
            if name == "file":
                content, filename = payload, part.get_filename() or filename
            else:
                fields[name] = payload.decode()
        with self.state.lock:
            self.state.counts["files_uploaded"] += 1
            file_id = f"file-{self.state.counts['files_uploaded']}"
            self.state.files[file_id] = content
        self._send(200, {"id": file_id, "object": "file", "bytes": len(content), "created_at": int(time.time()),
                         "filename": filename, "purpose": fields.get("purpose", ""), "status": "processed"})

    def _create_batch(self, request: dict[str, Any]) -> None:
        state = self.state
        if request.get("input_file_id") not in state.files:
            self._send(400, _error("input file not found", "invalid_request_error"))
            return
        with state.lock:
            state.counts["batches_created"] += 1
            batch_id = f"batch_{state.counts['batches_created']}"
            batch = {
                "id": batch_id, "object": "batch", "endpoint": request.get("endpoint"), "input_file_id": request["input_file_id"],
                "completion_window": request.get("completion_window", "24h"), "status": "validating", "created_at": int(time.time()),
                "metadata": request.get("metadata"), "output_file_id": None, "error_file_id": None, "errors": None,
                "request_counts": {"total": 0, "completed": 0, "failed": 0}, "_polls": 0,
            }
            state.batches[batch_id] = batch
        self._send(200, {k: v for k, v in batch.items() if not k.startswith("_")})

    def _poll_batch(self, batch_id: str) -> dict[str, Any] | None:
        state = self.state
        with state.lock:
            batch = state.batches.get(batch_id)
            if batch is None:
                return None
            state.counts["batch_polls"] += 1
            batch["_polls"] += 1
            if batch["status"] in ("validating", "in_progress"):
                if batch["_polls"] >= state.batch_polls:
                    self._run_batch(batch)
                else:
                    batch["status"] = "in_progress"
            return {k: v for k, v in batch.items() if not k.startswith("_")}

    def _run_batch(self, batch: dict[str, Any]) -> None:
        """Answer every line of the batch's input file (called with the state lock held)."""
        state = self.state
        lines = [json.loads(line) for line in state.files[batch["input_file_id"]].splitlines() if line.strip()]
        ids = [line.get("custom_id") for line in lines]
        now = int(time.time())
        if state.batch_status == "failed" or len(set(ids)) != len(ids) or any(
                line.get("method") != "POST" or line.get("url") != batch["endpoint"] for line in lines):
            why = "injected failure" if state.batch_status == "failed" else "duplicate custom_id or bad method/url"
            batch.update(status="failed", failed_at=now, errors={"object": "list", "data": [{"code": "invalid_request", "message": why, "line": None, "param": None}]})
            return
        outputs, errors = [], []
        for k, line in enumerate(lines):
            state.counts["batch_lines"] += 1
            row = {"id": f"batch_req_{batch['id']}_{k}", "custom_id": line["custom_id"], "response": None, "error": None}
            if state.batch_status == "expired" and k >= len(lines) // 2:
                row["error"] = {"code": "batch_expired", "message": "This request could not be executed before the completion window expired."}
                errors.append(row)
                continue
            request = line["body"]
            fault = state.faults.pop(0) if state.faults else None
            missing = _model_missing(state, request)
            if missing is not None:
                row["response"] = {"status_code": 404, "request_id": row["id"], "body": missing}
            elif fault == "429":
                row["response"] = {"status_code": 429, "request_id": row["id"], "body": _error("rate limited", "rate_limit")}
            elif fault == "500":
                row["response"] = {"status_code": 500, "request_id": row["id"], "body": _error("internal error", "server_error")}
            else:
                state.lock.release()  # _completion counts under the lock
                try:
                    row["response"] = {"status_code": 200, "request_id": row["id"], "body": _completion(state, request, fault)}
                finally:
                    state.lock.acquire()
            (outputs if row["response"]["status_code"] == 200 else errors).append(row)
        for kind, rows in (("output_file_id", outputs), ("error_file_id", errors)):
            if rows:
                state.counts["files_written"] += 1
                file_id = f"file-out-{batch['id']}-{kind[:-8]}"
                state.files[file_id] = "".join(json.dumps(r) + "\n" for r in rows).encode()
                batch[kind] = file_id
        status = "expired" if state.batch_status == "expired" else "completed"
        batch.update(status=status, request_counts={"total": len(lines), "completed": len(outputs), "failed": len(errors)},
                     **({"expired_at": now} if status == "expired" else {"completed_at": now}))


def _quiet_handle_error(server: ThreadingHTTPServer, request: Any, client_address: Any) -> None:
    """A client that hung up (a timeout, a killed run) is expected here: no traceback for that."""
    import sys

    if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
        ThreadingHTTPServer.handle_error(server, request, client_address)


class FakeOpenAIServer:
    """``with FakeOpenAIServer(delay_s=0.1, faults=FaultPlan(rate_limited=2)) as srv: srv.base_url``"""

    def __init__(self, delay_s: float = 0.0, faults: FaultPlan | None = None, *, api_key: str | None = None,
                 models: set[str] | None = None, rate_limit: RateLimitPlan | None = None, batch_polls: int = 1,
                 batch_status: str = "completed"):
        plan = faults or FaultPlan()
        self.state = ServerState(delay_s=delay_s, plan=plan, faults=plan.queue(), api_key=api_key,
                                 models=frozenset(models) if models is not None else None, rate_limit=rate_limit,
                                 batch_polls=batch_polls, batch_status=batch_status)
        handler = type("Handler", (_Handler,), {"state": self.state})
        server_cls = type("Server", (ThreadingHTTPServer,), {"request_queue_size": 1024,  # bench runs 256 in flight
                                                              "handle_error": _quiet_handle_error})
        self.httpd = server_cls(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @property
    def requests(self) -> int:
        return self.state.counts["requests"]

    def faults_served(self) -> dict[str, int]:
        """Faults served so far, by name."""
        with self.state.lock:
            return {k[6:]: n for k, n in self.state.counts.items() if k.startswith("fault:") and n}

    def repeated_bodies(self) -> int:
        """Requests whose exact body had been sent before."""
        return sum(n - 1 for k, n in self.state.counts.items() if k.startswith("body:"))

    def __enter__(self) -> "FakeOpenAIServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
