"""Precondition pairs mined from call order without data flow (tasks/mining/order.py, mine.resolve_orders)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tasks.mining.filters import MinedOrder
from tasks.mining.mine import MineResult, mine_files, resolve_flows
from tasks.mining.parse import parse_chunk, parse_file
from tasks.mining.reasons import MineReason
from tasks.mining.sources import FileItem, tree_files
from tests.mining_trees import mine_tree


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


def _orders(result: MineResult) -> dict[tuple[str, str], MinedOrder]:
    return {(o.consumer, o.producer): o for o in result.orders}


def _reasons(result: MineResult) -> dict[str, str]:
    """record id -> rejection reason."""
    return {r.record_id: r.reason for r in result.order_rejections}


def test_each_pattern_is_found(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"api.py": API, "use.py": '''
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
    res = mine_tree(tmp_path, {"api.py": API, "use.py": '''
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
    res = mine_tree(tmp_path, {"api.py": API, "use.py": '''
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
    res = mine_tree(tmp_path, {"api.py": API, "a.py": '''
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
    res = mine_tree(tmp_path, {"api.py": API + '''

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
    res = mine_tree(tmp_path, {"api.py": API, "use.py": '''
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
    res = mine_tree(tmp_path, {"lib.py": f'def prepare(x):\n    """Prepare x."""\n\n{consumers}\n\n{runs}'})
    assert res.orders == []
    assert list(_reasons(res).values()) == [MineReason.GENERIC_PRECONDITION] * 20  # 20 consumers > 16
    assert len(res.order_rejections) == res.order_candidates


def test_call_orders_in_test_code_are_rejected_unless_asked_for_and_its_flows_still_count(tmp_path: Path) -> None:
    files = {"api.py": API, "tests/test_api.py": '''
        from api import Conn, exists, remove, load, save


        def test_round_trip(path):
            conn = Conn()
            conn.connect()
            conn.send(path)
            if exists(path):
                remove(path)
            save(load(path))
        '''}
    default = mine_tree(tmp_path, files)
    assert default.orders == [] and default.order_candidates == 0  # the test file's call orders are not read
    assert default.test_files_orders_not_read == 1  # and the books say so
    assert [(f.consumer, f.producer) for f in default.flows] == [("api.save", "api.load")]  # the test's data flow counts
    with_tests = mine_files(tree_files(tmp_path, "tree"), workers=1, test_orders=True)
    assert {("api.Conn.send", "api.Conn.connect"), ("api.remove", "api.exists")} <= set(_orders(with_tests))
    assert with_tests.order_candidates >= 2 and with_tests.test_files_orders_not_read == 0
    assert with_tests.flows == default.flows
    # parsed with them but resolved without (a caller mixing the two): rejected, each one, whatever else it met
    read = resolve_flows(parse_chunk(tree_files(tmp_path, "tree"), test_orders=True), 2)
    assert read.orders == [] and read.order_candidates == with_tests.order_candidates
    assert set(_reasons(read).values()) == {MineReason.TEST_ORDER}
    for res in (default, with_tests, read):
        assert len(res.orders) + len(res.order_rejections) == res.order_candidates


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
    res = mine_tree(tmp_path, {"api.py": API, "t.py": "from api import Conn\n\n\ndef t(self, c: Conn):\n    c.connect()\n" + body})
    assert res.orders == [] and res.order_candidates == 0


def test_a_class_own_steps_count_only_when_shown_twice(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"job.py": '''
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
    res = mine_tree(tmp_path, {"api.py": API, "use.py": '''
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
    res = mine_tree(tmp_path, {"plug.py": '''
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


# -- typing rules that resolve more receivers (issue 22 item 2) -------------------------------------------
TYPED_API = API + '''

class Other:
    """Another object with a connect step."""

    def connect(self):
        """Open the other thing."""

    def send(self, data):
        """Send through the other thing."""


class HMAC:
    """A keyed hash."""

    def update(self, data):
        """Feed data."""

    def verify(self, signature):
        """Check the signature against what was fed."""


def make_conn(host):
    """A new connection to host."""
    conn = Conn()
    conn.host = host
    return conn


def make_either(flag):
    """A Conn or an Other: two types."""
    if flag:
        made = Conn()
    else:
        made = Other()
    return made


def passthrough(conn):
    """Gives back what it was given: a caller's value, of unknown type."""
    return conn


def reuse(conn):
    """A local rebound by a loop as well as by a call: of unknown type."""
    made = Conn()
    for made in conn:
        pass
    return made

'''


def test_a_local_returned_by_a_function_gives_its_callers_the_type(tmp_path: Path) -> None:
    """``def make_conn(): conn = Conn(); ...; return conn``: ``c = make_conn(); c.connect(); c.send(d)`` is
    ``Conn.send`` after ``Conn.connect``; a local bound to two types, a parameter handed back, or a local also
    bound by a loop gives no type."""
    res = mine_tree(tmp_path, {"api.py": TYPED_API, "use.py": '''
        from api import make_conn, make_either, passthrough, reuse


        def talk(data):
            c = make_conn("host")
            c.connect()
            c.send(data)


        def either(data):
            c = make_either(True)
            c.connect()
            c.send(data)


        def handed_back(conn, data):
            c = passthrough(conn)
            c.connect()
            c.send(data)


        def looped(conns, data):
            c = reuse(conns)
            c.connect()
            c.send(data)
        '''})
    orders = _orders(res)
    assert orders[("api.Conn.send", "api.Conn.connect")].record_id.startswith("use:talk:")
    assert orders[("api.Conn.send", "api.Conn.connect")].support == 1  # the other three functions show nothing
    reasons = _reasons(res)
    for fn, callee in (("either", "make_either"), ("handed_back", "passthrough"), ("looped", "reuse")):
        (rid,) = [r for r in reasons if r.startswith(f"use:{fn}:")]
        assert reasons[rid] == MineReason.UNRESOLVED_TARGET
        assert f"return type of api.{callee} unknown" in next(r.detail for r in res.order_rejections if r.record_id == rid)
    assert len(res.orders) + len(res.order_rejections) == res.order_candidates


def test_a_name_from_a_star_import_resolves_unless_the_module_binds_it(tmp_path: Path) -> None:
    """``from api import *; c = Conn()``: Conn comes from the star import; a name the module binds itself
    (twice here, so it has no known value) is not taken from the star import."""
    res = mine_tree(tmp_path, {"api.py": TYPED_API, "star.py": '''
        from api import *


        def talk(data):
            c = Conn()
            c.connect()
            c.send(data)
        ''', "shadow.py": '''
        from api import *

        Other = None
        Other = make_either(False)


        def talk(data):
            o = Other()
            o.connect()
            o.send(data)
        '''})
    assert _orders(res)[("api.Conn.send", "api.Conn.connect")].record_id.startswith("star:talk:")
    assert ("api.Other.send", "api.Other.connect") not in _orders(res)
    (shadowed,) = [r for r in res.order_rejections if r.record_id.startswith("shadow:")]
    assert shadowed.reason == MineReason.UNRESOLVED_TARGET and "local variable o" in shadowed.detail  # Other() gave no type
    assert len(res.orders) + len(res.order_rejections) == res.order_candidates


def test_an_attribute_bound_from_a_method_of_the_class_takes_its_return_type(tmp_path: Path) -> None:
    """``self.conn = self._open()`` with ``_open`` returning a ``Conn``: ``self.conn.connect(); self.conn.send(d)``
    resolves; when another method binds the attribute to another type, it stays untyped."""
    res = mine_tree(tmp_path, {"api.py": TYPED_API, "holder.py": '''
        from api import Conn, Other


        class Holder:
            def __init__(self):
                self.conn = self._open()

            def _open(self):
                return Conn()

            def run(self, data):
                self.conn.connect()
                self.conn.send(data)


        class Mixed:
            def __init__(self):
                self.conn = self._open()

            def _open(self):
                return Conn()

            def reset(self):
                self.conn = Other()

            def run(self, data):
                self.conn.connect()
                self.conn.send(data)
        '''})
    assert _orders(res)[("api.Conn.send", "api.Conn.connect")].record_id.startswith("holder:Holder.run:")
    (mixed,) = [r for r in res.order_rejections if r.record_id.startswith("holder:Mixed.run:")]
    assert mixed.reason == MineReason.UNRESOLVED_TARGET and "attribute of self" in mixed.detail
    assert len(res.orders) + len(res.order_rejections) == res.order_candidates


def test_names_unpacked_from_a_call_annotated_as_a_tuple_take_the_element_types(tmp_path: Path) -> None:
    """``c, h = pair()`` with ``pair`` annotated ``-> tuple[Conn, HMAC]``: ``c`` is a Conn, ``h`` an HMAC; a bare
    ``-> tuple``, or a tuple of another length than the names unpacked, types nothing."""
    res = mine_tree(tmp_path, {"api.py": TYPED_API, "use.py": '''
        from api import Conn, HMAC


        def pair() -> tuple[Conn, HMAC]:
            return Conn(), HMAC()


        def bare() -> tuple:
            return Conn(), HMAC()


        def triple() -> tuple[Conn, HMAC, Conn]:
            return Conn(), HMAC(), Conn()


        def both(data, signature):
            c, h = pair()
            c.connect()
            c.send(data)
            h.update(data)
            h.verify(signature)


        def untyped(data):
            c, h = bare()
            c.connect()
            c.send(data)


        def miscounted(data):
            c, h = triple()
            c.connect()
            c.send(data)
        '''})
    orders = _orders(res)
    assert orders[("api.Conn.send", "api.Conn.connect")].record_id.startswith("use:both:")
    assert orders[("api.HMAC.verify", "api.HMAC.update")].record_id.startswith("use:both:")
    for fn in ("untyped", "miscounted"):
        (rejected,) = [r for r in res.order_rejections if r.record_id.startswith(f"use:{fn}:")]
        assert rejected.reason == MineReason.UNRESOLVED_TARGET and "type of element 0" in rejected.detail
    assert len(res.orders) + len(res.order_rejections) == res.order_candidates


def test_a_local_read_from_a_typed_attribute_takes_its_type(tmp_path: Path) -> None:
    """``conn = self.conn; conn.connect(); conn.send(d)`` with ``self.conn`` typed in the class, and ``c = h.conn``
    with ``h`` a typed local: the attribute's type; an attribute the class binds to two types gives none,
    and ``fn = self.method; fn()`` still calls the method."""
    res = mine_tree(tmp_path, {"api.py": TYPED_API, "holder.py": '''
        from api import Conn, Other


        class Holder:
            """Holds a connection."""

            def __init__(self):
                self.conn = Conn()

            def run(self, data):
                conn = self.conn
                conn.connect()
                conn.send(data)

            def via_method(self, data):
                step = self.prepare
                step(data)
                self.conn.send(data)

            def prepare(self, data):
                """Prepare the data."""


        def from_outside(data):
            h = Holder()
            c = h.conn
            c.connect()
            c.send(data)


        class Mixed:
            def __init__(self):
                self.conn = Conn()

            def reset(self):
                self.conn = Other()

            def run(self, data):
                conn = self.conn
                conn.connect()
                conn.send(data)
        '''})
    orders = _orders(res)
    pair = orders[("api.Conn.send", "api.Conn.connect")]
    assert pair.support == 2 and pair.record_id.startswith("holder:Holder.run:")  # and from_outside
    assert ("api.Conn.send", "holder.Holder.prepare") in orders  # step(data): the aliased method, validate_first
    (mixed,) = [r for r in res.order_rejections if r.record_id.startswith("holder:Mixed.run:")]
    assert mixed.reason == MineReason.UNRESOLVED_TARGET
    assert len(res.orders) + len(res.order_rejections) == res.order_candidates


def test_loop_items_of_an_annotated_collection_take_the_item_type(tmp_path: Path) -> None:
    """``for c in conns`` with ``conns: list[Conn]``, ``for c in open_all()`` with ``open_all() -> Iterator[Conn]``
    (directly or through a local): each ``c`` is a Conn; a ``dict[str, Conn]`` (keys are iterated), a
    ``tuple[Conn, Other]``, an unannotated source or ``str(..)`` of the collection types nothing."""
    res = mine_tree(tmp_path, {"api.py": TYPED_API, "use.py": '''
        from typing import Iterator

        from api import Conn, Other


        def open_all() -> Iterator[Conn]:
            yield Conn()


        def open_some():
            return [Conn()]


        def given(conns: list[Conn], data):
            for c in conns:
                c.connect()
                c.send(data)


        def produced(data):
            for c in open_all():
                c.connect()
                c.send(data)


        def through_a_local(data):
            conns = open_all()
            for i, c in enumerate(conns):
                c.connect()
                c.send(data)


        def keyed(conns: dict[str, Conn], data):
            for c in conns:
                c.connect()
                c.send(data)


        def mixed(conns: tuple[Conn, Other], data):
            for c in conns:
                c.connect()
                c.send(data)


        def unannotated(data):
            for c in open_some():
                c.connect()
                c.send(data)


        def as_text(conns: list[Conn], data):
            for c in str(conns):
                c.connect()
                c.send(data)
        '''})
    pair = _orders(res)[("api.Conn.send", "api.Conn.connect")]
    assert pair.support == 3  # given, produced, through_a_local
    rejected = {r.record_id.split(":")[1]: r for r in res.order_rejections if r.reason == MineReason.UNRESOLVED_TARGET}
    assert set(rejected) == {"keyed", "mixed", "unannotated", "as_text"}
    assert "type of the items of use.open_some() unknown" in rejected["unannotated"].detail
    assert len(res.orders) + len(res.order_rejections) == res.order_candidates


def test_an_isinstance_test_types_a_local_where_it_holds(tmp_path: Path) -> None:
    """``if isinstance(c, Conn):`` types ``c`` in the body; ``assert isinstance(c, Conn)`` and ``if not
    isinstance(c, Conn): raise`` from there on; a tuple of classes, the ``else`` branch, after the body of a
    positive test, or a negative test whose body goes on, type nothing."""
    res = mine_tree(tmp_path, {"api.py": TYPED_API, "use.py": '''
        from api import Conn, Other


        def in_body(c, data):
            if isinstance(c, Conn):
                c.connect()
                c.send(data)


        def asserted(c, data):
            assert isinstance(c, Conn)
            c.connect()
            c.send(data)


        def raised(c, data):
            if not isinstance(c, Conn):
                raise TypeError(c)
            c.connect()
            c.send(data)


        def either(c, data):
            if isinstance(c, (Conn, Other)):
                c.connect()
                c.send(data)


        def in_else(c, data):
            if isinstance(c, Conn):
                pass
            else:
                c.connect()
                c.send(data)


        def after_body(c, data):
            if isinstance(c, Conn):
                pass
            c.connect()
            c.send(data)


        def not_exiting(c, data):
            if not isinstance(c, Conn):
                print(c)
            c.connect()
            c.send(data)
        '''})
    pair = _orders(res)[("api.Conn.send", "api.Conn.connect")]
    assert pair.support == 3  # in_body, asserted, raised
    rejected = {r.record_id.split(":")[1] for r in res.order_rejections if r.reason == MineReason.UNRESOLVED_TARGET}
    assert rejected == {"either", "in_else", "after_body", "not_exiting"}
    assert len(res.orders) + len(res.order_rejections) == res.order_candidates
