"""What to read: the source spec, its kinds and defaults, and the errors of a source that cannot be read at all."""
from __future__ import annotations

import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

CSN_PARTITIONS: tuple[str, ...] = ("train", "valid", "test")

SourceKind = Literal["codesearchnet", "hf", "tree", "stdlib"]
SOURCE_KINDS: tuple[str, ...] = ("codesearchnet", "hf", "tree", "stdlib")

# Directory names never read from a local tree (not the project's own code, or generated).
DEFAULT_TREE_EXCLUDES: tuple[str, ...] = (
    ".git", ".hg", ".svn", ".tox", ".venv", "venv", "__pycache__", "node_modules", "site-packages",
)
# The stdlib's test suites, the IDLE app and the deprecated 2to3 (its fixtures do not parse).
STDLIB_EXCLUDES: tuple[str, ...] = (
    "test", "tests", "idlelib", "lib2to3", "site-packages", "__pycache__",
)


class SourceError(Exception):
    """A source cannot be read at all (configuration or availability), as opposed to bad items."""


class SourceConfigError(SourceError, ValueError):
    """The source spec is invalid or points at something that is not there."""


class SourceUnavailableError(SourceError, ConnectionError):
    """A remote source (the Hugging Face hub) cannot be reached or loaded."""


class EmptySourceError(SourceConfigError):
    """The source is there but holds nothing to read (an empty file, a folder without matching files)."""


@dataclass(frozen=True)
class SourceSpec:
    """Which functions to read.

    ``path``: the CodeSearchNet release root (the folder holding ``<lang>/final/jsonl``) for
    ``codesearchnet``; the tree root for ``tree``; an optional stdlib folder override for
    ``stdlib`` (default ``sysconfig.get_paths()["stdlib"]``); unused for ``hf``.

    ``sample_seed``: ``None`` reads in a deterministic file order (sorted paths, then line or
    source order). An integer shuffles the full candidate list with ``random.Random(seed)``
    before ``limit`` is applied, so a limited read samples across files and modules instead of
    taking the first N alphabetically. The same seed gives the same records. Sampling has to
    enumerate every candidate first (all JSONL lines are held as bytes; every tree file is
    parsed), and file-level failures met during that enumeration are all counted as read.
    For ``hf`` the seed drives the hub's buffered stream shuffle (``hf_shuffle_buffer`` rows).
    """

    kind: SourceKind = "stdlib"
    path: str | Path | None = None
    languages: tuple[str, ...] = ("python",)
    partitions: tuple[str, ...] = CSN_PARTITIONS
    sample_seed: int | None = None
    # tree / stdlib
    repo_name: str | None = None                 # default: the tree folder's name / cpython-stdlib-X.Y
    exclude_dirs: tuple[str, ...] | None = None  # default: DEFAULT_TREE_EXCLUDES / STDLIB_EXCLUDES
    # hf: the parquet conversion of the hub dataset (datasets>=4 no longer runs its loading script)
    hf_dataset_id: str = "code-search-net/code_search_net"
    hf_revision: str = "refs/convert/parquet"
    hf_data_files: str = "hf://datasets/{dataset_id}@{revision}/{language}/{split}/*.parquet"
    hf_shuffle_buffer: int = 10_000

    def __post_init__(self) -> None:
        if self.kind not in SOURCE_KINDS:
            raise SourceConfigError(f"unknown source kind {self.kind!r}; expected one of {SOURCE_KINDS}")
        for name in ("languages", "partitions"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
                raise SourceConfigError(f"{name} must be a sequence of non-empty strings, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        if self.kind in ("codesearchnet", "tree") and self.path is None:
            raise SourceConfigError(f"source kind {self.kind!r} needs a path")
        if self.kind in ("codesearchnet", "hf"):
            bad = [p for p in self.partitions if p not in CSN_PARTITIONS]
            if bad:
                raise SourceConfigError(f"unknown partitions {bad}; expected some of {CSN_PARTITIONS}")
        if self.sample_seed is not None and not isinstance(self.sample_seed, int):
            raise SourceConfigError(f"sample_seed must be an int or None, got {self.sample_seed!r}")

    @property
    def name(self) -> str:
        """Short human-readable name of the source, for logs and manifests."""
        if self.kind == "hf":
            return f"hf:{self.hf_dataset_id}"
        if self.kind == "stdlib":
            return f"stdlib:{stdlib_root(self)}"
        return f"{self.kind}:{self.path}"


def stdlib_root(spec: SourceSpec) -> Path:
    return Path(spec.path) if spec.path is not None else Path(sysconfig.get_paths()["stdlib"])
