"""Checks of the files and folders a flow will write, made before any work starts (a read-only or mistyped
output is found in a second, not after the run)."""
from __future__ import annotations

import os
from pathlib import Path


def writable_folder_problem(path: str | Path, flag: str, named: str | Path | None = None) -> str | None:
    """Why ``path`` cannot be created or written as a folder, or None: it is a file, or its nearest existing
    ancestor is a file or not writable (``os.access``: a read-only mount too, for root as well). ``named``: the
    value the message names (the flag's own, when ``path`` is derived from it)."""
    path = Path(path)
    shown = f"{flag} {named if named is not None else path}"
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        return f"{shown}: a file, not a folder" if probe == path and named is None else \
            f"{shown}: {probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{shown}: {probe} is not writable"
    return None


def writable_file_problem(path: str | Path, flag: str) -> str | None:
    """Why the file ``path`` cannot be written or replaced (atomically, from a temporary file beside it), or None."""
    path = Path(path)
    if path.is_dir():
        return f"{flag} {path}: a folder, not a file"
    if path.exists() and not os.access(path, os.R_OK):
        return f"{flag} {path}: not readable"
    return writable_folder_problem(path.parent, flag, named=path)


def check_writable(*problems: str | None) -> None:
    """A ``ValueError`` with every problem found (';'-joined), or nothing."""
    found = [p for p in problems if p]
    if found:
        raise ValueError("; ".join(found))
