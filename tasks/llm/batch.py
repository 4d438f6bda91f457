"""The OpenAI Batch API mode of StructuredLLM (``LLMConfig(batch=True)``): requests go as JSONL through
``/v1/files`` + ``/v1/batches``, and batch ids are stored beside the cache, so a resume polls the
batches already submitted instead of submitting again."""
from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import openai

from tasks.llm.cache import ResponseCache, fast_cache_key, request_key_parts
from tasks.llm.codec import dumps, loads
from tasks.llm.config import LLMConfig, redact
from tasks.llm.errors import FATAL_STATUSES, LLMEndpointError
from tasks.llm.ledger import CallRecord
from tasks.llm.structured import StructuredRequest, StructuredResult, evaluate_entry, not_completion, usage_count


class BatchMode:
    """The batch half of :class:`tasks.llm.client.StructuredLLM`, mixed into it: it uses the client's
    config, cache, ledger (``_log``, ``_finish``), answer reading (``_entry``, ``_cached``) and SDK client."""

    cfg: LLMConfig
    cache: ResponseCache
    stats: Counter[str]
    _key_parts: tuple[str, str, str]
    _secrets: tuple[str, ...]
    _sleep: Callable[[float], Awaitable[None]]

    async def _run_batch(self, requests: list[StructuredRequest], on_done: Callable[[StructuredResult], None] | None) -> list[StructuredResult]:
        """Every attempt round goes through the Batch API; answers land in the same cache."""
        n = len(requests)
        parts = [request_key_parts(self.cfg, r, self._key_parts) for r in requests]
        attempt = [0] * n
        tries = [0] * n
        calls: list[list[CallRecord]] = [[] for _ in range(n)]
        last_text: list[str | None] = [None] * n
        last_reason: list[tuple[str, str]] = [("", "")] * n
        results: list[StructuredResult | None] = [None] * n

        def finish(i: int, result: StructuredResult) -> None:
            results[i] = self._finish(result)
            if on_done is not None:
                on_done(result)

        def advance(i: int, entry: dict[str, Any], record: CallRecord) -> None:
            req = requests[i]
            last_text[i] = entry["text"]
            value, reason, detail = evaluate_entry(entry, req.schema)
            if value is not None:
                self._log(calls[i], record)
                finish(i, StructuredResult(req.item_id, True, value=value, calls=calls[i]))
                return
            if record.outcome == "ok":
                record.outcome, record.detail = reason, detail
            self._log(calls[i], record)
            last_reason[i] = (reason, detail)
            attempt[i] += 1
            tries[i] = 0
            if attempt[i] >= self.cfg.parse_attempts:
                finish(i, StructuredResult(req.item_id, False, reason=reason, detail=detail, raw_text=last_text[i], calls=calls[i]))

        pending = list(range(n))
        while pending:
            need: dict[str, list[int]] = {}
            for i in pending:
                keys = [fast_cache_key(parts[i], a) for a in range(self.cfg.parse_attempts)]
                hit = self._cached(requests[i], keys[attempt[i]:])
                if hit is not None:
                    a = attempt[i] + hit[0]
                    self.stats["cache_hits"] += 1
                    self._log(calls[i], CallRecord(requests[i].agent, requests[i].item_id, keys[a], a, "cache_hit", 0.0))
                    finish(i, StructuredResult(requests[i].item_id, True, value=hit[1], calls=calls[i]))
                else:
                    need.setdefault(keys[attempt[i]], []).append(i)
            if not need:
                break
            outcomes = await self._batch_fetch({key: requests[idx[0]] for key, idx in need.items()})
            for key, idx in need.items():
                kind, payload, batch_id = outcomes[key]
                for j, i in enumerate(idx):
                    req = requests[i]
                    if kind == "ok":
                        entry = payload
                        record = (CallRecord(req.agent, req.item_id, key, attempt[i], "ok", entry.get("latency_s") or 0.0, entry["tokens_in"],
                                             entry["tokens_out"], self._cost(entry["tokens_in"], entry["tokens_out"], self.cfg.batch_price_factor),
                                             f"batch {batch_id}")
                                  if j == 0 else CallRecord(req.agent, req.item_id, key, attempt[i], "cache_hit", 0.0))
                        advance(i, entry, record)
                        continue
                    outcome, detail, retryable = payload
                    self._log(calls[i], CallRecord(req.agent, req.item_id, key, attempt[i], outcome, 0.0, detail=f"batch {batch_id}: {detail}"))
                    tries[i] += 1
                    if not retryable or tries[i] > self.cfg.max_retries:
                        finish(i, StructuredResult(req.item_id, False, reason=f"llm_{outcome}", detail=detail[:300], raw_text=last_text[i], calls=calls[i]))
            pending = [i for i in pending if results[i] is None]
        return results  # type: ignore[return-value]

    async def _sdk(self, call: Awaitable[Any]) -> Any:
        try:
            return await call
        except openai.APIStatusError as exc:
            if exc.status_code in FATAL_STATUSES:
                raise self._fatal(exc.status_code, str(exc)) from exc
            raise

    async def _batch_fetch(self, wanted: dict[str, StructuredRequest]) -> dict[str, tuple[str, Any, str]]:
        """Answers for ``wanted`` keys via batches: poll live ones (from an earlier run too), submit
        the rest. Returns {key: ("ok", entry, batch_id) | ("error", (outcome, detail, retryable), batch_id)}."""
        keys = list(wanted)
        live = self.cache.live_batches(keys)
        covered = set().union(*live.values()) if live else set()
        todo = [k for k in keys if k not in covered]
        for chunk in self._batch_chunks(todo, wanted):
            batch_id = await self._submit_batch(chunk, wanted)
            live[batch_id] = {key for key, _ in chunk}
        out: dict[str, tuple[str, Any, str]] = {}
        while live:
            for batch_id in list(live):
                try:
                    batch = await self._sdk(self.client().batches.retrieve(batch_id))
                except LLMEndpointError as exc:
                    if exc.status == 404:
                        exc.args = (f"{exc.args[0]} Batch {batch_id} is recorded in {self.cache.path} but unknown at this endpoint; "
                                    f"if it is gone for good, `python -m tasks.llm.cache forget-batches {self.cfg.cache_dir}` resubmits its requests.",)
                    raise
                self.stats["batch_polls"] += 1
                if batch.status not in ("completed", "failed", "expired", "cancelled"):
                    continue
                found = await self._ingest(batch, wanted)
                for key in live.pop(batch_id):
                    out[key] = found.get(key) or ("error", (f"batch_{batch.status}", _batch_errors(batch) or "no result for this request", False), batch_id)
            if live:
                await self._sleep(self.cfg.batch_poll_s)
        return out

    def _batch_chunks(self, keys: list[str], wanted: dict[str, StructuredRequest]) -> Iterable[list[tuple[str, bytes]]]:
        chunk: list[tuple[str, bytes]] = []
        size = 0
        for key in keys:
            line = dumps({"custom_id": key, "method": "POST", "url": "/v1/chat/completions", "body": self._body(wanted[key])}) + b"\n"
            if chunk and (len(chunk) >= self.cfg.batch_max_requests or size + len(line) > self.cfg.batch_max_bytes):
                yield chunk
                chunk, size = [], 0
            chunk.append((key, line))
            size += len(line)
        if chunk:
            yield chunk

    async def _submit_batch(self, chunk: list[tuple[str, bytes]], wanted: dict[str, StructuredRequest]) -> str:
        data = b"".join(line for _, line in chunk)
        upload = await self._sdk(self.client().files.create(file=("requests.jsonl", data, "application/jsonl"), purpose="batch"))
        batch = await self._sdk(self.client().batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window=self.cfg.batch_completion_window,  # type: ignore[arg-type]
            metadata={"source": "tgr-pipeline", "requests": str(len(chunk))},
        ))
        # Stored at once: a resume from here on polls this batch instead of submitting it again.
        self.cache.record_batch(batch.id, upload.id, batch.status, [(k, wanted[k].agent, wanted[k].prompt_version) for k, _ in chunk])
        self.stats["batches_submitted"] += 1
        self.stats["requests_sent"] += len(chunk)
        return batch.id

    async def _ingest(self, batch: Any, wanted: Mapping[str, StructuredRequest]) -> dict[str, tuple[str, Any, str]]:
        """Read a finished batch's output and error files, cache the answers that validate (against
        the schema of ``wanted``; a key of an earlier run's batch that this run does not ask for: any
        JSON object), then release its keys."""
        meta = self.cache.batch_request_meta(batch.id)
        found: dict[str, tuple[str, Any, str]] = {}
        entries: list[tuple[str, dict[str, Any]]] = []
        elapsed = float((batch.completed_at or batch.expired_at or batch.failed_at or batch.created_at) - batch.created_at) if batch.created_at else 0.0
        for file_id in (batch.output_file_id, batch.error_file_id):
            if not file_id:
                continue
            content = await self._sdk(self.client().files.content(file_id))
            for line in content.content.splitlines():
                if not line.strip():
                    continue
                row = loads(line)
                key = row.get("custom_id")
                if not key:
                    continue
                response = row.get("response") if isinstance(row.get("response"), dict) else {}
                status = usage_count(response.get("status_code"))
                body = response.get("body")
                agent, version = meta.get(key, ("", ""))
                if status == 200:
                    entry = self._entry(body, StructuredRequest(agent, "", (), "", {}, version), elapsed)
                    if entry is not None:
                        entry["batch_id"] = batch.id
                        if evaluate_entry(entry, wanted[key].schema if key in wanted else {})[0] is not None:
                            entries.append((key, entry))
                        found[key] = ("ok", entry, batch.id)
                        continue
                error = row.get("error") or (body.get("error") if isinstance(body, dict) else None) or {}
                message = (error.get("message") or error.get("code") or "") if isinstance(error, dict) else str(error)
                if status in FATAL_STATUSES:
                    raise self._fatal(status, message)
                if status == 200:  # not a completion: submitted again, as online
                    outcome, retryable, message = "bad_response", True, f"without a chat completion ({not_completion(body)})"
                elif status == 429 or status >= 500 or status == 408:
                    outcome, retryable = ("http_429" if status == 429 else "http_5xx"), True
                elif status:
                    outcome, retryable = "http_4xx", False
                else:
                    code = str((error.get("code") if isinstance(error, dict) else "") or "error")
                    outcome, retryable = (code if code.startswith("batch_") else f"batch_{code}"), False
                found[key] = ("error", (outcome, f"{status or ''} {message}".strip(), retryable), batch.id)
        self.cache.ingest_batch(batch.id, batch.status, entries, redact(_batch_errors(batch), self._secrets))
        return found


def _batch_errors(batch: Any) -> str:
    errors = getattr(batch, "errors", None)
    data = getattr(errors, "data", None) or []
    return "; ".join(f"{getattr(e, 'code', '')}: {getattr(e, 'message', '')}" for e in data)[:1000]
