"""The record every reader yields (CodeSearchNet's twelve fields), the read rejection reasons, and
what a reader yields per item: a :class:`Candidate` whose ``load()`` gives the record or its rejection."""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from tasks.common.outcome import Outcome

# The CodeSearchNet record schema, in the release's field order.
CSN_FIELDS: tuple[str, ...] = (
    "repo", "path", "func_name", "original_string", "language", "code", "code_tokens",
    "docstring", "docstring_tokens", "sha", "url", "partition",
)
_LIST_FIELDS = frozenset({"code_tokens", "docstring_tokens"})
READ = "read"  # the stage of every rejection made while reading, filtering and deduplicating
EXCERPT_CHARS = 300


class Reason:
    """Rejection reason codes (stable strings: they are stored in the warehouse)."""

    UNREADABLE_FILE = "unreadable_file"          # OSError opening/reading a file
    BAD_ENCODING = "bad_encoding"                # gzip stream errors, invalid UTF-8 / source encoding
    MALFORMED_JSON = "malformed_json"            # a JSONL line that is not JSON
    NOT_AN_OBJECT = "not_an_object"              # JSON that is not an object
    MISSING_FIELD = "missing_field"              # a CodeSearchNet field is absent
    WRONG_TYPE = "wrong_type"                    # a field has the wrong type
    SYNTAX_ERROR = "syntax_error"                # a source file ast.parse rejects
    NO_DOCSTRING = "no_docstring"                # empty docstring after strip
    TOO_SHORT = "too_short"                      # code under min_lines / min_chars
    TOO_LONG = "too_long"                        # code over max_chars / max_lines
    DUPLICATE_ID = "duplicate_id"                # same repo:path:func_name as an accepted record
    DUPLICATE_EXACT = "duplicate_exact"          # byte-identical code to an accepted record
    DUPLICATE_NORMALIZED = "duplicate_normalized"  # same code up to whitespace/comments


REJECTION_REASONS: tuple[str, ...] = tuple(
    v for k, v in vars(Reason).items() if not k.startswith("_") and isinstance(v, str)
)


@dataclass(frozen=True)
class FunctionRecord:
    """One function in the CodeSearchNet record schema."""

    repo: str
    path: str
    func_name: str
    original_string: str
    language: str
    code: str
    code_tokens: list[str]
    docstring: str
    docstring_tokens: list[str]
    sha: str
    url: str
    partition: str

    @property
    def record_id(self) -> str:
        """``repo:path:func_name``; a content hash of ``code`` when any of the three is empty."""
        if self.repo and self.path and self.func_name:
            return f"{self.repo}:{self.path}:{self.func_name}"
        return content_id(self.code)

    def to_dict(self) -> dict[str, Any]:
        """The record as a CodeSearchNet JSON object (field order of the release)."""
        return asdict(self)


def content_id(text: str | bytes) -> str:
    """Stable id of content that has no repo/path/func_name: ``sha1:<first 16 hex digits>``."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return "sha1:" + hashlib.sha1(data).hexdigest()[:16]


def excerpt(raw: str | bytes) -> str:
    if isinstance(raw, bytes):
        raw = raw[: EXCERPT_CHARS * 4].decode("utf-8", errors="replace")
    return raw[:EXCERPT_CHARS]


def rejected(reason: str, detail: str, raw: str = "", record_id: str = "") -> Outcome:
    """A read rejection; the reading pipeline places it (locator, fallback id: :meth:`Outcome.placed`)."""
    return Outcome(record_id, READ, reason, detail, raw)


Loaded = FunctionRecord | Outcome  # what a candidate's load() gives


@dataclass(frozen=True)
class Candidate:
    """One item a reader yields: where it is, and how to get its record (or its rejection) when it is read.
    Loading is deferred so a seeded sample can shuffle every candidate before parsing any."""

    locator: str
    load: Callable[[], Loaded]
    fallback_id: str  # record_id of a rejection found before a record exists
    # Fills in costly fields (tree code_tokens) once the record has passed the filter.
    finish: Callable[[FunctionRecord], FunctionRecord] | None = None


def _given(outcome: Outcome) -> Outcome:
    return outcome


def failed(locator: str, fallback_id: str, reason: str, detail: str, raw: str = "") -> Candidate:
    """A candidate that is a rejection already (a file that cannot be read or parsed)."""
    return Candidate(locator, partial(_given, rejected(reason, detail, raw)), fallback_id)


def record_from_mapping(obj: Any, raw: str = "") -> Loaded:
    """A decoded CodeSearchNet object as a record, or the rejection saying what is wrong with it."""
    if not isinstance(obj, dict):
        return rejected(Reason.NOT_AN_OBJECT, f"expected a JSON object, got {type(obj).__name__}", raw)
    missing = [f for f in CSN_FIELDS if f not in obj]
    partial_id = _partial_id(obj) or ""
    if missing:
        return rejected(Reason.MISSING_FIELD, f"missing field(s): {', '.join(missing)}", raw, partial_id)
    for name in CSN_FIELDS:
        value = obj[name]
        if name in _LIST_FIELDS:
            if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
                return rejected(Reason.WRONG_TYPE, f"{name} must be a list of strings, got {type(value).__name__}", raw, partial_id)
        elif not isinstance(value, str):
            return rejected(Reason.WRONG_TYPE, f"{name} must be a string, got {type(value).__name__}", raw, partial_id)
        # JSON \ud800-style escapes decode to lone surrogates, which Arrow/Parquet cannot store.
        for text in value if isinstance(value, list) else (value,):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                return rejected(Reason.BAD_ENCODING, f"{name} is not encodable as UTF-8 (lone surrogate at index {exc.start})",
                                raw, partial_id)
    return FunctionRecord(**{name: obj[name] for name in CSN_FIELDS})


def _partial_id(obj: Mapping[str, Any]) -> str | None:
    parts = [obj.get(k) for k in ("repo", "path", "func_name")]
    if all(isinstance(p, str) and p for p in parts):
        joined = ":".join(parts)  # type: ignore[arg-type]
        try:
            joined.encode("utf-8")
            return joined
        except UnicodeEncodeError:
            pass
    if isinstance(obj.get("code"), str):
        return content_id(obj["code"])
    return None


def file_or_broken_link(path: Path) -> bool:
    """A regular file, or a symlink that leads nowhere (dangling, or a loop): opening the latter
    fails, so it is read as one unreadable_file rejection instead of vanishing from the books."""
    return path.is_file() or (path.is_symlink() and not path.exists())
