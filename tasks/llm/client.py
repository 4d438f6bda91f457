"""LLM layer: structured JSON calls to any OpenAI-compatible endpoint, at scale (docs/llm.md).
This module runs the requests (StructuredLLM: online calls, retries, workers); each part it uses has
its own module in tasks/llm/, named at the end of its point below.

- one request = one content-addressed cache entry (model, messages, sampling params, schema,
  prompt version, parse attempt) in an embedded SQLite store (WAL mode: many reader and writer
  processes; answers of one event-loop tick share a transaction), so a rerun or a resume after a crash makes zero repeated
  calls, and 10^6+ entries cost one file; an old one-file-per-request folder is still read (cache.py);
- bounded async concurrency over a small keep-alive HTTP/1.1 transport (the official SDK is the
  fallback for proxies and injected clients: transport.py); RPM/TPM limits from the config and from the
  ``x-ratelimit-*`` response headers; a 429 starts a cool-down shared by every request in flight
  (honouring ``retry-after``); exponential backoff for timeouts, connection errors and 5xx (limits.py);
- fail fast: 401/403/404 raise :class:`LLMEndpointError` at once; a refused connection or a host that
  does not resolve raises :class:`LLMUnreachableError` at once (no retry can help; preflight.py also
  checks it before a run); a run of consecutive failed requests raises :class:`LLMUnavailableError`;
  :func:`raise_if_all_failed` ends a stage whose every request failed (errors.py); every retry is
  logged as it happens, with its cause and wait;
- invalid/truncated JSON is re-asked (a new attempt is a new cache key) and the raw text is kept
  when every attempt fails (answers are read in structured.py);
- optional OpenAI Batch API mode (``/v1/files`` + ``/v1/batches``): batch ids are stored beside
  the cache, so a resume polls the batches already submitted instead of submitting again (batch.py);
- a ledger row for every request sent and every cache hit, written when the call ends (also when
  the run is aborted or cancelled) and, with ``ledger_journal``, appended to a file at once (ledger.py);
- only answers that parsed and validated are cached: a fault's damage is never replayed;
- secrets stay out of what is recorded: ``api_key`` is a ``SecretStr``, credentials in the base URL
  are kept apart from it, and error text echoed by a server is redacted (:func:`redact`; config.py).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import openai

from tasks.llm.batch import BatchMode
from tasks.llm.cache import CACHE_FORMAT, ResponseCache, config_key_parts, fast_cache_key, request_key_parts
from tasks.llm.codec import dumps
from tasks.llm.config import DEFAULT_BASE_URL, LLMConfig, redact, split_userinfo
from tasks.llm.errors import FATAL_STATUSES, LLMEndpointError, LLMUnavailableError
from tasks.llm.ledger import CallRecord, LedgerJournal
from tasks.llm.preflight import LLMUnreachableError, unreachable_cause
from tasks.llm.limits import RateLimiter, estimate_tokens, rate_limit_delay, retry_delay
from tasks.llm.structured import StructuredRequest, StructuredResult, evaluate_entry, not_completion, response_format, usage_count
from tasks.llm.transport import FastHTTPTransport, Reply, SDKTransport, proxy_applies


_TIMEOUT = getattr(asyncio, "timeout", None)  # 3.11+
log = logging.getLogger(__name__)


async def run_workers(worker: Callable[[], Awaitable[None]], n: int) -> None:
    """Run ``n`` copies of ``worker`` (each pulls from a shared iterator); when one fails, cancel
    the others and wait for them before re-raising, so nothing is left running on the loop."""
    workers = [asyncio.ensure_future(worker()) for _ in range(n)]
    try:
        await asyncio.gather(*workers)
    except BaseException:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise


def chat_body(cfg: LLMConfig, req: StructuredRequest) -> dict[str, Any]:
    """The chat-completions request body ``req`` is sent as under ``cfg`` (online, and as a Batch API line)."""
    return {
        "model": cfg.model,
        "messages": [{"role": role, "content": content} for role, content in req.messages],
        "temperature": cfg.temperature,
        "max_tokens": cfg.max_tokens,
        "response_format": response_format(req, cfg.strict_schema),
    }


class StructuredLLM(BatchMode):
    """Runs structured requests with cache, retries, rate limits, concurrency and a ledger."""

    def __init__(
        self,
        cfg: LLMConfig,
        client: openai.AsyncOpenAI | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.cfg = cfg
        self.cache = ResponseCache(cfg.cache_dir)
        self._client = client
        self._owns_client = client is None
        self._sleep = sleep
        self._clock = clock
        self._transport: FastHTTPTransport | SDKTransport | None = None
        self.limiter = RateLimiter(cfg.rpm_limit, cfg.tpm_limit, clock, sleep)
        self.ledger: list[CallRecord] = []
        self.stats: Counter[str] = Counter()  # requests_sent, http_ok, http_429, ..., items_ok, items_failed
        self._consecutive_failures = 0
        self._key_parts = config_key_parts(cfg)
        self._pending_puts: list[tuple[str, dict[str, Any]]] = []
        self._store_error: Exception | None = None
        self._secrets = cfg.secrets()
        self._journal = LedgerJournal(cfg.ledger_journal) if cfg.ledger_journal else None

    # clients ----------------------------------------------------------------------------------
    def base_url(self) -> str:
        """The URL connected to (with the configured credentials, if any: never record it)."""
        return (self.cfg.resolved_base_url() or DEFAULT_BASE_URL).rstrip("/")

    def public_base_url(self) -> str:
        """The URL as messages and records name it: without credentials."""
        return split_userinfo(self.base_url())[0]

    def client(self) -> openai.AsyncOpenAI:
        """The official SDK client (batch API, and online calls when the fast transport is not used)."""
        if self._client is None:
            self._client = openai.AsyncOpenAI(
                base_url=self.base_url(),
                api_key=self.cfg.resolved_api_key(),
                timeout=self.cfg.timeout_s,
                max_retries=0 if not self.cfg.batch else self.cfg.max_retries,
            )
        return self._client

    def transport(self) -> FastHTTPTransport | SDKTransport:
        if self._transport is None:
            mode = self.cfg.transport
            if mode not in ("auto", "fast", "openai"):
                raise ValueError(f"LLMConfig.transport must be auto, fast or openai, not {mode!r}")
            use_fast = mode == "fast" or (mode == "auto" and self._owns_client and not proxy_applies(self.base_url()))
            if use_fast:
                headers = {"Authorization": f"Bearer {self.cfg.resolved_api_key()}"}
                for env, header in (("OPENAI_ORG_ID", "OpenAI-Organization"), ("OPENAI_PROJECT_ID", "OpenAI-Project")):
                    if os.environ.get(env):
                        headers[header] = os.environ[env]
                self._transport = FastHTTPTransport(self.base_url(), headers)
            else:
                self._transport = SDKTransport(self.client())
        return self._transport

    async def _close(self) -> None:
        if self._transport is not None:
            await self._transport.close()
            self._transport = None
        if self._owns_client and self._client is not None:
            # Close on this event loop: a client left to the garbage collector fails on a closed one.
            await self._client.close()
            self._client = None

    # running ----------------------------------------------------------------------------------
    def run(self, requests: Sequence[StructuredRequest], on_done: Callable[[StructuredResult], None] | None = None) -> list[StructuredResult]:
        """:meth:`run_many` on a new event loop: uvloop's when it is installed (~0.1 ms less client
        CPU per request), else asyncio's."""
        try:
            import uvloop
        except ImportError:
            return asyncio.run(self.run_many(requests, on_done))
        return uvloop.run(self.run_many(requests, on_done))

    async def run_many(
        self,
        requests: Sequence[StructuredRequest],
        on_done: Callable[[StructuredResult], None] | None = None,
    ) -> list[StructuredResult]:
        """Run all requests with at most ``cfg.in_flight`` in flight; results keep input order.

        Raises :class:`LLMEndpointError` (401/403/404) or :class:`LLMUnavailableError` (too many
        consecutive failures) and cancels what is in flight; every other failure is a reason.
        """
        self.limiter.reset_loop()
        try:
            if self.cfg.batch:
                results = await self._run_batch(list(requests), on_done)
            else:
                results = await self._run_online(requests, on_done)
        except BaseException:
            try:
                await self.aclose()
            except Exception:  # noqa: BLE001 - the error that ended the run is the one to see
                pass
            raise
        await self.aclose()
        return results

    async def aclose(self) -> None:
        """Commit the answers still queued, close the HTTP transport (on this event loop) and the
        cache; raise a cache error that happened meanwhile. For callers that drive
        :meth:`run_one` themselves; :meth:`run_many` does it on its own."""
        self._flush_puts()  # answers already in hand are kept, whatever ended the run
        await self._close()
        self.cache.close()  # reopened on the next use
        if self._journal is not None:
            self._journal.close()  # reopened (appending) on the next row
        error, self._store_error = self._store_error, None
        if error is not None:
            raise error

    async def _run_online(self, requests: Sequence[StructuredRequest], on_done: Callable[[StructuredResult], None] | None) -> list[StructuredResult]:
        results: list[StructuredResult | None] = [None] * len(requests)
        indices = iter(range(len(requests)))  # shared by the workers: memory stays O(concurrency)

        async def worker() -> None:
            for i in indices:
                result = await self.run_one(requests[i])
                results[i] = result
                if on_done is not None:
                    on_done(result)

        await run_workers(worker, min(max(1, self.cfg.in_flight), len(requests)))
        return results  # type: ignore[return-value]

    def _body(self, req: StructuredRequest) -> dict[str, Any]:
        return chat_body(self.cfg, req)

    def _log(self, calls: list[CallRecord], record: CallRecord) -> None:
        """A call ended: its row goes to the request's calls, the client's ledger and the journal at
        once, so a run that is aborted or cancelled later still accounts for it."""
        if record.detail:
            record.detail = redact(record.detail, self._secrets)[:300]
        calls.append(record)
        self.ledger.append(record)
        if self._journal is not None:
            self._journal.write(record)

    def _finish(self, result: StructuredResult) -> StructuredResult:
        if not result.ok:  # what a server echoed in an error, or a bad answer, is stored: no secrets in it
            result.detail = redact(result.detail, self._secrets)
            result.raw_text = redact(result.raw_text, self._secrets) if result.raw_text else result.raw_text
        self.stats["items_ok" if result.ok else "items_failed"] += 1
        return result

    def _fatal(self, status: int, detail: str) -> LLMEndpointError:
        return LLMEndpointError(status, self.public_base_url(), self.cfg.model, redact(detail, self._secrets))

    def _cached(self, req: StructuredRequest, keys: Sequence[str]) -> tuple[int, dict[str, Any]] | None:
        """``(attempt, value)`` of the first parse attempt with a cached answer that validates, in one
        lookup: a rerun reuses the answer of attempt 1 without asking attempt 0 again. Entries
        cached before answers were validated first, that do not validate, are dropped."""
        found = self.cache.get_many(keys)
        for attempt, key in enumerate(keys):
            entry = found.get(key)
            if entry is None:
                continue
            value = evaluate_entry(entry, req.schema)[0]
            if value is not None:
                return attempt, value
            self.cache.discard(key)
        return None

    async def run_one(self, req: StructuredRequest) -> StructuredResult:
        calls: list[CallRecord] = []
        parts = request_key_parts(self.cfg, req, self._key_parts)
        keys = [fast_cache_key(parts, attempt) for attempt in range(self.cfg.parse_attempts)]
        hit = self._cached(req, keys)
        if hit is not None:
            self.stats["cache_hits"] += 1
            self._log(calls, CallRecord(req.agent, req.item_id, keys[hit[0]], hit[0], "cache_hit", 0.0))
            return self._finish(StructuredResult(req.item_id, True, value=hit[1], calls=calls))
        last_text: str | None = None
        reason, detail = "", ""
        body = self._body(req)
        for attempt, key in enumerate(keys):
            entry, failure, record = await self._call_with_retries(req, body, key, attempt, calls)
            if entry is None or record is None:
                return self._finish(StructuredResult(req.item_id, False, reason=failure[0], detail=failure[1], raw_text=last_text, calls=calls))
            last_text = entry["text"]
            value, reason, detail = evaluate_entry(entry, req.schema)
            if value is not None:
                self._log(calls, record)
                self._store(key, entry)  # only answers that parsed and validated are cached
                return self._finish(StructuredResult(req.item_id, True, value=value, calls=calls))
            record.outcome, record.detail = reason, detail  # the call worked, its answer did not: asked again, not cached
            self._log(calls, record)
        return self._finish(StructuredResult(req.item_id, False, reason=reason, detail=detail, raw_text=last_text, calls=calls))

    def _store(self, key: str, entry: dict[str, Any]) -> None:
        """Queue an answer for the group commit that runs right after this event-loop tick: every
        answer that arrived in the tick shares one transaction. The worker goes on at once (waiting
        for the commit would send all those workers' next requests in one burst, every cycle);
        ``run_many`` commits what is queued before it returns, also when it is aborted."""
        if self._store_error is not None:
            raise self._store_error
        self._pending_puts.append((key, entry))
        if len(self._pending_puts) == 1:
            asyncio.get_running_loop().call_soon(self._flush_puts)

    def _flush_puts(self) -> None:
        items, self._pending_puts = self._pending_puts, []
        if not items:
            return
        try:
            if len(items) == 1:
                self.cache.put(*items[0])
            else:
                self.cache.put_many(items)
        except Exception as exc:  # noqa: BLE001 - raised to the workers and by run_many
            self._store_error = exc
            return
        self.stats["commits"] += 1

    def _entry(self, data: Any, req: StructuredRequest, latency: float) -> dict[str, Any] | None:
        """The cache entry of a chat completion (a dict), or None when it is not one."""
        if not_completion(data):
            return None
        choice = data["choices"][0]
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}  # junk usage: an answer all the same
        return {
            "format": CACHE_FORMAT,
            "model": str(data.get("model") or self.cfg.model),
            "agent": req.agent,
            "prompt_version": req.prompt_version,
            "text": choice["message"].get("content"),
            "finish_reason": choice.get("finish_reason"),
            "tokens_in": usage_count(usage.get("prompt_tokens")),
            "tokens_out": usage_count(usage.get("completion_tokens")),
            "latency_s": latency,
        }

    def _cost(self, tokens_in: int, tokens_out: int, factor: float = 1.0) -> float:
        return (tokens_in * self.cfg.price_in_per_mtok + tokens_out * self.cfg.price_out_per_mtok) / 1e6 * factor

    def _note_failure(self) -> None:
        """A request ended in a transport failure after all its retries."""
        self._consecutive_failures += 1
        limit = self.cfg.max_consecutive_failures
        if limit and self._consecutive_failures >= limit:
            raise LLMUnavailableError(
                f"{self._consecutive_failures} LLM requests in a row failed after {self.cfg.max_retries} retries each "
                f"at {self.public_base_url()} (model {self.cfg.model!r}); stopping the run. Counters: {dict(self.stats)}"
            )

    async def _send(self, body: dict[str, Any]) -> Reply:
        transport = self.transport()
        if _TIMEOUT is not None:
            async with _TIMEOUT(self.cfg.timeout_s):
                return await transport.chat(body)
        return await asyncio.wait_for(transport.chat(body), self.cfg.timeout_s)  # pragma: no cover - 3.10

    async def _call_with_retries(
        self, req: StructuredRequest, body: dict[str, Any], key: str, attempt: int, calls: list[CallRecord]
    ) -> tuple[dict[str, Any] | None, tuple[str, str], CallRecord | None]:
        """``(entry, ("", ""), its ledger row)`` for a chat completion, which the caller logs once it
        has judged the answer; or ``(None, (reason, detail), None)`` after the retries. Every other
        request sent is logged here, as it ends: failed, fatal or cancelled in flight."""
        failure = ("llm_unavailable", "")
        tokens = estimate_tokens(self.cfg, req)
        for retry in range(self.cfg.max_retries + 1):
            ticket = await self.limiter.acquire(tokens)
            started = time.perf_counter()
            self.stats["requests_sent"] += 1
            shared_cooldown, cooldown = False, 0.0
            retry_after: str | None = None
            try:
                reply = await self._send(body)
            except (TimeoutError, asyncio.TimeoutError) as exc:
                self.limiter.done(ticket)
                outcome, detail = "timeout", str(exc)[:300] or f"no answer within {self.cfg.timeout_s:g} s"
            except (OSError, asyncio.IncompleteReadError) as exc:
                self.limiter.done(ticket)
                outcome, detail = "connection", f"{type(exc).__name__}: {exc}"[:300]
                if (cause := unreachable_cause(exc)) is not None:  # nothing listens there: no retry can help
                    self.stats["unreachable"] += 1
                    self._log(calls, CallRecord(req.agent, req.item_id, key, attempt, "unreachable",
                                                time.perf_counter() - started, detail=detail))
                    raise LLMUnreachableError(self.public_base_url(), cause) from None
            except BaseException as exc:  # cancelled (another request failed the run) or interrupted: it was sent
                self.limiter.done(ticket)
                outcome = "cancelled" if isinstance(exc, asyncio.CancelledError) else "error"
                self._log(calls, CallRecord(req.agent, req.item_id, key, attempt, outcome, time.perf_counter() - started,
                                            detail=f"in flight when the run stopped ({type(exc).__name__})"))
                raise
            else:
                latency = time.perf_counter() - started
                self.limiter.done(ticket, reply.headers)
                status = reply.status
                if 200 <= status < 300:
                    entry = self._entry(reply.data, req, latency)
                    if entry is not None:
                        self.stats["http_ok"] += 1
                        self._consecutive_failures = 0
                        cost = self._cost(entry["tokens_in"], entry["tokens_out"])
                        return entry, ("", ""), CallRecord(req.agent, req.item_id, key, attempt, "ok", latency, entry["tokens_in"], entry["tokens_out"], cost)
                    excerpt = reply.text or dumps(reply.data).decode("utf-8", "replace")
                    outcome, detail = "bad_response", f"HTTP {status} without a chat completion ({not_completion(reply.data)}): {excerpt[:2000]}"
                elif status in FATAL_STATUSES:
                    self.stats[f"http_{status}"] += 1
                    error = self._fatal(status, _error_message(reply.text))
                    self._log(calls, CallRecord(req.agent, req.item_id, key, attempt, f"http_{status}", latency, detail=error.detail))
                    raise error
                elif status == 429:
                    outcome, detail = "http_429", _error_message(reply.text)
                    cooldown = rate_limit_delay(self.cfg, reply.headers, retry)
                    self.limiter.cool_down(cooldown)
                    shared_cooldown = True
                else:
                    outcome = "http_5xx" if status >= 500 else "http_4xx"
                    detail = f"HTTP {status}: {_error_message(reply.text)}"
                    retry_after = reply.headers.get("retry-after")
                    if outcome == "http_4xx" and status not in (408, 409):
                        self.stats[outcome] += 1
                        self._log(calls, CallRecord(req.agent, req.item_id, key, attempt, outcome, latency, detail=detail))
                        self._consecutive_failures = 0  # the server is up; this request is bad
                        return None, (f"llm_{outcome}", calls[-1].detail), None  # a request the server will never accept
            self.stats[outcome] += 1
            self._log(calls, CallRecord(req.agent, req.item_id, key, attempt, outcome, time.perf_counter() - started, detail=detail))
            failure = (f"llm_{outcome}", calls[-1].detail)
            if retry < self.cfg.max_retries:
                wait = cooldown if shared_cooldown else retry_delay(self.cfg, retry, retry_after)
                log.warning("LLM %s request for %s: %s (%s); retry %d of %d in %.1f s%s", req.agent, req.item_id, outcome,
                            calls[-1].detail[:160], retry + 1, self.cfg.max_retries, wait,
                            " (a cool-down every request waits out)" if shared_cooldown else "")
                if not shared_cooldown:
                    await self._sleep(wait)
            # after a 429 the next acquire() waits out the cool-down shared by every request
        self._note_failure()
        return None, failure, None


def _error_message(text: str) -> str:
    """The ``error.message`` of an OpenAI-style error body, else the text itself. Not cut short:
    a secret cut in half would escape :func:`redact`; what is stored is cut after redaction."""
    try:
        data = json.loads(text)
        message = data.get("error", {}).get("message") if isinstance(data, dict) else None
        if message:
            return str(message)[:2000]
    except (ValueError, AttributeError, TypeError):
        pass
    return (text or "")[:2000]
