"""Reader of the official CodeSearchNet release layout ``<root>/<lang>/final/jsonl/<partition>/*.jsonl.gz``:
one candidate per non-blank line, one rejection for the rest of a file whose gzip stream breaks."""
from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from functools import partial
from pathlib import Path

from tasks.sources.records import (
    Candidate,
    Loaded,
    Reason,
    content_id,
    excerpt,
    failed,
    file_or_broken_link,
    record_from_mapping,
    rejected,
)
from tasks.sources.spec import SourceConfigError, SourceSpec


def csn_files(spec: SourceSpec) -> list[tuple[Path, str]]:
    root = Path(spec.path)  # type: ignore[arg-type]
    if not root.is_dir():
        raise SourceConfigError(f"CodeSearchNet root {root} is not a directory")
    files: list[tuple[Path, str]] = []
    for lang in spec.languages:
        for part in spec.partitions:
            folder = root / lang / "final" / "jsonl" / part
            if not folder.is_dir():
                raise SourceConfigError(
                    f"no {folder}: expected the release layout <root>/<lang>/final/jsonl/<partition>/"
                    f"*.jsonl.gz under {root} for language {lang!r}, partition {part!r}")
            found = sorted(p for p in folder.iterdir()
                           if file_or_broken_link(p) and (p.name.endswith(".jsonl.gz") or p.name.endswith(".jsonl")))
            files.extend((p, p.relative_to(root).as_posix()) for p in found)
    return files


def record_from_json_line(raw: bytes) -> Loaded:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return rejected(Reason.BAD_ENCODING, f"line is not valid UTF-8: {exc}", excerpt(raw))
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError; an int over 4300 digits; deep nesting
        return rejected(Reason.MALFORMED_JSON, f"invalid JSON: {exc}", excerpt(text))
    return record_from_mapping(obj, excerpt(text))


def csn_candidates(spec: SourceSpec) -> Iterator[Candidate]:
    for file, rel in csn_files(spec):
        lineno = 0
        try:
            opener = gzip.open if file.name.endswith(".gz") else open
            with opener(file, "rb") as fh:
                for raw in fh:
                    lineno += 1
                    raw = raw.rstrip(b"\r\n")
                    if not raw.strip():
                        continue  # blank separator lines are not records
                    yield Candidate(f"{rel}:{lineno}", partial(record_from_json_line, raw), content_id(raw))
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            # The rest of the file is unreadable: one rejection stands for it.
            yield failed(f"{rel}:{lineno + 1}", content_id(f"{rel}:{lineno + 1}"), Reason.BAD_ENCODING,
                         f"gzip stream error after {lineno} line(s), rest of file skipped: "
                         f"{type(exc).__name__}: {exc}")
        except OSError as exc:
            yield failed(f"{rel}:{lineno + 1}", content_id(f"{rel}:{lineno + 1}"), Reason.UNREADABLE_FILE,
                         f"cannot read after {lineno} line(s): {type(exc).__name__}: {exc}")
