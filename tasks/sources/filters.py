"""Which records are kept: a filter returns ``(keep, reason)``, the reason an :class:`Outcome` when it
does not keep the record. Also the key of near-duplicate code (``normalized_code_key``)."""
from __future__ import annotations

from dataclasses import dataclass

from tasks.common.outcome import Outcome
from tasks.sources.records import FunctionRecord, Reason, excerpt, rejected
from tasks.sources.spec import SourceConfigError
from tasks.sources.tree import python_code_tokens

Verdict = tuple[bool, Outcome | None]  # (keep, why not): (True, None) or (False, a rejection)
KEEP: Verdict = (True, None)


@dataclass(frozen=True)
class SourceFilter:
    """Which records are kept. Size bounds are on ``code`` (docstring included, as in the
    release) and sized so a function plus its prompt fits the agents' context."""

    require_docstring: bool = True
    min_lines: int = 3
    min_chars: int = 80
    max_chars: int = 4000
    max_lines: int | None = None
    dedup: bool = True   # reject exact and whitespace/comment-normalized duplicates of code

    def __post_init__(self) -> None:
        if self.min_chars < 0 or self.min_lines < 0 or self.max_chars < self.min_chars:
            raise SourceConfigError(f"inconsistent size bounds in {self}")
        if self.max_lines is not None and self.max_lines < self.min_lines:
            raise SourceConfigError(f"max_lines < min_lines in {self}")


def drop(rec: FunctionRecord, reason: str, detail: str, record_id: str | None = None) -> Verdict:
    """``(False, the rejection)`` of ``rec``."""
    return False, rejected(reason, detail, excerpt(rec.code), record_id or rec.record_id)


def passes(rec: FunctionRecord, flt: SourceFilter) -> Verdict:
    """Docstring, then size (the first failure is the reason)."""
    if flt.require_docstring and not rec.docstring.strip():
        return drop(rec, Reason.NO_DOCSTRING, "docstring is empty")
    code = rec.code.strip()
    n_chars, n_lines = len(code), code.count("\n") + 1 if code else 0
    if n_lines < flt.min_lines or n_chars < flt.min_chars:
        return drop(rec, Reason.TOO_SHORT, f"{n_lines} line(s), {n_chars} chars; need at least "
                    f"{flt.min_lines} lines and {flt.min_chars} chars")
    if n_chars > flt.max_chars or (flt.max_lines is not None and n_lines > flt.max_lines):
        return drop(rec, Reason.TOO_LONG, f"{n_lines} line(s), {n_chars} chars; at most {flt.max_chars} chars"
                    + (f" and {flt.max_lines} lines" if flt.max_lines else ""))
    return KEEP


def normalized_code_key(code: str, language: str) -> str:
    """Key for near-duplicate detection: Python code as its significant token sequence (so
    whitespace, line breaks and comments do not matter); other code (or Python that does not
    tokenize) with whitespace runs collapsed."""
    if language == "python":
        tokens = python_code_tokens(code)
        if tokens is not None:
            return "py:" + "\x1f".join(tokens)
    return "ws:" + " ".join(code.split())
