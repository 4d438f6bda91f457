"""Function-record sources: the real CodeSearchNet release layout, bad lines, local trees, stdlib."""
from __future__ import annotations

import gzip
import hashlib
import json
import sysconfig
from pathlib import Path

import pytest

from tasks.sources.filters import normalized_code_key, SourceFilter
from tasks.sources.hub import hf_row_to_csn
from tasks.sources.read import read_function_records, SourceReadResult
from tasks.sources.records import content_id, CSN_FIELDS, FunctionRecord, Reason, REJECTION_REASONS
from tasks.sources.spec import SourceConfigError, SourceSpec, SourceUnavailableError
from tasks.sources.tree import python_code_tokens

# Keeps every well-formed record: isolates reading from filtering.
KEEP_ALL = SourceFilter(require_docstring=False, min_lines=0, min_chars=0, max_chars=10**9, dedup=False)
CSN_COUNTS = {"train": 120, "valid": 120, "test": 130}


def assert_accounted(result: SourceReadResult) -> None:
    assert len(result.accepted) + len(result.rejected) == result.n_read
    assert {r.reason for r in result.rejected} <= set(REJECTION_REASONS)
    assert all(r.stage == "read" and r.detail and r.record_id for r in result.rejected)
    ids = [rec.record_id for rec in result.accepted]
    assert len(ids) == len(set(ids)), "accepted record ids must be unique"


def raw_release_lines(shared_data: Path, partition: str) -> list[dict]:
    folder = shared_data / "codesearchnet" / "python" / "final" / "jsonl" / partition
    rows = []
    for file in sorted(folder.glob("*.jsonl.gz")):
        with gzip.open(file, "rt", encoding="utf-8") as fh:
            rows.extend(json.loads(line) for line in fh if line.strip())
    return rows


# ------------------------------------------------------------------ official release layout (real)

@pytest.mark.parametrize("partition", ["train", "valid", "test"])
def test_release_layout_reads_every_real_record_with_its_schema(shared_data, partition):
    spec = SourceSpec(kind="codesearchnet", path=shared_data / "codesearchnet", partitions=(partition,))
    result = read_function_records(spec, source_filter=KEEP_ALL)

    raw = raw_release_lines(shared_data, partition)
    assert result.n_read == len(raw) == CSN_COUNTS[partition]
    assert result.rejected == []
    assert [rec.to_dict() for rec in result.accepted] == raw  # same records, same order, no change
    for rec in result.accepted:
        assert list(rec.to_dict()) == list(CSN_FIELDS)
        assert rec.language == "python" and rec.partition == partition
        assert rec.record_id == f"{rec.repo}:{rec.path}:{rec.func_name}"
        assert all(isinstance(t, str) for t in rec.code_tokens + rec.docstring_tokens)


def test_default_filter_on_real_records_rejects_only_for_true_reasons(shared_data):
    spec = SourceSpec(kind="codesearchnet", path=shared_data / "codesearchnet")
    result = read_function_records(spec)
    assert_accounted(result)
    assert result.n_read == sum(CSN_COUNTS.values())

    raw = {f"{r['repo']}:{r['path']}:{r['func_name']}": r
           for part in CSN_COUNTS for r in raw_release_lines(shared_data, part)}
    flt = SourceFilter()
    for rej in result.rejected:
        code = raw[rej.record_id]["code"].strip()
        if rej.reason == Reason.TOO_LONG:
            assert len(code) > flt.max_chars
        elif rej.reason == Reason.TOO_SHORT:
            assert len(code) < flt.min_chars or code.count("\n") + 1 < flt.min_lines
        elif rej.reason == Reason.NO_DOCSTRING:
            assert not raw[rej.record_id]["docstring"].strip()
        else:
            assert rej.reason.startswith("duplicate_"), rej
    for rec in result.accepted:
        assert rec.docstring.strip() and flt.min_chars <= len(rec.code.strip()) <= flt.max_chars


def test_limit_stops_reading_and_accounts_for_every_line_read(shared_data):
    spec = SourceSpec(kind="codesearchnet", path=shared_data / "codesearchnet", partitions=("valid",))
    full = read_function_records(spec)
    limited = read_function_records(spec, limit=25)
    assert_accounted(limited)
    assert len(limited.accepted) == 25
    assert limited.accepted == full.accepted[:25]
    # Reading stopped at the line that gave the 25th record (one file, one item per line):
    # lines 1..n_read are all accounted for, and nothing after them was read.
    line = lambda rej: int(rej.locator.rsplit(":", 1)[1])  # noqa: E731
    assert limited.n_read == 25 + len(limited.rejected)
    assert limited.rejected == [r for r in full.rejected if line(r) <= limited.n_read]
    assert limited.n_read not in {line(r) for r in full.rejected}


def test_sample_seed_is_deterministic_and_samples_across_the_release(shared_data):
    def sample(seed):
        spec = SourceSpec(kind="codesearchnet", path=shared_data / "codesearchnet", sample_seed=seed)
        return read_function_records(spec, limit=30)

    first, again, other = sample(7), sample(7), sample(8)
    for result in (first, again, other):
        assert_accounted(result)
        assert len(result.accepted) == 30
    assert [r.record_id for r in first.accepted] == [r.record_id for r in again.accepted]
    assert [r.record_id for r in first.accepted] != [r.record_id for r in other.accepted]
    # The unseeded first 30 all come from train (file order); a seeded sample spans partitions.
    unseeded = read_function_records(SourceSpec(kind="codesearchnet", path=shared_data / "codesearchnet"),
                                     limit=30)
    assert {r.partition for r in unseeded.accepted} == {"train"}
    assert len({r.partition for r in first.accepted}) > 1


def test_missing_language_folder_is_a_clear_config_error(shared_data):
    spec = SourceSpec(kind="codesearchnet", path=shared_data / "codesearchnet", languages=("go",))
    with pytest.raises(SourceConfigError, match=r"go/final/jsonl/train.*release layout"):
        read_function_records(spec)


# ------------------------------------------------------------------ bad lines in a release file

GOOD = {
    "repo": "octo/geo", "path": "geo/distance.py", "func_name": "haversine",
    "original_string": "", "language": "python", "code": "", "code_tokens": [],
    "docstring": "Great-circle distance in kilometres between two (lat, lon) points.",
    "docstring_tokens": ["Great", "-", "circle", "distance", "in", "kilometres"],
    "sha": "0" * 40, "url": "https://github.com/octo/geo/blob/" + "0" * 40 + "/geo/distance.py#L1-L9",
    "partition": "train",
}
GOOD_CODE = '''def haversine(a, b):
    """Great-circle distance in kilometres between two (lat, lon) points."""
    lat1, lon1 = map(math.radians, a)
    lat2, lon2 = map(math.radians, b)
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return 2 * 6371.0 * math.asin(math.sqrt(h))'''


def record(**changes) -> dict:
    rec = dict(GOOD, code=GOOD_CODE, original_string=GOOD_CODE,
               code_tokens=python_code_tokens(GOOD_CODE, skip_docstring=True))
    rec.update(changes)
    return rec


def write_release(root: Path, lines: list[bytes], partition: str = "train",
                  name: str = "python_train_0") -> Path:
    folder = root / "python" / "final" / "jsonl" / partition
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / f"{name}.jsonl.gz"
    with gzip.open(file, "wb") as fh:
        fh.write(b"\n".join(lines) + b"\n")
    return file


def test_every_bad_line_becomes_a_rejection_with_its_reason(tmp_path):
    whitespace_variant = GOOD_CODE.replace("(a, b)", "( a,b )").replace(
        "    return", "    # same code, new comment\n    return")
    missing = record(func_name="no_sha")
    del missing["sha"]
    lines = [
        json.dumps(record()).encode(),                                        # 1 accepted
        b'{"repo": "octo/geo", "path": ',                                     # 2 malformed JSON
        json.dumps(record(func_name="latin")).encode().replace(b"octo", b"\xe9t\xe9"),  # 3 not UTF-8
        json.dumps(missing).encode(),                                         # 4 missing sha
        json.dumps(record(func_name="typed", code_tokens="def f")).encode(),  # 5 wrong type
        b"[1, 2, 3]",                                                         # 6 not an object
        b"",                                                                  # blank: not an item
        json.dumps(record(func_name="nodoc", docstring="   ")).encode(),      # 7 no docstring
        json.dumps(record(func_name="tiny", code="def f():\n    return 1")).encode(),  # 8 too short
        json.dumps(record(func_name="huge", code=GOOD_CODE + "\n" + "    x = 1\n" * 500)).encode(),  # 9 long
        json.dumps(record(func_name="copy")).encode(),                        # 10 exact duplicate
        json.dumps(record(func_name="respaced", code=whitespace_variant)).encode(),  # 11 normalized dup
        json.dumps(record()).encode(),                                        # 12 duplicate id
        json.dumps(record(func_name="surrogate", docstring="bad \ud800 text")).encode(),  # 13 surrogate
    ]
    write_release(tmp_path, lines)
    result = read_function_records(SourceSpec(kind="codesearchnet", path=tmp_path, partitions=("train",)))

    assert_accounted(result)
    assert result.n_read == 13
    assert [r.record_id for r in result.accepted] == ["octo/geo:geo/distance.py:haversine"]
    assert [(r.locator.rsplit(":", 1)[1], r.reason) for r in result.rejected] == [
        ("2", Reason.MALFORMED_JSON), ("3", Reason.BAD_ENCODING), ("4", Reason.MISSING_FIELD),
        ("5", Reason.WRONG_TYPE), ("6", Reason.NOT_AN_OBJECT), ("8", Reason.NO_DOCSTRING),
        ("9", Reason.TOO_SHORT), ("10", Reason.TOO_LONG), ("11", Reason.DUPLICATE_EXACT),
        ("12", Reason.DUPLICATE_NORMALIZED), ("13", Reason.DUPLICATE_ID), ("14", Reason.BAD_ENCODING),
    ]
    by_reason = {r.reason: r for r in result.rejected}
    assert "sha" in by_reason[Reason.MISSING_FIELD].detail
    assert "code_tokens" in by_reason[Reason.WRONG_TYPE].detail
    assert by_reason[Reason.MALFORMED_JSON].raw_text.startswith('{"repo": "octo/geo"')
    assert by_reason[Reason.DUPLICATE_NORMALIZED].record_id == "octo/geo:geo/distance.py:respaced"
    assert "octo/geo:geo/distance.py:haversine" in by_reason[Reason.DUPLICATE_NORMALIZED].detail
    # The undecodable line has no trustworthy fields: its id is the hash of its bytes.
    assert result.rejected[1].record_id == content_id(lines[2])
    for rej in result.rejected:  # every stored string must survive UTF-8 (DuckDB, Parquet)
        for value in rej.to_dict().values():
            value.encode("utf-8")


def test_dedup_can_be_switched_off(tmp_path):
    write_release(tmp_path, [json.dumps(record(func_name=f"f{i}")).encode() for i in range(3)])
    spec = SourceSpec(kind="codesearchnet", path=tmp_path, partitions=("train",))
    assert len(read_function_records(spec).accepted) == 1
    assert len(read_function_records(spec, source_filter=SourceFilter(dedup=False)).accepted) == 3


def test_corrupt_gzip_files_are_rejections_not_crashes(tmp_path):
    good = [json.dumps(record(func_name=f"f{i}", code=GOOD_CODE.replace("6371.0", f"{6371 + i}.0"))).encode()
            for i in range(200)]
    file = write_release(tmp_path, good, name="python_train_0")
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])                                  # truncated stream
    (file.parent / "python_train_1.jsonl.gz").write_bytes(b"not gzip at all\n")  # not gzip

    result = read_function_records(SourceSpec(kind="codesearchnet", path=tmp_path, partitions=("train",)))
    assert_accounted(result)
    assert 0 < len(result.accepted) < 200
    stream_errors = [r for r in result.rejected if r.reason == Reason.BAD_ENCODING]
    assert [r.locator.split(":")[0].rsplit("/", 1)[1] for r in stream_errors] == [
        "python_train_0.jsonl.gz", "python_train_1.jsonl.gz"]
    assert "rest of file skipped" in stream_errors[0].detail


def test_hf_row_names_map_to_the_release_schema(shared_data):
    # A real record renamed to the hub's column names must come back unchanged.
    real = raw_release_lines(shared_data, "test")[0]
    hub_row = {
        "repository_name": real["repo"], "func_path_in_repository": real["path"],
        "func_name": real["func_name"], "whole_func_string": real["original_string"],
        "language": real["language"], "func_code_string": real["code"],
        "func_code_tokens": real["code_tokens"], "func_documentation_string": real["docstring"],
        "func_documentation_tokens": real["docstring_tokens"], "split_name": "test",
        "func_code_url": real["url"],
    }
    assert hf_row_to_csn(hub_row, "test") == real


def test_hf_source_offline_raises_a_clear_error():
    import huggingface_hub.constants

    if not huggingface_hub.constants.HF_HUB_OFFLINE:
        pytest.skip("HF_HUB_OFFLINE is unset: this test checks the offline error only")
    with pytest.raises(SourceUnavailableError) as info:
        read_function_records(SourceSpec(kind="hf", partitions=("test",)), limit=1)
    message = str(info.value)
    assert "code-search-net/code_search_net" in message and "network" in message
    assert "kind='codesearchnet'" in message  # says what to do offline


# ------------------------------------------------------------------ local trees

PACKAGE_FILES = {
    "geo/__init__.py": '"""Geometry helpers."""\n',
    "geo/shapes.py": '''"""Shapes."""
import math


class Circle:
    """A circle."""

    def __init__(self, radius):
        self.radius = radius

    def area(self):
        """Area of the circle in square units, from its radius."""
        # pi r squared
        return math.pi * self.radius ** 2

    async def fetch(self, client):
        """Fetch a remote circle description and return its parsed JSON body."""
        response = await client.get("/circle")
        return response.json()


def scale(points, factor):
    """Scale every point by a factor and return the new list of points."""

    def one(point):
        """Scale one (x, y) point by the enclosing factor and return it."""
        return (point[0] * factor, point[1] * factor)

    return [one(p) for p in points]


if math.pi > 3:
    def conditional(value):
        """Defined inside an if block; still a module function with a docstring."""
        return value * 2 + 1
''',
    "geo/broken.py": "def oops(:\n    pass\n",
    "geo/latin.py": '# -*- coding: latin-1 -*-\ndef caf\xe9_name():\n    """Return the caf\xe9 name, spelled with an accent, as a string."""\n    return "caf\xe9"\n',
    "geo/__pycache__/cached.py": 'def hidden():\n    """Never read by default: __pycache__ is an excluded folder name."""\n    return 1\n',
}


def write_package(root: Path) -> Path:
    for rel, text in PACKAGE_FILES.items():
        file = root / rel
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(text.encode("latin-1" if "latin" in rel else "utf-8"))
    (root / "geo" / "binary.py").write_bytes(b'def f():\n    """caf\xe9"""\n')  # not UTF-8, no coding line
    return root


def test_tree_parsing_finds_methods_nested_and_conditional_functions(tmp_path):
    root = write_package(tmp_path / "geo-project")
    result = read_function_records(SourceSpec(kind="tree", path=root))
    assert_accounted(result)

    names = [(r.path, r.func_name) for r in result.accepted]
    assert names == [
        ("geo/latin.py", "caf\xe9_name"),
        ("geo/shapes.py", "Circle.area"),
        ("geo/shapes.py", "Circle.fetch"),
        ("geo/shapes.py", "scale"),
        ("geo/shapes.py", "scale.<locals>.one"),
        ("geo/shapes.py", "conditional"),
    ]
    rejected = {(r.locator, r.reason) for r in result.rejected}
    assert rejected == {
        ("geo/binary.py", Reason.BAD_ENCODING),
        ("geo/broken.py", Reason.SYNTAX_ERROR),
        ("geo/shapes.py::Circle.__init__", Reason.NO_DOCSTRING),
    }
    syntax = next(r for r in result.rejected if r.reason == Reason.SYNTAX_ERROR)
    assert "line 1" in syntax.detail and syntax.raw_text.startswith("def oops(")
    # 6 functions in shapes.py, 1 in latin.py, and the 2 files that could not be parsed
    assert result.n_read == 6 + 1 + 2

    area = result.accepted[1]
    shapes = (root / "geo" / "shapes.py").read_bytes()
    assert area.repo == "geo-project" and area.language == "python" and area.partition == "train"
    assert area.sha == hashlib.sha1(shapes).hexdigest()
    assert area.url == f"{(root / 'geo' / 'shapes.py').resolve().as_uri()}#L11-L14"
    assert area.code == area.original_string and area.code.startswith('def area(self):\n    """Area')
    assert area.docstring == "Area of the circle in square units, from its radius."
    assert area.docstring_tokens == ["Area", "of", "the", "circle", "in", "square", "units", ",", "from",
                                     "its", "radius", "."]
    # code tokens: no docstring, no comment
    assert area.code_tokens == ["def", "area", "(", "self", ")", ":", "return", "math", ".", "pi", "*",
                                "self", ".", "radius", "**", "2"]
    assert result.accepted[0].code.endswith('return "caf\xe9"')


def test_tree_sampling_permutes_the_same_records_deterministically(tmp_path):
    root = write_package(tmp_path / "geo-project")
    ordered = read_function_records(SourceSpec(kind="tree", path=root))
    sampled = [read_function_records(SourceSpec(kind="tree", path=root, sample_seed=seed))
               for seed in (1, 1, 2)]
    for result in sampled:
        assert_accounted(result)
        assert result.n_read == ordered.n_read
        assert sorted(r.record_id for r in result.accepted) == sorted(r.record_id for r in ordered.accepted)
    ids = [[r.record_id for r in result.accepted] for result in sampled]
    assert ids[0] == ids[1] and ids[0] != ids[2]


def test_tree_exclude_dirs_and_repo_name_are_configurable(tmp_path):
    root = write_package(tmp_path / "pkg")
    spec = SourceSpec(kind="tree", path=root, repo_name="octo/pkg", exclude_dirs=())
    result = read_function_records(spec)
    assert_accounted(result)
    assert ("geo/__pycache__/cached.py", "hidden") in {(r.path, r.func_name) for r in result.accepted}
    assert {r.repo for r in result.accepted} == {"octo/pkg"}


def test_normalized_key_ignores_layout_and_comments_but_not_code():
    a = "def f(x, y):\n    return x + y\n"
    respaced = "def f( x,y ):  # add\n  return x+y"
    assert normalized_code_key(a, "python") == normalized_code_key(respaced, "python")
    assert normalized_code_key(a, "python") != normalized_code_key(a.replace("+", "-"), "python")
    assert normalized_code_key("func  f() {\n}", "go") == normalized_code_key("func f() { }", "go")


def test_record_id_falls_back_to_a_content_hash():
    rec = FunctionRecord(**dict(record(), repo=""))
    assert rec.record_id == content_id(GOOD_CODE) and rec.record_id.startswith("sha1:")


# ------------------------------------------------------------------ stdlib default corpus

def test_stdlib_default_yields_over_a_thousand_records_with_a_limit():
    result = read_function_records(SourceSpec(), limit=1200)
    assert_accounted(result)
    assert len(result.accepted) == 1200
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    paths = [r.path for r in result.accepted]
    assert paths == sorted(paths)  # deterministic: sorted by path, source order inside a file
    for rec in result.accepted:
        assert not {"test", "tests", "idlelib", "lib2to3", "site-packages"} & set(rec.path.split("/"))
        assert (stdlib / rec.path).is_file() and rec.docstring.strip() and rec.code_tokens
        assert rec.repo.startswith("cpython-stdlib-")


def test_stdlib_sampling_spreads_across_modules():
    # Sampling parses every file first; the email package keeps that fast (the whole stdlib
    # takes a few seconds), the mechanism is the same.
    email = Path(sysconfig.get_paths()["stdlib"]) / "email"
    sampled = read_function_records(SourceSpec(kind="stdlib", path=email, sample_seed=3), limit=100)
    first = read_function_records(SourceSpec(kind="stdlib", path=email), limit=100)
    assert_accounted(sampled)
    assert len(sampled.accepted) == len(first.accepted) == 100
    files = lambda result: {rec.path for rec in result.accepted}  # noqa: E731
    assert len(files(sampled)) > 2 * len(files(first))


# ------------------------------------------------------------------ configuration errors

@pytest.mark.parametrize("kwargs, message", [
    (dict(kind="parquet"), "unknown source kind"),
    (dict(kind="tree"), "needs a path"),
    (dict(kind="codesearchnet", path=".", partitions=("validation",)), "unknown partitions"),
    (dict(kind="codesearchnet", path=".", languages="python"), "sequence of non-empty strings"),
])
def test_bad_specs_fail_early_with_a_clear_message(kwargs, message):
    with pytest.raises(SourceConfigError, match=message):
        SourceSpec(**kwargs)


def test_bad_limit_and_missing_tree_are_config_errors(tmp_path):
    with pytest.raises(SourceConfigError, match="limit"):
        read_function_records(SourceSpec(kind="tree", path=tmp_path), limit=-1)
    with pytest.raises(SourceConfigError, match="not a directory"):
        read_function_records(SourceSpec(kind="tree", path=tmp_path / "absent"))
    assert read_function_records(SourceSpec(kind="tree", path=tmp_path), limit=0).n_read == 0


def test_repeated_qualnames_get_unique_record_ids_and_the_books_balance(tmp_path):
    # a property getter and setter, and a function defined in both branches of an `if`
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "twice.py").write_text('''import sys


class Box:
    @property
    def size(self):
        """Size of the box in centimetres, as an integer."""
        return self._size

    @size.setter
    def size(self, value):
        """Set the size of the box in centimetres."""
        self._size = value


if sys.platform == "win32":
    def home():
        """Home folder of the user on Windows, where profiles live by default."""
        return "C:/Users"
else:
    def home():
        """Home folder of the user on a POSIX system, where profiles live by default."""
        return "/home"
''')
    result = read_function_records(SourceSpec(kind="tree", path=tmp_path))
    assert_accounted(result)
    ids = [r.record_id for r in result.accepted] + [r.record_id for r in result.rejected]
    assert len(ids) == len(set(ids)) == result.n_read == 4
    assert [r.func_name for r in result.accepted] == ["Box.size", "Box.size@L11", "home", "home@L21"]
    from tasks.dataset.accounting import AccountingError, check_read_ids

    check_read_ids(ids, result.n_read)
    with pytest.raises(AccountingError, match="distinct ids"):
        check_read_ids([ids[0], *ids[:-1]], result.n_read)
