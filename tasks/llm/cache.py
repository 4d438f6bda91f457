"""The response cache: the cache key (everything that determines an answer, and nothing else), the
SQLite store of answers and of live batch ids, the old one-file-per-request folder, and the
maintenance command line (python -m tasks.llm.cache)."""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tasks.llm.codec import dumps, loads
from tasks.llm.config import LLMConfig
from tasks.llm.structured import IdentityMemo, StructuredRequest

CACHE_FORMAT = "tgr-llm-cache-v1"


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


_schema_canon = IdentityMemo(_canon)


def config_key_parts(cfg: LLMConfig) -> tuple[str, str, str]:
    """The parts of the :func:`cache_key` blob that depend on the config only (computed once per client)."""
    return (
        ',"format":' + _canon(CACHE_FORMAT) + ',"max_tokens":' + _canon(cfg.max_tokens) + ',"messages":',
        ',"model":' + _canon(cfg.model) + ',"prompt_version":',
        ',"strict":' + _canon(cfg.strict_schema) + ',"temperature":' + _canon(cfg.temperature) + "}",
    )


def request_key_parts(cfg: LLMConfig, req: StructuredRequest, config_parts: tuple[str, str, str] | None = None) -> tuple[str, str]:
    """The blob of :func:`cache_key` around the attempt number (keys in sorted order), the schema's text memoised."""
    a, b, c = config_parts or config_key_parts(cfg)
    tail = a + _canon([list(m) for m in req.messages]) + b + _canon(req.prompt_version) + ',"schema":' + _schema_canon(req.schema) + c
    return '{"attempt":', tail


def fast_cache_key(parts: tuple[str, str], attempt: int) -> str:
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
            return loads(row[0])
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
        found = {k: loads(e) for k, e in rows}
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
        blob = dumps(entry).decode()
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
        rows = [(k, dumps(e).decode(), now) for k, e in items]
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
        rows = [(k, dumps(e).decode(), now) for k, e in entries]
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


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tasks.llm.cache", description="LLM cache maintenance")
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
