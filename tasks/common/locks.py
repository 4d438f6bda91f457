"""One writer at a time: an exclusive, non-blocking file lock that the OS drops when the holder dies.

flock locks belong to the open file, so a kill -9 leaves nothing stale behind: the next run takes
the lock at once. A second live writer gets ``BusyError`` naming who holds it.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


class BusyError(RuntimeError):
    """Another live process holds the lock."""


@contextlib.contextmanager
def exclusive_lock(lock_file: Path, what: str, error: type[BusyError] = BusyError) -> Iterator[None]:
    """Hold ``lock_file`` for the ``with`` block; ``what`` names the guarded thing in the error."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise error(f"{what} is being written by another run ({holder}); wait for it to finish "
                        "or choose another output") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
