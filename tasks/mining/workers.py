"""Mining work in worker processes: a chunked process-pool map (:func:`map_chunks`), and the cyclic garbage
collector paused for steps that allocate millions of objects (:func:`no_gc`)."""
from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def map_chunks(fn: Any, items: Sequence[Any], workers: int, chunk: int) -> list[Any]:
    """``fn`` over ``items`` in chunks, in ``workers`` processes (in-process when workers <= 1 or
    there is one chunk); results flattened in input order."""
    chunks = [items[i: i + chunk] for i in range(0, len(items), chunk)]
    out: list[Any] = []
    if workers <= 1 or len(chunks) <= 1:
        for c in chunks:
            out += fn(c)
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for part in pool.map(fn, chunks):
                out += part
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
