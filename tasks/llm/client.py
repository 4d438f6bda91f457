"""LLM layer: structured JSON calls to any OpenAI-compatible endpoint, at scale (docs/llm.md).

- one request = one content-addressed cache entry (model, messages, sampling params, schema,
  prompt version, parse attempt) in an embedded SQLite store (WAL mode: many reader and writer
  processes; answers of one event-loop tick share a transaction), so a rerun or a resume after a crash makes zero repeated
  calls, and 10^6+ entries cost one file; an old one-file-per-request folder is still read;
- bounded async concurrency over a small keep-alive HTTP/1.1 transport (the official SDK is the
  fallback for proxies and injected clients); RPM/TPM limits from the config and from the
  ``x-ratelimit-*`` response headers; a 429 starts a cool-down shared by every request in flight
  (honouring ``retry-after``); exponential backoff for timeouts, connection errors and 5xx;
- fail fast: 401/403/404 raise :class:`LLMEndpointError` at once; a run of consecutive failed
  requests raises :class:`LLMUnavailableError`; :func:`raise_if_all_failed` ends a stage whose
  every request failed;
- invalid/truncated JSON is re-asked (a new attempt is a new cache key) and the raw text is kept
  when every attempt fails;
- optional OpenAI Batch API mode (``/v1/files`` + ``/v1/batches``): batch ids are stored beside
  the cache, so a resume polls the batches already submitted instead of submitting again;
- a ledger row for every request sent and every cache hit, written when the call ends (also when
  the run is aborted or cancelled) and, with ``ledger_journal``, appended to a file at once;
- only answers that parsed and validated are cached: a fault's damage is never replayed;
- secrets stay out of what is recorded: ``api_key`` is a ``SecretStr``, credentials in the base URL
  are kept apart from it, and error text echoed by a server is redacted (:func:`redact`).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import email.utils
import hashlib
import json
import os
import random
import re
import sqlite3
import ssl
import threading
import time
import urllib.parse
import urllib.request
import weakref
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import openai
from pydantic import SecretStr

from schemas.docs import validation_errors

try:  # 10x faster than json for request bodies and responses; json is the fallback
    import orjson

    def _dumps(value: Any) -> bytes:
        return orjson.dumps(value)

    _loads = orjson.loads
except ImportError:  # pragma: no cover - orjson ships with prefect

    def _dumps(value: Any) -> bytes:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()

    _loads = json.loads


CACHE_FORMAT = "tgr-llm-cache-v1"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
EMBEDDED = "embedded"  # base_url value: the packaged llama.cpp server, started by the flow (models.embedded_llm)
# Requests in flight when ``LLMConfig.concurrency`` is None: the embedded server has one slot (more
# requests only queue, docs/embedded-llm.md); an endpoint (vLLM, a hosted API) takes many at once.
EMBEDDED_CONCURRENCY = 1
ENDPOINT_CONCURRENCY = 16
FATAL_STATUSES = {401: "the API key was rejected", 403: "access to this model or endpoint is forbidden", 404: "the endpoint or model does not exist"}


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


@dataclass(frozen=True)
class StructuredRequest:
    """One structured call: chat messages plus the JSON schema the answer must match."""

    agent: str
    item_id: str
    messages: tuple[tuple[str, str], ...]  # (role, content)
    schema_name: str
    schema: dict[str, Any]
    prompt_version: str


@dataclass(slots=True)
class CallRecord:
    """A ledger row."""

    agent: str
    item_id: str
    cache_key: str
    attempt: int
    # ok | cache_hit | http_429 | http_5xx | http_4xx | http_401/403/404 | timeout | connection | bad_response |
    # invalid_json | schema_invalid | truncated | cancelled (in flight when the run stopped) | batch_<error>
    outcome: str
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


# -- errors that end a run ----------------------------------------------------------------------
class LLMError(RuntimeError):
    """Base of the errors that stop a whole LLM run (per-item failures are reasons, not errors)."""


class LLMEndpointError(LLMError):
    """401/403/404: the endpoint, key or model is wrong; retrying cannot help, so nothing is retried.
    ``base_url`` and ``detail`` are as recorded: without credentials (see :meth:`StructuredLLM._fatal`)."""

    def __init__(self, status: int, base_url: str, model: str, detail: str):
        self.status, self.base_url, self.model, self.detail = status, base_url, model, detail
        super().__init__(
            f"LLM endpoint answered HTTP {status} ({FATAL_STATUSES.get(status, 'fatal')}) for model {model!r} at "
            f"{base_url}: {detail[:300]}. Check --base-url, --model and OPENAI_API_KEY; nothing was retried."
        )


class LLMUnavailableError(LLMError):
    """``max_consecutive_failures`` requests in a row failed after all their retries: the endpoint is down."""


class LLMStageFailed(LLMError):
    """Every request of a stage failed (see :func:`raise_if_all_failed`)."""


def raise_if_all_failed(results: Sequence[StructuredResult], stage: str = "LLM stage") -> None:
    """Raise :class:`LLMStageFailed` when there were requests and none of them produced an answer."""
    if not results or any(r.ok for r in results):
        return
    reasons = Counter(r.reason for r in results)
    first = next((r.detail for r in results if r.detail), "")
    raise LLMStageFailed(f"{stage}: all {len(results)} requests failed, by reason {dict(reasons.most_common(6))}; first detail: {first[:300]}")


# -- cache keys ---------------------------------------------------------------------------------
_CANON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))
_canon = _CANON.encode  # == json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


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


class _IdentityMemo:
    """Per-object memo for constant dicts (schemas): keyed by id, checked by identity."""

    def __init__(self, build: Callable[[Any], Any]):
        self._build, self._memo = build, {}

    def __call__(self, obj: Any) -> Any:
        hit = self._memo.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        value = self._build(obj)
        if len(self._memo) > 256:
            self._memo.clear()
        self._memo[id(obj)] = (obj, value)
        return value


_schema_canon = _IdentityMemo(_canon)


def _config_key_parts(cfg: LLMConfig) -> tuple[str, str, str]:
    """The parts of the :func:`cache_key` blob that depend on the config only (computed once per client)."""
    return (
        ',"format":' + _canon(CACHE_FORMAT) + ',"max_tokens":' + _canon(cfg.max_tokens) + ',"messages":',
        ',"model":' + _canon(cfg.model) + ',"prompt_version":',
        ',"strict":' + _canon(cfg.strict_schema) + ',"temperature":' + _canon(cfg.temperature) + "}",
    )


def _request_key_parts(cfg: LLMConfig, req: StructuredRequest, config_parts: tuple[str, str, str] | None = None) -> tuple[str, str]:
    """The blob of :func:`cache_key` around the attempt number (keys in sorted order), the schema's text memoised."""
    a, b, c = config_parts or _config_key_parts(cfg)
    tail = a + _canon([list(m) for m in req.messages]) + b + _canon(req.prompt_version) + ',"schema":' + _schema_canon(req.schema) + c
    return '{"attempt":', tail


def _fast_cache_key(parts: tuple[str, str], attempt: int) -> str:
    """Equal to :func:`cache_key` (tests check it) without serialising the schema every time."""
    return hashlib.sha256((parts[0] + str(int(attempt)) + parts[1]).encode()).hexdigest()


# -- the response store -------------------------------------------------------------------------
_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,          -- cache_key(): sha256 hex
    entry TEXT NOT NULL,           -- the answer and its usage, JSON
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS batches (
    batch_id TEXT PRIMARY KEY,
    input_file_id TEXT NOT NULL,
    status TEXT NOT NULL,          -- last status seen
    n_requests INTEGER NOT NULL,
    created_at REAL NOT NULL,
    ingested INTEGER NOT NULL DEFAULT 0,   -- 1: results are in `responses`; its keys are free again
    detail TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS batch_requests (
    key TEXT PRIMARY KEY,          -- a request waiting in a live batch (custom_id = key)
    batch_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    prompt_version TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS batch_requests_by_batch ON batch_requests(batch_id);
"""
_LEGACY_DIR = re.compile(r"^[0-9a-f]{2}$")


class _Checkpointer:
    """A daemon thread that folds the WAL into the database every ``interval_s`` (PASSIVE: it never
    blocks readers or writers; SQLite releases the GIL meanwhile). One per process and store."""

    def __init__(self, path: Path, busy_timeout_s: float, interval_s: float = 1.0, min_pages: int = 1000):
        self._path, self._busy, self._interval, self._min_pages = path, busy_timeout_s, interval_s, min_pages
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="llm-cache-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn = sqlite3.connect(self._path, timeout=self._busy, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_size_limit=67108864")
        try:
            while not self._stop.wait(self._interval):
                self.checkpoint(conn)
            self.checkpoint(conn, force=True)
        finally:
            conn.close()

    def checkpoint(self, conn: sqlite3.Connection, force: bool = False) -> None:
        try:
            wal = self._path.with_name(self._path.name + "-wal")
            if force or (wal.exists() and wal.stat().st_size >= self._min_pages * 4096):
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except (sqlite3.Error, OSError):
            pass  # busy or gone: the next round (or another process) does it

    def signal(self) -> None:
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class ResponseCache:
    """Content-addressed answers in ``<dir>/responses.sqlite3`` (SQLite, WAL mode).

    Every ``put`` is one transaction, so an entry is either wholly there or absent, whichever
    process or thread wrote it; concurrent writers of one key keep the first answer. Readers never
    block writers. An older one-file-per-request layout (``<dir>/<key[:2]>/<key>.json``) found in
    the same folder is read on a miss and copied in; ``migrate_legacy_cache`` moves it all at once.
    """

    DB_NAME = "responses.sqlite3"

    def __init__(self, directory: str | Path, busy_timeout_s: float = 60.0):
        self.directory = Path(directory)
        self.path = self.directory / self.DB_NAME
        self.busy_timeout_s = busy_timeout_s
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._lock = threading.RLock()
        self._legacy: bool | None = None
        self._stale: list[sqlite3.Connection] = []  # connections inherited over fork: never used, never closed
        self._checkpointer: _Checkpointer | None = None

    # connection -------------------------------------------------------------------------------
    def _db(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            if self._conn is not None:
                self._stale.append(self._conn)  # a forked child must not use (or close) its parent's handle
            self.directory.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")  # persistent: set once per database file
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process crashes
            # Checkpoints (WAL -> database, with an fsync) run in a background thread, not in the
            # commit that happens to cross the threshold: a commit then costs ~40 us, not ~200 us.
            conn.execute("PRAGMA wal_autocheckpoint=0")
            conn.execute("PRAGMA journal_size_limit=67108864")  # the WAL shrinks back to 64 MB after a checkpoint
            conn.executescript(_SCHEMA_SQL)
            self._conn, self._pid = conn, os.getpid()
            self._legacy = None
            self._checkpointer = _Checkpointer(self.path, self.busy_timeout_s)
            weakref.finalize(self, self._checkpointer.signal)  # a cache dropped without close() stops its thread
        return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                if self._checkpointer is not None:
                    self._checkpointer.stop()
                self._conn.close()
            self._conn = None
            self._checkpointer = None

    # answers ----------------------------------------------------------------------------------
    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db().execute("SELECT entry FROM responses WHERE key = ?", (key,)).fetchone()
        if row is not None:
            return _loads(row[0])
        if self._has_legacy():
            entry = self._legacy_get(key)
            if entry is not None:
                self.put(key, entry)
            return entry
        return None

    def get_many(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The entries of those ``keys`` that are stored, in one query (a request's parse attempts)."""
        with self._lock:
            rows = self._db().execute(f"SELECT key, entry FROM responses WHERE key IN ({','.join('?' * len(keys))})", tuple(keys)).fetchall()
        found = {k: _loads(e) for k, e in rows}
        if len(found) < len(keys) and self._has_legacy():
            for key in keys:
                if key not in found and (entry := self.get(key)) is not None:
                    found[key] = entry
        return found

    def discard(self, key: str) -> None:
        """Drop an entry (an answer cached before answers were validated first, that does not validate)."""
        with self._lock:
            self._db().execute("DELETE FROM responses WHERE key = ?", (key,))
        if self._has_legacy():  # else the old file would be copied in again on the next miss
            (self.directory / key[:2] / f"{key}.json").unlink(missing_ok=True)

    def put(self, key: str, entry: dict[str, Any]) -> None:
        blob = _dumps(entry).decode()
        with self._lock:
            self._db().execute(
                "INSERT INTO responses(key, entry, created_at) VALUES (?, ?, ?) ON CONFLICT(key) DO NOTHING", (key, blob, time.time())
            )

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the cache's lock: committed whole, or rolled back."""
        with self._lock:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def put_many(self, items: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """Many entries in one transaction (batch results, migration)."""
        now = time.time()
        rows = [(k, _dumps(e).decode(), now) for k, e in items]
        with self._transaction() as db:
            db.executemany("INSERT INTO responses(key, entry, created_at) VALUES (?, ?, ?) ON CONFLICT(key) DO NOTHING", rows)

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def count(self) -> int:
        """Entries in the SQLite store (a legacy folder not yet migrated is not counted)."""
        with self._lock:
            return self._db().execute("SELECT count(*) FROM responses").fetchone()[0]

    __len__ = count

    def __bool__(self) -> bool:
        return True  # not len(): a store is a store, empty or not

    # legacy one-file-per-request folder ------------------------------------------------------
    def _has_legacy(self) -> bool:
        if self._legacy is None:
            try:
                self._legacy = any(p.is_dir() and _LEGACY_DIR.match(p.name) for p in self.directory.iterdir())
            except FileNotFoundError:
                self._legacy = False
        return self._legacy

    def _legacy_get(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.directory / key[:2] / f"{key}.json").read_text())
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None  # a torn file from a crash: ask again

    # batch bookkeeping ------------------------------------------------------------------------
    def record_batch(self, batch_id: str, input_file_id: str, status: str, requests: Sequence[tuple[str, str, str]]) -> None:
        """Remember a submitted batch and its (key, agent, prompt_version) requests, atomically."""
        with self._transaction() as db:
            db.execute(
                "INSERT INTO batches(batch_id, input_file_id, status, n_requests, created_at) VALUES (?, ?, ?, ?, ?)",
                (batch_id, input_file_id, status, len(requests), time.time()),
            )
            db.executemany(
                "INSERT INTO batch_requests(key, batch_id, agent, prompt_version) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(key) DO UPDATE SET batch_id = excluded.batch_id",
                [(k, batch_id, a, v) for k, a, v in requests],
            )

    def live_batches(self, keys: Sequence[str]) -> dict[str, set[str]]:
        """Batches not yet ingested that hold some of ``keys``: {batch_id: those keys}."""
        found: dict[str, set[str]] = {}
        with self._lock:
            db = self._db()
            for start in range(0, len(keys), 500):
                chunk = list(keys[start : start + 500])
                rows = db.execute(
                    f"SELECT r.key, r.batch_id FROM batch_requests r JOIN batches b USING (batch_id) "
                    f"WHERE b.ingested = 0 AND r.key IN ({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
                for key, batch_id in rows:
                    found.setdefault(batch_id, set()).add(key)
        return found

    def batch_request_meta(self, batch_id: str) -> dict[str, tuple[str, str]]:
        with self._lock:
            rows = self._db().execute("SELECT key, agent, prompt_version FROM batch_requests WHERE batch_id = ?", (batch_id,)).fetchall()
        return {k: (a, v) for k, a, v in rows}

    def ingest_batch(self, batch_id: str, status: str, entries: Sequence[tuple[str, dict[str, Any]]], detail: str = "") -> None:
        """Store a finished batch's answers and release its keys, in one transaction."""
        now = time.time()
        rows = [(k, _dumps(e).decode(), now) for k, e in entries]
        with self._transaction() as db:
            db.executemany("INSERT INTO responses(key, entry, created_at) VALUES (?, ?, ?) ON CONFLICT(key) DO NOTHING", rows)
            db.execute("UPDATE batches SET status = ?, ingested = 1, detail = ? WHERE batch_id = ?", (status, detail[:2000], batch_id))
            db.execute("DELETE FROM batch_requests WHERE batch_id = ?", (batch_id,))

    def forget_batches(self) -> int:
        """Drop every live batch (their requests are submitted again on the next run); returns how many."""
        with self._transaction() as db:
            n = db.execute("UPDATE batches SET ingested = 1, status = 'forgotten' WHERE ingested = 0").rowcount
            db.execute("DELETE FROM batch_requests")
        return n

    def batches(self) -> list[dict[str, Any]]:
        with self._lock:
            cur = self._db().execute("SELECT batch_id, input_file_id, status, n_requests, created_at, ingested, detail FROM batches ORDER BY created_at")
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]


def migrate_legacy_cache(directory: str | Path, remove: bool = False, chunk: int = 10_000) -> int:
    """Copy a one-file-per-request cache folder into its SQLite store; returns entries copied.

    Safe to run while nothing writes the folder; ``remove`` deletes each file once it is committed.
    Torn files (a crash mid-write under the old layout) are skipped and will be asked again.
    """
    directory = Path(directory)
    cache = ResponseCache(directory)
    copied = 0
    subdirs = sorted(p for p in directory.iterdir() if p.is_dir() and _LEGACY_DIR.match(p.name)) if directory.is_dir() else []
    for sub in subdirs:
        files = sorted(sub.glob("*.json"))
        for start in range(0, len(files), chunk):
            batch = []
            for f in files[start : start + chunk]:
                try:
                    batch.append((f.stem, json.loads(f.read_text())))
                except (json.JSONDecodeError, UnicodeDecodeError):
                    continue
            cache.put_many(batch)
            copied += len(batch)
            if remove:
                for f in files[start : start + chunk]:
                    f.unlink(missing_ok=True)
        if remove:
            for leftover in sub.glob("*.tmp"):
                leftover.unlink(missing_ok=True)
            try:
                sub.rmdir()
            except OSError:
                pass
    cache.close()
    return copied


# -- answers ------------------------------------------------------------------------------------
def response_format(req: StructuredRequest, strict: bool) -> dict[str, Any]:
    """The standard OpenAI structured-output field (the embedded server translates it)."""
    return {
        "type": "json_schema",
        "json_schema": {"name": req.schema_name, "schema": req.schema, "strict": strict},
    }


_FAST_KEYWORDS = {"type", "required", "properties", "additionalProperties", "items", "maxItems", "minItems", "enum",
                  "maxLength", "minLength", "description", "title"}
_TYPE_TESTS = {  # 1.0 as an integer, or True as a number: not sure, so the full validator decides
    "object": "type({v}) is dict",
    "array": "type({v}) is list",
    "string": "type({v}) is str",
    "integer": "type({v}) is int",
    "number": "type({v}) in (int, float)",
    "boolean": "type({v}) is bool",
    "null": "{v} is None",
}
_KEYWORDS_OF = {"object": {"required", "properties", "additionalProperties"}, "array": {"items", "maxItems", "minItems"},
                "string": {"maxLength", "minLength"}}


def _compile_fast(schema: Any) -> Callable[[Any], bool] | None:
    """A generated checker that returns True only when ``schema`` surely accepts the value, or None
    when the schema uses keywords it does not know. False means "ask jsonschema" (for the errors too).
    ~2 us per answer instead of ~150 us; tests compare it with jsonschema."""
    lines = ["def check(v0):"]
    consts: dict[str, Any] = {}
    names = iter(range(1, 1 << 30))

    def const(value: Any) -> str:
        name = f"c{len(consts)}"
        consts[name] = value
        return name

    def emit(sub: Any, var: str, depth: int) -> bool:
        pad = "    " * depth
        if not isinstance(sub, dict) or set(sub) - _FAST_KEYWORDS:
            return False
        typ = sub.get("type")
        if set(sub) - {"description", "title", "enum"} and not isinstance(typ, str):
            return False  # keywords without a single type: leave it to jsonschema
        if typ is not None and typ not in _TYPE_TESTS:
            return False
        for other, keywords in _KEYWORDS_OF.items():
            if typ != other and keywords & set(sub):
                return False
        if typ is not None:
            lines.append(f"{pad}if not ({_TYPE_TESTS[typ].format(v=var)}): return False")
        if "enum" in sub:
            enum = sub["enum"]
            if typ not in ("string", "integer", "number", "boolean", "null") or not isinstance(enum, list) or not all(
                    type(e) in (str, int, float, bool) or e is None for e in enum):
                return False
            lines.append(f"{pad}if (type({var}), {var}) not in {const(frozenset((type(e), e) for e in enum))}: return False")
        if typ == "object":
            props = sub.get("properties") or {}
            required = sub.get("required") or []
            extra = sub.get("additionalProperties", True)
            if not isinstance(extra, bool) or not all(isinstance(k, str) for k in props) or not all(isinstance(k, str) for k in required):
                return False
            if required:
                lines.append(f"{pad}if not {var}.keys() >= {const(frozenset(required))}: return False")
            if extra is False:
                lines.append(f"{pad}if not {var}.keys() <= {const(frozenset(props))}: return False")
            for name, prop in props.items():
                child = f"v{next(names)}"
                if name in required:
                    lines.append(f"{pad}{child} = {var}[{name!r}]")
                    if not emit(prop, child, depth):
                        return False
                else:
                    lines.append(f"{pad}if {name!r} in {var}:")
                    lines.append(f"{pad}    {child} = {var}[{name!r}]")
                    if not emit(prop, child, depth + 1):
                        return False
        if typ == "array":
            if "maxItems" in sub:
                lines.append(f"{pad}if len({var}) > {int(sub['maxItems'])}: return False")
            if "minItems" in sub:
                lines.append(f"{pad}if len({var}) < {int(sub['minItems'])}: return False")
            if sub.get("items") is not None:
                child = f"v{next(names)}"
                lines.append(f"{pad}for {child} in {var}:")
                lines.append(f"{pad}    pass")
                if not emit(sub["items"], child, depth + 1):
                    return False
        if typ == "string":
            if "maxLength" in sub:
                lines.append(f"{pad}if len({var}) > {int(sub['maxLength'])}: return False")
            if "minLength" in sub:
                lines.append(f"{pad}if len({var}) < {int(sub['minLength'])}: return False")
        return True

    if not emit(schema, "v0", 1):
        return None
    lines.append("    return True")
    namespace = dict(consts)
    exec(compile("\n".join(lines), "<schema checker>", "exec"), namespace)  # noqa: S102 - generated from the schema's structure only
    return namespace["check"]


_fast_checker = _IdentityMemo(_compile_fast)


def parse_answer(text: str | None, schema: dict[str, Any]) -> tuple[dict[str, Any] | None, str, str]:
    """Parse and validate an answer: (value, reason, detail); reason is empty when valid."""
    if not text or not text.strip():
        return None, "invalid_json", "empty answer"
    body = text.strip()
    if body.startswith("```"):  # some servers wrap JSON in a fence despite response_format
        body = body.strip("`")
        body = body[body.find("{") :] if "{" in body else body
    try:
        value = _loads(body)
    except ValueError:  # orjson is stricter (NaN, huge ints): json decides, and words the error
        try:
            value = json.loads(body)
        except json.JSONDecodeError as exc:
            return None, "invalid_json", f"{exc.msg} at char {exc.pos}"
    if not isinstance(value, dict):
        return None, "schema_invalid", f"expected a JSON object, got {type(value).__name__}"
    fast = _fast_checker(schema)
    if fast is not None and fast(value):
        return value, "", ""
    errors = validation_errors(value, schema)
    if errors:
        return None, "schema_invalid", "; ".join(errors[:5])
    return value, "", ""


def _evaluate(entry: dict[str, Any], schema: dict[str, Any]) -> tuple[dict[str, Any] | None, str, str]:
    if entry.get("finish_reason") not in (None, "stop"):
        return None, "truncated", f"finish_reason={entry.get('finish_reason')}"
    return parse_answer(entry.get("text"), schema)


# -- delays and rate limits ---------------------------------------------------------------------
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


# -- transports ---------------------------------------------------------------------------------
class _Reply:
    __slots__ = ("status", "headers", "data", "text")

    def __init__(self, status: int, headers: Mapping[str, str], data: Any, text: str):
        self.status, self.headers, self.data, self.text = status, headers, data, text


def _ssl_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if not (os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR")):
        try:
            import certifi

            ctx.load_verify_locations(certifi.where())
        except ImportError:  # pragma: no cover
            pass
    return ctx


def _proxy_applies(base_url: str) -> bool:
    parts = urllib.parse.urlsplit(base_url)
    proxies = urllib.request.getproxies()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(parts.hostname or "")


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: a request is written, its future completes with
    (status, headers, body, keep_alive) once the whole response is in; one wakeup per response."""

    MAX_HEAD = 1 << 16

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future | None = None
        self.head: tuple[int, dict[str, str], bool] | None = None
        self.received = False  # any byte of the current response
        self.closed = False
        self.expires_at = 0.0  # idle connections past this are dropped, not reused

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, message: bytes, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
        self.waiter = loop.create_future()
        self.head, self.received = None, False
        self.buf.clear()
        self.transport.write(message)  # type: ignore[union-attr]
        return self.waiter

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self.received = True
        if self.waiter is not None and not self.waiter.done():
            try:
                self._advance(eof=False)
            except (ValueError, IndexError) as exc:
                self._fail(ConnectionError(f"malformed HTTP response: {exc}"))

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            try:
                if not self._advance(eof=True):
                    self._fail(ConnectionError(f"connection closed before any byte of the response: {exc or 'EOF'}") if not self.received
                               else ConnectionError(f"connection closed mid-response: {exc or 'EOF'}"))
            except (ValueError, IndexError) as err:
                self._fail(ConnectionError(f"malformed HTTP response: {err}"))

    def _fail(self, exc: BaseException) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)

    def _advance(self, eof: bool) -> bool:
        """Complete the waiter if the response is whole; True when it did."""
        buf = self.buf
        while self.head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > self.MAX_HEAD:
                    raise ValueError("response head too large")
                return False
            head = _parse_head(bytes(buf[: end + 4]))
            del buf[: end + 4]
            if 100 <= head[0] < 200:
                continue  # an interim response (100 Continue): the real one follows
            self.head = head
        status, headers, keep = self.head
        if "chunked" in headers.get("transfer-encoding", "").lower():
            parsed = _parse_chunked(buf)
            if parsed is None:
                if eof:
                    raise ValueError("truncated chunked body")
                return False
            body = parsed
        elif "content-length" in headers:
            length = int(headers["content-length"])
            if len(buf) < length:
                if eof:
                    raise ValueError(f"body ended after {len(buf)} of {length} bytes")
                return False
            body = bytes(buf[:length])
        elif status in (204, 304):
            body = b""
        else:
            if not eof:
                return False  # the body ends with the connection
            body, keep = bytes(buf), False
        self.waiter.set_result((status, headers, body, keep and not eof))  # type: ignore[union-attr]
        return True


def _parse_chunked(buf: bytearray) -> bytes | None:
    """The body of a complete chunked message in ``buf``, or None while it is incomplete."""
    parts, pos = [], 0
    while True:
        line_end = buf.find(b"\r\n", pos)
        if line_end < 0:
            return None
        size = int(bytes(buf[pos:line_end]).split(b";", 1)[0].strip(), 16)
        pos = line_end + 2
        if size == 0:
            while True:  # optional trailers, then an empty line
                line_end = buf.find(b"\r\n", pos)
                if line_end < 0:
                    return None
                if line_end == pos:
                    return b"".join(parts)
                pos = line_end + 2
        if len(buf) < pos + size + 2:
            return None
        parts.append(bytes(buf[pos : pos + size]))
        pos += size + 2


class FastHTTPTransport:
    """A minimal HTTP/1.1 keep-alive client for JSON POSTs: the hot path of online calls.

    The official SDK costs ~7 ms of CPU per structured call here (request transformation over the
    schema, pydantic models, httpx's pool); this costs ~0.1 ms. It speaks plain HTTP/1.1 with
    Content-Length or chunked bodies (gzip/deflate decoded), over TLS for https; no proxies (the
    SDK transport is used when one applies), no redirects.
    """

    def __init__(self, base_url: str, headers: Mapping[str, str]):
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"unsupported base_url {base_url!r}")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = _ssl_context() if parts.scheme == "https" else None
        self._prefix = parts.path.rstrip("/")
        host_header = parts.netloc.rpartition("@")[2]
        all_headers = {"Host": host_header, "Content-Type": "application/json", "Accept": "application/json",
                       "Accept-Encoding": "identity", "Connection": "keep-alive", "User-Agent": "tgr-pipeline-llm/1", **headers}
        self._head = "".join(f"{k}: {v}\r\n" for k, v in all_headers.items()).encode("latin-1")
        self._idle: list[_Connection] = []
        self.connections_opened = 0

    async def _connect(self) -> _Connection:
        self.connections_opened += 1
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Connection, self._host, self._port, ssl=self._ssl,
                                               server_hostname=self._host if self._ssl else None)
        return conn

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
        """(status, lower-cased headers, body) of one request on a pooled connection."""
        payload = body or b""
        message = b"%s %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
            method.encode(), (self._prefix + path).encode("latin-1"), self._head, len(payload), payload)
        loop = asyncio.get_running_loop()
        while True:
            reused = bool(self._idle)
            conn = self._idle.pop() if reused else await self._connect()
            if reused and (conn.closed or loop.time() >= conn.expires_at):
                conn.transport.close()  # type: ignore[union-attr]
                continue
            if conn.closed:
                raise ConnectionError(f"{self._host}:{self._port} closed a new connection at once")
            try:
                status, headers, data, keep = await conn.send(message, loop)
            except BaseException:
                # Cancelled (timeout), failed mid-response or closed before any byte of it: unusable. A close
                # before the response is not resent here, even on a pooled connection: the request was written
                # and the server may have read (and run) it, so it is a request sent, with its ledger row and a
                # backed-off retry. (An idle connection the server closed is dropped before it is used, above.)
                conn.transport.abort()  # type: ignore[union-attr]
                raise
            if keep and not conn.closed:
                conn.expires_at = loop.time() + _keep_alive_s(headers)
                self._idle.append(conn)
            else:
                conn.transport.close()  # type: ignore[union-attr]
            encoding = headers.get("content-encoding", "").lower()
            try:
                if encoding in ("gzip", "x-gzip"):
                    data = zlib.decompress(data, 16 + zlib.MAX_WBITS)
                elif encoding == "deflate":
                    data = zlib.decompress(data)
            except zlib.error as exc:  # a transport fault like a torn body: retried
                raise ConnectionError(f"malformed {encoding} body: {exc}") from exc
            return status, headers, data

    async def chat(self, body: dict[str, Any]) -> _Reply:
        status, headers, data = await self.request("POST", "/chat/completions", _dumps(body))
        if status == 200:
            try:
                return _Reply(status, headers, _loads(data), "")
            except ValueError:
                pass  # not JSON: the caller sees data=None and retries
        return _Reply(status, headers, None, data[:2000].decode("utf-8", "replace"))

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            if conn.transport is not None:
                conn.transport.close()
        await asyncio.sleep(0)  # let the transports finish closing on this loop


def _keep_alive_s(headers: Mapping[str, str]) -> float:
    """How long an idle connection may be reused: a second less than the server's ``Keep-Alive:
    timeout=N``, else 5 s (httpx's default), so a request never races the server's idle close."""
    match = re.search(r"timeout=(\d+)", headers.get("keep-alive", ""))
    return max(0.0, int(match.group(1)) - 1.0) if match else 5.0


def _parse_head(head: bytes) -> tuple[int, dict[str, str], bool]:
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if not version.startswith("HTTP/"):
        raise ValueError(f"not an HTTP response: {lines[0][:100]!r}")
    status = int(rest[:3])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            name, value = name.strip().lower(), value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
    connection = headers.get("connection", "").lower()
    keep = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    return status, headers, keep


class SDKTransport:
    """The official openai client: used for an injected client, behind a proxy, or when asked."""

    def __init__(self, client: openai.AsyncOpenAI):
        self.client = client

    async def chat(self, body: dict[str, Any]) -> _Reply:
        try:
            raw = await self.client.chat.completions.with_raw_response.create(**body)
        except openai.APIStatusError as exc:  # the body as the server sent it (the SDK's message drops a plain-text one)
            return _Reply(exc.status_code, {k.lower(): v for k, v in exc.response.headers.items()}, None, exc.response.text[:2000] or str(exc))
        except openai.APITimeoutError as exc:
            raise TimeoutError(str(exc)) from exc
        except openai.APIConnectionError as exc:
            raise ConnectionError(str(exc)) from exc
        # The body as JSON, as the fast transport reads it: the SDK's parse() returns a str for an
        # HTML page and a half-built model for JSON that is not a completion.
        headers = {k.lower(): v for k, v in raw.headers.items()}
        data = raw.http_response.content
        try:
            return _Reply(raw.status_code, headers, _loads(data), "")
        except ValueError:
            return _Reply(raw.status_code, headers, None, data[:2000].decode("utf-8", "replace"))

    async def close(self) -> None:
        pass


# -- the client ---------------------------------------------------------------------------------
_TIMEOUT = getattr(asyncio, "timeout", None)  # 3.11+


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


class StructuredLLM:
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
        self._key_parts = _config_key_parts(cfg)
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
            use_fast = mode == "fast" or (mode == "auto" and self._owns_client and not _proxy_applies(self.base_url()))
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
        return {
            "model": self.cfg.model,
            "messages": [{"role": role, "content": content} for role, content in req.messages],
            "temperature": self.cfg.temperature,
            "max_tokens": self.cfg.max_tokens,
            "response_format": response_format(req, self.cfg.strict_schema),
        }

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
            value = _evaluate(entry, req.schema)[0]
            if value is not None:
                return attempt, value
            self.cache.discard(key)
        return None

    async def run_one(self, req: StructuredRequest) -> StructuredResult:
        calls: list[CallRecord] = []
        parts = _request_key_parts(self.cfg, req, self._key_parts)
        keys = [_fast_cache_key(parts, attempt) for attempt in range(self.cfg.parse_attempts)]
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
            value, reason, detail = _evaluate(entry, req.schema)
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
            "tokens_in": _count(usage.get("prompt_tokens")),
            "tokens_out": _count(usage.get("completion_tokens")),
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

    async def _send(self, body: dict[str, Any]) -> _Reply:
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
            shared_cooldown = False
            retry_after: str | None = None
            try:
                reply = await self._send(body)
            except (TimeoutError, asyncio.TimeoutError) as exc:
                self.limiter.done(ticket)
                outcome, detail = "timeout", str(exc)[:300] or f"no answer within {self.cfg.timeout_s:g} s"
            except (OSError, asyncio.IncompleteReadError) as exc:
                self.limiter.done(ticket)
                outcome, detail = "connection", f"{type(exc).__name__}: {exc}"[:300]
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
                    excerpt = reply.text or _dumps(reply.data).decode("utf-8", "replace")
                    outcome, detail = "bad_response", f"HTTP {status} without a chat completion ({not_completion(reply.data)}): {excerpt[:2000]}"
                elif status in FATAL_STATUSES:
                    self.stats[f"http_{status}"] += 1
                    error = self._fatal(status, _error_message(reply.text))
                    self._log(calls, CallRecord(req.agent, req.item_id, key, attempt, f"http_{status}", latency, detail=error.detail))
                    raise error
                elif status == 429:
                    outcome, detail = "http_429", _error_message(reply.text)
                    self.limiter.cool_down(rate_limit_delay(self.cfg, reply.headers, retry))
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
            if retry < self.cfg.max_retries and not shared_cooldown:
                await self._sleep(retry_delay(self.cfg, retry, retry_after))
            # after a 429 the next acquire() waits out the cool-down shared by every request
        self._note_failure()
        return None, failure, None

    # batch API --------------------------------------------------------------------------------
    async def _run_batch(self, requests: list[StructuredRequest], on_done: Callable[[StructuredResult], None] | None) -> list[StructuredResult]:
        """Every attempt round goes through the Batch API; answers land in the same cache."""
        n = len(requests)
        parts = [_request_key_parts(self.cfg, r, self._key_parts) for r in requests]
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
            value, reason, detail = _evaluate(entry, req.schema)
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
                keys = [_fast_cache_key(parts[i], a) for a in range(self.cfg.parse_attempts)]
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
                                    f"if it is gone for good, `python -m tasks.llm.client forget-batches {self.cfg.cache_dir}` resubmits its requests.",)
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
            line = _dumps({"custom_id": key, "method": "POST", "url": "/v1/chat/completions", "body": self._body(wanted[key])}) + b"\n"
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
                row = _loads(line)
                key = row.get("custom_id")
                if not key:
                    continue
                response = row.get("response") if isinstance(row.get("response"), dict) else {}
                status = _count(response.get("status_code"))
                body = response.get("body")
                agent, version = meta.get(key, ("", ""))
                if status == 200:
                    entry = self._entry(body, StructuredRequest(agent, "", (), "", {}, version), elapsed)
                    if entry is not None:
                        entry["batch_id"] = batch.id
                        if _evaluate(entry, wanted[key].schema if key in wanted else {})[0] is not None:
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


def not_completion(data: Any) -> str:
    """Why a 200's body is not a chat completion with an answer to read ("" when it is one): a
    proxy's page, an error object, empty ``choices``, a choice without a message... Such a reply
    is a transport fault (retried), never an answer (cached, or re-asked as a bad answer)."""
    if not isinstance(data, dict):
        return f"the body is {'not JSON' if data is None else 'a JSON ' + type(data).__name__}"
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        return "no choices" if "error" not in data else "an error object"
    choice = choices[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        return "the first choice has no message"
    content = choice["message"].get("content")
    if content is not None and not isinstance(content, str):
        return f"the message content is a {type(content).__name__}, not text"
    return ""


def _count(value: Any) -> int:
    """A token count from a usage field, 0 when the server sent something else."""
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def _batch_errors(batch: Any) -> str:
    errors = getattr(batch, "errors", None)
    data = getattr(errors, "data", None) or []
    return "; ".join(f"{getattr(e, 'code', '')}: {getattr(e, 'message', '')}" for e in data)[:1000]


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


class LedgerJournal:
    """Ledger rows appended to a JSON-lines file as each call ends (``LLMConfig.ledger_journal``):
    one unbuffered append per row, so the rows of a run that fails, is cancelled or killed are on
    disk for the books (``tasks.dataset.accounting`` reads these files as ``llm_calls`` rows)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._file: Any = None

    def write(self, record: CallRecord) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - closed by close(), rows written as they come
        self._file.write(_dumps(asdict(record)) + b"\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


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


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tasks.llm.client", description="LLM cache maintenance")
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("migrate-cache", help="copy a one-file-per-request cache folder into its SQLite store")
    m.add_argument("directory", nargs="?", default=LLMConfig(model="").cache_dir)
    m.add_argument("--remove", action="store_true", help="delete each JSON file once it is committed")
    s = sub.add_parser("stats", help="entries and batches in a cache folder")
    s.add_argument("directory", nargs="?", default=LLMConfig(model="").cache_dir)
    f = sub.add_parser("forget-batches", help="drop the live batch ids, so their requests are submitted again")
    f.add_argument("directory", nargs="?", default=LLMConfig(model="").cache_dir)
    a = p.parse_args(argv)
    if not Path(a.directory).is_dir():
        raise SystemExit(f"no cache folder at {a.directory}")
    if a.command == "migrate-cache":
        print(f"copied {migrate_legacy_cache(a.directory, remove=a.remove)} entries into {Path(a.directory) / ResponseCache.DB_NAME}")
    elif a.command == "forget-batches":
        print(f"forgot {ResponseCache(a.directory).forget_batches()} live batches")
    else:
        cache = ResponseCache(a.directory)
        print(json.dumps({"entries": cache.count(), "batches": cache.batches()}, indent=2))


if __name__ == "__main__":
    main()
