"""The data-flow miner, docstring docs, mined balancing and the mine-tdi flow on small packages."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from schemas.docs import schema_errors
from tasks.mining.docs import docs_from_source
from tasks.mining.dataset import DependencyPair, MinedBalanceConfig, balance_mined, drop_outputs, single_output
from tasks.mining.mine import build_docs, mine_files
from tasks.mining.reasons import MineReason
from tasks.mining.sources import tree_files


def _doc(summary: str) -> str:
    return f'    """{summary}"""\n'


def write_package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


PKG = {
    "pkg/__init__.py": """
        from .core import load_config
        from . import util
    """,
    "pkg/core.py": '''
        def load_config(path):
            """Read the configuration file at path."""
            return {"path": path}


        def connect(config, timeout=3):
            """Open a connection described by config."""
            return object()


        def make_token(user):
            """Make an access token for a user."""
            return user + "-token"


        def undocumented_source(x):
            return x


        def pair(x):
            """Split x into two halves."""
            return [x[:1], x[1:]]                      # a list: which item a, b = pair(x) takes is not known


        def sink(value):
            """Consume a value."""
            return None


        def nothing(x):
            """Log x and return nothing."""
            print(x)


        class Client:
            """A client for the service."""

            def fetch(self, token):
                """Fetch data with a token."""
                return token

            def run(self, user):
                """Fetch for a user."""
                tok = make_token(user)
                return self.fetch(tok)                     # self.method via a local variable
    ''',
    "pkg/util.py": '''
        def undocumented_sink(value):
            return value


        def render(data, fmt="text"):
            """Render data in a format."""
            return str(data)
    ''',
    "pkg/sub/__init__.py": "",
    "pkg/sub/jobs.py": '''
        import pkg.core as core
        from pkg.core import connect as open_connection
        from ..util import render
        from .. import util
        import pkg
        import somewhere_unknown


        def direct():
            """g(f(x))."""
            return open_connection(pkg.load_config("a.ini"))         # import alias + re-export via pkg/__init__


        def keyword():
            """keyword argument."""
            return core.connect(config=core.load_config("b.ini"))      # module.attr, keyword


        def variable():
            """v = f(x); g(v) with a positional argument mapped to its name."""
            tok = core.make_token("bob")
            out = render(tok)                                           # relative import
            return out


        def reassigned():
            """a value killed before the call is not a flow."""
            cfg = core.load_config("c.ini")
            cfg = {}
            return core.connect(cfg)


        def not_passed():
            """a value computed but never passed."""
            cfg = core.load_config("d.ini")
            return core.connect({})


        def undocumented():
            """flows through undocumented functions are rejected."""
            core.sink(core.undocumented_source(1))
            return util.undocumented_sink(core.make_token("x"))


        def unresolved():
            """targets nobody defines are rejected."""
            return somewhere_unknown.consume(core.make_token("y"))


        def unpacked():
            """tuple unpacking is not a flow."""
            a, b = core.pair("xy")
            return core.sink(a)


        def odd_calls():
            """self-flow, an argument beyond the signature, a producer that returns nothing."""
            core.make_token(core.make_token("z"))
            core.sink(1, core.make_token("w"))
            return core.sink(core.nothing(1))


        def repeated():
            """the same pair again is a duplicate."""
            return render(core.make_token("again"))
    ''',
}


@pytest.fixture()
def mined(tmp_path: Path):
    root = write_package(tmp_path / "src", PKG)
    return mine_files(tree_files(root, "tree"), workers=1)


def _pairs(result) -> dict[tuple[str, str], str]:
    return {(f.consumer, f.producer): f.param for f in result.flows}


def test_known_flows_are_mined_with_the_parameter_they_reach(mined) -> None:
    pairs = _pairs(mined)
    assert pairs[("pkg.core.connect", "pkg.core.load_config")] == "config"  # direct, alias, re-export, keyword
    assert pairs[("pkg.util.render", "pkg.core.make_token")] == "data"  # local variable, positional 0 -> name
    assert pairs[("pkg.core.Client.fetch", "pkg.core.make_token")] == "token"  # self.method, bound
    assert len(pairs) == 3
    vias = {(f.consumer, f.producer): f.via for f in mined.flows}
    assert vias[("pkg.core.connect", "pkg.core.load_config")] == "direct"
    assert vias[("pkg.util.render", "pkg.core.make_token")] == "variable"


def test_non_flows_are_rejected_with_their_reasons(mined) -> None:
    reasons = mined.reason_counts()
    by_reason = {}
    for r in mined.rejections:
        by_reason.setdefault(r.reason, []).append(r)
    assert reasons[MineReason.UNDOCUMENTED_PRODUCER] == 1  # sink(undocumented_source(1))
    assert reasons[MineReason.UNDOCUMENTED_CONSUMER] == 1  # util.undocumented_sink(...)
    assert reasons[MineReason.TUPLE_UNPACK] == 1
    assert reasons[MineReason.SELF_FLOW] == 1
    assert reasons[MineReason.BAD_ARGUMENT_POSITION] == 1  # sink(1, make_token(...))
    assert reasons[MineReason.PRODUCER_RETURNS_NOTHING] == 1
    assert reasons[MineReason.DUPLICATE_FLOW] == 2  # render(make_token(...)) again; connect(config=load_config(...)) after direct()
    unresolved = [r.detail for r in by_reason[MineReason.UNRESOLVED_TARGET]]
    assert any("somewhere_unknown.consume" in d for d in unresolved)
    # the reassigned and the never-passed value produce no candidate at all
    ids = {r.record_id for r in mined.rejections} | {f.record_id for f in mined.flows}
    assert not any(":reassigned:" in i or ":not_passed:" in i for i in ids if "core.load_config" in i)
    assert not any(f.record_id.startswith("pkg.sub.jobs:reassigned") or f.record_id.startswith("pkg.sub.jobs:not_passed") for f in mined.flows)


def test_a_parameter_that_many_producers_reach_is_a_generic_sink(tmp_path: Path) -> None:
    producers = "\n".join(f'def make_{k}():\n    """Make value {k}."""\n    return {k}\n' for k in range(4))
    files = {
        "sinkpkg/__init__.py": "",
        "sinkpkg/lib.py": producers + '''
def assert_same(actual, expected=None):
    """Check a value."""
    return actual == expected


def use(token):
    """Use a token."""
    return token
''',
        "sinkpkg/flows.py": "from sinkpkg.lib import assert_same, make_0, make_1, make_2, make_3, use\n\n" + "\n".join(
            f'def check_{k}():\n    """Check {k}."""\n    return assert_same(make_{k}())\n' for k in range(4))
        + '\ndef run():\n    """Run."""\n    return use(make_0())\n',
    }
    root = write_package(tmp_path / "src", files)
    strict = mine_files(tree_files(root, "tree"), workers=1, max_producers_per_param=3)
    assert set(_pairs(strict)) == {("sinkpkg.lib.use", "sinkpkg.lib.make_0")}  # 4 producers reach assert_same(actual)
    sinks = [r for r in strict.rejections if r.reason == MineReason.GENERIC_SINK]
    assert len(sinks) == 4 and "sinkpkg.lib.assert_same(actual) takes values from 4 producers" in sinks[0].detail
    assert len(strict.flows) + len(strict.rejections) == strict.candidates
    assert "sinkpkg.lib.assert_same" not in strict.targets  # no doc is built for a tool no pair uses
    loose = mine_files(tree_files(root, "tree"), workers=1, max_producers_per_param=None)
    assert len(loose.flows) == 5 and MineReason.GENERIC_SINK not in loose.reason_counts()


def test_every_candidate_ends_accepted_or_rejected(mined) -> None:
    assert len(mined.flows) + len(mined.rejections) == mined.candidates
    assert len({f.record_id for f in mined.flows} | {r.record_id for r in mined.rejections}) == mined.candidates
    assert mined.files_parsed + len(mined.file_rejections) == mined.files_read == len(PKG) == 5


def test_unparsable_and_oversized_files_are_rejected_sources(tmp_path: Path) -> None:
    root = write_package(tmp_path / "src", {"bad/__init__.py": "", "bad/broken.py": "def f(:\n", "bad/ok.py": "x = 1\n"})
    (root / "bad" / "tests").mkdir()
    (root / "bad" / "tests" / "test_x.py").write_text("def test(): pass\n")  # test folders: read for flows only
    (root / "bad" / "huge.py").write_text("x = 1\n" * 200_000)
    result = mine_files(tree_files(root, "tree"), workers=1)
    assert result.files_read == 5
    assert result.file_reason_counts() == {MineReason.FILE_TOO_LARGE: 1, MineReason.SYNTAX_ERROR: 1}
    assert [i.module for i in tree_files(root, "tree") if i.flows_only] == ["bad.tests.test_x"]
    assert len(tree_files(root, "tree", tests=False)) == 4


GOOGLE = '''
def get_user_token(user: str, scope="read") -> str:
    """Fetch a user's token.

    Longer text.

    Args:
        user: The user name.
        scope (str): The scope.

    Returns:
        The token string.
    """
    return "t"
'''
NUMPY = '''
def load_frame(path, *args, **kwargs):
    """Load a data frame.

    Parameters
    ----------
    path : str
        Where the file is.
    *args
        Passed on.

    Returns
    -------
    frame : DataFrame
        The loaded data.
    """
    return path
'''
REST = '''
class Store:
    def get_item_count(self, key):
        """Look a key up.

        :param key: the key
        :type key: bytes
        :returns: the stored value
        :rtype: int
        """
        return 1

    def clear(self):
        """Drop everything."""
        self.items = {}
'''


@pytest.mark.parametrize(
    "source,name,inputs,output",
    [
        (GOOGLE, "get_user_token", [("user", "str", "The user name."), ("scope", "str", "The scope.")], ("user_token", "str", "The token string.")),
        (NUMPY, "load_frame", [("path", "str", "Where the file is."), ("args", "any", "Passed on.")], ("frame", "DataFrame", "The loaded data.")),
        (REST, "Store.get_item_count", [("key", "bytes", "the key")], ("item_count", "int", "the stored value")),
    ],
)
def test_docstring_styles_give_schema_valid_docs(source: str, name: str, inputs: list, output: tuple) -> None:
    doc = docs_from_source(source)[name]
    assert schema_errors(doc) == []
    assert doc["name"] == name
    assert [(p["name"], p["type"], p["description"]) for p in doc["input_params"]] == inputs
    assert [(p["name"], p["type"], p["description"]) for p in doc["output_params"]] == [output]


def test_doc_details() -> None:
    docs = docs_from_source(GOOGLE + REST + "\ndef bare(x):\n    return x\n")
    assert docs["get_user_token"]["description"] == "Fetch a user's token.\n\nLonger text."
    assert docs["Store.clear"]["output_params"] == []  # returns nothing: no output
    assert "bare" not in docs  # undocumented: not usable
    assert docs_from_source(NUMPY)["load_frame"]["input_params"][-1]["name"] == "args"  # **kwargs undocumented: left out


def test_hard_negatives_never_pair_known_dependencies() -> None:
    def doc(name: str) -> dict:
        return {"name": name, "description": f"{name} tool", "input_params": [], "output_params": [{"name": "x", "type": "any", "description": ""}]}

    # a dense package: most same-package pairs are known, so a careless sampler would hit them
    names = [f"p{pkg}.m.f{i}" for pkg in range(3) for i in range(8)]
    docs = {n: doc(n) for n in names}
    pairs = []
    for pkg in range(3):
        group = [n for n in names if n.startswith(f"p{pkg}.")]
        for i, a in enumerate(group):
            for b in group[i + 1: i + 5]:
                pairs.append(DependencyPair(f"{a}>{b}", a, b, "mined", f"p{pkg}"))
    balanced = balance_mined(pairs, docs, MinedBalanceConfig(validation_fraction=0.0, output_dropout=0.0, seed=3))
    known = {frozenset((r["tool_a_id"], r["tool_b_id"])) for r in balanced.rows if r["label"] != 1}
    negatives = [r for r in balanced.rows if r["label"] == 1]
    assert len(negatives) == balanced.per_class == len(pairs)
    assert all(frozenset((r["tool_a_id"], r["tool_b_id"])) not in known for r in negatives)
    assert all(r["tool_a_id"] != r["tool_b_id"] for r in negatives)
    assert balanced.negatives.get("hard_negative", 0) > 0
    for r in negatives:
        same = r["source_a"].split(".")[0] == r["source_b"].split(".")[0]
        assert same == (r["origin"] == "hard_negative")


def test_mined_pairs_keep_the_parameter_and_the_producers_single_output() -> None:
    def doc(name: str, inputs: list[str], outputs: list[str]) -> dict:
        p = lambda n: {"name": n, "type": "any", "description": ""}  # noqa: E731
        return {"name": name, "description": f"{name} tool", "input_params": [p(i) for i in inputs], "output_params": [p(o) for o in outputs]}

    docs = {f"p.m.use{i}": doc(f"use{i}", ["path", "mode"], ["status"]) for i in range(40)}
    docs |= {f"p.m.tmp{i}": doc(f"tmp{i}", ["prefix"], ["tmp_dir"]) for i in range(40)}
    docs |= {"p.m.two": doc("two", ["x"], ["a", "b"]), "p.m.user": doc("use_two", ["y"], ["z"])}
    pairs = [DependencyPair(f"r{i}", f"p.m.use{i}", f"p.m.tmp{i}", "mined", "p", "path", single_output(docs[f"p.m.tmp{i}"]))
             for i in range(40)]
    pairs.append(DependencyPair("r-two", "p.m.user", "p.m.two", "mined", "p", "y", single_output(docs["p.m.two"])))
    pairs.append(DependencyPair("r-gone", "p.m.use0", "p.m.two", "mined", "p", "kwargs_key", None))  # no such input
    assert single_output(docs["p.m.tmp0"]) == "tmp_dir" and single_output(docs["p.m.two"]) is None and single_output(None) is None
    balanced = balance_mined(pairs, docs, MinedBalanceConfig(validation_fraction=0.0, output_dropout=0.5, seed=1))
    dependent = [r for r in balanced.rows if r["label"] != 1]
    assert {r["consumer_param"] for r in dependent} == {"path", "y", None}
    dropped = 0
    for r in dependent:
        producer = json.loads(r["doc_b"] if r["label"] == 0 else r["doc_a"])
        if producer["name"].startswith("tmp"):  # the single output, unless dropout removed it (the name says no tmp_dir)
            assert r["producer_output"] == ("tmp_dir" if producer["output_params"] else None)
            dropped += not producer["output_params"]
        else:  # two outputs: which one flows is not known
            assert r["producer_output"] is None
    assert 0 < dropped < 80
    assert all(r["consumer_param"] is None and r["producer_output"] is None for r in balanced.rows if r["label"] == 1)
    assert balanced.parameters["dependent_pairs"] == 42 and balanced.parameters["consumer_param"] == 41
    assert balanced.parameters["by_kind"] == {"data": 42, "precondition": 0}
    assert {r["kind"] for r in dependent} == {"data"} and all(r["kind"] is None for r in balanced.rows if r["label"] == 1)


def test_balance_mined_mixes_data_and_precondition_pairs_and_a_data_pair_wins_its_docs() -> None:
    def doc(name: str, inputs: list[str], outputs: list[str]) -> dict:
        p = lambda n: {"name": n, "type": "any", "description": ""}  # noqa: E731
        return {"name": name, "description": f"{name} tool", "input_params": [p(i) for i in inputs], "output_params": [p(o) for o in outputs]}

    docs = {f"p.m.use{i}": doc(f"use{i}", ["path"], ["status"]) for i in range(20)}
    docs |= {f"p.m.tmp{i}": doc(f"tmp{i}", ["prefix"], ["tmp_dir"]) for i in range(20)}
    docs |= {f"p.m.check{i}": doc(f"check{i}", ["user"], ["ok"]) for i in range(10)}
    data = [DependencyPair(f"d{i:02d}", f"p.m.use{i}", f"p.m.tmp{i}", "mined", "p", "path", "tmp_dir", support=1 + i % 3)
            for i in range(20)]
    # use_i may run only after check_i (no value passed): precondition pairs of their own docs
    pre = [DependencyPair(f"c{i:02d}", f"p.m.use{i}", f"p.m.check{i}", "mined", "p", kind="precondition", support=2)
           for i in range(10)]
    # precondition pairs of docs a data pair links: same direction (record id sorting first), and reversed
    shadows = [DependencyPair("a-shadow", "p.m.use3", "p.m.tmp3", "mined", "p", kind="precondition", support=5),
               DependencyPair("z-shadow", "p.m.tmp4", "p.m.use4", "mined", "p", kind="precondition")]
    balanced = balance_mined([*data, *pre, *shadows], docs, MinedBalanceConfig(validation_fraction=0.2, output_dropout=0.0, seed=2))
    assert sorted((r, reason) for r, reason, _ in balanced.rejections) == [("a-shadow", "balance_kind_conflict"),
                                                                           ("z-shadow", "balance_kind_conflict")]
    assert all("precondition pair" in detail and "data pair of the same docs is kept" in detail for _, _, detail in balanced.rejections)
    assert balanced.per_class == 30 and balanced.parameters["by_kind"] == {"data": 20, "precondition": 10}
    assert balanced.per_class + len(balanced.rejections) == len(data) + len(pre) + len(shadows)
    support = {p.record_id: p.support for p in [*data, *pre]}
    for r in balanced.rows:
        if r["label"] == 1:
            assert (r["kind"], r["support"], r["consumer_param"]) == (None, None, None)
            continue
        consumer = json.loads(r["doc_a"] if r["label"] == 0 else r["doc_b"])
        producer = json.loads(r["doc_b"] if r["label"] == 0 else r["doc_a"])
        if producer["name"].startswith("check"):
            assert (r["kind"], r["consumer_param"], r["producer_output"], r["support"]) == ("precondition", None, None, 2)
        else:
            assert (r["kind"], r["consumer_param"], r["producer_output"]) == ("data", "path", "tmp_dir")
            assert r["support"] == support[f"d{int(consumer['name'][3:]):02d}"]
    # a precondition pair is never also a negative: its docs are known to depend
    known = {frozenset((r["tool_a_id"], r["tool_b_id"])) for r in balanced.rows if r["label"] != 1}
    assert all(frozenset((r["tool_a_id"], r["tool_b_id"])) not in known for r in balanced.rows if r["label"] == 1)
    with pytest.raises(ValueError, match="precondition passes no value"):
        DependencyPair("bad", "p.m.use0", "p.m.check0", "mined", "p", "path", kind="precondition")
    with pytest.raises(ValueError, match="support"):
        DependencyPair("bad", "p.m.use0", "p.m.tmp0", "mined", "p", "path", support=0)


def test_output_dropout_is_seeded_and_keyed() -> None:
    docs = {f"k{i}": {"name": f"k{i}", "description": "d", "input_params": [], "output_params": [{"name": "o", "type": "t", "description": ""}]} for i in range(400)}
    a, n = drop_outputs(docs, 0.3, 7)
    b, _ = drop_outputs(dict(reversed(list(docs.items()))), 0.3, 7)
    assert 80 < n < 160
    assert {k for k, d in a.items() if not d["output_params"]} == {k for k, d in b.items() if not d["output_params"]}


def test_docs_for_targets_are_built(mined) -> None:
    docs = build_docs(list(mined.targets.values()), workers=1)
    assert set(docs) == set(mined.targets)
    assert docs["pkg.core.make_token"]["output_params"][0]["name"] == "token"  # make_token -> token
    assert all(schema_errors(d) == [] for d in docs.values())


def test_outputs_take_the_name_callers_give_the_result(tmp_path: Path) -> None:
    root = write_package(tmp_path, {"lib/__init__.py": "", "lib/ast_tools.py": '''
        def parse(source):
            """Parse source text."""
            return source.split()


        def dump(node):
            """Show a parsed node."""
            return str(node)


        def visit_all(text):
            """Parse and show."""
            node = parse(text)
            tree = parse(text)
            node = parse(text + "!")
            x = parse(text)
            return dump(node)
    '''})
    result = mine_files(tree_files(root, "tree"), workers=1)
    assert result.output_names["lib.ast_tools.parse"] == "node"  # 2 x node, 1 x tree; x is too short to count
    docs = build_docs(list(result.targets.values()), workers=1, output_names=result.output_names)
    assert docs["lib.ast_tools.parse"]["output_params"][0]["name"] == "node"
    assert build_docs(list(result.targets.values()), workers=1)["lib.ast_tools.parse"]["output_params"][0]["name"] == "result"


def _bigger_tree(root: Path, n_modules: int = 6, n_funcs: int = 6) -> Path:
    """Modules whose functions feed each other: enough pairs for both splits."""
    return write_package(root, pipeline_modules(n_modules, n_funcs))


def pipeline_modules(n_modules: int, n_funcs: int) -> dict[str, str]:
    """Source files of package ``lib``: per module, producers, consumers and a pipeline wiring them."""
    files = {"lib/__init__.py": ""}
    for m in range(n_modules):
        lines = []
        for i in range(n_funcs):
            lines.append(f'def produce_{m}_{i}(x):\n    """Produce value {m}.{i} from x."""\n    return x\n\n')
            lines.append(f'def consume_{m}_{i}(value, flag=False):\n    """Consume value {m}.{i}."""\n    return value\n\n')
        lines.append(f'def pipeline_{m}():\n    """Wire the functions."""\n')
        for i in range(n_funcs):
            lines.append(f"    v{i} = produce_{m}_{i}({i})\n    consume_{m}_{i}(v{i})\n    consume_{m}_{(i + 1) % n_funcs}(value=produce_{m}_{i}(0))\n")
        lines.append("    return None\n")
        files[f"lib/mod{m}.py"] = "".join(lines)
    return files


def test_mine_tdi_keeps_a_precondition_stated_in_code_at_support_one(tmp_path: Path, prefect_harness) -> None:
    """A state guard (tasks/mining/state.py) reaches the shards as a kind-precondition pair with support 1 at the
    default --min-order-support 2: the consumer's own code states the order."""
    from flows.mine_tdi import _parse_args, mine_tdi

    files = pipeline_modules(4, 4)
    files["lib/conn.py"] = textwrap.dedent('''
        class Conn:
            """A network connection."""

            def __init__(self, addr):
                self.addr = addr
                self._sock = None

            def connect(self):
                """Open the connection to the address."""
                self._sock = object()

            def send(self, data):
                """Send data over the open connection."""
                if self._sock is None:
                    raise ConnectionError("not connected: call connect() first")
    ''')
    src = write_package(tmp_path / "src", files)
    manifest = mine_tdi(_parse_args(["--source", "tree", "--tree-paths", str(src), "--output-root", str(tmp_path / "out"),
                                     "--workers", "1", "--validation-fraction", "0.2", "--dataset", "stated"]))
    assert manifest["mining"]["precondition_pairs_kept"] == 1 and "rare_order" not in manifest["mining"]["precondition_rejected_by_reason"]
    pre = [r for r in pq.read_table(tmp_path / "out" / "stated" / "shards").to_pylist() if r["kind"] == "precondition"]
    assert len(pre) == 2 and all(r["support"] == 1 for r in pre)  # the pair and its swap
    consumer, producer = (pre[0]["doc_a"], pre[0]["doc_b"]) if pre[0]["label"] == 0 else (pre[0]["doc_b"], pre[0]["doc_a"])
    assert (json.loads(consumer)["name"], json.loads(producer)["name"]) == ("Conn.send", "Conn.connect")


def test_mine_tdi_writes_precondition_pairs_with_support(tmp_path: Path, prefect_harness) -> None:
    """Call order without data flow becomes kind-precondition rows carrying their support; an order seen in
    fewer functions than --min-order-support is rejected as rare_order, and the books still add up."""
    from flows.mine_tdi import _parse_args, mine_tdi

    files = pipeline_modules(4, 4)
    files["lib/files.py"] = textwrap.dedent('''
        def path_exists(path):
            """Tell whether a file is at path."""
            return True


        def delete_file(path):
            """Delete the file at path."""
            pass


        def check_record(record):
            """Raise ValueError when the record is malformed."""
            pass


        def store_record(record):
            """Write the record to the store."""
            pass


        def clean(path):
            """Remove path if it is there."""
            if path_exists(path):
                delete_file(path)


        def clean_twice(path):
            """Remove path, twice over."""
            if path_exists(path):
                delete_file(path)


        def save(record):
            """Check, then store, a record."""
            check_record(record)
            store_record(record)
    ''')
    src = write_package(tmp_path / "src", files)
    args = ["--source", "tree", "--tree-paths", str(src), "--output-root", str(tmp_path / "out"), "--workers", "1",
            "--validation-fraction", "0.2"]
    manifest = mine_tdi(_parse_args([*args, "--dataset", "pre"]))
    mining = manifest["mining"]
    assert mining["accepted_precondition_pairs"] == 2  # path_exists -> delete_file (2 functions), check -> store (1)
    assert mining["precondition_pairs_kept"] == 1 and mining["precondition_rejected_by_reason"]["rare_order"] == 1
    rows = pq.read_table(tmp_path / "out" / "pre" / "shards").to_pylist()
    pre = [r for r in rows if r["kind"] == "precondition"]
    assert len(pre) == 2  # the pair and its swap
    for r in pre:
        consumer, producer = (r["doc_a"], r["doc_b"]) if r["label"] == 0 else (r["doc_b"], r["doc_a"])
        assert (json.loads(consumer)["name"], json.loads(producer)["name"]) == ("delete_file", "path_exists")
        assert r["support"] == 2 and r["consumer_param"] is None and r["producer_output"] is None
    assert all(r["support"] is None for r in rows if r["kind"] == "data")
    assert mining["parameters"]["by_kind"]["precondition"] == 1
    card = (tmp_path / "out" / "pre" / "README.md").read_text()
    assert "precondition candidates" in card and "kept with support >= 2 or stated in code: 1" in card
    con = duckdb.connect(str(tmp_path / "out" / "pre" / "records.duckdb"), read_only=True)
    read, accepted, rejected = con.execute(
        "SELECT (SELECT records_read FROM run_info), count(*) FILTER (WHERE status='accepted'), "
        "count(*) FILTER (WHERE status='rejected') FROM record_outcomes").fetchone()
    assert read == accepted + rejected == manifest["accounting"]["read"]
    assert con.execute("SELECT count(*) FROM record_outcomes WHERE reason = 'rare_order'").fetchone()[0] == 1
    con.close()
    # support 1 keeps both; --no-preconditions mines none and reads no order candidates
    assert mine_tdi(_parse_args([*args, "--dataset", "all", "--min-order-support", "1"]))["mining"]["precondition_pairs_kept"] == 2
    off = mine_tdi(_parse_args([*args, "--dataset", "off", "--no-preconditions"]))["mining"]
    assert off["precondition_candidates"] == 0 and off["parameters"]["by_kind"]["precondition"] == 0
    with pytest.raises(SystemExit):
        _parse_args([*args, "--min-order-support", "0"])


def test_mine_tdi_flow_end_to_end(tmp_path: Path, prefect_harness) -> None:
    from flows.mine_tdi import MineTDIConfig, _parse_args, mine_tdi

    src = _bigger_tree(tmp_path / "src")
    cfg = _parse_args(["--source", "tree", "--tree-paths", str(src), "--output-root", str(tmp_path / "out"),
                       "--dataset", "mini", "--workers", "1", "--validation-fraction", "0.2"])
    assert isinstance(cfg, MineTDIConfig) and cfg.per_class is None and cfg.output_dropout == 0.3
    manifest = mine_tdi(cfg)
    out = tmp_path / "out" / "mini"
    table = pq.read_table(out / "shards")
    rows = table.to_pylist()
    assert manifest["mining"]["accepted_pairs"] == 6 * 6 * 2
    assert manifest["mining"]["inherited_docstrings"] == 0  # no classes in this tree
    assert manifest["quality"]["success"] and json.loads((out / "quality.json").read_text())["success"]
    labels = [r["label"] for r in rows]
    assert labels.count(0) == labels.count(1) == labels.count(2) == manifest["per_class"] > 0
    assert {r["origin"] for r in rows} <= {"mined", "mined_swapped", "hard_negative", "shuffled"}
    assert {r["split"] for r in rows} == {"train", "validation"}
    assert all(schema_errors(json.loads(r["doc_a"])) == [] for r in rows)
    assert 0 < manifest["mining"]["docs_outputs_dropped"] < manifest["mining"]["docs"]
    # the mined flow's parameter reaches the row: consume_*(value) takes produce_*'s return value
    for r in rows:
        if r["label"] == 1:
            assert (r["consumer_param"], r["producer_output"]) == (None, None)
            continue
        consumer, producer = (r["doc_a"], r["doc_b"]) if r["label"] == 0 else (r["doc_b"], r["doc_a"])
        assert json.loads(consumer)["name"].startswith("consume_") and r["consumer_param"] == "value"
        assert r["producer_output"] == json.loads(producer)["name"]  # produce_m_i: no producer verb, its name
    assert manifest["mining"]["parameters"] == {"dependent_pairs": manifest["per_class"], "consumer_param": manifest["per_class"],
                                                "producer_output": manifest["per_class"],
                                                "by_kind": {"data": manifest["per_class"], "precondition": 0}}
    assert {r["kind"] for r in rows if r["label"] != 1} == {"data"}
    per_split = {s: sum(r["label"] == 0 for r in rows if r["split"] == s) for s in ("train", "validation")}
    assert manifest["dependent_pairs_by_kind"] == {s: {"data": n, "precondition": 0} for s, n in per_split.items()}
    card = (out / "README.md").read_text()
    assert "`consumer_param`" in card and "`kind`" in card
    assert all(f"| {s} | {n} | 0 |" in card for s, n in per_split.items())
    con = duckdb.connect(str(out / "records.duckdb"), read_only=True)
    read, accepted, rejected = con.execute(
        "SELECT (SELECT records_read FROM run_info), count(*) FILTER (WHERE status='accepted'), count(*) FILTER (WHERE status='rejected') FROM record_outcomes"
    ).fetchone()
    assert read == accepted + rejected == manifest["accounting"]["read"]
    assert con.execute("SELECT count(*) FROM record_outcomes WHERE reason='in_dataset'").fetchone()[0] == manifest["per_class"]
    con.close()
    card = (out / "README.md").read_text()  # the hub's YAML metadata first (tests/test_hub.py), then the title
    assert card.startswith("---\n") and "\n---\n\n# mini: mined TDI" in card

    # a per-class cap keeps the books balanced: the surplus is rejected with a reason
    capped = mine_tdi(_parse_args(["--source", "tree", "--tree-paths", str(src), "--output-root", str(tmp_path / "out"),
                                   "--dataset", "capped", "--workers", "1", "--per-class", "10"]))
    assert capped["per_class"] == 10
    assert capped["accounting"]["by_reason"]["balance_surplus"] == 72 - 10


@pytest.mark.parametrize("version", [1, 2, 3])
def test_mixed_llm_pairs_carry_what_their_source_has(tmp_path: Path, prefect_harness, version: int) -> None:
    import pyarrow as pa

    from flows.mine_tdi import _parse_args, mine_tdi
    from schemas.tdi import TDI_PAIR_SCHEMA
    from tasks.dataset.balance import BalanceConfig, balance_pairs
    from tests.test_balance_shards import _pairs

    llm = balance_pairs(_pairs(12, precondition_every=3 if version == 3 else 0), BalanceConfig(per_class=12, validation_fraction=0.0)).rows
    table = pa.Table.from_pylist(llm, schema=TDI_PAIR_SCHEMA)
    if version < 3:  # a published dataset from before the kind columns (data pairs only)
        table = table.drop_columns(["kind", "support"]).replace_schema_metadata({"tgr.schema_version": "2"})
    if version == 1:  # a published dataset from before the parameter columns
        table = table.drop_columns(["consumer_param", "producer_output"]).replace_schema_metadata({"tgr.schema_version": "1"})
    (tmp_path / "llm" / "shards").mkdir(parents=True)
    pq.write_table(table, tmp_path / "llm" / "shards" / "train-00000-of-00001.parquet")
    src = _bigger_tree(tmp_path / "src", 2, 4)
    mine_tdi(_parse_args(["--source", "tree", "--tree-paths", str(src), "--output-root", str(tmp_path / "out"), "--dataset", "mix",
                          "--workers", "1", "--mix-tdi", str(tmp_path / "llm"), "--output-dropout", "0"]))
    rows = pq.read_table(tmp_path / "out" / "mix" / "shards").to_pylist()
    source = {(r["tool_a_id"], r["tool_b_id"]): (r["consumer_param"], r["producer_output"], r["kind"]) for r in llm if r["label"] == 0}
    mixed = [r for r in rows if r["origin"] in ("validated", "swapped")]
    assert len(mixed) == 2 * len(source)
    for r in mixed:
        key = (r["tool_a_id"], r["tool_b_id"]) if r["label"] == 0 else (r["tool_b_id"], r["tool_a_id"])
        assert (r["consumer_param"], r["producer_output"], r["kind"]) == (source[key] if version > 1 else (None, None, "data"))
        assert r["support"] is None  # LLM pairs: not counted
    assert (version == 3) == any(r["kind"] == "precondition" for r in mixed)
    assert all(r["consumer_param"] is not None for r in rows if r["origin"] in ("mined", "mined_swapped"))


def test_failing_quality_gate_publishes_no_shards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefect_harness) -> None:
    import flows.mine_tdi as mt
    import tasks.dataset.gate as gate
    from tasks.dataset.quality import QualityGateError, QualityReport

    src = _bigger_tree(tmp_path / "src", n_modules=2, n_funcs=3)
    monkeypatch.setattr(gate, "validate_shards", lambda d, progress=None: QualityReport(success=False, checks=[{"success": False, "expectation": "injected"}]))
    with pytest.raises(QualityGateError):
        mt.mine_tdi(mt._parse_args(["--source", "tree", "--tree-paths", str(src), "--output-root", str(tmp_path / "out"),
                                    "--dataset", "bad", "--workers", "1"]))
    out = tmp_path / "out" / "bad"
    assert not (out / "shards").exists() and not (out / "manifest.json").exists()
    assert list((out / ".failed" / "shards").glob("*.parquet"))  # kept for inspection, never published
    assert (out / "records.duckdb").exists()


def _shard_hashes(manifest: dict) -> list[tuple[str, str]]:
    return [(s["file"], s["sha256"]) for s in manifest["shards"]]


def test_a_rerun_from_the_pin_mines_the_same_pairs_and_an_edited_file_is_refused(tmp_path: Path, prefect_harness) -> None:
    from flows.mine_tdi import _parse_args, mine_tdi
    from tasks.mining.pin import PinError

    src = _bigger_tree(tmp_path / "src", n_modules=4, n_funcs=5)
    args = ["--source", "tree", "--tree-paths", str(src), "--output-root", str(tmp_path / "out"), "--workers", "1"]
    first = mine_tdi(_parse_args([*args, "--dataset", "first"]))
    pin = tmp_path / "out" / "first" / "sources.json"  # published with the shards, beside the manifest
    described = json.loads(pin.read_text())
    assert [(r["rel"], r["module"]) for r in described["files"]] == [("lib/__init__.py", "lib")] + [
        (f"lib/mod{m}.py", f"lib.mod{m}") for m in range(4)]
    assert all(len(r["sha256"]) == 64 for r in described["files"])
    (package,) = first["sources"]["packages"]  # one tree package, no distribution: its hash is its identity
    assert (package["origin"], package["package"], package["version"], package["files"]) == ("tree", "lib", None, 5)
    assert first["sources"]["sha256"] == described["sha256"] and "files" not in first["sources"]

    # the tree grows: a plain rerun mines more pairs, a rerun from the pin mines exactly the pinned files
    write_package(src, {"lib/extra.py": pipeline_modules(1, 5)["lib/mod0.py"].replace("_0_", "_9_").replace("_0(", "_9(")})
    grown = mine_tdi(_parse_args([*args, "--dataset", "grown"]))
    assert grown["mining"]["accepted_pairs"] > first["mining"]["accepted_pairs"]
    pinned = mine_tdi(_parse_args([*args, "--dataset", "pinned", "--pin", str(pin)]))
    assert _shard_hashes(pinned) == _shard_hashes(first) and pinned["mining"]["files_read"] == 5
    assert pinned["sources"]["sha256"] == first["sources"]["sha256"] and pinned["sources"]["pinned_from"] == str(pin)
    assert mine_tdi(_parse_args([*args, "--dataset", "again", "--pin", str(tmp_path / "out" / "first")]))["shards"] == pinned["shards"]

    # an edited pinned file is caught before anything is mined or published
    edited = src / "lib" / "mod2.py"
    edited.write_text(edited.read_text() + "\n# edited\n")
    with pytest.raises(PinError, match=r"1 of 5 pinned source files.*0 missing; 1 changed \(.*lib/mod2\.py \(pinned sha256"):
        mine_tdi(_parse_args([*args, "--dataset", "pinned", "--pin", str(pin)]))
    (src / "lib" / "mod3.py").unlink()
    with pytest.raises(PinError, match=r"2 of 5 .*1 missing \(tree:lib/mod3\.py\); 1 changed"):
        mine_tdi(_parse_args([*args, "--dataset", "pinned", "--pin", str(pin)]))
    assert _shard_hashes(json.loads((tmp_path / "out" / "pinned" / "manifest.json").read_text())) == _shard_hashes(first)


def test_a_pin_finds_installed_sources_under_this_interpreters_roots(tmp_path: Path, monkeypatch, prefect_harness) -> None:
    """A pin of site-packages made in one venv applies in another (a fresh clone's .venv elsewhere)."""
    import shutil

    import flows.mine_tdi as mt
    import tasks.mining.sources as sources

    real = sources.default_roots

    def roots_at(folder: Path) -> None:  # this interpreter's site-packages is at folder
        def fake(kind: str) -> list[Path]:
            return [folder] if kind == "site-packages" else real(kind)

        monkeypatch.setattr(mt, "default_roots", fake)
        monkeypatch.setattr(sources, "default_roots", fake)

    old = _bigger_tree(tmp_path / "venv-a" / "site-packages", n_modules=3, n_funcs=5)
    args = ["--source", "site-packages", "--output-root", str(tmp_path / "out"), "--workers", "1"]
    roots_at(old)
    first = mt.mine_tdi(mt._parse_args([*args, "--dataset", "first"]))
    shutil.copytree(old, tmp_path / "venv-b" / "site-packages")
    shutil.rmtree(tmp_path / "venv-a")
    roots_at(tmp_path / "venv-b" / "site-packages")
    pin = tmp_path / "out" / "first" / "sources.json"
    pinned = mt.mine_tdi(mt._parse_args([*args, "--dataset", "pinned", "--pin", str(pin)]))
    assert _shard_hashes(pinned) == _shard_hashes(first) and pinned["sources"]["sha256"] == first["sources"]["sha256"]
    roots = {r["root"] for r in json.loads((tmp_path / "out" / "pinned" / "sources.json").read_text())["files"]}
    assert roots == {str(tmp_path / "venv-b" / "site-packages")}
    (package,) = pinned["sources"]["packages"]  # no installed distribution lists these files
    assert (package["origin"], package["package"], package["distribution"], package["version"]) == ("site-packages", "lib", None, None)


def test_the_package_table_names_distributions_and_versions() -> None:
    import importlib.metadata
    import platform
    import sysconfig

    from tasks.mining.pin import file_records, package_table
    from tasks.mining.sources import FileItem

    dist = importlib.metadata.distribution("pytest")
    rel = next(f for f in dist.files if f.suffix == ".py" and f.parts[0] == "_pytest")
    site = Path(dist.locate_file(""))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    items = [FileItem(str(site / rel), ".".join(rel.with_suffix("").parts), False, "site-packages", False, str(site)),
             FileItem(str(stdlib / "json" / "__init__.py"), "json", True, "stdlib", False, str(stdlib)),
             FileItem(str(stdlib / "json" / "decoder.py"), "json.decoder", False, "stdlib", False, str(stdlib))]
    table = {p["package"]: p for p in package_table(file_records(items))}
    assert (table["pytest"]["distribution"], table["pytest"]["version"], table["pytest"]["files"]) == ("pytest", dist.version, 1)
    assert (table["stdlib"]["version"], table["stdlib"]["files"]) == (platform.python_version(), 2)


def test_pin_options_are_checked_with_the_config(tmp_path: Path) -> None:
    from flows.mine_tdi import MineTDIConfig
    from tasks.mining.pin import PinError, describe_sources, write_sources

    pin = write_sources(tmp_path, describe_sources([]))
    assert MineTDIConfig(pin=str(pin)).pin == str(pin) and MineTDIConfig(pin=str(tmp_path)).pin == str(tmp_path)
    with pytest.raises(ValueError, match="--limit-files 5 would sample it again"):
        MineTDIConfig(pin=str(pin), limit_files=5)
    with pytest.raises(ValueError, match="cannot be pinned"):
        MineTDIConfig(pin=str(pin), source=("tree", "codesearchnet"), codesearchnet_path="x")
    with pytest.raises(PinError, match="not a readable sources.json"):
        MineTDIConfig(pin=str(tmp_path / "nowhere.json"))
    (tmp_path / "other.json").write_text(json.dumps({"files": []}))
    with pytest.raises(PinError, match="not a sources.json of format"):
        MineTDIConfig(pin=str(tmp_path / "other.json"))


def _csn_line(func_name: str, code: str) -> str:
    record = {"repo": "acme/tools", "path": "acme/net.py", "func_name": func_name, "original_string": code,
              "language": "python", "code": code, "code_tokens": [], "docstring": "", "docstring_tokens": [],
              "sha": "0" * 40, "url": "", "partition": "train"}
    return json.dumps(record)


def test_codesearchnet_records_resolve_within_the_record_set(tmp_path: Path) -> None:
    from flows.mine_tdi import _codesearchnet_modules
    from tasks.mining.mine import resolve_flows

    folder = tmp_path / "csn" / "python" / "final" / "jsonl"
    records = [
        ("fetch_page", 'def fetch_page(url):\n    """Download a page."""\n    return url\n'),
        ("parse_links", 'def parse_links(html):\n    """Links in a page."""\n    return [html]\n'),
        ("crawl", 'def crawl(url):\n    """Crawl from url."""\n    page = fetch_page(url)\n    return parse_links(page)\n'),
        ("Spider.run", 'def run(self, url):\n    """Run the spider."""\n    return self.visit(fetch_page(url))\n'),
        ("Spider.visit", 'def visit(self, html):\n    """Visit a page."""\n    return html\n'),
    ]
    for part in ("train", "valid", "test"):
        (folder / part).mkdir(parents=True)
    (folder / "train" / "part.jsonl").write_text("\n".join(_csn_line(n, c) for n, c in records) + "\n")
    modules, n_read = _codesearchnet_modules(str(tmp_path / "csn"))
    result = resolve_flows(modules, n_read)
    pairs = {(f.consumer.split(":", 1)[1], f.producer.split(":", 1)[1], f.param) for f in result.flows}
    assert pairs == {("acme.net.parse_links", "acme.net.fetch_page", "html"), ("acme.net.Spider.visit", "acme.net.fetch_page", "html")}
    assert len(result.flows) + len(result.rejections) == result.candidates


# -- resolution rules, one small package each ------------------------------------------------------
def _mine(tmp_path: Path, files: dict[str, str]):
    result = mine_files(tree_files(write_package(tmp_path / "src", files), "tree"), workers=1)
    assert len(result.flows) + len(result.rejections) == result.candidates
    return result


def _flowing(result) -> set[str]:
    """Functions with a candidate accepted, or rejected only as a repeat of an accepted pair."""
    return {i.split(":")[1] for i in [f.record_id for f in result.flows]
            + [r.record_id for r in result.rejections if r.reason == MineReason.DUPLICATE_FLOW]}


def _reasons_at(result, function: str) -> dict[str, str]:
    """record id (without the module) -> rejection reason, for the candidates of one function."""
    return {r.record_id.split(":", 1)[1]: r.reason for r in result.rejections if r.record_id.split(":")[1] == function}


LIB = '''
    from typing import Optional


    def make_user(name):
        """Make a user record."""
        return {"name": name}


    def send(user, text=""):
        """Send a text to a user."""
        return True


    class Base:
        """A base client."""

        def post(self, payload):
            """Post a payload."""
            return payload


    class Client(Base):
        """A client."""

        def __init__(self, url):
            self.url = url

        def get(self, user):
            """Get the data of a user."""
            return user

        def copy(self):
            """A copy of the client."""
            return self

        @classmethod
        def create(cls, url):
            """A client for url."""
            return cls(url)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False


    class Other:
        """Another class with a get."""

        def get(self, user):
            """Get something else."""
            return user


    def connect(url) -> Client:
        """Connect to url."""
        return Client(url)


    def maybe_connect(url) -> Optional[Client]:
        """Connect to url, or not."""
        return None


    def open_client(url):
        """Open a client (unannotated: the body returns Client(...))."""
        return Client(url)


    def unknown_thing(url):
        """Something of unknown type."""
        return url.thing()
'''


def test_local_types_resolve_methods(tmp_path: Path) -> None:
    result = _mine(tmp_path, {"app/__init__.py": "", "app/lib.py": LIB, "app/use.py": '''
        from typing import Optional

        from app.lib import Client, connect, make_user, maybe_connect, open_client, unknown_thing


        def by_constructor():
            c = Client("u")
            return c.get(make_user("a"))                  # x = Foo(...); x.m()


        def inherited():
            c = Client("u")
            return c.post(make_user("b"))                 # a method of the base class


        def by_parameter(c: Client, o: "Optional[Client]", p: Client | None):
            return c.get(make_user("c")), o.post(make_user("d")), p.post(make_user("d2"))


        def by_annotated_variable():
            c: Client = unknown_thing("u")
            return c.get(make_user("e"))


        def by_return_annotation():
            c = connect("u")
            d = maybe_connect("u")
            return c.get(make_user("f")), d.post(make_user("g"))


        def by_inferred_return():
            c = open_client("u").copy()                   # return Client(...), then return self
            return c.get(make_user("h")), Client.create("u").post(make_user("i"))


        def by_with():
            with Client("u") as c:                        # __enter__ returns self
                return c.get(make_user("j"))


        class Service:
            """A service holding a client."""

            def __init__(self, url: str, backup: Client):
                self.client = Client(url)
                self.backup = backup

            def run(self):
                """Run."""
                return self.client.get(make_user("k")), self.backup.post(make_user("l"))


        def unknown_type(c):
            return c.get(make_user("m"))                  # a parameter without annotation: unknown


        def unknown_return():
            c = unknown_thing("u")
            return c.get(make_user("n"))                  # unannotated, returns something of unknown type


        class Mixed:
            """An attribute given two types."""

            def __init__(self):
                self.c = Client("u")

            def reset(self, other):
                self.c = other

            def run(self):
                """Run."""
                return self.c.get(make_user("o"))
    '''})
    # the pairs (Client.get, make_user) and (Base.post, make_user): first found, then duplicates of them
    assert {(f.consumer, f.producer, f.param) for f in result.flows} == {
        ("app.lib.Client.get", "app.lib.make_user", "user"), ("app.lib.Base.post", "app.lib.make_user", "payload")}
    first = {f.record_id: f.consumer for f in result.flows}
    calls = [(r.record_id.split(":")[1], r.record_id.split(":")[3], first[r.detail.removeprefix("same pair as ")])
             for r in result.rejections if r.reason == MineReason.DUPLICATE_FLOW]  # (function, column, consumer)
    assert ("by_annotated_variable", "11", "app.lib.Client.get") in calls  # c: Client = unknown_thing(...)
    assert ("by_return_annotation", "11", "app.lib.Client.get") in calls  # -> Client
    assert ("by_with", "15", "app.lib.Client.get") in calls  # with Client(...) as c: __enter__ returns self
    assert ("by_parameter", "11", "app.lib.Client.get") in calls  # c: Client
    assert ("by_parameter", "34", "app.lib.Base.post") in calls  # o: "Optional[Client]"
    assert ("by_parameter", "58", "app.lib.Base.post") in calls  # p: Client | None
    assert ("by_return_annotation", "34", "app.lib.Base.post") in calls  # -> Optional[Client]
    assert ("by_inferred_return", "11", "app.lib.Client.get") in calls  # return Client(...), then return self
    assert ("by_inferred_return", "34", "app.lib.Base.post") in calls  # return cls(...) in a classmethod
    assert ("Service.run", "15", "app.lib.Client.get") in calls  # self.client = Client(url)
    assert ("Service.run", "48", "app.lib.Base.post") in calls  # self.backup = backup, a parameter annotated Client
    for function in ("unknown_type", "unknown_return", "Mixed.run"):  # unannotated parameter, unknown return, two types
        assert set(_reasons_at(result, function).values()) == {MineReason.UNRESOLVED_TARGET}, function


def test_tuple_unpacking_when_the_producer_gives_a_fixed_tuple(tmp_path: Path) -> None:
    result = _mine(tmp_path, {"t/__init__.py": "", "t/m.py": '''
        def split(x):
            """Split x into a head and a tail."""
            if not x:
                return None, None
            return x[:1], x[1:]


        def pair(x) -> tuple[str, int]:
            """A name and a count."""
            return make(x)


        def make(x):
            return x


        def features(x):
            """Samples and labels.

            Returns
            -------
            X : list
                The samples.
            y : list
                The labels.
            """
            return make(x)


        def many(x):
            """As many parts as there are."""
            return x.split()


        def use(part):
            """Use one part."""
            return part


        def ok():
            head, tail = split("abc")
            name, count = pair("n")
            X, y = features("d")                           # the docstring names two returned items
            use(tail)
            use(y)
            return use(name)


        def not_ok():
            a, b = many("a b")
            c, d, e = split("xy")                          # 3 names, 2 items
            (f, g), h = split("xy")                        # nested: which element is unknown
            p, q, r = features("e")                        # 3 names, 2 documented items
            use(a)
            use(d)
            use(r)
            return use(f)
    '''})
    pairs = {(f.consumer, f.producer): f.via for f in result.flows}
    assert pairs == {("t.m.use", "t.m.split"): "tuple_element", ("t.m.use", "t.m.pair"): "tuple_element",
                     ("t.m.use", "t.m.features"): "tuple_element"}
    assert sorted(_reasons_at(result, "not_ok").values()) == [MineReason.TUPLE_UNPACK] * 4
    details = [r.detail for r in result.rejections]
    assert any("is not known to return a tuple" in d for d in details) and any("returns 2-item tuples" in d for d in details)


def test_loop_items_of_producers_that_give_items(tmp_path: Path) -> None:
    result = _mine(tmp_path, {"l/__init__.py": "", "l/m.py": '''
        from typing import Iterator


        def users():
            """Every user."""
            yield "a"


        def names() -> list[str]:
            """Every name."""
            return []


        def config():
            """A config value (a str: iterating gives characters)."""
            return "abc"


        def greet(user):
            """Greet a user."""
            return user


        def ok():
            for user in users():
                greet(user)
            for i, name in enumerate(names()):
                greet(name)


        def not_ok():
            for c in config():
                greet(c)
    '''})
    assert {(f.consumer, f.producer, f.via) for f in result.flows} == {("l.m.greet", "l.m.users", "loop_item"), ("l.m.greet", "l.m.names", "loop_item")}
    assert list(_reasons_at(result, "not_ok").values()) == [MineReason.LOOP_ITEM]


def test_aliases_conversions_and_call_receivers(tmp_path: Path) -> None:
    result = _mine(tmp_path, {"a/__init__.py": "", "a/m.py": '''
        import typing


        def load(path):
            """Load a file."""
            return path


        def save(data):
            """Save data."""
            return True


        def measure(data):
            """Measure data."""
            return 1


        class Store:
            """A store."""

            def put(self, item):
                """Put an item."""
                return item

            add = put                                      # a method alias in the class body

            def fill(self):
                """Fill the store."""
                insert = self.add                          # fn = self.method
                return insert(load("x"))


        Load = Persist = load                              # module-level aliases, two targets
        T = typing.TypeVar("T")


        class Registry:
            """Registered loaders."""

            __call__ = staticmethod(load)                  # an instance call is a call of load


        class Box(typing.Generic[T]):
            """A box."""

            def put(self, item):
                """Put an item in the box."""
                return item


        class IntBox(Box[int]):                            # the base of Box[int] is Box
            """A box of ints."""


        def generic_base():
            return IntBox().put(load("g"))


        def static_alias():
            r = Registry()
            return save(r("h"))


        def aliases():
            keep = save
            v = Load("a")
            w = v                                          # w holds what v holds
            return keep(w)


        def conversions():
            measure(list(load("b")))
            measure(str(load("c")))
            data = sorted(load("d"), key=len)
            return save(typing.cast(str, data))


        def receivers():
            return Store().put(Persist("e"))               # Foo(...).m()


        def not_flows():
            n = len(load("f"))                             # len is no conversion: n is not the data
            return save(n)
    '''})
    pairs = {(f.consumer, f.producer) for f in result.flows}
    assert ("a.m.Store.put", "a.m.load") in pairs  # fill: alias of self.add -> put; receivers: Store().put
    assert ("a.m.save", "a.m.load") in pairs and ("a.m.measure", "a.m.load") in pairs
    assert _flowing(result) == {"Store.fill", "aliases", "conversions", "receivers", "generic_base", "static_alias"}
    assert ("a.m.Box.put", "a.m.load") in pairs
    assert set(_reasons_at(result, "not_flows").values()) == {MineReason.UNRESOLVED_TARGET}  # len(load(...)), save(len(...))


def test_module_globals_and_attributes_bound_once(tmp_path: Path) -> None:
    result = _mine(tmp_path, {"g/__init__.py": "", "g/core.py": '''
        def load_settings():
            """Load the settings."""
            return {}


        def apply(settings):
            """Apply settings."""
            return settings


        def connect():
            """Open a connection."""
            return object()


        def query(conn, sql=""):
            """Run a query."""
            return []


        class Registry:
            """A registry of values."""

            def __call__(self, value):
                """Register a value."""
                return value

            def lookup(self, key):
                """Look a key up."""
                return key


        SETTINGS = load_settings()                         # bound once: functions see its value
        REG = Registry()                                   # a module-level instance
        LATER = load_settings()
        LATER = None                                       # bound twice: unknown


        def use_global():
            apply(LATER)
            return apply(SETTINGS)


        class Repo:
            """A repository."""

            def __init__(self):
                self.conn = connect()                      # the only binding of self.conn
                self.other = connect()

            def reset(self):
                self.other = None

            def rows(self):
                """All rows."""
                query(self.other)
                return query(self.conn)


        if __name__ == "__main__":                         # module-level statements are a body too
            apply(load_settings())
    ''', "g/use.py": '''
        from g.core import REG, load_settings


        def register():
            REG.lookup(load_settings())
            return REG(load_settings())                    # an instance call: Registry.__call__, self bound
    '''})
    flows = {(f.record_id.split(":")[1], f.consumer, f.producer, f.param, f.via) for f in result.flows}
    assert ("use_global", "g.core.apply", "g.core.load_settings", "settings", "global") in flows
    assert ("Repo.rows", "g.core.query", "g.core.connect", "conn", "attribute_once") in flows
    assert ("register", "g.core.Registry.__call__", "g.core.load_settings", "value", "direct") in flows
    assert ("register", "g.core.Registry.lookup", "g.core.load_settings", "key", "direct") in flows
    assert "<module>" in _flowing(result)
    assert len([f for f in flows if f[0] == "use_global"]) == 1 and len([f for f in flows if f[0] == "Repo.rows"]) == 1


def test_constructor_signatures(tmp_path: Path) -> None:
    result = _mine(tmp_path, {"c/__init__.py": "", "c/m.py": '''
        from dataclasses import dataclass


        def text():
            """Some text."""
            return "t"


        class Expr:
            """An expression."""

            _cache: dict = {}                              # a private annotated class attribute: no parameter

            def __new__(cls, *args):
                return object.__new__(cls)


        @dataclass
        class Point:
            """A point."""

            label: str
            _hidden: int = 0


        class Make:
            """Factories."""

            @staticmethod
            def build(spec):
                """Build from a spec; spec is a plain parameter here, not self."""
                return spec.render(text())


        def use():
            Expr(text())                                   # reaches __new__'s undocumented *args
            return Point(text())
    '''})
    assert {(f.consumer, f.param) for f in result.flows} == {("c.m.Point", "label")}
    assert set(_reasons_at(result, "use").values()) == {MineReason.UNDOCUMENTED_PARAMETER}
    assert set(_reasons_at(result, "Make.build").values()) == {MineReason.UNRESOLVED_TARGET}


def test_test_code_gives_flows_but_no_tools(tmp_path: Path) -> None:
    result = _mine(tmp_path, {"lib/__init__.py": "", "lib/core.py": '''
        def parse(text):
            """Parse text."""
            return text.split()


        def render(tree):
            """Render a parsed tree."""
            return " ".join(tree)
    ''', "lib/tests/__init__.py": "", "lib/tests/test_core.py": '''
        from lib.core import parse, render


        def helper(x):
            """A documented test helper: never a tool."""
            return x


        def test_roundtrip():
            tree = parse("a b")
            assert render(tree) == "a b"
            assert helper(parse("c")) == ["c"]
    '''})
    assert {(f.consumer, f.producer) for f in result.flows} == {("lib.core.render", "lib.core.parse")}
    assert "lib.tests.test_core.helper" not in result.documented
    assert list(_reasons_at(result, "test_roundtrip").values()) == [MineReason.UNRESOLVED_TARGET]  # helper(parse("c"))


def test_overloads_properties_and_repeated_defs(tmp_path: Path) -> None:
    result = _mine(tmp_path, {"o/__init__.py": "", "o/m.py": '''
        from typing import overload


        @overload
        def conv(x: int) -> int: ...
        @overload
        def conv(x: str) -> str: ...
        def conv(x):
            """Convert x (the implementation after its @overload signatures)."""
            return x


        if FLAG:
            def pick(x):
                """Pick x."""
                return x
        else:
            def pick(x):
                """Pick x."""
                return x                                   # the same def in both branches


        if FLAG:
            def choose(x):
                """Choose x."""
                return x
        else:
            def choose(y):
                """Choose y another way."""
                return y                                   # two different defs: which one runs is unknown


        class Thing:
            """A thing."""

            @property
            def size(self):
                """The size."""
                return 1

            def grow(self, n):
                """Grow by n."""
                return n


        def use():
            t = Thing()
            t.grow(conv(1))
            t.grow(pick(1))
            t.grow(choose(1))
            return t.size(conv(2))                         # calls the property's value, not the getter
    '''})
    assert {(f.consumer, f.producer) for f in result.flows} == {("o.m.Thing.grow", "o.m.conv"), ("o.m.Thing.grow", "o.m.pick")}
    assert sorted(_reasons_at(result, "use").values()) == [MineReason.AMBIGUOUS_TARGET, MineReason.UNRESOLVED_TARGET]


def test_attribute_types_through_bases_and_properties(tmp_path: Path) -> None:
    result = _mine(tmp_path, {"app/__init__.py": "", "app/lib.py": LIB, "app/svc.py": '''
        from app.lib import Client


        class BaseService:
            """A service with a client."""

            def __init__(self, url):
                self.client = Client(url)

            @property
            def backup(self) -> Client:
                """The backup client."""
                return Client("b")
    ''', "app/use.py": '''
        from app.lib import make_user
        from app.svc import BaseService


        class Service(BaseService):
            """A service."""

            def run(self):
                """Run: self.client is bound (and typed) in the base class only."""
                return self.client.get(make_user("a"))


        class Rebound(BaseService):
            """Binds client again, to something of unknown type."""

            def __init__(self, client):
                self.client = client

            def run(self):
                """Run."""
                return self.client.get(make_user("b"))


        def outside(s: Service):
            return s.backup.post(make_user("c"))           # a typed local's attribute: the property's annotation
    '''})
    assert {(f.record_id.split(":")[1], f.consumer) for f in result.flows} == {
        ("Service.run", "app.lib.Client.get"), ("outside", "app.lib.Base.post")}
    assert list(_reasons_at(result, "Rebound.run").values()) == [MineReason.UNRESOLVED_TARGET]


STORES = {"app/__init__.py": "", "app/base.py": '''
    class Store:
        """A key-value store."""

        def load(self, key):
            """Load the record stored under a key.

            Args:
                key: the record's key.
            """
            return {}

        def save(self, record):
            """Save a record; it can be loaded again by its key."""

        def __len__(self):
            """How many records the store holds."""
            return 0
''', "app/stores.py": '''
    from app.base import Store


    class FileStore(Store):
        """Records in files."""

        def load(self, name):
            return {}

        def save(self, record):
            pass

        def __len__(self):
            return 0


    class CachedFileStore(FileStore):
        """Files, cached."""

        def load(self, name):
            return {}


    class Loose:
        """No base."""

        def load(self, name):
            return {}
''', "app/use.py": '''
    from app.stores import CachedFileStore, FileStore, Loose


    def copy_record(src: FileStore, dst: CachedFileStore, other: Loose):
        """Copy a record from one store to another."""
        dst.save(src.load("a"))
        dst.save(other.load("b"))
        return len(src)
'''}


def test_an_undocumented_override_reads_its_base_methods_docstring(tmp_path: Path) -> None:
    """inspect.getdoc's rule: FileStore.load has no docstring of its own, so it is Store.load's; up a chain of
    undocumented overrides too (CachedFileStore.save is FileStore.save, which is Store.save). Without a documented
    base (Loose.load) or for a dunder, nothing is inherited; --no-inherited-docstrings reads none."""
    result = _mine(tmp_path, STORES)
    assert result.inherited_docs == 3  # FileStore.load, FileStore.save, CachedFileStore.load
    assert {(f.consumer, f.producer) for f in result.flows} == {("app.stores.FileStore.save", "app.stores.FileStore.load")}
    assert result.documented["app.stores.CachedFileStore.load"].facts.docstring_from == "app.base.Store.load"
    assert "app.stores.Loose.load" not in result.documented and "app.stores.FileStore.__len__" not in result.documented
    docs = build_docs(list(result.targets.values()), workers=1)
    load = docs["app.stores.FileStore.load"]
    assert load["name"] == "FileStore.load" and load["description"] == "Load the record stored under a key."
    assert [p["name"] for p in load["input_params"]] == ["name"]  # its own signature; the base documents `key`
    assert all(schema_errors(d) == [] for d in docs.values())

    plain = mine_files(tree_files(tmp_path / "src", "tree"), workers=1, inherit_docs=False)
    assert plain.inherited_docs == 0 and plain.flows == []
    assert {r.reason for r in plain.rejections if r.record_id.split(":")[1] == "copy_record"} >= {MineReason.UNDOCUMENTED_CONSUMER}


def test_child_nodes_are_ast_children_in_order_without_expression_contexts() -> None:
    """The walkers' step (tasks.mining.syntax.child_nodes) must see what ``ast.iter_child_nodes`` sees, in the
    same order, so that swapping it in changes no mined pair; checked on every node of a few stdlib files."""
    import ast
    import dataclasses
    import inspect
    import json.decoder
    import string

    from tasks.mining.syntax import child_nodes

    nodes = 0
    for module in (json.decoder, dataclasses, inspect, string):
        for node in ast.walk(ast.parse(Path(module.__file__).read_text(encoding="utf-8"))):
            expected = [c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.expr_context)]
            assert child_nodes(node) == expected, ast.dump(node)[:200]
            nodes += 1
    assert nodes > 10_000
