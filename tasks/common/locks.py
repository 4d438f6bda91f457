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
    """Hold ``lock_file`` for the ``with`` block; ``what`` names the guarded thing in the error.

    The file is removed when the block ends (a clean run leaves no ``.lock`` behind), and so is its folder
    when this lock made it and it is still empty. Removing it while still holding it is safe because a taker
    checks, once it holds the lock, that the path still names the file it locked; if not (it locked a file
    the holder had just removed), it tries again on the new one."""
    made = not lock_file.parent.exists()
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        handle = open(lock_file, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise error(f"{what} is being written by another run ({holder}); wait for it to finish "
                        "or choose another output") from None
        try:
            current = os.stat(lock_file).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(handle.fileno()).st_ino:
            break
        handle.close()  # the holder removed this file as we took it: take the new one
    else:  # pragma: no cover - a hundred removals in a row
        raise error(f"{what}: could not take {lock_file}")
    with handle:
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                lock_file.unlink()  # while still held: see the docstring
            fcntl.flock(handle, fcntl.LOCK_UN)
            if made:
                with contextlib.suppress(OSError):
                    lock_file.parent.rmdir()  # only when empty: a failed first run leaves no bare folder
