"""Call orders in docstrings' usage examples (tasks/mining/doctests.py): precondition candidates like a body's."""
from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from tasks.mining.doctests import doctest_bodies, examples_body
from tasks.mining.mine import mine_files
from tasks.mining.sources import tree_files
from tasks.mining.state import stated
from tests.mining_trees import mine_tree

CONN = '''
"""A network client.

>>> conn = Conn()
>>> conn.connect()
>>> conn.send(b"hi")
>>> p = make_temp()
>>> if exists(p):
...     remove(p)
"""


class Conn:
    """A network connection."""

    def connect(self):
        """Open the connection."""

    def status(self):
        """The connection's state, as text."""
        return "open"

    def send(self, data):
        """Send data over the open connection.

        >>> c = Conn()
        >>> c.status()
        'closed'
        >>> c.send(b"x")
        Traceback (most recent call last):
        ConnectionError: not open
        >>> c.reset()
        """

    def reset(self):
        """Forget the connection."""


def exists(path):
    """Whether a file exists at path."""
    return True


def remove(path):
    """Delete the file at path.

    >>> p = make_temp()
    >>> print p
    >>> remove(p)
    """


def make_temp():
    """A fresh temporary path."""
    return "/tmp/x"


class Pipe:
    """A pipe."""

    def open(self):
        """Open the pipe."""

    def flush(self):
        """Send what is buffered.

        >>> pipe = Pipe()
        >>> pipe.open()
        >>> pipe.flush()
        """
'''


def test_usage_examples_give_call_orders_labelled_as_doctests(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"client.py": CONN})
    orders = {(o.consumer, o.producer): o for o in res.orders}
    sent = orders[("client.Conn.send", "client.Conn.connect")]
    assert sent.patterns == ("doctest:same_receiver",)
    assert sent.record_id == "client:<doctest>:6:0:after:5:0"  # the file's lines of ``conn.send`` and ``conn.connect``
    assert orders[("client.remove", "client.exists")].patterns == ("doctest:guard",)
    # in flush's own docstring: its docs state the order (kept at support 1 like the other stated patterns)
    usage = orders[("client.Pipe.flush", "client.Pipe.open")]
    assert usage.patterns == ("doctest_usage:same_receiver",) and stated(usage.patterns)
    assert not stated(sent.patterns)
    # ``c.status()`` shows its value and ``c.send`` raises in the session: reads, so no step before ``send`` or ``reset``
    assert not {("client.Conn.send", "client.Conn.status"), ("client.Conn.reset", "client.Conn.status"),
                ("client.Conn.reset", "client.Conn.send")} & set(orders)
    # the examples' data flow (``p = make_temp(); remove(p)``) is no mined flow: the data corpus stays the code's
    assert res.flows == [] and res.candidates == 0
    assert len(res.orders) + len(res.order_rejections) == res.order_candidates


def test_doctests_off_and_in_test_code(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "client.py").write_text(textwrap.dedent(CONN))
    (tmp_path / "tests" / "test_client.py").write_text('def test_send():\n    """\n    >>> c = Conn()\n    >>> c.connect()\n    >>> c.send(1)\n    """\n')
    files = tree_files(tmp_path, "tree")
    off = mine_files(files, workers=1, doctests=False)
    assert off.orders == [] and off.order_candidates == 0
    on = mine_files(files, workers=1)
    assert {o.record_id.split(":")[0] for o in on.orders} == {"client"}  # test code's examples are not read for orders


def test_examples_that_do_not_parse_are_skipped_and_lines_are_the_files() -> None:
    tree = ast.parse(textwrap.dedent(CONN))
    bodies = {b.qualname: b for b in doctest_bodies(tree)}
    assert set(bodies) == {"<doctest>", "Conn.send.<doctest>", "remove.<doctest>", "Pipe.flush.<doctest>"}
    assert bodies["<doctest>"].function is None and bodies["Pipe.flush.<doctest>"].function == "Pipe.flush"
    remove_body = bodies["remove.<doctest>"].body  # ``print p`` (Python 2) is left out
    assert [ast.unparse(s) for s in remove_body] == ["p = make_temp()", "remove(p)"]
    assert [s.lineno for s in remove_body] == [47, 49]
    body, shown = examples_body("no examples here", 0)
    assert body == [] and shown == frozenset()
