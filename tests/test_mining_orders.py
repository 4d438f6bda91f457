"""Precondition pairs mined from call order without data flow (tasks/mining/order.py, mine.resolve_orders)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tasks.mining.filters import MinedOrder
from tasks.mining.mine import MineResult, mine_files
from tasks.mining.parse import parse_file
from tasks.mining.reasons import MineReason
from tasks.mining.sources import FileItem, tree_files


API = '''
class Conn:
    """A network connection."""

    def connect(self):
        """Open the connection."""

    def is_connected(self):
        """Whether the connection is open."""
        return True

    def send(self, data):
        """Send data over the open connection."""

    def close(self):
        """Close the connection."""


def exists(path):
    """Whether a file exists at path."""
    return True


def remove(path):
    """Delete the file at path."""


def validate(record):
    """Check a record; raise ValueError when it is malformed."""


def is_valid(record):
    """Whether a record is well formed."""
    return True


def save(record):
    """Store a record."""


def load(path):
    """Read a record from path."""
    return {"path": path}


def undocumented_check(record):
    return True
'''


def _mine(tmp_path: Path, files: dict[str, str]) -> MineResult:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return mine_files(tree_files(tmp_path, "tree"), workers=1)


def _orders(result: MineResult) -> dict[tuple[str, str], MinedOrder]:
    return {(o.consumer, o.producer): o for o in result.orders}


def _reasons(result: MineResult) -> dict[str, str]:
    """record id -> rejection reason."""
    return {r.record_id: r.reason for r in result.order_rejections}


def test_each_pattern_is_found(tmp_path: Path) -> None:
    res = _mine(tmp_path, {"api.py": API, "use.py": '''
        from api import Conn, exists, remove, validate, save, is_valid


        def drop(path):
            if exists(path):
                remove(path)


        def store(record):
            validate(record)
            save(record)


        def checked_store(record):
            if not is_valid(record):
                raise ValueError(record)
            save(record)


        def talk(data):
            conn = Conn()
            conn.connect()
            conn.send(data)


        def ensure(conn: Conn):
            if not conn.is_connected():
                conn.connect()
        '''})
    orders = _orders(res)
    assert orders[("api.remove", "api.exists")].patterns == ("guard",)
    assert orders[("api.save", "api.validate")].patterns == ("validate_first",)
    assert orders[("api.save", "api.is_valid")].patterns == ("guard",)  # if not valid: raise, then save
    assert orders[("api.Conn.send", "api.Conn.connect")].patterns == ("same_receiver",)
    assert orders[("api.Conn.connect", "api.Conn.is_connected")].patterns == ("guard",)
    one = orders[("api.remove", "api.exists")]
    assert one.support == 1 and one.record_id.startswith("use:drop:")  # module:function:line:col:after:line:col
    assert len(res.orders) + len(res.order_rejections) == res.order_candidates


def test_order_without_a_shared_operand_or_across_a_block_is_no_candidate(tmp_path: Path) -> None:
    res = _mine(tmp_path, {"api.py": API, "use.py": '''
        from api import Conn, validate, save, load


        def unrelated(a, b):
            validate(a)
            save(b)                  # another operand: no order


        def rebound(record):
            validate(record)
            record = load("x")
            save(record)             # a new value: the check was of the old one (and load -> save is a flow)


        def conditional(conn: Conn, flag):
            if flag:
                conn.connect()
            conn.send(1)             # connect ran only on one branch
        '''})
    assert res.orders == [] and res.order_candidates == 0


def test_a_pair_that_is_a_data_flow_is_rejected_as_such(tmp_path: Path) -> None:
    res = _mine(tmp_path, {"api.py": API, "use.py": '''
        from api import load, save


        def flow(path):
            save(load(path))         # the accepted data flow save <- load


        def order(path):
            if load(path):           # a guard, the same pair by call order
                save(path)
        '''})
    assert ("api.save", "api.load") in {(f.consumer, f.producer) for f in res.flows}
    assert res.orders == []
    assert list(_reasons(res).values()) == [MineReason.DATA_FLOW_PAIR]


def test_support_counts_distinct_functions_and_duplicates_are_merged(tmp_path: Path) -> None:
    res = _mine(tmp_path, {"api.py": API, "a.py": '''
        from api import validate, save


        def one(r):
            validate(r)
            save(r)
            save(r)                  # the same pair twice in one function: it counts once in the support


        def two(r):
            validate(r)
            save(r)
        ''', "b.py": '''
        import api


        def three(r):
            api.validate(r)
            api.save(r)
        '''})
    order = _orders(res)[("api.save", "api.validate")]
    assert order.support == 3  # one, two, three
    assert len(res.orders) == 1
    assert sorted(_reasons(res).values()) == [MineReason.DUPLICATE_ORDER] * 3
    assert len(res.orders) + len(res.order_rejections) == res.order_candidates == 4


def test_undocumented_unresolved_self_and_reporting_sides_are_rejected(tmp_path: Path) -> None:
    res = _mine(tmp_path, {"api.py": API + '''

def log_record(record):
    """Write a record to the log."""
''', "use.py": '''
        from api import undocumented_check, save, log_record, Conn


        def a(r):
            undocumented_check(r)
            save(r)


        def b(r, helper):
            helper.prepare(r)        # a local of unknown type
            save(r)


        def c(r):
            log_record(r)
            save(r)


        def d(c: Conn, data):
            c.send(data)
            c.close()                # a teardown follows an action, its prerequisite is the setup
        '''})
    reasons = sorted(_reasons(res).values())
    assert reasons == sorted([MineReason.UNDOCUMENTED_PRODUCER, MineReason.UNRESOLVED_TARGET, MineReason.REPORTING_CALL,
                              MineReason.TEARDOWN_AFTER_ACTION])
    assert res.orders == []
    assert len(res.order_rejections) == res.order_candidates


def test_conflicting_orders_of_comparable_support_are_both_rejected(tmp_path: Path) -> None:
    res = _mine(tmp_path, {"api.py": API, "use.py": '''
        from api import validate, save


        def first(r):
            validate(r)
            save(r)


        def second(r):
            save(r)
            validate(r)
        '''})
    assert res.orders == []
    assert sorted(_reasons(res).values()) == [MineReason.CONFLICTING_ORDER] * 2


def test_a_producer_before_too_many_consumers_is_generic(tmp_path: Path) -> None:
    consumers = "\n".join(f'def use{i}(x):\n    """Use x ({i})."""\n' for i in range(20))
    runs = "\n".join(f"def run{i}(x):\n    prepare(x)\n    use{i}(x)\n" for i in range(20))
    res = _mine(tmp_path, {"lib.py": f'def prepare(x):\n    """Prepare x."""\n\n{consumers}\n\n{runs}'})
    assert res.orders == []
    assert list(_reasons(res).values()) == [MineReason.GENERIC_PRECONDITION] * 20  # 20 consumers > 16
    assert len(res.order_rejections) == res.order_candidates


def test_orders_off_in_the_parse_phase(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(textwrap.dedent(API) + "\n\ndef f(r):\n    validate(r)\n    save(r)\n")
    item = FileItem(str(path), "m", False, "tree")
    with_orders, without = parse_file(item), parse_file(item, orders=False)
    assert [o.pattern for o in with_orders.orders] == ["validate_first"]  # type: ignore[union-attr]
    assert without.orders == []  # type: ignore[union-attr]
    assert with_orders.flows == without.flows  # type: ignore[union-attr]


@pytest.mark.parametrize("body", [
    "    self.assertEqual(c.is_connected(), True)\n",   # a check reads back, it uses nothing
    "    assert c.is_connected()\n",
])
def test_calls_inside_assertions_are_no_consumers(tmp_path: Path, body: str) -> None:
    res = _mine(tmp_path, {"api.py": API, "t.py": "from api import Conn\n\n\ndef t(self, c: Conn):\n    c.connect()\n" + body})
    assert res.orders == [] and res.order_candidates == 0


def test_a_class_own_steps_count_only_when_shown_twice(tmp_path: Path) -> None:
    res = _mine(tmp_path, {"job.py": '''
        class Job:
            """A batch job."""

            def prepare(self):
                """Allocate what the job needs."""

            def execute(self):
                """Run the prepared job."""

            def report(self):
                """Summarise the job."""

            def set_name(self, name):
                """Name the job."""

            def set_owner(self, owner):
                """Give the job an owner."""

            def run(self):
                """Prepare, then execute."""
                self.prepare()
                self.execute()

            def rerun(self):
                """Prepare again and execute."""
                self.prepare()
                self.execute()

            def once(self):
                """Execute, then report."""
                self.execute()
                self.report()

            def label(self, name, owner):
                """Name and own the job."""
                self.set_name(name)
                self.set_owner(owner)
        '''})
    orders = _orders(res)
    assert set(orders) == {("job.Job.execute", "job.Job.prepare")}
    assert orders[("job.Job.execute", "job.Job.prepare")].support == 2  # run and rerun
    assert sorted(_reasons(res).values()) == sorted([MineReason.DUPLICATE_ORDER, MineReason.SELF_SEQUENCE,
                                                     MineReason.INDEPENDENT_SETTERS])
    assert len(res.orders) + len(res.order_rejections) == res.order_candidates


def test_a_dropped_value_is_no_validation_and_a_kept_one_no_setup(tmp_path: Path) -> None:
    res = _mine(tmp_path, {"api.py": API, "use.py": '''
        from api import Conn, load, save


        def smoke(path):
            load(path)               # returns a value, dropped: exercised, not a check of path
            save(path)


        def getter(c: Conn):
            ok = c.is_connected()    # its value was wanted: no setup of c
            c.send(ok)
        '''})
    assert res.orders == []
    assert list(_reasons(res).values()) == [MineReason.DROPPED_VALUE]


def test_the_same_method_of_sibling_classes_is_one_step(tmp_path: Path) -> None:
    res = _mine(tmp_path, {"plug.py": '''
        class Words:
            """Counts words."""

            def feed(self, text):
                """Read text."""


        class Symbols:
            """Counts symbols."""

            def feed(self, text):
                """Read text."""


        def scan(text, w: Words, s: Symbols):
            w.feed(text)
            s.feed(text)
        '''})
    assert res.orders == []
    assert list(_reasons(res).values()) == [MineReason.SELF_ORDER]


def test_the_pattern_of_a_call_with_two_linked_operands_does_not_follow_the_hash_seed(tmp_path):
    """``conn.check(path); conn.open(path)``: both operands link the same earlier call (as receiver and as
    argument); the first operand in sorted order names the pattern, whatever PYTHONHASHSEED (a set's order
    used to decide, so build-tdi's mined pairs changed from run to run)."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    (tmp_path / "twoops.py").write_text(textwrap.dedent('''
        def use(conn, path):
            conn.check(path)
            conn.open(path)
        '''))
    probe = ("import sys; from pathlib import Path; from tasks.mining.parse import parse_file; "
             "from tasks.mining.sources import tree_files; "
             "m = parse_file(tree_files(Path(sys.argv[1]), 'tree')[0]); print(sorted((o.record_id, o.pattern) for o in m.orders))")
    seen = {subprocess.run([sys.executable, "-c", probe, str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in range(6)}
    assert len(seen) == 1 and "same_receiver" in seen.pop()
