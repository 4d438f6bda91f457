"""Folder swaps a reader, or a kill -9 at any point, sees whole: the old folder or the new one.

Used by the shard writer (``tasks.dataset.shards``), the checkpoint save (``tasks.training.trainer``) and the
training flow's ``best/``; ``renameat2(RENAME_EXCHANGE)`` where Linux offers it, else two renames
that ``restore_dir`` can undo.
"""
from __future__ import annotations

import ctypes
import errno
import functools
import os
import shutil
import sys
from pathlib import Path
from typing import Any

_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


@functools.lru_cache(maxsize=1)
def _renameat2() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        func = ctypes.CDLL(None, use_errno=True).renameat2  # glibc 2.28+
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


def exchange_paths(a: Path, b: Path) -> bool:
    """Swap two existing paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the
    OS or the file system cannot, having changed nothing."""
    func = _renameat2()
    if func is None:
        return False
    if func(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def hidden_sibling(path: Path, suffix: str) -> Path:
    """``.<name>.<suffix>`` beside ``path`` (a temp or aside name readers' globs skip)."""
    return path.with_name(f".{path.name.lstrip('.')}.{suffix}")


def restore_dir(dst: Path) -> None:
    """Put back the folder a ``replace_dir`` without atomic exchange moved aside, when a kill came
    between its two renames (``dst`` missing, ``.<dst>.old`` whole)."""
    old = hidden_sibling(dst, "old")
    if not dst.exists() and not dst.is_symlink() and old.is_dir():
        os.rename(old, dst)


def replace_dir(src: Path, dst: Path) -> None:
    """Put the finished folder ``src`` at ``dst`` in one step: a reader, or a kill -9 at any point,
    finds the old ``dst`` whole or the new one whole, never a mix of the two and never nothing.

    ``src`` must be a sibling of ``dst`` (same file system). An existing ``dst`` is exchanged with
    ``src`` atomically (``renameat2``) and the old folder deleted after; where the file system
    cannot exchange, the old folder goes aside to ``.<dst>.old`` first and ``restore_dir`` (called
    here, and by the next save) undoes a kill between the two renames.
    """
    old = hidden_sibling(dst, "old")
    restore_dir(dst)
    if not dst.exists():
        os.rename(src, dst)
    elif exchange_paths(src, dst):
        shutil.rmtree(src)  # the old folder now
    else:
        shutil.rmtree(old, ignore_errors=True)
        os.replace(dst, old)
        os.replace(src, dst)
    shutil.rmtree(old, ignore_errors=True)
