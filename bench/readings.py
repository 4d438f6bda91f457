"""The hand readings' markdown (bench/*_sample.md): each table row with the ``## `` heading it sits under, so a
bench that counts a reading parses its tables in one way."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def reading_rows(path: Path) -> Iterator[tuple[str, list[str]]]:
    """(the heading's text after ``## ``, the row's cells stripped) for every table row under a heading; header and
    rule rows (``| #``, ``|---``) left out."""
    heading = None
    for line in path.read_text().splitlines():
        if line.startswith("## "):
            heading = line[3:]
        elif heading is not None and line.startswith("| ") and not line.startswith(("| #", "|---")):
            yield heading, [c.strip() for c in line.strip().strip("|").split("|")]
