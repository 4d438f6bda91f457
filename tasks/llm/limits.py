"""Delays and rate limits: backoff before a retry, Retry-After and x-ratelimit-* headers, the cool-down
after a 429, and RateLimiter (RPM/TPM admission shared by every request of a client)."""
from __future__ import annotations

import asyncio
import email.utils
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping

from tasks.llm.config import LLMConfig
from tasks.llm.structured import StructuredRequest


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(value: str | None) -> float | None:
    """Seconds in an ``x-ratelimit-reset-*`` value: ``"1s"``, ``"6m0s"``, ``"20ms"``, ``"0.5"``; None if unreadable."""
    if value is None:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    total, pos = 0.0, 0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[m.group(2)]
        pos = m.end()
    return total if pos == len(text) and pos else None


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds in a ``Retry-After`` value: a number or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_delay(cfg: LLMConfig, retry_index: int, retry_after: str | None) -> float:
    """Seconds to wait before retry number ``retry_index`` (0-based)."""
    seconds = parse_retry_after(retry_after)
    if seconds is not None:
        return min(seconds, cfg.backoff_max_s)
    base = min(cfg.backoff_base_s * (2**retry_index), cfg.backoff_max_s)
    return base * (0.5 + random.random() / 2)  # jitter keeps many workers from retrying in step


def rate_limit_delay(cfg: LLMConfig, headers: Mapping[str, str], retry_index: int) -> float:
    """The cool-down after a 429: ``retry-after-ms``/``retry-after``, else the reset time of the
    exhausted ``x-ratelimit-*`` budget, else exponential backoff; capped at ``backoff_max_s``."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return min(max(0.0, float(ms) / 1000), cfg.backoff_max_s)
        except ValueError:
            pass
    seconds = parse_retry_after(headers.get("retry-after"))
    if seconds is not None:
        return min(seconds, cfg.backoff_max_s)
    resets = []
    for kind in ("requests", "tokens"):
        remaining = headers.get(f"x-ratelimit-remaining-{kind}")
        reset = parse_duration(headers.get(f"x-ratelimit-reset-{kind}"))
        if remaining is not None and reset is not None and _int_or(remaining, 1) <= 0:
            resets.append(reset)
    if resets:
        return min(max(resets), cfg.backoff_max_s)
    return retry_delay(cfg, retry_index, None)


def _int_or(value: str | None, default: int) -> int:
    try:
        return int(float(value)) if value is not None else default
    except ValueError:
        return default


def estimate_tokens(cfg: LLMConfig, req: StructuredRequest) -> int:
    """What a request counts against a TPM limit: prompt estimate (4 chars a token) + max_tokens."""
    return sum(len(c) for _, c in req.messages) // 4 + 8 * len(req.messages) + cfg.max_tokens


class _Budget:
    """A budget the server reported (``x-ratelimit-remaining-*``), spent locally until it resets."""

    __slots__ = ("remaining", "reset_at")

    def __init__(self) -> None:
        self.remaining: float | None = None
        self.reset_at = 0.0

    def wait(self, need: float, now: float) -> float:
        if self.remaining is None:
            return 0.0
        if now >= self.reset_at:
            self.remaining = None  # reset: unknown again until the next response says
            return 0.0
        return 0.0 if self.remaining >= need else self.reset_at - now

    def observe(self, remaining: float, reset_s: float, now: float) -> None:
        # Within one reset period keep the lowest view: answers arrive out of the server's order.
        if self.remaining is None or now >= self.reset_at:
            self.remaining, self.reset_at = remaining, now + reset_s
        else:
            self.remaining = min(self.remaining, remaining)
            self.reset_at = max(self.reset_at, now + reset_s)


class RateLimiter:
    """Admission for every request of one client: a shared 429 cool-down, local RPM/TPM token
    buckets (one second's worth of burst), and the budgets the server reports in its headers."""

    def __init__(self, rpm: int | None, tpm: int | None, clock: Callable[[], float], sleep: Callable[[float], Awaitable[None]]):
        self.rpm, self.tpm = rpm or None, tpm or None
        self._clock, self._sleep = clock, sleep
        self._req_cap = max(1.0, self.rpm / 60) if self.rpm else 0.0
        self._tok_cap = max(1.0, self.tpm / 60) if self.tpm else 0.0
        self._req_level, self._tok_level = self._req_cap, self._tok_cap
        self._stamp = clock()
        self.cooldown_until = 0.0
        self._srv_req, self._srv_tok = _Budget(), _Budget()
        self.inflight_requests = 0
        self.inflight_tokens = 0
        self._lock: asyncio.Lock | None = None
        self.waited_s = 0.0
        self.cooldowns = 0

    def reset_loop(self) -> None:
        self._lock = None  # an asyncio.Lock belongs to one event loop

    def _wait(self, tokens: int, now: float) -> float:
        wait = self.cooldown_until - now
        if self.rpm or self.tpm:
            dt = max(0.0, now - self._stamp)
            self._stamp = now
            if self.rpm:
                self._req_level = min(self._req_cap, self._req_level + dt * self.rpm / 60)
                if self._req_level < 1:
                    wait = max(wait, (1 - self._req_level) * 60 / self.rpm)
            if self.tpm:
                self._tok_level = min(self._tok_cap, self._tok_level + dt * self.tpm / 60)
                need = min(tokens, self._tok_cap)  # a request above one second's budget waits for a full bucket
                if self._tok_level < need:
                    wait = max(wait, (need - self._tok_level) * 60 / self.tpm)
        return max(wait, self._srv_req.wait(1, now), self._srv_tok.wait(tokens, now))

    def _take(self, tokens: int) -> int:
        self.inflight_requests += 1
        self.inflight_tokens += tokens
        self._req_level -= 1
        self._tok_level -= tokens
        if self._srv_req.remaining is not None:
            self._srv_req.remaining -= 1
        if self._srv_tok.remaining is not None:
            self._srv_tok.remaining -= tokens
        return tokens

    async def acquire(self, tokens: int) -> int:
        """Wait until a request of ``tokens`` may go; pass the returned ticket to :meth:`done`."""
        if (self._lock is None or not self._lock.locked()) and self._wait(tokens, self._clock()) <= 0:
            return self._take(tokens)  # the fast path: nothing to wait for, nobody queued
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # FIFO: one waiter sleeps, the others queue behind it
            while True:
                now = self._clock()
                wait = self._wait(tokens, now)
                if wait <= 0:
                    return self._take(tokens)
                self.waited_s += wait
                await self._sleep(wait)

    def done(self, ticket: int, headers: Mapping[str, str] | None = None) -> None:
        """A request ended; take the server's view of the remaining budgets from its headers, less
        every other request still in flight (the server may not have counted them yet)."""
        self.inflight_requests -= 1
        self.inflight_tokens -= ticket
        if not headers:
            return
        now = self._clock()
        for kind, budget, others in (("requests", self._srv_req, self.inflight_requests), ("tokens", self._srv_tok, self.inflight_tokens)):
            remaining = headers.get(f"x-ratelimit-remaining-{kind}")
            if remaining is None:
                continue
            try:
                value = float(remaining)
            except ValueError:
                continue
            reset = parse_duration(headers.get(f"x-ratelimit-reset-{kind}"))
            budget.observe(value - others, reset if reset is not None else 1.0, now)

    def cool_down(self, seconds: float) -> None:
        """Hold every request of this client for ``seconds`` (after a 429)."""
        until = self._clock() + seconds
        if until > self.cooldown_until:
            self.cooldown_until = until
            self.cooldowns += 1
