"""LLM layer: structured JSON calls to any OpenAI-compatible endpoint.

- one request = one content-addressed cache entry (model, messages, sampling params, schema,
  prompt version, parse attempt), so a rerun or a resume after a crash makes zero repeated calls
  and editing unrelated code does not invalidate anything;
- bounded async concurrency; exponential backoff that honours ``Retry-After`` on 429 and also
  covers timeouts, connection errors and 5xx; invalid/truncated JSON is re-asked (a new attempt
  is a new cache key) and the raw text is kept when every attempt fails;
- a ledger row for every call, cache hits included.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai

from schemas.docs import validation_errors


CACHE_FORMAT = "tgr-llm-cache-v1"


@dataclass(frozen=True)
class LLMConfig:
    """Where and how to call the model. ``base_url``/``api_key`` default to OPENAI_* env vars."""

    model: str
    base_url: str | None = None
    api_key: str | None = None
    temperature: float = 0.0
    max_tokens: int = 768
    concurrency: int = 8
    max_retries: int = 6  # transport retries (429, 5xx, timeouts) per request
    parse_attempts: int = 2  # how often an invalid/truncated answer is asked again
    timeout_s: float = 300.0
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    strict_schema: bool = False  # OpenAI strict mode rejects schemas with length bounds
    price_in_per_mtok: float = 0.0  # for the ledger's cost estimate (USD per million tokens)
    price_out_per_mtok: float = 0.0
    cache_dir: str = "artifacts/llm-cache"

    def resolved_base_url(self) -> str | None:
        return self.base_url or os.environ.get("OPENAI_BASE_URL")

    def resolved_api_key(self) -> str:
        # Local servers ignore the key; the openai client still wants a non-empty one.
        return self.api_key or os.environ.get("OPENAI_API_KEY") or "not-needed"


@dataclass(frozen=True)
class StructuredRequest:
    """One structured call: chat messages plus the JSON schema the answer must match."""

    agent: str
    item_id: str
    messages: tuple[tuple[str, str], ...]  # (role, content)
    schema_name: str
    schema: dict[str, Any]
    prompt_version: str


@dataclass
class CallRecord:
    """A ledger row."""

    agent: str
    item_id: str
    cache_key: str
    attempt: int
    outcome: str  # ok | cache_hit | http_429 | http_5xx | http_4xx | timeout | connection | invalid_json | schema_invalid | truncated
    latency_s: float
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    detail: str = ""


@dataclass
class StructuredResult:
    """Final outcome of a request after retries: a parsed answer or a failure reason."""

    item_id: str
    ok: bool
    value: dict[str, Any] | None = None
    reason: str = ""  # machine-readable failure code
    detail: str = ""
    raw_text: str | None = None  # kept whenever parsing failed
    calls: list[CallRecord] = field(default_factory=list)


def cache_key(cfg: LLMConfig, req: StructuredRequest, attempt: int) -> str:
    """Hash of everything that determines the answer, and nothing else."""
    material = {
        "format": CACHE_FORMAT,
        "model": cfg.model,
        "messages": [list(m) for m in req.messages],
        "temperature": cfg.temperature,
        "max_tokens": cfg.max_tokens,
        "schema": req.schema,
        "strict": cfg.strict_schema,
        "prompt_version": req.prompt_version,
        "attempt": attempt,
    }
    blob = json.dumps(material, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


class ResponseCache:
    """One JSON file per request under ``<dir>/<key[:2]>/<key>.json``, written atomically."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        path = self._path(key)
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None  # a torn file from a crash elsewhere: ask again

    def put(self, key: str, entry: dict[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{random.getrandbits(32):x}.tmp")
        tmp.write_text(json.dumps(entry, ensure_ascii=False))
        os.replace(tmp, path)


def response_format(req: StructuredRequest, strict: bool) -> dict[str, Any]:
    """The standard OpenAI structured-output field (the embedded server translates it)."""
    return {
        "type": "json_schema",
        "json_schema": {"name": req.schema_name, "schema": req.schema, "strict": strict},
    }


def parse_answer(text: str | None, schema: dict[str, Any]) -> tuple[dict[str, Any] | None, str, str]:
    """Parse and validate an answer: (value, reason, detail); reason is empty when valid."""
    if not text or not text.strip():
        return None, "invalid_json", "empty answer"
    body = text.strip()
    if body.startswith("```"):  # some servers wrap JSON in a fence despite response_format
        body = body.strip("`")
        body = body[body.find("{") :] if "{" in body else body
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        return None, "invalid_json", f"{exc.msg} at char {exc.pos}"
    if not isinstance(value, dict):
        return None, "schema_invalid", f"expected a JSON object, got {type(value).__name__}"
    errors = validation_errors(value, schema)
    if errors:
        return None, "schema_invalid", "; ".join(errors[:5])
    return value, "", ""


def retry_delay(cfg: LLMConfig, retry_index: int, retry_after: str | None) -> float:
    """Seconds to wait before retry number ``retry_index`` (0-based)."""
    if retry_after:
        try:
            return min(float(retry_after), cfg.backoff_max_s)
        except ValueError:
            pass  # an HTTP date: fall back to backoff
    base = min(cfg.backoff_base_s * (2**retry_index), cfg.backoff_max_s)
    return base * (0.5 + random.random() / 2)  # jitter keeps many workers from retrying in step


class StructuredLLM:
    """Runs structured requests with cache, retries, concurrency and a ledger."""

    def __init__(
        self,
        cfg: LLMConfig,
        client: openai.AsyncOpenAI | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        self.cfg = cfg
        self.cache = ResponseCache(cfg.cache_dir)
        self._client = client
        self._owns_client = client is None
        self._sleep = sleep
        self.ledger: list[CallRecord] = []

    def client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            self._client = openai.AsyncOpenAI(
                base_url=self.cfg.resolved_base_url(),
                api_key=self.cfg.resolved_api_key(),
                timeout=self.cfg.timeout_s,
                max_retries=0,  # retries are ours: they honour Retry-After and feed the ledger
            )
        return self._client

    async def run_many(
        self,
        requests: Sequence[StructuredRequest],
        on_done: Callable[[StructuredResult], None] | None = None,
    ) -> list[StructuredResult]:
        """Run all requests with at most ``cfg.concurrency`` in flight; results keep input order."""
        semaphore = asyncio.Semaphore(self.cfg.concurrency)

        async def one(req: StructuredRequest) -> StructuredResult:
            async with semaphore:
                result = await self.run_one(req)
            if on_done is not None:
                on_done(result)
            return result

        try:
            return list(await asyncio.gather(*(one(r) for r in requests)))
        finally:
            if self._owns_client and self._client is not None:
                # Close on this event loop: a client left to the garbage collector fails on a closed one.
                await self._client.close()
                self._client = None

    async def run_one(self, req: StructuredRequest) -> StructuredResult:
        calls: list[CallRecord] = []
        last_text: str | None = None
        reason, detail = "", ""
        for attempt in range(self.cfg.parse_attempts):
            key = cache_key(self.cfg, req, attempt)
            entry = self.cache.get(key)
            if entry is not None:
                calls.append(CallRecord(req.agent, req.item_id, key, attempt, "cache_hit", 0.0))
            else:
                entry, failure = await self._call_with_retries(req, key, attempt, calls)
                if entry is None:
                    self.ledger.extend(calls)
                    return StructuredResult(req.item_id, False, reason=failure[0], detail=failure[1], raw_text=last_text, calls=calls)
                self.cache.put(key, entry)
            last_text = entry["text"]
            if entry["finish_reason"] not in (None, "stop"):
                reason, detail = "truncated", f"finish_reason={entry['finish_reason']}"
            else:
                value, reason, detail = parse_answer(last_text, req.schema)
                if value is not None:
                    self.ledger.extend(calls)
                    return StructuredResult(req.item_id, True, value=value, calls=calls)
            if calls[-1].outcome == "ok":  # the call worked; its answer did not
                calls[-1].outcome, calls[-1].detail = reason, detail
        self.ledger.extend(calls)
        return StructuredResult(req.item_id, False, reason=reason, detail=detail, raw_text=last_text, calls=calls)

    async def _call_with_retries(
        self, req: StructuredRequest, key: str, attempt: int, calls: list[CallRecord]
    ) -> tuple[dict[str, Any] | None, tuple[str, str]]:
        failure = ("llm_unavailable", "")
        for retry in range(self.cfg.max_retries + 1):
            started = time.perf_counter()
            retry_after: str | None = None
            try:
                completion = await self.client().chat.completions.create(
                    model=self.cfg.model,
                    messages=[{"role": role, "content": content} for role, content in req.messages],
                    temperature=self.cfg.temperature,
                    max_tokens=self.cfg.max_tokens,
                    response_format=response_format(req, self.cfg.strict_schema),
                )
            except openai.APIStatusError as exc:
                status = exc.status_code
                outcome = "http_429" if status == 429 else ("http_5xx" if status >= 500 else "http_4xx")
                retry_after = exc.response.headers.get("retry-after")
                calls.append(CallRecord(req.agent, req.item_id, key, attempt, outcome, time.perf_counter() - started, detail=str(exc)[:300]))
                failure = (f"llm_{outcome}", str(exc)[:300])
                if outcome == "http_4xx" and status not in (408, 409):
                    return None, failure  # a request the server will never accept
            except (openai.APITimeoutError, httpx.TimeoutException) as exc:
                calls.append(CallRecord(req.agent, req.item_id, key, attempt, "timeout", time.perf_counter() - started, detail=str(exc)[:300]))
                failure = ("llm_timeout", str(exc)[:300])
            except openai.APIConnectionError as exc:
                calls.append(CallRecord(req.agent, req.item_id, key, attempt, "connection", time.perf_counter() - started, detail=str(exc)[:300]))
                failure = ("llm_connection", str(exc)[:300])
            else:
                latency = time.perf_counter() - started
                usage = completion.usage
                tokens_in = usage.prompt_tokens if usage else 0
                tokens_out = usage.completion_tokens if usage else 0
                choice = completion.choices[0] if completion.choices else None
                entry = {
                    "format": CACHE_FORMAT,
                    "model": completion.model or self.cfg.model,
                    "agent": req.agent,
                    "prompt_version": req.prompt_version,
                    "text": choice.message.content if choice else None,
                    "finish_reason": choice.finish_reason if choice else "empty",
                    "tokens_in": tokens_in,
                    "tokens_out": tokens_out,
                    "latency_s": latency,
                }
                cost = (tokens_in * self.cfg.price_in_per_mtok + tokens_out * self.cfg.price_out_per_mtok) / 1e6
                calls.append(CallRecord(req.agent, req.item_id, key, attempt, "ok", latency, tokens_in, tokens_out, cost))
                return entry, ("", "")
            if retry < self.cfg.max_retries:
                await self._sleep(retry_delay(self.cfg, retry, retry_after))
        return None, failure


def ledger_rows(calls: Sequence[CallRecord]) -> list[dict[str, Any]]:
    return [asdict(c) for c in calls]


def usage_summary(ledger: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Requests actually sent (cache hits aside), their tokens and estimated cost."""
    sent = [c for c in ledger if c["outcome"] != "cache_hit"]
    return {
        "requests_sent": len(sent),
        "cache_hits": len(ledger) - len(sent),
        "tokens_in": sum(c["tokens_in"] for c in sent),
        "tokens_out": sum(c["tokens_out"] for c in sent),
        "cost_usd": round(sum(c["cost_usd"] for c in sent), 6),
    }
