"""Where and how to call the model: LLMConfig and the endpoint constants (the embedded server,
requests in flight); keeping its secrets out of what is recorded (split_userinfo, redact)."""
from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import SecretStr

DEFAULT_BASE_URL = "https://api.openai.com/v1"
EMBEDDED = "embedded"  # base_url value: the packaged llama.cpp server, started by the flow (models.embedded_llm)
# Requests in flight when ``LLMConfig.concurrency`` is None: the embedded server has one slot (more
# requests only queue, docs/embedded-llm.md); an endpoint (vLLM, a hosted API) takes many at once.
EMBEDDED_CONCURRENCY = 1
ENDPOINT_CONCURRENCY = 16


@dataclass(frozen=True)
class LLMConfig:
    """Where and how to call the model. ``base_url``/``api_key`` default to OPENAI_* env vars.

    ``api_key`` is a ``SecretStr`` (a plain string is converted): Prefect's parameter store, repr
    and JSON show ``**********``. Credentials in ``base_url`` (``http://user:KEY@host/v1``) move
    to ``base_url_credentials`` (a ``SecretStr`` too), so ``base_url`` itself never holds them;
    :meth:`resolved_base_url` puts them back for the connection only.
    """

    model: str
    base_url: str | None = None
    api_key: SecretStr | None = None
    temperature: float = 0.0
    max_tokens: int = 768
    concurrency: int | None = None  # requests in flight; None: 1 on the embedded server, 16 on an endpoint (in_flight)
    max_retries: int = 6  # transport retries (429, 5xx, timeouts) per request
    parse_attempts: int = 2  # how often an invalid/truncated answer is asked again
    timeout_s: float = 300.0
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    strict_schema: bool = False  # OpenAI strict mode rejects schemas with length bounds
    price_in_per_mtok: float = 0.0  # for the ledger's cost estimate (USD per million tokens)
    price_out_per_mtok: float = 0.0
    cache_dir: str = "artifacts/llm-cache"
    # -- scale (docs/llm.md) --
    rpm_limit: int | None = None  # requests per minute this client may send (None: no local limit)
    tpm_limit: int | None = None  # tokens per minute (prompt estimate + max_tokens, as OpenAI counts)
    max_consecutive_failures: int = 50  # requests failing in a row (after retries) that abort the run; 0: never
    transport: str = "auto"  # auto | fast | openai (auto: fast unless a proxy applies or a client is injected)
    batch: bool = False  # OpenAI Batch API instead of online calls (50% price, results within 24 h)
    batch_poll_s: float = 30.0
    batch_max_requests: int = 50_000  # OpenAI's per-batch limit
    batch_max_bytes: int = 190_000_000  # input file limit is 200 MB
    batch_completion_window: str = "24h"
    batch_price_factor: float = 0.5  # batch price relative to online, for the ledger's cost estimate
    base_url_credentials: SecretStr | None = None  # the userinfo of base_url (set from it; never recorded)
    ledger_journal: str | None = None  # a JSON-lines file each ledger row is appended to as its call ends

    def __post_init__(self) -> None:
        if isinstance(self.api_key, str):
            object.__setattr__(self, "api_key", SecretStr(self.api_key) if self.api_key else None)
        if isinstance(self.base_url_credentials, str):
            object.__setattr__(self, "base_url_credentials", SecretStr(self.base_url_credentials) if self.base_url_credentials else None)
        if self.base_url:
            url, userinfo = split_userinfo(self.base_url)
            if userinfo:
                object.__setattr__(self, "base_url", url)
                object.__setattr__(self, "base_url_credentials", SecretStr(userinfo))

    @property
    def in_flight(self) -> int:
        """Requests in flight: ``concurrency``, or by endpoint when it is None (EMBEDDED_CONCURRENCY
        for ``base_url`` 'embedded', ENDPOINT_CONCURRENCY otherwise)."""
        if self.concurrency is not None:
            return self.concurrency
        return EMBEDDED_CONCURRENCY if self.base_url == EMBEDDED else ENDPOINT_CONCURRENCY

    def resolved_base_url(self) -> str | None:
        """The URL to connect to: with the credentials of the configured URL, when it had some."""
        if self.base_url and self.base_url_credentials is not None:
            parts = urllib.parse.urlsplit(self.base_url)
            netloc = f"{self.base_url_credentials.get_secret_value()}@{parts.netloc}"
            return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
        return self.base_url or os.environ.get("OPENAI_BASE_URL")

    def public_base_url(self) -> str | None:
        """The URL as it may be recorded (manifests, cards, logs, error messages): no userinfo."""
        url = self.resolved_base_url()
        return split_userinfo(url)[0] if url else url

    def resolved_api_key(self) -> str:
        # Local servers ignore the key; the openai client still wants a non-empty one.
        if self.api_key is not None and self.api_key.get_secret_value():
            return self.api_key.get_secret_value()
        return os.environ.get("OPENAI_API_KEY") or "not-needed"

    def secrets(self) -> tuple[str, ...]:
        """Strings that must never be recorded: the keys (config and environment) and the URL's credentials."""
        found = [self.api_key.get_secret_value() if self.api_key is not None else "", os.environ.get("OPENAI_API_KEY", "")]
        for userinfo in (self.base_url_credentials.get_secret_value() if self.base_url_credentials is not None else "",
                         split_userinfo(os.environ.get("OPENAI_BASE_URL", ""))[1]):
            found += [userinfo, userinfo.partition(":")[2]]
        return tuple(dict.fromkeys(s for s in found if s))

    def recorded(self) -> dict[str, Any]:
        """The config as manifests record it: no key, no URL credentials, no run-local journal path."""
        out = asdict(self)
        for name in ("api_key", "base_url_credentials", "ledger_journal"):
            out.pop(name)
        return out  # base_url holds no credentials: __post_init__ moved them to base_url_credentials


# -- secrets in what is recorded --------------------------------------------------------------
def split_userinfo(url: str) -> tuple[str, str]:
    """``(url without userinfo, userinfo)``: ``http://u:KEY@host/v1`` -> ``("http://host/v1", "u:KEY")``."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, ""
    userinfo, _, host = parts.netloc.rpartition("@")
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), userinfo


REDACTED = "***"
# Credentials a server (or a proxy) may echo back in an error body: an Authorization or API-key
# header or field with its value, a bearer/basic token, an OpenAI-style key, a URL's userinfo.
_SECRET_PATTERNS = (
    (re.compile(r"""(?i)((?:proxy-)?authorization|x-api-key|api[_-]?key|access[_-]?token)(["']?\s*[:=]\s*["']?)(?:(?:bearer|basic|token)\s+)?[^\s"',;}&]+"""),
     rf"\1\2{REDACTED}"),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"), rf"\1 {REDACTED}"),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{6,}"), f"sk-{REDACTED}"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@"), rf"\1{REDACTED}@"),
)
_MIN_SECRET = 4  # shorter configured "keys" (test placeholders) are left to the patterns


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with the given secrets and anything that looks like a credential replaced by ``***``."""
    if not text:
        return text
    for secret in sorted((s for s in secrets if len(s) >= _MIN_SECRET), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text
