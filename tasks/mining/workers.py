"""Mining work in worker processes: a chunked process-pool map (:func:`map_chunks`), and the cyclic garbage
collector paused for steps that allocate millions of objects (:func:`no_gc`)."""
from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from tasks.common.progress import CountProgress


def map_chunks(fn: Any, items: Sequence[Any], workers: int, chunk: int, progress: CountProgress | None = None) -> list[Any]:
    """``fn`` over ``items`` in chunks, in ``workers`` processes (in-process when workers <= 1 or
    there is one chunk); results flattened in input order. ``progress`` advances by each chunk's items."""
    chunks = [items[i: i + chunk] for i in range(0, len(items), chunk)]
    out: list[Any] = []
    parts = map(fn, chunks) if workers <= 1 or len(chunks) <= 1 else None
    with contextlib.ExitStack() as stack:
        if parts is None:
            parts = stack.enter_context(ProcessPoolExecutor(max_workers=workers)).map(fn, chunks)
        for c, part in zip(chunks, parts):
            out += part
            if progress is not None:
                progress.advance(len(c))
    return out


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector paused: parsing and resolving allocate millions of objects that form
    no reference cycles (ASTs have no parent links), and its passes over them cost a fifth of the time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
