"""Hostile inputs, one standing table per reader.

Every row is an input built to break a reader (a corrupt or truncated file, bytes that are not
UTF-8, JSON that is not a record, a duplicate, a symlink loop, an id made of SQL and quotes, a
path with quotes or glob characters) together with the one outcome it must have:

* ``Rejected``: the item is read and recorded as a rejection with a specific reason (function
  sources: ``tasks.sources.records.Reason``; trajectories: ``tasks.toolsets.trajectories.Rejection``; benchmark
  imports: a line of the ``ImportReport``), the books still balance;
* ``Raises``: a clear error of a given type whose message names the file (and the line, where
  there is one), never a raw ``UnicodeDecodeError`` / ``RecursionError`` / ``KeyError``;
* accepted, for names that are hostile but valid: then they must come back unchanged from a real
  DuckDB warehouse build (values are bound or go through Parquet, never spliced into SQL).

Small inputs only: no LLM, no model, a few seconds in all.
"""
from __future__ import annotations

import gzip
import json
import os
import threading
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

from schemas.docs import canonical_doc_json
from schemas.toolset import DependencyEdge, Query, Tool, ToolSet
from tasks.sources.read import check_source, read_function_records, SourceReadResult
from tasks.sources.records import Reason
from tasks.sources.spec import EmptySourceError, SourceConfigError, SourceSpec
from tasks.toolsets.readers import (
    ToolSetFormatError,
    load_benchmark_with_report,
    load_toolset_spec,
    read_toolset_dir,
    write_toolset_dir,
)
from tasks.toolsets.trajectories import (
    Trajectories,
    TrajectoryFormatError,
    gold_trajectories,
    read_trajectories,
    split_of,
)
from tests.test_sources import GOOD_CODE, assert_accounted, record, write_release
from warehouse.build import DatasetTables, WarehouseError, build_warehouse, connect, rows_of


@dataclass(frozen=True)
class Rejected:
    """Recorded, not raised: where (exact locator; ``<next>`` = the line after the last accepted
    one), the reason code, and a fragment of the detail."""

    where: str
    reason: str
    detail: str


@dataclass(frozen=True)
class Read:
    """The read completes: what is accepted (a count, a (low, high) exclusive range, or the
    function names in order) and every rejection, in order."""

    accepted: int | tuple[int, int] | list[str]
    rejections: tuple[Rejected, ...] = ()


@dataclass(frozen=True)
class RunRejected:
    """A trajectory run that is well-formed but unusable: its line, run id and exact reason."""

    line: int
    run_id: str
    reason: str


@dataclass(frozen=True)
class Raises:
    """A clear error: its type and fragments its message must hold. ``<dir>`` stands for the
    folder the case was written to, so a fragment like ``<dir>/tools.jsonl:2:`` pins file and line."""

    error: type[BaseException]
    fragments: tuple[str, ...]

    def check(self, exc: BaseException, folder: Path) -> None:
        assert type(exc) is self.error, f"expected {self.error.__name__}, got {type(exc).__name__}: {exc}"
        message = str(exc)
        for fragment in self.fragments:
            assert fragment.replace("<dir>", str(folder)) in message, (fragment, message)


def finishes(fn: Callable[[], object], seconds: float = 60.0) -> object:
    """``fn()``, failing the test (instead of hanging it) when it does not return in time."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the test's thread
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s: the reader hangs"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]


def raised_by(fn: Callable[[], object]) -> BaseException:
    """The exception ``fn`` raises (any type: the table says which one it must be)."""
    try:
        finishes(fn)
    except BaseException as exc:  # noqa: BLE001 - the caller checks the type exactly
        return exc
    pytest.fail("expected an error, the call returned")


def utf8_safe(result: SourceReadResult) -> None:
    """Every stored string of a rejection must survive UTF-8 (DuckDB, Parquet)."""
    for rej in result.rejected:
        for value in rej.to_dict().values():
            value.encode("utf-8")


DEEP = b"[" * 100_000 + b"]" * 100_000  # json.loads: RecursionError
BIG_INT = b"1" * 5000  # json.loads: ValueError (int over 4300 digits)

# ==================================================================================================
# 1. CodeSearchNet release layout: one hostile line after one good record


def csn_line(func_name: str = "haversine", **changes) -> bytes:
    return json.dumps(record(func_name=func_name, **changes)).encode()


FIRST_ID = "octo/geo:geo/distance.py:haversine"
RELEASE_FILE = "python/final/jsonl/train/python_train_0.jsonl.gz"
RESPACED = GOOD_CODE.replace("(a, b)", "( a,b )").replace("    return", "    # same code, new comment\n    return")
FIVE_MB = GOOD_CODE + "\n" + "    x = 1\n" * (5 * 1024 * 1024 // 10)

CSN_LINE_CASES = [
    pytest.param(csn_line("latin").replace(b"octo", b"\xe9t\xe9"),
                 Rejected(f"{RELEASE_FILE}:2", Reason.BAD_ENCODING, "line is not valid UTF-8"), id="latin-1 bytes"),
    pytest.param(b"\xff\xfe{}", Rejected(f"{RELEASE_FILE}:2", Reason.BAD_ENCODING, "line is not valid UTF-8"),
                 id="UTF-16 byte order mark"),
    pytest.param(csn_line("lone", docstring="bad \ud800 text"),
                 Rejected(f"{RELEASE_FILE}:2", Reason.BAD_ENCODING, "docstring is not encodable as UTF-8 (lone surrogate"),
                 id="lone surrogate escape"),
    pytest.param(b'{"repo": "octo/geo", "path": ', Rejected(f"{RELEASE_FILE}:2", Reason.MALFORMED_JSON, "invalid JSON"),
                 id="truncated JSON"),
    pytest.param(csn_line("nul").replace(b"Great", b"Gr\x00eat"),
                 Rejected(f"{RELEASE_FILE}:2", Reason.MALFORMED_JSON, "Invalid control character"), id="raw NUL byte"),
    pytest.param(b'{"repo": ' + BIG_INT + b"}",
                 Rejected(f"{RELEASE_FILE}:2", Reason.MALFORMED_JSON, "Exceeds the limit (4300 digits)"),
                 id="5000-digit integer"),
    pytest.param(DEEP, Rejected(f"{RELEASE_FILE}:2", Reason.MALFORMED_JSON, "maximum recursion depth"),
                 id="arrays nested 100000 deep"),
    pytest.param(b"[1, 2, 3]", Rejected(f"{RELEASE_FILE}:2", Reason.NOT_AN_OBJECT, "got list"), id="JSON array"),
    pytest.param(b'"def f(): pass"', Rejected(f"{RELEASE_FILE}:2", Reason.NOT_AN_OBJECT, "got str"), id="JSON string"),
    pytest.param(b"null", Rejected(f"{RELEASE_FILE}:2", Reason.NOT_AN_OBJECT, "got NoneType"), id="JSON null"),
    pytest.param(b"{}", Rejected(f"{RELEASE_FILE}:2", Reason.MISSING_FIELD, "missing field(s): repo, path, func_name"),
                 id="empty object"),
    pytest.param(json.dumps({"repo": "octo/geo", "code": GOOD_CODE}).encode(),
                 Rejected(f"{RELEASE_FILE}:2", Reason.MISSING_FIELD, "missing field(s): path, func_name, original_string"),
                 id="missing required fields"),
    pytest.param(csn_line("typed", docstring=None),
                 Rejected(f"{RELEASE_FILE}:2", Reason.WRONG_TYPE, "docstring must be a string, got NoneType"),
                 id="null docstring"),
    pytest.param(csn_line("tokens", code_tokens=[1, 2]),
                 Rejected(f"{RELEASE_FILE}:2", Reason.WRONG_TYPE, "code_tokens must be a list of strings"),
                 id="tokens that are not strings"),
    pytest.param(csn_line("huge", code=FIVE_MB),
                 Rejected(f"{RELEASE_FILE}:2", Reason.TOO_LONG, f"{len(FIVE_MB.strip())} chars; at most 4000 chars"),
                 id="5 MB function"),
    pytest.param(csn_line("copy"), Rejected(f"{RELEASE_FILE}:2", Reason.DUPLICATE_EXACT, f"code identical to {FIRST_ID}"),
                 id="exact duplicate code"),
    pytest.param(csn_line("respaced", code=RESPACED),
                 Rejected(f"{RELEASE_FILE}:2", Reason.DUPLICATE_NORMALIZED, f"whitespace/comments to {FIRST_ID}"),
                 id="duplicate up to whitespace and comments"),
    pytest.param(csn_line(), Rejected(f"{RELEASE_FILE}:2", Reason.DUPLICATE_ID,
                                      f"same id as the record accepted from {RELEASE_FILE}:1"), id="duplicate id"),
]


@pytest.mark.parametrize("line, expected", CSN_LINE_CASES)
def test_codesearchnet_hostile_line_is_one_rejection_with_its_reason(tmp_path, line, expected):
    write_release(tmp_path, [csn_line(), line])
    spec = SourceSpec(kind="codesearchnet", path=tmp_path, partitions=("train",))
    result = finishes(lambda: read_function_records(spec))
    assert_accounted(result)
    utf8_safe(result)
    assert result.n_read == 2
    assert [r.record_id for r in result.accepted] == [FIRST_ID]
    [rej] = result.rejected
    assert (rej.locator, rej.reason) == (expected.where, expected.reason)
    assert expected.detail in rej.detail, rej.detail
    assert len(rej.raw_text) <= 300


# ---------------------------------------------------------------------- whole files and folders

PARTITION = ("python", "final", "jsonl", "train")


def _partition(root: Path) -> Path:
    folder = root.joinpath(*PARTITION)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def distinct_lines(n: int) -> list[bytes]:
    return [csn_line(f"f{i}", code=GOOD_CODE.replace("6371.0", f"{6371 + i}.0")) for i in range(n)]


def truncated_mid_stream(root: Path) -> Path:
    file = write_release(root, distinct_lines(200))
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])
    return root


def truncated_in_header(root: Path) -> Path:
    file = write_release(root, distinct_lines(1))
    file.write_bytes(file.read_bytes()[:5])
    return root


def trailing_garbage(root: Path) -> Path:
    file = write_release(root, distinct_lines(1))
    file.write_bytes(file.read_bytes() + b"garbage!")
    return root


def not_gzip(root: Path) -> Path:
    (_partition(root) / "python_train_0.jsonl.gz").write_bytes(b'{"repo": "plain JSON, not gzip"}\n')
    return root


def symlink_loop_file(root: Path) -> Path:
    os.symlink("python_train_0.jsonl.gz", _partition(root) / "python_train_0.jsonl.gz")
    return root


def dangling_symlink_file(root: Path) -> Path:
    os.symlink("gone.jsonl.gz", _partition(root) / "python_train_0.jsonl.gz")
    return root


def empty_file(root: Path) -> Path:
    (_partition(root) / "python_train_0.jsonl.gz").write_bytes(b"")
    return root


def gzip_of_blank_lines(root: Path) -> Path:
    (_partition(root) / "python_train_0.jsonl.gz").write_bytes(gzip.compress(b"\n  \n\r\n"))
    return root


def empty_plain_jsonl(root: Path) -> Path:
    (_partition(root) / "python_train_0.jsonl").write_bytes(b"")
    return root


def no_files(root: Path) -> Path:
    _partition(root)
    return root


def only_other_files(root: Path) -> Path:
    folder = _partition(root)
    (folder / "README.md").write_text("not a release file")
    (folder / "python_train_0.json").write_bytes(csn_line())
    (folder / "nested.jsonl.gz").mkdir()  # a folder with a release file's name
    return root


def missing_root(root: Path) -> Path:
    return root / "absent"


def missing_partition(root: Path) -> Path:
    root.joinpath("python", "final", "jsonl", "valid").mkdir(parents=True)
    return root


def root_is_a_file(root: Path) -> Path:
    (root / "release.jsonl.gz").write_bytes(gzip.compress(csn_line()))
    return root / "release.jsonl.gz"


def root_is_a_symlink_loop(root: Path) -> Path:
    os.symlink("loop", root / "loop")
    return root / "loop"


NOTHING_READ = "nothing was read from codesearchnet:<dir>: no line in any <dir>/<lang>/final/jsonl/<partition>"
CSN_FILE_CASES = [
    pytest.param(truncated_mid_stream, Read((0, 200), (Rejected(
        f"{RELEASE_FILE}:<next>", Reason.BAD_ENCODING, "rest of file skipped: EOFError: Compressed file ended"),)),
        id="gzip truncated mid-stream"),
    pytest.param(truncated_in_header, Read(0, (Rejected(
        f"{RELEASE_FILE}:1", Reason.BAD_ENCODING, "gzip stream error after 0 line(s), rest of file skipped: EOFError"),)),
        id="gzip truncated in its header"),
    pytest.param(trailing_garbage, Read(1, (Rejected(
        f"{RELEASE_FILE}:2", Reason.BAD_ENCODING, "gzip stream error after 1 line(s), rest of file skipped: BadGzipFile"),)),
        id="gzip with trailing garbage"),
    pytest.param(not_gzip, Read(0, (Rejected(
        f"{RELEASE_FILE}:1", Reason.BAD_ENCODING, "after 0 line(s), rest of file skipped: BadGzipFile: Not a gzipped file"),)),
        id="plain text named .jsonl.gz"),
    pytest.param(symlink_loop_file, Read(0, (Rejected(
        f"{RELEASE_FILE}:1", Reason.UNREADABLE_FILE, "Too many levels of symbolic links"),)),
        id="release file is a symlink loop"),
    pytest.param(dangling_symlink_file, Read(0, (Rejected(
        f"{RELEASE_FILE}:1", Reason.UNREADABLE_FILE, "No such file or directory"),)),
        id="release file is a dangling symlink"),
    pytest.param(empty_file, Raises(EmptySourceError, (NOTHING_READ,)), id="empty .jsonl.gz file"),
    pytest.param(gzip_of_blank_lines, Raises(EmptySourceError, (NOTHING_READ,)), id="gzip of blank lines"),
    pytest.param(empty_plain_jsonl, Raises(EmptySourceError, (NOTHING_READ,)), id="empty .jsonl file"),
    pytest.param(no_files, Raises(EmptySourceError, (NOTHING_READ,)), id="partition folder without files"),
    pytest.param(only_other_files, Raises(EmptySourceError, (NOTHING_READ,)), id="only files of other names"),
    pytest.param(missing_root, Raises(SourceConfigError, ("CodeSearchNet root <dir>/absent is not a directory",)),
                 id="missing path"),
    pytest.param(missing_partition, Raises(SourceConfigError, ("no <dir>/python/final/jsonl/train", "release layout")),
                 id="missing partition folder"),
    pytest.param(root_is_a_file, Raises(SourceConfigError, ("root <dir>/release.jsonl.gz is not a directory",)),
                 id="path is a file"),
    pytest.param(root_is_a_symlink_loop, Raises(SourceConfigError, ("root <dir>/loop is not a directory",)),
                 id="path is a symlink loop"),
]


def check_source_outcome(spec: SourceSpec, expected: Read | Raises, folder: Path) -> SourceReadResult | None:
    """The outcome both entry points must give: ``check_source`` (run before any work) and
    ``read_function_records``. An empty source reads as zero items; the flows raise on that."""
    if isinstance(expected, Raises):
        expected.check(raised_by(lambda: check_source(spec)), folder)
        if expected.error is EmptySourceError:
            assert finishes(lambda: read_function_records(spec)).n_read == 0
        else:
            expected.check(raised_by(lambda: read_function_records(spec)), folder)
        return None
    finishes(lambda: check_source(spec))  # something is there to read: no EmptySourceError
    result = finishes(lambda: read_function_records(spec))
    assert_accounted(result)
    utf8_safe(result)
    following = str(len(result.accepted) + 1)
    assert [(r.locator, r.reason) for r in result.rejected] == [
        (e.where.replace("<next>", following), e.reason) for e in expected.rejections]
    for rej, exp in zip(result.rejected, expected.rejections):
        assert exp.detail in rej.detail, rej.detail
    return result


@pytest.mark.parametrize("build, expected", CSN_FILE_CASES)
def test_codesearchnet_hostile_files_and_folders(tmp_path, build, expected):
    spec = SourceSpec(kind="codesearchnet", path=build(tmp_path), partitions=("train",))
    result = check_source_outcome(spec, expected, tmp_path)
    if result is not None:
        if isinstance(expected.accepted, tuple):
            low, high = expected.accepted
            assert low < len(result.accepted) < high
        else:
            assert len(result.accepted) == expected.accepted


# ==================================================================================================
# 2. Source trees (--source tree): one good module plus one hostile entry

GOOD_MODULE = '''def good(a, b):
    """Add two numbers together and return their sum to the caller, unchanged."""
    total = a + b
    return total
'''


def tree_with(*entries: tuple[str, bytes | str | None, str | None]) -> Callable[[Path], Path]:
    """A builder: ``(relative path, content, symlink target)`` entries beside ``pkg/ok.py``."""

    def build(root: Path) -> Path:
        tree = root / "tree"
        (tree / "pkg").mkdir(parents=True)
        (tree / "pkg" / "ok.py").write_text(GOOD_MODULE)
        for rel, content, link in entries:
            path = tree / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if link is not None:
                os.symlink(link, path)
            else:
                path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return tree

    return build


def no_functions(root: Path) -> Path:
    write_lines(root / "tree" / "pkg" / "const.py", ["X = 1"])
    write_lines(root / "tree" / "pkg" / "empty.py", [])
    return root / "tree"


def empty_tree(root: Path) -> Path:
    (root / "tree").mkdir()
    return root / "tree"


TREE_CASES = [
    pytest.param(tree_with(("pkg/broken.py", "def oops(:\n    pass\n", None)),
                 Read(["good"], (Rejected("pkg/broken.py", Reason.SYNTAX_ERROR, "SyntaxError (line 1)"),)),
                 id="syntax error"),
    pytest.param(tree_with(("pkg/latin.py", b'def f():\n    """caf\xe9"""\n', None)),
                 Read(["good"], (Rejected("pkg/latin.py", Reason.BAD_ENCODING, "UnicodeDecodeError"),)),
                 id="non-UTF-8 source"),
    pytest.param(tree_with(("pkg/klingon.py", "# -*- coding: klingon -*-\ndef f():\n    pass\n", None)),
                 Read(["good"], (Rejected("pkg/klingon.py", Reason.BAD_ENCODING, "unknown encoding: klingon"),)),
                 id="unknown coding declaration"),
    pytest.param(tree_with(("pkg/nul.py", b'def f():\n    """x\x00y"""\n    return 1\n', None)),
                 Read(["good"], (Rejected("pkg/nul.py", Reason.SYNTAX_ERROR, "null bytes"),)), id="NUL byte in source"),
    pytest.param(tree_with(("pkg/loop", None, "..")), Read(["good"]), id="directory symlink to its parent"),
    pytest.param(tree_with(("pkg/self", None, "self")), Read(["good"]), id="directory-named symlink loop"),
    pytest.param(tree_with(("pkg/self.py", None, "self.py")),
                 Read(["good"], (Rejected("pkg/self.py", Reason.UNREADABLE_FILE, "Too many levels of symbolic links"),)),
                 id="module that is a symlink loop"),
    pytest.param(tree_with(("pkg/gone.py", None, "nowhere.py")),
                 Read(["good"], (Rejected("pkg/gone.py", Reason.UNREADABLE_FILE, "No such file or directory"),)),
                 id="dangling module symlink"),
    pytest.param(tree_with(("o'neil \"x\"/mod.py", GOOD_MODULE.replace("good", "quoted"), None)),
                 Read(["quoted", "good"]), id="folder with quotes"),
    pytest.param(root_is_a_symlink_loop, Raises(SourceConfigError, ("source tree <dir>/loop is not a directory",)),
                 id="root is a symlink loop"),
    pytest.param(missing_root, Raises(SourceConfigError, ("source tree <dir>/absent is not a directory",)),
                 id="missing root"),
    pytest.param(no_functions, Raises(EmptySourceError, ("nothing was read from tree:<dir>/tree",
                                                         "no function in any *.py file")), id="modules without functions"),
    pytest.param(empty_tree, Raises(EmptySourceError, ("nothing was read from tree:<dir>/tree",)), id="empty folder"),
]


@pytest.mark.parametrize("build, expected", TREE_CASES)
def test_source_tree_hostile_entries_end_as_rejections_or_skips(tmp_path, build, expected):
    result = check_source_outcome(SourceSpec(kind="tree", path=build(tmp_path)), expected, tmp_path)
    if result is not None:
        assert [r.func_name for r in result.accepted] == expected.accepted  # each once: no walk through a loop
        assert {r.repo for r in result.accepted} == {"tree"}


# ==================================================================================================
# 3. Tool sets and trajectories

# Hostile but valid names: accepted as they are, and the same after a warehouse build.
HOSTILE_NAMES = [
    pytest.param("x'); DROP TABLE tools;--", id="sql"),
    pytest.param("O'Brien \"the\" `tool`", id="quotes"),
    pytest.param("Ünïcødé 🔧 名前 \u202eevil\u200b", id="unicode"),
    pytest.param("a\x00b", id="embedded NUL"),
    pytest.param("C:\\tools\\new\nline\ttab", id="backslash and control characters"),
    pytest.param("100% _match_ * ? [x]", id="LIKE and glob characters"),
    pytest.param("$1 ? :name {inputs}", id="parameter placeholders"),
]


def _doc(name: str) -> dict:
    return {"name": name[:120], "description": f"the {name} tool", "input_params": [], "output_params": []}


def _tool(tool_id, group="g", doc=None) -> str:
    return json.dumps({"tool_id": tool_id, "group": group, "doc": doc if doc is not None else _doc(str(tool_id))})


def _edge(dependent, prerequisite, group="g") -> str:
    return json.dumps({"group": group, "dependent": dependent, "prerequisite": prerequisite})


def _query(query_id, gold, text="find it") -> str:
    return json.dumps({"query_id": query_id, "text": text, "gold_tools": gold})


def write_lines(path: Path, lines: list[str | bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join((line if isinstance(line, bytes) else line.encode("utf-8")) + b"\n" for line in lines))
    return path


def write_folder(folder: Path, files: dict[str, list[str | bytes]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in files.items():
        write_lines(folder / name, lines)
    return folder


BASE_TOOLS = [_tool("login"), _tool("update")]
SURROGATE_ID = '{"tool_id": "a\\ud800", "group": "g", "doc": ' + json.dumps(_doc("a")) + "}"

TOOLSET_DIR_CASES = [
    pytest.param({"tools.jsonl": BASE_TOOLS + [_tool("login")]}, ("<dir>/tools.jsonl:3:", "duplicate tool_id 'login'"),
                 id="duplicate tool id"),
    pytest.param({"tools.jsonl": BASE_TOOLS + [_tool(1), _tool("1")]}, ("<dir>/tools.jsonl:4:", "duplicate tool_id '1'"),
                 id="duplicate tool id as int and string"),
    pytest.param({"tools.jsonl": BASE_TOOLS + [_tool("cafe").encode().replace(b"cafe", b"caf\xe9")]},
                 ("<dir>/tools.jsonl:3:", "not UTF-8 (byte b'\\xe9'"), id="non-UTF-8 line"),
    pytest.param({"tools.jsonl": BASE_TOOLS + [SURROGATE_ID]}, ("<dir>/tools.jsonl:3:", "lone surrogate ('\\ud800')"),
                 id="lone surrogate id"),
    pytest.param({"tools.jsonl": BASE_TOOLS + [b'{"tool_id": ' + BIG_INT + b', "group": "g", "doc": {}}']},
                 ("<dir>/tools.jsonl:3:", "not valid JSON (ValueError: Exceeds the limit"), id="5000-digit tool id"),
    pytest.param({"tools.jsonl": BASE_TOOLS + [DEEP]}, ("<dir>/tools.jsonl:3:", "not valid JSON (RecursionError"),
                 id="arrays nested 100000 deep"),
    pytest.param({"tools.jsonl": BASE_TOOLS + ["{'tool_id': 'x'}"]}, ("<dir>/tools.jsonl:3:", "not valid JSON"),
                 id="non-JSON line"),
    pytest.param({"tools.jsonl": BASE_TOOLS + ['["login"]']}, ("<dir>/tools.jsonl:3:", "expected a JSON object, got list"),
                 id="JSON array line"),
    pytest.param({"tools.jsonl": BASE_TOOLS + [_tool(" \t")]}, ("<dir>/tools.jsonl:3:", "field 'tool_id' is empty"),
                 id="blank tool id"),
    pytest.param({"tools.jsonl": BASE_TOOLS + [_tool(["login"])]},
                 ("<dir>/tools.jsonl:3:", "'tool_id' must be a string or an integer, got list"), id="tool id is a list"),
    pytest.param({"tools.jsonl": ["", "  "]}, ("<dir>/tools.jsonl: no tools",), id="empty tools file"),
    pytest.param({"edges.jsonl": [_edge("update", "login")]}, ("<dir>/tools.jsonl: missing",), id="no tools file"),
    pytest.param({"tools.jsonl": BASE_TOOLS, "edges.jsonl": [_edge("update", "login"), _edge("update", "login")]},
                 ("<dir>/edges.jsonl:2:", "duplicate edge 'update' -> 'login' (first on line 1)"), id="duplicate edge"),
    pytest.param({"tools.jsonl": BASE_TOOLS, "edges.jsonl": [_edge("update", "login"), _edge("login", "update")]},
                 ("<dir>/edges.jsonl:2:", "mutual edges", "line 1 says"), id="mutual edges A->B, B->A"),
    pytest.param({"tools.jsonl": BASE_TOOLS, "edges.jsonl": [_edge("update", "ghost")]},
                 ("<dir>/edges.jsonl:1:", "prerequisite 'ghost' is not a tool in tools.jsonl"), id="edge to an unknown tool"),
    pytest.param({"tools.jsonl": BASE_TOOLS, "edges.jsonl": [_edge("login", "login")]},
                 ("<dir>/edges.jsonl:1:", "cannot depend on itself"), id="self loop"),
    pytest.param({"tools.jsonl": BASE_TOOLS, "queries.jsonl": [_query("q1", ["login"]), _query("q1", ["update"])]},
                 ("<dir>/queries.jsonl:2:", "duplicate query_id 'q1' (first on line 1)"), id="duplicate query id"),
    pytest.param({"tools.jsonl": BASE_TOOLS, "queries.jsonl": [_query("q1", [])]},
                 ("<dir>/queries.jsonl:1:", "empty gold_tools for query 'q1'"), id="empty gold set"),
    pytest.param({"tools.jsonl": BASE_TOOLS, "queries.jsonl": [_query("q1", [["login", "update"]])]},
                 ("<dir>/queries.jsonl:1:", "'gold_tools' must be a string or an integer, got list"), id="nested gold list"),
    pytest.param({"tools.jsonl": BASE_TOOLS, "queries.jsonl": [_query("q1", ["login", "ghost"])]},
                 ("<dir>/queries.jsonl:1:", "gold tools not in tools.jsonl: ['ghost']"), id="unknown gold tool"),
    pytest.param({"tools.jsonl": BASE_TOOLS, "queries.jsonl": [b'{"query_id": "q1", "text": "caf\xe9", "gold_tools": []}']},
                 ("<dir>/queries.jsonl:1:", "not UTF-8"), id="non-UTF-8 query"),
]


@pytest.mark.parametrize("files, fragments", TOOLSET_DIR_CASES)
def test_toolset_dir_hostile_lines_are_errors_naming_file_and_line(tmp_path, files, fragments):
    folder = write_folder(tmp_path / "ts", files)
    exc = raised_by(lambda: read_toolset_dir(folder))
    Raises(ToolSetFormatError, fragments).check(exc, folder)


@dataclass(frozen=True)
class Report:
    """What the benchmark importer keeps, and every rejection line of its report."""

    tools: list[tuple[str, str]]  # (tool id, description)
    edges: set[tuple[str, str]]  # (dependent, prerequisite)
    queries: list[tuple[str, tuple[str, ...]]]
    rejected: list[str] = field(default_factory=list)


def _bench_tool(name, **extra) -> str:
    return json.dumps({"name": name, "description": f"the {name} tool", **extra})


def _produces(producer, consumer, **extra) -> str:
    return json.dumps({"producer": producer, "consumer": consumer, **extra})


def _bench_query(qid, gold) -> str:
    return json.dumps({"qid": qid, "query": "find it", "gold_tools": gold})


AB = [_bench_tool("A"), _bench_tool("B")]
AB_KEPT = [("A", "the A tool"), ("B", "the B tool")]
GENERIC_CASES = [
    pytest.param({"tools.jsonl": AB + [_bench_tool("A", description="second A")]},
                 Report(AB_KEPT, set(), [], ["tool A: duplicate name, later record dropped"]), id="duplicate tool name"),
    pytest.param({"tools.jsonl": AB, "my_edges.jsonl": [_produces("A", "B"), _produces("A", "B")]},
                 Report(AB_KEPT, {("B", "A")}, []), id="duplicate edge (counts as evidence)"),
    pytest.param({"tools.jsonl": AB, "my_edges.jsonl": [_produces("A", "B"), _produces("A", "B"), _produces("B", "A")]},
                 Report(AB_KEPT, {("B", "A")}, [], ["edge B->A (count 1): reverse direction seen 2 times"]),
                 id="mutual edges, one direction seen more"),
    pytest.param({"tools.jsonl": AB, "my_edges.jsonl": [_produces("A", "B"), _produces("B", "A")]},
                 Report(AB_KEPT, set(), [], ["edge A->B (count 1): reverse seen equally often, direction unknown",
                                                "edge B->A (count 1): reverse seen equally often, direction unknown"]),
                 id="mutual edges seen equally often"),
    pytest.param({"tools.jsonl": AB, "my_edges.jsonl": [_produces("A", "Z"), _produces("A", "B")]},
                 Report(AB_KEPT, {("B", "A")}, [], ["edge A->Z: unknown tool(s) ['Z']"]), id="edge to an unknown tool"),
    pytest.param({"tools.jsonl": AB, "my_edges.jsonl": [_produces("A", "A")]},
                 Report(AB_KEPT, set(), [], ["edge A->A: self loop"]), id="self loop"),
    pytest.param({"tools.jsonl": AB, "queries.jsonl": [_bench_query(1, []), _bench_query(2, ["B"])]},
                 Report(AB_KEPT, set(), [("2", ("B",))], ["query 1: no known gold tool, query dropped"]),
                 id="empty gold set"),
    pytest.param({"tools.jsonl": AB, "queries.jsonl": [_bench_query(1, ["A", "Z"])]},
                 Report(AB_KEPT, set(), [("1", ("A",))], ["query 1: unknown gold tools ['Z'] removed"]),
                 id="unknown gold tool"),
    pytest.param({"tools.jsonl": AB, "queries.jsonl": [_bench_query(1, [["A"]])]},
                 Raises(ToolSetFormatError, ("<dir>/queries.jsonl:1:", "'gold_tools' must be a string or an integer, got list")),
                 id="nested gold list"),
    pytest.param({"tools.jsonl": AB, "queries.jsonl": [_bench_query(1, ["A"]), _bench_query("1", ["B"])]},
                 Raises(ToolSetFormatError, ("<dir>/queries.jsonl:2:", "duplicate query id '1' (first on line 1)")),
                 id="duplicate query id"),
    pytest.param({"tools.jsonl": AB + [b'{"name": "caf\xe9"}']},
                 Raises(ToolSetFormatError, ("<dir>/tools.jsonl:3:", "not UTF-8")), id="non-UTF-8 line"),
    pytest.param({"tools.jsonl": AB + ['{"name": "C",']},
                 Raises(ToolSetFormatError, ("<dir>/tools.jsonl:3:", "not valid JSON")), id="non-JSON line"),
    pytest.param({"tools.jsonl": AB + ['{"name": "\\udc00x"}']},
                 Raises(ToolSetFormatError, ("<dir>/tools.jsonl:3:", "lone surrogate ('\\udc00')")), id="lone surrogate name"),
    pytest.param({"tools.jsonl": AB + [b'{"name": ' + BIG_INT + b"}"]},
                 Raises(ToolSetFormatError, ("<dir>/tools.jsonl:3:", "not valid JSON (ValueError")), id="5000-digit name"),
    pytest.param({"tools.jsonl": AB, "my_edges.jsonl": [DEEP]},
                 Raises(ToolSetFormatError, ("<dir>/my_edges.jsonl:1:", "not valid JSON (RecursionError")),
                 id="edges nested 100000 deep"),
    pytest.param({"tools.jsonl": AB, "my_edges.jsonl": [_produces("A", "B", count=1.5)]},
                 Raises(ToolSetFormatError, ("<dir>/my_edges.jsonl:1:", "'count' must be a positive integer, got 1.5")),
                 id="fractional edge count"),
]


@pytest.mark.parametrize("files, expected", GENERIC_CASES)
def test_benchmark_importer_hostile_records_are_reported_or_errors(tmp_path, files, expected):
    folder = write_folder(tmp_path / "mybench", files)
    if isinstance(expected, Raises):
        expected.check(raised_by(lambda: load_benchmark_with_report(folder)), folder)
        return
    toolset, report = load_benchmark_with_report(folder)
    assert [(t.tool_id, t.doc["description"]) for t in toolset.tools] == expected.tools  # first record wins
    assert {(e.dependent, e.prerequisite) for e in toolset.edges} == expected.edges
    assert [(q.query_id, q.gold_tools) for q in toolset.queries] == expected.queries
    assert report.rejected == expected.rejected


GOOD_SPEC = json.dumps({"type": "function", "function": {"name": "login", "parameters": {"type": "object"}}})
TOOL_SPEC_CASES = [  # (file name, bytes, fragments): an agent's tool definitions (tasks/toolsets/tool_specs.py)
    pytest.param("t.json", b'[' + GOOD_SPEC.encode().replace(b"login", b"caf\xe9") + b']',
                 ("<dir>/t.json: not UTF-8 (byte b'\\xe9' at offset",), id="non-UTF-8 json"),
    pytest.param("t.jsonl", GOOD_SPEC.encode() + b"\n" + GOOD_SPEC.encode().replace(b"login", b"caf\xe9"),
                 ("<dir>/t.jsonl:2: not UTF-8 (byte b'\\xe9'",), id="non-UTF-8 jsonl line"),
    pytest.param("t.json", b'[' + GOOD_SPEC.encode().replace(b'"login"', b'"a\\ud800"') + b']',
                 ("<dir>/t.json: a \\u escape decodes to a lone surrogate ('\\ud800')",), id="lone surrogate name"),
    pytest.param("t.json", b'{"tools": [' + BIG_INT + b']}', ("<dir>/t.json: not valid JSON (ValueError: Exceeds",),
                 id="5000-digit entry"),
    pytest.param("t.json", DEEP, ("<dir>/t.json: not valid JSON (RecursionError",), id="arrays nested 100000 deep"),
    pytest.param("t.jsonl", DEEP, ("<dir>/t.jsonl:1: not valid JSON (RecursionError",), id="deep jsonl line"),
    pytest.param("t.json", b'[\n' + GOOD_SPEC.encode() + b',\n{"name": ]', ("<dir>/t.json: not valid JSON "
                 "(Expecting value at line 3, column 10)",), id="truncated file, its line said"),
    pytest.param("t.json", b"", ("<dir>/t.json: not valid JSON (Expecting value)",), id="empty file"),
    pytest.param("t.json", b'"login"', ("<dir>/t.json: expected a list of tool definitions, got str",),
                 id="a JSON string"),
    pytest.param("t.json", b'[' + GOOD_SPEC.encode() + b', ["login"]]', ("<dir>/t.json: [1]: expected a JSON object",),
                 id="an entry that is a list"),
    pytest.param("t.json", json.dumps([{"name": ["login"]}]).encode(),
                 ("<dir>/t.json: [0]: a tool needs a non-empty string 'name'",), id="name is a list"),
]


@pytest.mark.parametrize("name, content, fragments", TOOL_SPEC_CASES)
def test_tool_definition_files_hostile_content_is_an_error_naming_file_and_entry(tmp_path, name, content,
                                                                                  fragments):
    from tasks.toolsets.availability import check_toolsets

    (tmp_path / name).write_bytes(content)
    exc = raised_by(lambda: load_toolset_spec(tmp_path / name))
    Raises(ToolSetFormatError, fragments).check(exc, tmp_path)
    checked = raised_by(lambda: check_toolsets([str(tmp_path / name)], tmp_path, "--toolset"))  # before any work
    Raises(ValueError, (f"--toolset {tmp_path / name}: {exc}",)).check(checked, tmp_path)


KNOWN = {"a", "b"}
OK_RUN = {"run_id": "ok", "tools": ["a", "b"]}
TRAJECTORY_CASES = [
    pytest.param([OK_RUN, {"tools": ["a", "zzz"]}], RunRejected(2, "line-2", "unknown tool ids ['zzz']"),
                 id="unknown tool"),
    pytest.param([OK_RUN, {"run_id": "r", "tools": ["a", "x'); DROP TABLE tools;--"]}],
                 RunRejected(2, "r", "unknown tool ids [\"x'); DROP TABLE tools;--\"]"), id="unknown SQL-ish tool"),
    pytest.param([OK_RUN, {"run_id": "r", "tools": []}], RunRejected(2, "r", "empty run (no tools)"), id="empty run"),
    pytest.param([OK_RUN, {"run_id": "r", "tools": ["<start>", "a", "<end>"]}],
                 RunRejected(2, "r", "reserved node ids ['<end>', '<start>'] are not tools"), id="reserved ids"),
    pytest.param([OK_RUN, {"run_id": "r", "tools": ["a"], "scores": {"b": 1}}],
                 RunRejected(2, "r", "scores for tools the run did not call: ['b']"), id="scores for tools not called"),
    pytest.param([OK_RUN, "not json"], Raises(TrajectoryFormatError, ("<dir>/runs.jsonl:2: not valid JSON",)),
                 id="non-JSON line"),
    pytest.param([OK_RUN, b'{"tools": ["caf\xe9"]}'], Raises(TrajectoryFormatError, ("<dir>/runs.jsonl:2: not UTF-8",)),
                 id="non-UTF-8 line"),
    pytest.param([OK_RUN, '{"run_id": "\\ud800", "tools": ["a"]}'],
                 Raises(TrajectoryFormatError, ("<dir>/runs.jsonl:2:", "lone surrogate ('\\ud800')")),
                 id="lone surrogate run id"),
    pytest.param([OK_RUN, b'{"run_id": ' + BIG_INT + b', "tools": ["a"]}'],
                 Raises(TrajectoryFormatError, ("<dir>/runs.jsonl:2: not valid JSON (ValueError",)), id="5000-digit run id"),
    pytest.param([OK_RUN, DEEP], Raises(TrajectoryFormatError, ("<dir>/runs.jsonl:2: not valid JSON (RecursionError",)),
                 id="arrays nested 100000 deep"),
    pytest.param([OK_RUN, ["a", "b"]],
                 Raises(TrajectoryFormatError, ("<dir>/runs.jsonl:2: expected a JSON object, got list",)), id="a bare list"),
    pytest.param([OK_RUN, {"tools": [["a", "b"]]}], Raises(TrajectoryFormatError, (
        "<dir>/runs.jsonl:2: field 'tools' must be a string or an integer, got list",)), id="nested tool list"),
    pytest.param([OK_RUN, {"run_id": "ok", "tools": ["b"]}],
                 Raises(TrajectoryFormatError, ("<dir>/runs.jsonl:2: duplicate run_id 'ok' (first on line 1)",)),
                 id="duplicate run id"),
    pytest.param([{"tools": ["a"]}, {"run_id": "line-1", "tools": ["b"]}],
                 Raises(TrajectoryFormatError, ("<dir>/runs.jsonl:2: duplicate run_id 'line-1' (first on line 1)",)),
                 id="explicit run id equal to a default one"),
]


@pytest.mark.parametrize("lines, expected", TRAJECTORY_CASES)
def test_trajectory_hostile_runs_are_rejections_or_errors(tmp_path, lines, expected):
    path = write_lines(tmp_path / "runs.jsonl", [
        line if isinstance(line, (str, bytes)) else json.dumps(line) for line in lines])
    known = KNOWN | {"<start>", "<end>"}  # reserved ids stay rejected even when a tool set "knows" them
    if isinstance(expected, Raises):
        expected.check(raised_by(lambda: read_trajectories(path, known)), tmp_path)
        return
    got = read_trajectories(path, known)
    assert [(r.run_id, r.tools) for r in got.runs] == [("ok", ("a", "b"))]
    assert [(r.line, r.run_id, r.reason) for r in got.rejections] == [(expected.line, expected.run_id, expected.reason)]
    assert str(got.rejections[0]) == f"{path}:{expected.line}: run {expected.run_id!r} rejected: {expected.reason}"


TRAJECTORY_FILE_CASES = [
    pytest.param(lambda d: write_lines(d / "runs.jsonl", []),
                 ("<dir>/runs.jsonl: no usable run (0 rejected): the file has no runs",), TrajectoryFormatError,
                 id="empty file"),
    pytest.param(lambda d: write_lines(d / "runs.jsonl", ["", "   "]),
                 ("<dir>/runs.jsonl: no usable run (0 rejected)",), TrajectoryFormatError, id="blank lines only"),
    pytest.param(lambda d: write_lines(d / "runs.jsonl", [json.dumps({"tools": []}), json.dumps({"tools": ["zzz"]})]),
                 ("<dir>/runs.jsonl: no usable run (2 rejected)", "<dir>/runs.jsonl:1: run 'line-1' rejected: empty run"),
                 TrajectoryFormatError, id="only unusable runs"),
    pytest.param(lambda d: d / "absent.jsonl", ("<dir>/absent.jsonl: trajectories file not found",), FileNotFoundError,
                 id="missing file"),
]


@pytest.mark.parametrize("make, fragments, error", TRAJECTORY_FILE_CASES)
def test_trajectory_files_without_usable_runs_are_errors(tmp_path, make, fragments, error):
    path = make(tmp_path)
    Raises(error, fragments).check(raised_by(lambda: read_trajectories(path, KNOWN)), tmp_path)


def _gold(qid, order) -> str:
    return json.dumps({"qid": qid, "query": "q", "gold_tools": ["a"], "gold_nodes_in_order": order})


GOLD_CASES = [
    pytest.param([_gold(1, ["a", "b"]), _gold(1, ["b"])],
                 Raises(TrajectoryFormatError, ("<dir>/queries.jsonl:2: duplicate query id '1' (first on line 1)",)),
                 id="duplicate query id"),
    pytest.param([_gold(1, ["a", "zzz"])], RunRejected(1, "1", "unknown tool ids ['zzz']"), id="unknown tool"),
    pytest.param([_gold(1, [])], RunRejected(1, "1", "empty run (no tools)"), id="empty call order"),
    pytest.param([_gold(1, ["<start>", "a"])], RunRejected(1, "1", "reserved node ids ['<start>'] are not tools"),
                 id="reserved id"),
    pytest.param([_gold(1, "a,b")], Raises(TrajectoryFormatError, ("<dir>/queries.jsonl:1:", "must be a list, got str")),
                 id="call order not a list"),
    pytest.param([_gold(1, [["a"]])], Raises(TrajectoryFormatError, ("<dir>/queries.jsonl:1:", "got list")),
                 id="nested call order"),
    pytest.param([b'{"qid": "caf\xe9", "gold_nodes_in_order": ["a"]}'],
                 Raises(TrajectoryFormatError, ("<dir>/queries.jsonl:1: not UTF-8",)), id="non-UTF-8 line"),
]


@pytest.mark.parametrize("lines, expected", GOLD_CASES)
def test_gold_call_orders_hostile_rows(tmp_path, lines, expected):
    path = write_lines(tmp_path / "queries.jsonl", lines)
    if isinstance(expected, Raises):
        expected.check(raised_by(lambda: gold_trajectories(path, KNOWN)), tmp_path)
        return
    got = gold_trajectories(path, KNOWN)
    assert got.runs == [] and got.files == [str(path)]
    assert [(r.line, r.run_id, r.reason) for r in got.rejections] == [(expected.line, expected.run_id, expected.reason)]


# ---------------------------------------------------------------------- hostile but valid names

DIM = 4
BUILT = datetime(2024, 1, 1)


def warehouse_tables(toolset: ToolSet, runs: Trajectories | None = None) -> DatasetTables:
    """The rows a graph build writes for a tool set with manual edges and user runs (no encoder)."""
    ds = toolset.name
    runs = runs or Trajectories([], [], [])
    return DatasetTables(ds, {
        "datasets": [{"dataset": ds, "embed_style": "structured", "encoder": "none", "discriminator": None,
                      "built_at": BUILT}],
        "tools": [{"dataset": ds, "tool_id": t.tool_id, "name": t.doc["name"], "tool_group": t.group,
                   "doc_json": canonical_doc_json(t.doc), "embed_text": t.doc["description"]} for t in toolset.tools],
        "tool_embeddings": [{"dataset": ds, "tool_id": t.tool_id, "kind": "base", "embedding": [1.0, 0.5, 0.0, 0.25]}
                            for t in toolset.tools],
        "queries": [{"dataset": ds, "query_id": q.query_id, "query_text": q.text, "query_group": None}
                    for q in toolset.queries],
        "query_gold_tools": [{"dataset": ds, "query_id": q.query_id, "tool_id": t}
                             for q in toolset.queries for t in q.gold_tools],
        "edges": [{"dataset": ds, "tool_group": e.group, "dependent": e.dependent, "prerequisite": e.prerequisite,
                   "prob": 1.0, "predicted_class": 0, "source": "manual"} for e in toolset.edges],
        "edge_lineage": [{"dataset": ds, "source": "manual", "producer": "test", "input_files": runs.files,
                          "built_at": BUILT}],
        "trajectories": [{"dataset": ds, "origin": r.origin, "run_id": r.run_id, "line": r.line, "source": r.source,
                          "query_id": r.query_id, "success": r.success, "split": split_of(r, 0), "tools": list(r.tools),
                          "given_scores": None, "stream_iteration": None} for r in runs.runs],
        "trajectory_rejections": [{"dataset": ds, "origin": r.origin, "line": r.line, "run_id": r.run_id,
                                   "reason": r.reason} for r in runs.rejections],
    })


def assert_round_trip(path: Path, toolset: ToolSet, runs: Trajectories | None = None) -> None:
    """Everything read back from the warehouse equals what went in (ids and texts exactly, docs as JSON)."""
    runs = runs or Trajectories([], [], [])
    con = connect(path)
    try:
        ds = toolset.name
        tools = rows_of(con, "SELECT tool_id, tool_group, name, doc_json::VARCHAR AS doc FROM tools WHERE dataset = ?",
                        [ds])
        assert sorted((r["tool_id"], r["tool_group"], r["name"]) for r in tools) == sorted(
            (t.tool_id, t.group, t.doc["name"]) for t in toolset.tools)
        docs = {r["tool_id"]: json.loads(r["doc"]) for r in tools}
        assert docs == {t.tool_id: t.doc for t in toolset.tools}
        edges = con.execute("SELECT tool_group, dependent, prerequisite FROM edges WHERE dataset = ?", [ds]).fetchall()
        assert sorted(edges) == sorted((e.group, e.dependent, e.prerequisite) for e in toolset.edges)
        gold = con.execute("SELECT q.query_id, q.query_text, list(g.tool_id ORDER BY g.tool_id) FROM queries q "
                           "JOIN query_gold_tools g USING (dataset, query_id) WHERE dataset = ? GROUP BY ALL",
                           [ds]).fetchall()
        assert sorted(gold) == sorted((q.query_id, q.text, sorted(q.gold_tools)) for q in toolset.queries)
        got_runs = con.execute("SELECT origin, run_id, line, tools FROM trajectories WHERE dataset = ?", [ds]).fetchall()
        assert sorted(got_runs) == sorted((r.origin, r.run_id, r.line, list(r.tools)) for r in runs.runs)
        rejected = con.execute("SELECT origin, line, run_id, reason FROM trajectory_rejections WHERE dataset = ?",
                               [ds]).fetchall()
        assert sorted(rejected) == sorted((r.origin, r.line, r.run_id, r.reason) for r in runs.rejections)
        for t in toolset.tools:  # a bound value finds exactly its tool
            assert con.execute("SELECT count(*) FROM tools WHERE dataset = ? AND tool_id = ?",
                               [ds, t.tool_id]).fetchone() == (1,)
        tables = {n for (n,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        assert {"tools", "edges", "queries", "trajectories"} <= tables  # nothing was dropped
    finally:
        con.close()


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_names_are_accepted_and_survive_a_warehouse_build(tmp_path, name):
    # the project format: the name as tool id, group, doc name, query id and text, in an edge and a run
    folder = write_folder(tmp_path / "ts", {
        "tools.jsonl": [_tool("plain", group=name), _tool(name, group=name)],
        "edges.jsonl": [_edge(name, "plain", group=name)],
        "queries.jsonl": [_query(name, [name, "plain"], text=name)],
    })
    toolset = read_toolset_dir(folder)
    assert [t.tool_id for t in toolset.tools] == ["plain", name] and toolset.tools[1].doc["name"] == name[:120]
    assert toolset.edges == [DependencyEdge(name, name, "plain", "manual")]
    assert toolset.queries == [Query(name, name, (name, "plain"))]
    assert load_toolset_spec(folder) == toolset

    # the shared benchmark layout reads the same ids
    bench = write_folder(tmp_path / "bench", {
        "tools.jsonl": [_bench_tool("plain", category=name), _bench_tool(name, category=name)],
        "edges.jsonl": [_produces("plain", name)],
        "queries.jsonl": [_bench_query(name, [name, "plain"])],
    })
    imported, report = load_benchmark_with_report(bench)
    assert report.rejected == []
    assert [(t.tool_id, t.group) for t in imported.tools] == [("plain", name), (name, name)]
    assert [(e.dependent, e.prerequisite) for e in imported.edges] == [(name, "plain")]
    assert [(q.query_id, q.gold_tools) for q in imported.queries] == [(name, (name, "plain"))]

    # runs that call it are accepted; one that calls a near miss is rejected by line
    near_miss = name + " "  # ids are matched exactly, never stripped
    runs = read_trajectories(write_lines(tmp_path / "runs.jsonl", [
        json.dumps({"run_id": name, "tools": ["plain", name]}),
        json.dumps({"run_id": name + "-2", "tools": [name, near_miss]}),
    ]), {t.tool_id for t in toolset.tools})
    assert [(r.run_id, r.tools) for r in runs.runs] == [(name, ("plain", name))]
    assert [(r.line, r.reason) for r in runs.rejections] == [(2, f"unknown tool ids {[near_miss]}")]

    path = tmp_path / "wh" / "tgr.duckdb"
    build_warehouse(path, [warehouse_tables(toolset, runs)], DIM)
    assert_round_trip(path, toolset, runs)

    # the README's SQL macros take the name as a bound value: the right rows, or a clear error, and nothing dropped
    con = connect(path)
    try:
        ds = toolset.name
        assert con.execute("SELECT prerequisite, depth FROM prerequisites_of(?, 'manual', ?)",
                           [ds, name]).fetchall() == [("plain", 1)]
        with pytest.raises(duckdb.Error, match="has no tool"):  # an unknown tool is an error, as in next_tools
            con.execute("SELECT count(*) FROM prerequisites_of(?, 'manual', ?)", [ds, near_miss]).fetchall()
        assert con.execute("SELECT count(*) FROM next_tools(?, ?, 3)", [ds, name]).fetchone() == (0,)  # no transitions built
        with pytest.raises(duckdb.Error, match="has no tool"):
            con.execute("SELECT * FROM next_tools(?, ?, 3)", [ds, near_miss]).fetchall()
        top = con.execute("SELECT tool_id FROM tool_top_k(?, 'base', ?, 2)", [ds, [1.0, 0.5, 0.0, 0.25]]).fetchall()
        assert sorted(t for (t,) in top) == sorted(["plain", name])
        assert con.execute("SELECT count(*) FROM tools").fetchone() == (2,)  # nothing was dropped
    finally:
        con.close()


def test_ids_equal_up_to_unicode_normalisation_stay_two_tools(tmp_path):
    nfc, nfd = "caf\u00e9", unicodedata.normalize("NFD", "caf\u00e9")
    folder = write_folder(tmp_path / "ts", {"tools.jsonl": [_tool(nfc), _tool(nfd)],
                                            "edges.jsonl": [_edge(nfd, nfc)]})
    toolset = read_toolset_dir(folder)  # ids are matched exactly: no silent merge, no false duplicate
    assert [t.tool_id for t in toolset.tools] == [nfc, nfd]
    path = tmp_path / "wh" / "tgr.duckdb"
    build_warehouse(path, [warehouse_tables(toolset)], DIM)
    assert_round_trip(path, toolset)


# ==================================================================================================
# 4. Paths with quotes (and other characters that mean something to SQL, DuckDB or a glob)


def _toy() -> ToolSet:
    return ToolSet("o'neil", [Tool("login", "g", _doc("login")), Tool("update", "g", _doc("update"))],
                   [DependencyEdge("g", "update", "login")], [Query("q1", "change my email", ("login", "update"))])


@pytest.mark.parametrize("folder_name", ["o'neil", "o'neil \"jr\" [1] * ?"])
def test_toolset_folders_with_quotes_in_their_path(tmp_path, folder_name):
    project = write_toolset_dir(_toy(), tmp_path / folder_name / "o'neil")
    assert load_toolset_spec(project) == _toy()  # the name is the folder's, quote included
    shared = write_folder(tmp_path / folder_name / "it's a bench", {
        "tools.jsonl": [_bench_tool("A"), _bench_tool("B")], "x_edges.jsonl": [_produces("A", "B")]})
    imported = load_toolset_spec(shared)
    assert imported.name == "it's a bench" and {t.group for t in imported.tools} == {"it's a bench"}
    assert [(e.dependent, e.prerequisite) for e in imported.edges] == [("B", "A")]
    runs = read_trajectories(write_lines(tmp_path / folder_name / "run's.jsonl", [json.dumps({"tools": ["B"]})]),
                             {"A", "B"})
    assert runs.files == [str(tmp_path / folder_name / "run's.jsonl")]


@pytest.mark.parametrize("folder_name, file_name", [
    pytest.param("o'neil", "tgr.duckdb", id="quote"),
    pytest.param("o'neil \"jr\"", "it's.duckdb", id="quotes in folder and file"),
    pytest.param("runs[1]", "tgr.duckdb", id="glob brackets"),
    pytest.param("all*", "tgr[2].duckdb", id="glob star and brackets in the file name"),
    pytest.param("it's {inputs} $1 %s", "tgr.duckdb", id="placeholders"),
])
def test_warehouse_paths_with_quotes_build_rebuild_and_read(tmp_path, folder_name, file_name):
    path = tmp_path / folder_name / file_name
    toy = _toy()
    runs = read_trajectories(write_lines(tmp_path / folder_name / "run's.jsonl", [
        json.dumps({"tools": ["login", "update"]}), json.dumps({"tools": ["ghost'); DROP TABLE edges;--"]})]),
        {t.tool_id for t in toy.tools})
    build_warehouse(path, [warehouse_tables(toy, runs)], DIM)
    other = ToolSet('say "hi"', toy.tools, toy.edges, toy.queries)
    build_warehouse(path, [warehouse_tables(other)], DIM)  # carries o'neil over: a bound list, not spliced
    assert_round_trip(path, toy, runs)
    assert_round_trip(path, other)
    con = connect(path)
    try:
        assert con.execute("SELECT list(dataset ORDER BY dataset) FROM datasets").fetchone() == (
            ["o'neil", 'say "hi"'],)
    finally:
        con.close()
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([file_name, "run's.jsonl"])  # no lock file left


@pytest.mark.parametrize("folder_name, bad", [("what?", "['?']"), ("back\\slash", "['\\\\']")])
def test_warehouse_paths_duckdb_cannot_open_are_refused_up_front(tmp_path, folder_name, bad):
    path = tmp_path / folder_name / "tgr.duckdb"
    exc = raised_by(lambda: build_warehouse(path, [warehouse_tables(_toy())], DIM))
    Raises(WarehouseError, (f"{path}: DuckDB cannot keep a database at a path containing {bad}",)).check(exc, tmp_path)
    assert not (tmp_path / folder_name).exists()  # nothing written, not even the folder
