"""Function-record sources for build-tdi (step 1): where the functions that become tools come from.

Four sources, one record schema (CodeSearchNet's twelve fields):

* ``codesearchnet``: the official release layout ``<root>/<lang>/final/jsonl/<partition>/*.jsonl.gz``;
* ``hf``: the CodeSearchNet copy on the Hugging Face hub, streamed (needs network);
* ``tree``: any local Python source tree, parsed with :mod:`ast`;
* ``stdlib``: the running interpreter's standard library (the embedded default corpus, offline).

:func:`read_function_records` runs every source through one accounting pipeline: each item read
(a JSONL line, a hub row, a function definition, or a source file that cannot be read or parsed)
ends either in ``accepted`` or as a :class:`Rejection` with a reason code, so
``len(accepted) + len(rejected) == n_read`` always holds. Nothing is dropped silently.
"""
from __future__ import annotations

import ast
import gzip
import hashlib
import io
import json
import os
import random
import re
import sys
import sysconfig
import textwrap
import tokenize
import zlib
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Mapping
from urllib.parse import quote

# The CodeSearchNet record schema, in the release's field order.
CSN_FIELDS: tuple[str, ...] = (
    "repo", "path", "func_name", "original_string", "language", "code", "code_tokens",
    "docstring", "docstring_tokens", "sha", "url", "partition",
)
_LIST_FIELDS = frozenset({"code_tokens", "docstring_tokens"})
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


class Reason:
    """Rejection reason codes (stable strings: they are stored in the warehouse)."""

    UNREADABLE_FILE = "unreadable_file"          # OSError opening/reading a file
    BAD_ENCODING = "bad_encoding"                # gzip stream errors, invalid UTF-8 / source encoding
    MALFORMED_JSON = "malformed_json"            # a JSONL line that is not JSON
    NOT_AN_OBJECT = "not_an_object"              # JSON that is not an object
    MISSING_FIELD = "missing_field"              # a CodeSearchNet field is absent
    WRONG_TYPE = "wrong_type"                    # a field has the wrong type
    SYNTAX_ERROR = "syntax_error"                # a source file ast.parse rejects
    NO_DOCSTRING = "no_docstring"                # empty docstring after strip
    TOO_SHORT = "too_short"                      # code under min_lines / min_chars
    TOO_LONG = "too_long"                        # code over max_chars / max_lines
    DUPLICATE_ID = "duplicate_id"                # same repo:path:func_name as an accepted record
    DUPLICATE_EXACT = "duplicate_exact"          # byte-identical code to an accepted record
    DUPLICATE_NORMALIZED = "duplicate_normalized"  # same code up to whitespace/comments


REJECTION_REASONS: tuple[str, ...] = tuple(
    v for k, v in vars(Reason).items() if not k.startswith("_") and isinstance(v, str)
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
class FunctionRecord:
    """One function in the CodeSearchNet record schema."""

    repo: str
    path: str
    func_name: str
    original_string: str
    language: str
    code: str
    code_tokens: list[str]
    docstring: str
    docstring_tokens: list[str]
    sha: str
    url: str
    partition: str

    @property
    def record_id(self) -> str:
        """``repo:path:func_name``; a content hash of ``code`` when any of the three is empty."""
        if self.repo and self.path and self.func_name:
            return f"{self.repo}:{self.path}:{self.func_name}"
        return content_id(self.code)

    def to_dict(self) -> dict[str, Any]:
        """The record as a CodeSearchNet JSON object (field order of the release)."""
        return asdict(self)


def content_id(text: str | bytes) -> str:
    """Stable id of content that has no repo/path/func_name: ``sha1:<first 16 hex digits>``."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return "sha1:" + hashlib.sha1(data).hexdigest()[:16]


@dataclass(frozen=True)
class Rejection:
    """An item read but not accepted, with why (one row of the rejections table)."""

    record_id: str
    source: str          # locator: file:line, file::qualname, or hf:<id>/<lang>/<split>#<row>
    stage: str
    reason: str          # one of REJECTION_REASONS
    detail: str
    raw_excerpt: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


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
            return f"stdlib:{_stdlib_root(self)}"
        return f"{self.kind}:{self.path}"


@dataclass(frozen=True)
class SourceFilter:
    """Which records are kept. Size bounds are on ``code`` (docstring included, as in the
    release) and sized so a function plus its prompt fits the agents' context."""

    require_docstring: bool = True
    min_lines: int = 3
    min_chars: int = 80
    max_chars: int = 4000
    max_lines: int | None = None
    dedup: bool = True   # reject exact and whitespace/comment-normalized duplicates of code

    def __post_init__(self) -> None:
        if self.min_chars < 0 or self.min_lines < 0 or self.max_chars < self.min_chars:
            raise SourceConfigError(f"inconsistent size bounds in {self}")
        if self.max_lines is not None and self.max_lines < self.min_lines:
            raise SourceConfigError(f"max_lines < min_lines in {self}")


@dataclass
class SourceReadResult:
    """What one read produced. Invariant: ``len(accepted) + len(rejected) == n_read``."""

    source: str
    accepted: list[FunctionRecord] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    n_read: int = 0

    def reason_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.rejected:
            counts[r.reason] = counts.get(r.reason, 0) + 1
        return dict(sorted(counts.items()))


# --------------------------------------------------------------------------------------------
# Candidates: every item read is a locator plus a loader that builds the record or rejects it.

class _Rejected(Exception):
    def __init__(self, reason: str, detail: str, excerpt: str = "", record_id: str | None = None):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail, self.excerpt, self.record_id = reason, detail, excerpt, record_id


@dataclass(frozen=True)
class _Candidate:
    locator: str
    load: Callable[[], FunctionRecord]   # raises _Rejected
    fallback_id: str                     # record_id when the load fails before a record exists
    # Fills in costly fields (tree code_tokens) once the record has passed the filter.
    finish: Callable[[FunctionRecord], FunctionRecord] | None = None


EXCERPT_CHARS = 300


def _excerpt(raw: str | bytes) -> str:
    if isinstance(raw, bytes):
        raw = raw[: EXCERPT_CHARS * 4].decode("utf-8", errors="replace")
    return raw[:EXCERPT_CHARS]


def _fail(reason: str, detail: str, excerpt: str = "") -> FunctionRecord:
    raise _Rejected(reason, detail, excerpt)


def _failed(locator: str, fallback_id: str, reason: str, detail: str, excerpt: str = "") -> _Candidate:
    return _Candidate(locator, partial(_fail, reason, detail, excerpt), fallback_id)


def record_from_mapping(obj: Any, excerpt: str = "") -> FunctionRecord:
    """Validate a decoded CodeSearchNet object and build the record (raises ``_Rejected``)."""
    if not isinstance(obj, dict):
        raise _Rejected(Reason.NOT_AN_OBJECT, f"expected a JSON object, got {type(obj).__name__}", excerpt)
    missing = [f for f in CSN_FIELDS if f not in obj]
    partial_id = _partial_id(obj)
    if missing:
        raise _Rejected(Reason.MISSING_FIELD, f"missing field(s): {', '.join(missing)}", excerpt, partial_id)
    for name in CSN_FIELDS:
        value = obj[name]
        if name in _LIST_FIELDS:
            if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
                raise _Rejected(Reason.WRONG_TYPE, f"{name} must be a list of strings, got "
                                f"{type(value).__name__}", excerpt, partial_id)
        elif not isinstance(value, str):
            raise _Rejected(Reason.WRONG_TYPE, f"{name} must be a string, got {type(value).__name__}",
                            excerpt, partial_id)
        # JSON \ud800-style escapes decode to lone surrogates, which Arrow/Parquet cannot store.
        for text in value if isinstance(value, list) else (value,):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise _Rejected(Reason.BAD_ENCODING, f"{name} is not encodable as UTF-8 (lone "
                                f"surrogate at index {exc.start})", excerpt, partial_id) from None
    return FunctionRecord(**{name: obj[name] for name in CSN_FIELDS})


def _partial_id(obj: Mapping[str, Any]) -> str | None:
    parts = [obj.get(k) for k in ("repo", "path", "func_name")]
    if all(isinstance(p, str) and p for p in parts):
        joined = ":".join(parts)  # type: ignore[arg-type]
        try:
            joined.encode("utf-8")
            return joined
        except UnicodeEncodeError:
            pass
    if isinstance(obj.get("code"), str):
        return content_id(obj["code"])
    return None


def _record_from_json_line(raw: bytes) -> FunctionRecord:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Rejected(Reason.BAD_ENCODING, f"line is not valid UTF-8: {exc}", _excerpt(raw)) from None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError; an int over 4300 digits; deep nesting
        raise _Rejected(Reason.MALFORMED_JSON, f"invalid JSON: {exc}", _excerpt(text)) from None
    return record_from_mapping(obj, _excerpt(text))


# ---------------------------------------------------------------- codesearchnet release layout

def _csn_files(spec: SourceSpec) -> list[tuple[Path, str]]:
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
                           if _file_or_broken_link(p) and (p.name.endswith(".jsonl.gz") or p.name.endswith(".jsonl")))
            files.extend((p, p.relative_to(root).as_posix()) for p in found)
    return files


def _file_or_broken_link(path: Path) -> bool:
    """A regular file, or a symlink that leads nowhere (dangling, or a loop): opening the latter
    fails, so it is read as one unreadable_file rejection instead of vanishing from the books."""
    return path.is_file() or (path.is_symlink() and not path.exists())


def _csn_candidates(spec: SourceSpec) -> Iterator[_Candidate]:
    for file, rel in _csn_files(spec):
        lineno = 0
        try:
            opener = gzip.open if file.name.endswith(".gz") else open
            with opener(file, "rb") as fh:
                for raw in fh:
                    lineno += 1
                    raw = raw.rstrip(b"\r\n")
                    if not raw.strip():
                        continue  # blank separator lines are not records
                    yield _Candidate(f"{rel}:{lineno}", partial(_record_from_json_line, raw), content_id(raw))
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            # The rest of the file is unreadable: one rejection stands for it.
            yield _failed(f"{rel}:{lineno + 1}", content_id(f"{rel}:{lineno + 1}"), Reason.BAD_ENCODING,
                          f"gzip stream error after {lineno} line(s), rest of file skipped: "
                          f"{type(exc).__name__}: {exc}")
        except OSError as exc:
            yield _failed(f"{rel}:{lineno + 1}", content_id(f"{rel}:{lineno + 1}"), Reason.UNREADABLE_FILE,
                          f"cannot read after {lineno} line(s): {type(exc).__name__}: {exc}")


# ---------------------------------------------------------------- Hugging Face hub

_HF_SPLITS = {"train": "train", "valid": "validation", "test": "test"}
_GITHUB_SHA = re.compile(r"github\.com/[^/]+/[^/]+/blob/([0-9a-fA-F]{7,40})/")


def hf_row_to_csn(row: Mapping[str, Any], partition: str) -> dict[str, Any]:
    """Map a hub row (``repository_name``, ``func_code_string``, ...) to the release field names.

    Rows already in the release schema pass through unchanged. Hub rows carry no ``sha`` field:
    it is taken from ``func_code_url`` (``.../blob/<sha>/...``), empty when absent.
    """
    if "repo" in row and "code" in row:
        return dict(row)
    url = row.get("func_code_url")
    sha = _GITHUB_SHA.search(url) if isinstance(url, str) else None
    mapping = {
        "repo": "repository_name", "path": "func_path_in_repository", "func_name": "func_name",
        "original_string": "whole_func_string", "language": "language", "code": "func_code_string",
        "code_tokens": "func_code_tokens", "docstring": "func_documentation_string",
        "docstring_tokens": "func_documentation_tokens", "url": "func_code_url",
    }
    out = {ours: row[theirs] for ours, theirs in mapping.items() if theirs in row}
    out["sha"] = sha.group(1) if sha else ""
    out["partition"] = partition
    return out


def _record_from_hf_row(row: Mapping[str, Any], partition: str) -> FunctionRecord:
    excerpt = _excerpt(json.dumps(dict(row), default=str, ensure_ascii=False))
    return record_from_mapping(hf_row_to_csn(row, partition), excerpt)


def _hf_error(spec: SourceSpec, what: str, exc: BaseException) -> SourceUnavailableError:
    return SourceUnavailableError(
        f"cannot {what} Hugging Face dataset {spec.hf_dataset_id!r} (revision {spec.hf_revision!r}): "
        f"{type(exc).__name__}: {str(exc).rstrip('.')}. The 'hf' source streams from the hub and "
        "needs network access (and HF_HUB_OFFLINE unset); offline, use kind='codesearchnet' with a local copy of the "
        "release or kind='stdlib'.")


def _hf_candidates(spec: SourceSpec) -> Iterator[_Candidate]:
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - datasets is a hard dependency
        raise SourceUnavailableError(f"the 'hf' source needs the datasets package: {exc}") from exc
    for lang in spec.languages:
        for part in spec.partitions:
            split = _HF_SPLITS[part]
            pattern = spec.hf_data_files.format(dataset_id=spec.hf_dataset_id, language=lang, split=split,
                                                revision=quote(spec.hf_revision, safe=""))
            try:
                ds = datasets.load_dataset("parquet", data_files={split: pattern}, split=split,
                                           streaming=True)
                if spec.sample_seed is not None:
                    ds = ds.shuffle(seed=spec.sample_seed, buffer_size=spec.hf_shuffle_buffer)
                rows = iter(ds)
            except Exception as exc:  # network/offline/hub errors come in many types
                raise _hf_error(spec, "open", exc) from exc
            index = 0
            while True:
                try:
                    row = next(rows)
                except StopIteration:
                    break
                except Exception as exc:
                    raise _hf_error(spec, f"stream row {index} of {lang}/{split} from", exc) from exc
                yield _Candidate(f"hf:{spec.hf_dataset_id}/{lang}/{split}#{index}",
                                 partial(_record_from_hf_row, row, part),
                                 content_id(json.dumps(dict(row), default=str, sort_keys=True)))
                index += 1


# ---------------------------------------------------------------- local trees and the stdlib

def _stdlib_root(spec: SourceSpec) -> Path:
    return Path(spec.path) if spec.path is not None else Path(sysconfig.get_paths()["stdlib"])


def _tree_settings(spec: SourceSpec) -> tuple[Path, str, tuple[str, ...]]:
    root = _stdlib_root(spec) if spec.kind == "stdlib" else Path(spec.path)  # type: ignore[arg-type]
    if not root.is_dir():  # checked before resolve(), which raises on a symlink loop
        raise SourceConfigError(f"source tree {root} is not a directory")
    if spec.kind == "stdlib":
        repo = spec.repo_name or f"cpython-stdlib-{sys.version_info.major}.{sys.version_info.minor}"
        excludes = STDLIB_EXCLUDES if spec.exclude_dirs is None else spec.exclude_dirs
    else:
        repo = spec.repo_name or root.resolve().name
        excludes = DEFAULT_TREE_EXCLUDES if spec.exclude_dirs is None else spec.exclude_dirs
    return root, repo, tuple(excludes)


def _tree_files(root: Path, excludes: tuple[str, ...]) -> list[tuple[Path, str]]:
    """``*.py`` files under ``root`` sorted by relative path, not descending into excluded dirs."""
    skip = set(excludes)
    out = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in skip]
        for name in names:
            if name.endswith(".py"):
                file = Path(folder, name)
                if _file_or_broken_link(file):
                    out.append((file, file.relative_to(root).as_posix()))
    return sorted(out, key=lambda item: item[1])


@dataclass(frozen=True)
class _ParsedFile:
    file: Path
    rel: str
    repo: str
    lines: list[str]  # split like the parser does (\r\n, \r, \n), line ends kept
    sha: str


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def _source_segment(lines: list[str], node: ast.AST) -> str:
    """``ast.get_source_segment(..., padded=True)`` over pre-split lines (the stdlib function
    re-splits the whole file on every call, quadratic on large modules)."""
    start, end = node.lineno - 1, node.end_lineno - 1  # type: ignore[attr-defined]
    col, end_col = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
    first = lines[start].encode("utf-8")
    if start == end:
        return first[col:end_col].decode("utf-8")
    padding = " " * len(first[:col].decode("utf-8"))
    last = lines[end].encode("utf-8")[:end_col].decode("utf-8")
    return padding + first[col:].decode("utf-8") + "".join(lines[start + 1:end]) + last


def _functions_in_order(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function/method in source order with its qualified name (``Class.method``,
    ``outer.<locals>.inner`` as in ``__qualname__``)."""

    def visit(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, Any]]:
        for node in body:
            for child in _nested_statements(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    qualname = prefix + child.name
                    yield qualname, child
                    yield from visit(child.body, qualname + ".<locals>.")
                elif isinstance(child, ast.ClassDef):
                    yield from visit(child.body, prefix + child.name + ".")

    yield from visit(tree.body, "")


def _nested_statements(node: ast.stmt) -> Iterator[ast.stmt]:
    """The statement itself, or for compound statements (if/try/with/for/while/match) the
    definitions inside them, so conditionally defined functions are found too."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node
        return
    for name in ("body", "orelse", "finalbody", "handlers", "cases"):
        for child in getattr(node, name, None) or []:
            if isinstance(child, ast.stmt):
                yield from _nested_statements(child)
            else:  # ExceptHandler, match_case
                for stmt in getattr(child, "body", []):
                    yield from _nested_statements(stmt)


_SKIP_TOKENS = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                tokenize.ENDMARKER, tokenize.ENCODING}


def python_code_tokens(code: str, skip_docstring: bool = False) -> list[str] | None:
    """Significant tokens of Python code (names, ops, literals; no comments/whitespace), as
    CodeSearchNet's ``code_tokens``. ``skip_docstring`` drops the string literal(s) that open the
    body of the (first) def. ``None`` when the code does not tokenize."""
    tokens: list[str] = []
    depth = 0
    state = "header"  # header -> body_start (after the def's ':') -> body
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type in _SKIP_TOKENS:
                continue
            if state == "body_start":
                if skip_docstring and tok.type == tokenize.STRING:
                    continue
                state = "body"
            if state == "header" and tok.type == tokenize.OP:
                if tok.string in "([{":
                    depth += 1
                elif tok.string in ")]}":
                    depth -= 1
                elif tok.string == ":" and depth == 0 and "def" in tokens:
                    state = "body_start"
            tokens.append(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return tokens


_WORD_OR_PUNCT = re.compile(r"\w+|[^\w\s]")


def docstring_tokens(docstring: str) -> list[str]:
    """CodeSearchNet-style summary tokens: words and punctuation of the first paragraph."""
    summary = re.split(r"\n\s*\n", docstring.strip(), maxsplit=1)[0]
    return _WORD_OR_PUNCT.findall(summary)


def _record_from_function(parsed: _ParsedFile, qualname: str, node: ast.AST) -> FunctionRecord:
    code = textwrap.dedent(_source_segment(parsed.lines, node))
    doc = ast.get_docstring(node, clean=True) or ""  # type: ignore[arg-type]
    start, end = node.lineno, node.end_lineno  # type: ignore[attr-defined]
    return FunctionRecord(
        repo=parsed.repo, path=parsed.rel, func_name=qualname, original_string=code, language="python",
        code=code, code_tokens=[], docstring=doc,  # code_tokens: filled by _with_code_tokens
        docstring_tokens=docstring_tokens(doc), sha=parsed.sha,
        url=f"{parsed.file.resolve().as_uri()}#L{start}-L{end}", partition="train")


def _with_code_tokens(rec: FunctionRecord) -> FunctionRecord:
    tokens = python_code_tokens(rec.code, skip_docstring=True)
    return replace(rec, code_tokens=tokens if tokens is not None else rec.code.split())


def _file_candidates(file: Path, rel: str, repo: str) -> list[_Candidate]:
    """All candidates of one source file: its functions, or one rejection for the whole file."""
    locator, file_id = rel, f"{repo}:{rel}"
    try:
        data = file.read_bytes()
    except OSError as exc:
        return [_failed(locator, file_id, Reason.UNREADABLE_FILE, f"{type(exc).__name__}: {exc}")]
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        source = data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        return [_failed(locator, file_id, Reason.BAD_ENCODING, f"{type(exc).__name__}: {exc}",
                        _excerpt(data))]
    try:
        tree = ast.parse(source, filename=str(file))
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes in source
        where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
        return [_failed(locator, file_id, Reason.SYNTAX_ERROR, f"{type(exc).__name__}{where}: {exc}",
                        _excerpt(source))]
    parsed = _ParsedFile(file, rel, repo, _LINE.findall(source), hashlib.sha1(data).hexdigest())
    out, seen = [], set()
    for qualname, node in _functions_in_order(tree):
        # a property's getter and setter, or one name defined in both branches of an `if`, share a
        # qualname: the later ones get their line, so every record id is unique
        name = qualname if qualname not in seen else f"{qualname}@L{node.lineno}"
        seen.add(qualname)
        out.append(_Candidate(f"{rel}::{name}", partial(_record_from_function, parsed, name, node),
                              f"{repo}:{rel}:{name}", _with_code_tokens))
    return out


def _tree_candidates(spec: SourceSpec) -> Iterator[_Candidate]:
    root, repo, excludes = _tree_settings(spec)
    for file, rel in _tree_files(root, excludes):
        yield from _file_candidates(file, rel, repo)


# --------------------------------------------------------------------------------------------
# Filtering, dedup and accounting

def normalized_code_key(code: str, language: str) -> str:
    """Key for near-duplicate detection: Python code as its significant token sequence (so
    whitespace, line breaks and comments do not matter); other code (or Python that does not
    tokenize) with whitespace runs collapsed."""
    if language == "python":
        tokens = python_code_tokens(code)
        if tokens is not None:
            return "py:" + "\x1f".join(tokens)
    return "ws:" + " ".join(code.split())


def _check_filter(rec: FunctionRecord, flt: SourceFilter) -> None:
    if flt.require_docstring and not rec.docstring.strip():
        raise _Rejected(Reason.NO_DOCSTRING, "docstring is empty", _excerpt(rec.code))
    code = rec.code.strip()
    n_chars, n_lines = len(code), code.count("\n") + 1 if code else 0
    if n_lines < flt.min_lines or n_chars < flt.min_chars:
        raise _Rejected(Reason.TOO_SHORT, f"{n_lines} line(s), {n_chars} chars; need at least "
                        f"{flt.min_lines} lines and {flt.min_chars} chars", _excerpt(rec.code))
    if n_chars > flt.max_chars or (flt.max_lines is not None and n_lines > flt.max_lines):
        raise _Rejected(Reason.TOO_LONG, f"{n_lines} line(s), {n_chars} chars; at most {flt.max_chars} "
                        f"chars" + (f" and {flt.max_lines} lines" if flt.max_lines else ""),
                        _excerpt(rec.code))


def _candidates(spec: SourceSpec) -> Iterator[_Candidate]:
    if spec.kind == "codesearchnet":
        return _csn_candidates(spec)
    if spec.kind == "hf":
        return _hf_candidates(spec)
    return _tree_candidates(spec)


def nothing_read(spec: SourceSpec) -> str:
    """The message for a source that yielded no item at all (says what was looked for, and where)."""
    if spec.kind == "codesearchnet":
        looked = (f"no line in any {spec.path}/<lang>/final/jsonl/<partition>/*.jsonl[.gz] for languages "
                  f"{','.join(spec.languages)}, partitions {','.join(spec.partitions)}")
    elif spec.kind == "hf":
        looked = f"the hub dataset gave no row for languages {','.join(spec.languages)}, partitions {','.join(spec.partitions)}"
    else:
        looked = "no function in any *.py file under it (after the excluded folders)"
    return f"nothing was read from {spec.name}: {looked}"


def check_source(spec: SourceSpec) -> None:
    """Before any work: raise :class:`SourceConfigError` (one line, no traceback needed) when the
    source's path or layout is missing, :class:`EmptySourceError` when it has nothing to read.
    Reads at most the first item; the hub (``hf``) is checked when it is read, not here."""
    if spec.kind == "hf":
        return
    candidates = _candidates(spec)
    try:
        if next(candidates, None) is None:
            raise EmptySourceError(nothing_read(spec))
    finally:
        close = getattr(candidates, "close", None)
        if close is not None:
            close()


def read_function_records(source_spec: SourceSpec, limit: int | None = None,
                          source_filter: SourceFilter | None = None) -> SourceReadResult:
    """Read function records from one source, filter and deduplicate them, account for all.

    An item is *read* when it is taken from the source: a non-blank JSONL line, a hub row, a
    function definition, or a file that could not be read/decoded/parsed (one item for the
    whole file, or for the rest of a gzip file after a stream error). Reading stops as soon as
    ``limit`` records are accepted, so every item read is in ``accepted`` or ``rejected`` and
    ``len(accepted) + len(rejected) == n_read``. ``limit=None`` reads the whole source.

    Checks, in order (first failure is the reason): decoding and schema (bad_encoding,
    malformed_json, not_an_object, missing_field, wrong_type), docstring, size, then duplicates
    of an already accepted record (duplicate_id, duplicate_exact, duplicate_normalized).

    Raises :class:`SourceConfigError` for a bad spec or missing folders and
    :class:`SourceUnavailableError` when the hub cannot be reached.
    """
    flt = source_filter or SourceFilter()
    if limit is not None and limit < 0:
        raise SourceConfigError(f"limit must be >= 0 or None, got {limit}")
    result = SourceReadResult(source=source_spec.name)
    if limit == 0:
        return result

    candidates: Iterator[_Candidate] = _candidates(source_spec)
    if source_spec.sample_seed is not None and source_spec.kind != "hf":
        pool = list(candidates)
        random.Random(source_spec.sample_seed).shuffle(pool)
        candidates = iter(pool)

    seen_ids: dict[str, str] = {}
    seen_exact: dict[str, str] = {}
    seen_normalized: dict[str, str] = {}
    try:
        for cand in candidates:
            result.n_read += 1
            rec: FunctionRecord | None = None
            try:
                rec = cand.load()
                _check_filter(rec, flt)
                rid = rec.record_id
                if rid in seen_ids:  # the rejection gets an id of its own: the books count distinct ids
                    raise _Rejected(Reason.DUPLICATE_ID, f"same id as the record accepted from "
                                    f"{seen_ids[rid]}", _excerpt(rec.code), f"{rid}#read{result.n_read}")
                if flt.dedup:
                    exact = hashlib.sha1(rec.code.encode("utf-8", "surrogatepass")).hexdigest()
                    if exact in seen_exact:
                        raise _Rejected(Reason.DUPLICATE_EXACT, f"code identical to {seen_exact[exact]}",
                                        _excerpt(rec.code), rid)
                    norm = hashlib.sha1(normalized_code_key(rec.code, rec.language)
                                        .encode("utf-8", "surrogatepass")).hexdigest()
                    if norm in seen_normalized:
                        raise _Rejected(Reason.DUPLICATE_NORMALIZED, "code equal up to whitespace/comments "
                                        f"to {seen_normalized[norm]}", _excerpt(rec.code), rid)
                    seen_exact[exact] = seen_normalized[norm] = rid
                seen_ids[rid] = cand.locator
                if cand.finish is not None:
                    rec = cand.finish(rec)
            except _Rejected as rej:
                record_id = rej.record_id or (rec.record_id if rec is not None else cand.fallback_id)
                result.rejected.append(Rejection(record_id=record_id, source=cand.locator, stage="read",
                                                 reason=rej.reason, detail=rej.detail,
                                                 raw_excerpt=rej.excerpt))
                continue
            result.accepted.append(rec)
            if limit is not None and len(result.accepted) >= limit:
                break
    finally:
        close = getattr(candidates, "close", None)
        if close is not None:
            close()
    return result
