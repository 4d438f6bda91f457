"""Which files to mine: the default roots (stdlib, site-packages), the ``*.py`` files under a folder as
importable modules (:class:`FileItem`; test folders for their flows only), and a target key's top package."""
from __future__ import annotations

import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path


SKIP_DIRS = frozenset({"__pycache__", "idlelib", "lib2to3", "site-packages", ".git", "node_modules"})
TEST_DIRS = frozenset({"test", "tests", "testing"})  # read for their flows only: their functions are never tools


@dataclass(frozen=True)
class FileItem:
    path: str
    module: str
    is_package: bool
    origin: str
    flows_only: bool = False  # test code: its flows between library functions count, its own functions are no targets
    root: str = ""  # the folder ``path`` was listed under (``tree_files``): a pin records paths relative to it


def module_name(rel: Path) -> tuple[str, bool]:
    parts = list(rel.with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def tree_files(root: Path, origin: str, skip_dirs: frozenset[str] = SKIP_DIRS, tests: bool = True) -> list[FileItem]:
    """``*.py`` files under ``root`` as importable modules. Files under a ``test``/``tests``/``testing``
    folder are read for their flows only (``FileItem.flows_only``), or not at all when ``tests`` is False."""
    out: list[FileItem] = []
    root = Path(root)
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skip_dirs and d.isidentifier() and (tests or d not in TEST_DIRS))
        rel = Path(folder).relative_to(root)
        in_tests = any(part in TEST_DIRS for part in rel.parts)
        for name in sorted(names):
            if name.endswith(".py") and name[:-3].isidentifier():
                path = Path(folder, name)
                mod, is_package = module_name(path.relative_to(root))
                if mod:
                    out.append(FileItem(str(path), mod, is_package, origin, in_tests, str(root)))
    return out


def default_roots(kind: str) -> list[Path]:
    if kind == "stdlib":
        return [Path(sysconfig.get_paths()["stdlib"])]
    if kind == "site-packages":
        paths = sysconfig.get_paths()
        return sorted({Path(paths["purelib"]), Path(paths["platlib"])})
    raise ValueError(f"no default root for source {kind!r}")


def top_package(key: str) -> str:
    return key.split(".", 1)[0].split(":", 1)[0]
