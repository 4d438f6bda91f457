"""Precondition pairs from an entry used before it is stored (tasks/mining/state.py ``keyed_state``): a method that
reads ``self.X[key]`` unguarded, where X starts empty and other public methods store its entries."""
from __future__ import annotations

from pathlib import Path

from tasks.mining.mine import MineResult
from tasks.mining.reasons import MineReason
from tasks.mining.state import KEYED_STATE
from tests.mining_trees import mine_tree

GRAPH = '''
from collections import OrderedDict, defaultdict


class Graph:
    """A graph of named nodes."""

    def __init__(self):
        self._nodes = {}
        self._edges = OrderedDict()
        self._seen = defaultdict(int)  # makes a missing entry: no KeyError to need a store first

    def add_node(self, name, data=None):
        """Add a node."""
        self._nodes[name] = data

    def add_edge(self, src, dst):
        """Join two nodes that were added."""
        self._nodes[src]
        self._nodes[dst]
        self._edges.setdefault(src, []).append(dst)

    def node(self, name):
        """The data of a node."""
        return self._nodes[name]

    def remove_node(self, name):
        """Remove a node."""
        del self._nodes[name]

    def successors(self, name):
        """The nodes an edge leads to."""
        return self._edges.pop(name)

    def get(self, name):
        """The data of a node, or None."""
        if name in self._nodes:
            return self._nodes[name]
        return None

    def maybe(self, name):
        """The data of a node, or None, the other way."""
        return self._nodes.get(name)

    def first(self):
        """The first node's data: no key from the caller."""
        return self._nodes["first"]

    def visits(self, name):
        """How often a node was seen."""
        return self._seen[name]

    def count(self, name):
        """Count a visit."""
        self._seen[name] += 1

    def guarded(self, name):
        """The data of a node, in a try."""
        try:
            return self._nodes[name]
        except KeyError:
            return None

    def bump(self, name):
        """Add one to a stored number: needs the entry, makes none."""
        self._nodes[name] += 1
'''


def _keyed(res: MineResult) -> set[tuple[str, str]]:
    return {(o.consumer.rsplit(".", 1)[-1], o.producer.rsplit(".", 1)[-1]) for o in res.orders if KEYED_STATE in o.patterns}


def test_a_method_that_reads_an_entry_only_another_method_stores_needs_that_method_first(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"graphs.py": GRAPH}, keyed_state=True)
    assert _keyed(res) == {("add_edge", "add_node"), ("node", "add_node"), ("remove_node", "add_node"),
                           ("successors", "add_edge")}
    edge = next(o for o in res.orders if o.consumer == "graphs.Graph.node")
    assert edge.support == 1 and edge.patterns == (KEYED_STATE,) and edge.record_id.startswith("graphs:Graph.node:")
    assert len(res.orders) + len(res.order_rejections) == res.order_candidates


def test_a_method_that_tests_the_key_reads_with_a_default_catches_or_makes_the_entry_is_no_consumer(tmp_path: Path) -> None:
    consumers = {c for c, _ in _keyed(mine_tree(tmp_path, {"graphs.py": GRAPH}, keyed_state=True))}
    assert not consumers & {"get", "maybe", "guarded", "first", "visits", "count", "bump"}
    producers = {p for _, p in _keyed(mine_tree(tmp_path / "again", {"graphs.py": GRAPH}, keyed_state=True))}
    assert "bump" not in producers  # += reads the entry first: it stores none


def test_a_table_refilled_elsewhere_or_filled_by_many_methods_gives_no_pair(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"registry.py": '''
        class Cache:
            """A cache loaded whole."""

            def __init__(self):
                self.entries = {}

            def load(self, path):
                """Load every entry from a file."""
                self.entries = dict(read(path))

            def put(self, key, value):
                """Store an entry."""
                self.entries[key] = value

            def fetch(self, key):
                """An entry."""
                return self.entries[key]


        class Registry:
            """Handlers by name, from many registrations."""

            def __init__(self):
                self.handlers = {}

            def on_a(self, name, f):
                """Register a handler of kind a."""
                self.handlers[name] = f

            def on_b(self, name, f):
                """Register a handler of kind b."""
                self.handlers[name] = f

            def on_c(self, name, f):
                """Register a handler of kind c."""
                self.handlers[name] = f

            def on_d(self, name, f):
                """Register a handler of kind d."""
                self.handlers[name] = f

            def handler(self, name):
                """The handler of a name."""
                return self.handlers[name]


        def read(path):
            return []
        '''}, keyed_state=True)
    assert _keyed(res) == set()  # load replaces the table: fetch's key may come from the file
    shared = [r for r in res.order_rejections if r.reason == MineReason.SHARED_STATE]
    assert len(shared) == 4 and {r.record_id.split(":after:")[0] for r in shared} == {"registry:Registry.handler:45:8"}
    assert {r.detail for r in shared} == {"self.handlers is filled by 4 methods (> 3)"}


def test_a_consumer_that_calls_a_maker_and_a_producer_that_needs_the_entry_give_no_pair(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"stack.py": '''
        class Stack:
            """Axes by key, in order."""

            def __init__(self):
                self._axes = {}
                self._waits = {}

            def add(self, key, ax):
                """Add an axes."""
                self._axes[key] = ax

            def bubble(self, key):
                """Move an added axes to the top."""
                if key not in self._axes:
                    raise ValueError("not added")
                self._axes[key] = self._axes.pop(key)

            def trim(self, key):
                """Keep the axes' first part."""
                self._axes[key] = self._axes[key][:1]

            def ensure(self, key):
                """The axes of a key, added when missing."""
                self.add(key, None)
                return self._axes[key]

            def remove(self, key):
                """Remove an axes."""
                self._axes.pop(key)

            def wake(self, key):
                """Wake whoever waits on a key."""
                self._waits[key] = 1

            def wait(self, key):
                """Wait until a key was woken."""
                until(lambda: self._waits.get(key, 0) > 0)
                return self._waits[key]


        def until(test):
            return test()
        '''}, keyed_state=True)
    # bubble and trim update an entry that must exist: no maker of it; ensure makes its own; wait waits for it
    assert _keyed(res) == {("remove", "add")}


def test_the_pattern_is_opt_in(tmp_path: Path) -> None:
    assert _keyed(mine_tree(tmp_path, {"graphs.py": GRAPH})) == set()
