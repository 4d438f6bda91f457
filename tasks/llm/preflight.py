"""Preflight: one cheap ``GET {base_url}/models`` before a run's first stage, so an endpoint that cannot be
reached (connection refused, a host that does not resolve) or a rejected key is one clear error in seconds,
not minutes of retries; and :func:`unreachable_cause`, which tells those faults from transient ones."""
from __future__ import annotations

import errno
import json
import logging
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from tasks.llm.config import DEFAULT_BASE_URL, LLMConfig, redact, split_userinfo
from tasks.llm.errors import LLMEndpointError, LLMUnavailableError

log = logging.getLogger(__name__)

PREFLIGHT_TIMEOUT_S = 10.0  # the request is tiny: an endpoint that is up answers at once
# OS errors that mean nothing listens there or the name does not resolve: retrying cannot help
_UNREACHABLE_ERRNOS = {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL}


class LLMUnreachableError(LLMUnavailableError):
    """The endpoint cannot be reached at all (connection refused, DNS failure): not retried (an
    :class:`LLMUnavailableError`, so whatever does not retry an endpoint that is down does not retry this)."""

    def __init__(self, base_url: str, cause: str):
        self.base_url, self.cause = base_url, cause
        super().__init__(f"LLM endpoint {base_url} cannot be reached ({cause}); nothing was retried. "
                         "Start the server or fix --base-url (or OPENAI_BASE_URL).")


def unreachable_cause(exc: BaseException) -> str | None:
    """``'connection refused'`` / ``'host ... does not resolve'`` when ``exc`` (or an exception it was
    raised from, as the openai SDK and urllib wrap them) means the endpoint cannot be reached; None for
    everything else (timeouts, resets, closed connections: transient, retried)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, socket.gaierror):
            return f"the host name does not resolve: {exc.strerror or exc}"
        if isinstance(exc, ConnectionRefusedError):
            return "connection refused"
        if isinstance(exc, OSError) and exc.errno in _UNREACHABLE_ERRNOS:
            return f"{exc.strerror or exc}".lower()
        if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
            exc = exc.reason
            continue
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return None


@dataclass(frozen=True)
class PreflightResult:
    base_url: str  # public: no credentials
    status: int | None  # HTTP status of GET /models; None when it timed out (transient: the run goes on)
    models: tuple[str, ...]  # the ids the endpoint lists
    seconds: float


_PASSED: dict[tuple[str, int], tuple[float, PreflightResult]] = {}  # (url, hash of the key) -> (when, result)
REMEMBER_S = 60.0  # a command line checks before Prefect starts, the flow again: one request is enough


def preflight(cfg: LLMConfig, timeout_s: float = PREFLIGHT_TIMEOUT_S) -> PreflightResult:
    """``GET {base_url}/models`` once. Raises :class:`LLMUnreachableError` when nothing can be reached
    there and :class:`LLMEndpointError` on 401/403 (the key); any other answer means a server is up, and a
    timeout or another transient fault is logged and left to the run's retries. A model the endpoint does
    not list is a warning (some servers list only some). A pass is remembered for ``REMEMBER_S`` seconds."""
    url = (cfg.resolved_base_url() or DEFAULT_BASE_URL).rstrip("/")
    public = split_userinfo(url)[0]
    secrets = cfg.secrets()
    memo = (url, hash(cfg.resolved_api_key()))
    if memo in _PASSED and time.monotonic() - _PASSED[memo][0] < REMEMBER_S:
        return _PASSED[memo][1]
    request = urllib.request.Request(f"{public}/models", headers={
        "Authorization": f"Bearer {cfg.resolved_api_key()}", "Accept": "application/json",
        "User-Agent": "tgr-pipeline-llm/1"})
    started = time.monotonic()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler())  # the environment's proxies, as the SDK
    try:
        with opener.open(request, timeout=timeout_s) as reply:
            status, body = reply.status, reply.read(1 << 20)
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read(4000)
    except (TimeoutError, socket.timeout) as exc:
        log.warning("LLM preflight: GET %s/models gave no answer within %g s (%s); going on, requests will be retried",
                    public, timeout_s, exc)
        return PreflightResult(public, None, (), time.monotonic() - started)
    except (OSError, ValueError) as exc:
        cause = unreachable_cause(exc)
        if cause is not None:
            raise LLMUnreachableError(public, cause) from None
        log.warning("LLM preflight: GET %s/models failed (%s: %s); going on, requests will be retried",
                    public, type(exc).__name__, redact(str(exc), secrets))
        return PreflightResult(public, None, (), time.monotonic() - started)
    seconds = time.monotonic() - started
    if status in (401, 403):
        detail = redact(body.decode("utf-8", "replace"), secrets)
        raise LLMEndpointError(status, public, cfg.model, f"GET /models: {detail}") from None
    models: tuple[str, ...] = ()
    if 200 <= status < 300:
        try:
            data = json.loads(body)
            models = tuple(str(m.get("id")) for m in data.get("data", []) if isinstance(m, dict))
        except (ValueError, AttributeError, TypeError):
            pass
    else:  # a server is up; the chat requests will say what is wrong, if anything is
        hint = " (is --base-url right? it usually ends in /v1)" if status == 404 else ""
        log.warning("LLM preflight: GET %s/models answered HTTP %d%s; going on", public, status, hint)
    if models and cfg.model not in models:
        log.warning("LLM preflight: %s does not list the model %r (it lists %s); requests will name it all the same",
                    public, cfg.model, ", ".join(models[:8]) + (" ..." if len(models) > 8 else ""))
    log.info("LLM preflight: %s answered GET /models with HTTP %d in %.2f s", public, status, seconds)
    result = PreflightResult(public, status, models, seconds)
    if 200 <= status < 300:
        _PASSED[memo] = (time.monotonic(), result)
    return result
