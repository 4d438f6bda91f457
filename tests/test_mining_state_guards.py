"""Precondition pairs from state guards (tasks/mining/state.py): a function that raises unless some state is set,
and the functions that set it."""
from __future__ import annotations

from pathlib import Path

from tasks.mining.dataset import RARE_ORDER, precondition_pairs
from tasks.mining.mine import MineResult
from tasks.mining.reasons import MineReason
from tasks.mining.state import ERROR_MESSAGE, STATE_GUARD
from tests.mining_trees import mine_tree

CONN = '''
class Conn:
    """A network connection."""

    def __init__(self, addr):
        self.addr = addr
        self._sock = None
        self._closed = False
        self.retries = 3

    def connect(self):
        """Open the connection."""
        self._sock = object()

    def open(self):
        """Open the connection, retrying."""
        self._dial()

    def _dial(self):
        """Dial the address."""
        self._sock = object()

    def close(self):
        """Close the connection."""
        self._sock = None
        self._closed = True

    def set_retries(self, n):
        """Set how often to retry."""
        self.retries = n

    def send(self, data):
        """Send data over the open connection."""
        if self._sock is None:
            raise ConnectionError("not connected: call connect() first")
        return len(data)

    def _check_open(self):
        """Raise unless the connection is open."""
        if not self._sock:
            raise ValueError("closed")

    def recv(self):
        """Receive data."""
        self._check_open()
        return b""

    def peek(self):
        """Look at the next byte."""
        with self._lock:
            assert self._sock is not None  # a with block runs whenever the method does
        return b""

    def unread(self, data):
        """Push data back."""
        try:
            if self._sock is None:
                raise ValueError("not open")
        except ValueError:
            pass  # caught: no guard

    def flush(self):
        """Flush the buffer."""
        if self._closed:
            raise ValueError("flush on a closed connection")  # must not come after close: no "call first"

    def is_open(self):
        """Whether the connection is open."""
        if self._sock is None:
            return False  # no raise: this guard decides, it requires nothing
        return True

    def resend(self):
        """Send again with retries."""
        if not self.retries:
            raise ValueError("no retries")  # __init__ sets retries: the guard checks a reset, not a first call
'''


def _guarded(res: MineResult) -> set[tuple[str, str]]:
    return {(o.consumer.rsplit(".", 1)[-1], o.producer.rsplit(".", 1)[-1]) for o in res.orders if STATE_GUARD in o.patterns}


def test_a_method_that_raises_unless_state_is_set_needs_the_methods_that_set_it(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"net.py": CONN})
    # open sets it through self._dial(): one hop; recv's guard is its checker's: one hop; peek asserts; the
    # checker is a documented method too
    consumers, producers = ("send", "recv", "peek", "_check_open"), ("connect", "open", "_dial")
    assert _guarded(res) == {(c, p) for c in consumers for p in producers}
    one = next(o for o in res.orders if o.consumer == "net.Conn.send" and o.producer == "net.Conn.connect")
    assert one.support == 1 and one.patterns == (ERROR_MESSAGE, STATE_GUARD)  # its error names connect() too
    assert one.record_id.startswith("net:Conn.send:")  # module:function:line:col:after:line:col, as call orders
    assert len(res.orders) + len(res.order_rejections) == res.order_candidates


def test_close_flush_reconnect_and_a_reset_guard_give_no_pair(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"net.py": CONN})
    consumers = {c for c, _ in _guarded(res)}
    producers = {p for _, p in _guarded(res)}
    assert "close" not in producers  # binds None: it unsets
    assert "set_retries" not in producers and "resend" not in consumers  # __init__ already binds retries
    assert "flush" not in consumers  # ``if self._closed: raise``: what must not come first
    assert "is_open" not in consumers  # the guard decides and raises nothing
    assert "unread" not in consumers  # a raise inside try may be caught


def test_a_state_that_many_methods_set_is_shared_and_rejected_with_its_reason(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"builder.py": '''
        class Builder:
            """Builds a buffer."""

            def start_object(self):
                """Start an object."""
                self.nested = True

            def start_vector(self):
                """Start a vector."""
                self.nested = True

            def start_string(self):
                """Start a string."""
                self.nested = True

            def start_table(self):
                """Start a table."""
                self.nested = True

            def end_object(self):
                """End the object."""
                if not self.nested:
                    raise ValueError("not nested")
        '''})
    assert not _guarded(res)
    reasons = [r for r in res.order_rejections if r.reason == MineReason.SHARED_STATE]
    assert len(reasons) == 4 and "self.nested is set by 4 methods" in reasons[0].detail
    assert len(res.orders) + len(res.order_rejections) == res.order_candidates


def test_a_state_restored_from_another_attribute_is_not_set_there(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"image.py": '''
        class Image:
            """An image file."""

            def load(self):
                """Open the file."""
                self.fp = open("x")

            def seek(self, frame):
                """Go to a frame."""
                self.fp = self._fp

            def read(self):
                """Read the frame."""
                assert self.fp is not None
                return b""
        '''})
    assert _guarded(res) == {("read", "load")}


def test_a_base_class_method_of_the_same_module_is_a_producer(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"model.py": '''
        class Base:
            """An estimator."""

            def fit(self, X):
                """Learn from X."""
                self.coef_ = [1.0]
                return self


        class Linear(Base):
            """A linear estimator."""

            def predict(self, X):
                """Predict for X with the learned coefficients."""
                if not self.coef_:
                    raise RuntimeError("call fit first")
                return X
        '''})
    assert _guarded(res) == {("predict", "fit")}
    order = next(o for o in res.orders if STATE_GUARD in o.patterns)
    assert (order.consumer, order.producer) == ("model.Linear.predict", "model.Base.fit")


def test_a_module_global_guard_needs_the_function_that_sets_it(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"client.py": '''
        _client = None
        _debug = False


        def init(url):
            """Set up the client for url."""
            global _client
            _client = {"url": url}


        def shutdown():
            """Drop the client."""
            global _client
            _client = None


        def get(key):
            """Fetch a key with the client."""
            if _client is None:
                raise RuntimeError("call init() first")
            return key


        def connect(_client=None):
            """Connect with a client of one's own."""
            if _client is None:
                raise ValueError("no client")  # its parameter, not the module's state
        '''})
    assert _guarded(res) == {("get", "init")}


def test_a_guarded_pair_is_kept_at_the_default_support_where_a_lone_call_order_is_not(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"net.py": CONN, "use.py": '''
        from net import Conn


        def talk(conn: Conn, data):
            conn.set_retries(5)
            conn.connect()
        '''})
    kept, rare = precondition_pairs(res, min_support=2)
    kept_pairs = {(p.dependent_key.rsplit(".", 1)[-1], p.prerequisite_key.rsplit(".", 1)[-1]) for p in kept}
    assert ("send", "connect") in kept_pairs and all(p.support == 1 for p in kept)
    assert ("connect", "set_retries") not in kept_pairs  # one function's call order: a habit not yet shown twice
    assert any(reason == RARE_ORDER and "set_retries" in detail for _, reason, detail in rare)
    assert len(kept) + len(rare) == len(res.orders)


def test_an_error_that_names_the_call_to_make_first_gives_the_pair(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"sorter.py": '''
        class Sorter:
            """Topological sorting."""

            def prepare(self):
                """Mark the graph as done."""
                self._state = 2

            def putrequest(self, url):
                """Start a request."""

            def get_ready(self):
                """The nodes ready now."""
                if self._state != 2:
                    raise ValueError("prepare() must be called first")
                return []

            def send(self, data):
                """Send request data."""
                if self._state < 1:
                    raise ConnectionError("Must call `putrequest` first.")

            def fit(self):
                """Fit from scratch."""
                if self._state:
                    raise ValueError("cannot call fit() after prepare()")  # what must not come first

            def read(self):
                """Read."""
                if self._state is False:
                    raise ValueError("I/O on a closed sorter: call prepare() before")  # closed: no "call first"

            def lookup(self, key):
                """Look a key up."""
                raise KeyError(f"{key}: unknown; see get_ready()")  # names a method, asks for no order

            def select(self, rows):
                """Select rows."""
                raise ValueError("Using `.get_ready` here is not allowed. You can first run `.prepare()`.")


        def configure(**options):
            """Set the module up."""


        def run(job):
            """Run a job."""
            if job is None:
                raise RuntimeError("configure() has not been called")
        '''})
    said = {(o.consumer, o.producer) for o in res.orders if ERROR_MESSAGE in o.patterns}
    assert said == {("sorter.Sorter.get_ready", "sorter.Sorter.prepare"), ("sorter.Sorter.send", "sorter.Sorter.putrequest"),
                    ("sorter.Sorter.select", "sorter.Sorter.prepare"),  # the sentence that says "first" names prepare
                    ("sorter.run", "sorter.configure")}
    kept, _ = precondition_pairs(res, min_support=2)
    assert {(p.dependent_key, p.prerequisite_key) for p in kept} >= said  # stated: kept at support 1


ESTIMATOR = '''
from sklearn.utils.validation import check_is_fitted


class Scaler:
    """Scale features."""

    def __init__(self, copy=True):
        self.copy = copy

    def fit(self, X):
        """Learn the mean of each feature."""
        self._reset()
        self.mean_ = sum(X) / len(X)
        return self

    def partial_fit(self, X):
        """Learn the mean from one more batch."""
        self._update(X)
        return self

    def _update(self, X):
        """Update the running mean."""
        self.n_seen_ = len(X)

    def _reset(self):
        """Forget what was learned."""
        self._cache = {}

    def set_params(self, copy):
        """Set the copy flag."""
        self.copy = copy  # no fitted attribute: no producer

    def transform(self, X):
        """Centre X by the learned mean."""
        check_is_fitted(self)
        return [x - self.mean_ for x in X]

    def inverse_transform(self, X):
        """Undo transform."""
        check_is_fitted(self, "mean_")  # names the attribute: only fit sets it
        return [x + self.mean_ for x in X]

    def score(self, X):
        """Score X."""
        if X:
            check_is_fitted(self)  # in a branch: not a check that always runs
        return 0.0
'''


def test_a_fitted_check_needs_the_public_methods_that_bind_a_fitted_attribute(tmp_path: Path) -> None:
    """scikit-learn's convention: ``check_is_fitted(self)`` at the top of a method; fit and partial_fit (through
    its helper, one hop) bind trailing-underscore attributes; the private helpers and set_params are no producers."""
    from tasks.mining.state import FITTED_CHECK

    res = mine_tree(tmp_path, {"scale.py": ESTIMATOR})
    fitted = {(o.consumer.rsplit(".", 1)[-1], o.producer.rsplit(".", 1)[-1]) for o in res.orders
              if FITTED_CHECK in o.patterns}
    assert fitted == {("transform", "fit"), ("transform", "partial_fit"), ("inverse_transform", "fit")}
    one = next(o for o in res.orders if o.consumer == "scale.Scaler.transform" and o.producer == "scale.Scaler.fit")
    assert one.support == 1 and one.patterns == (FITTED_CHECK,)
    # stated in code: kept at mine-tdi's default support floor of 2
    kept, rare = precondition_pairs(res, min_support=2)
    assert {(p.dependent_key, p.prerequisite_key) for p in kept} == {
        (f"scale.Scaler.{c}", f"scale.Scaler.{p}") for c, p in fitted} and not rare


def test_a_hasattr_guard_needs_the_methods_that_set_the_attribute(tmp_path: Path) -> None:
    """``if not hasattr(self, "_source"): raise`` reads as ``self._source is None``; another object's attribute or
    one that ``__init__`` sets say nothing."""
    res = mine_tree(tmp_path, {"ffi.py": '''
class Builder:
    """Build an extension."""

    def __init__(self):
        self.name = "ext"

    def set_source(self, text):
        """Give the C source."""
        self._source = text

    def rename(self, name):
        """Rename the extension."""
        self.name = name

    def compile(self):
        """Compile the source set by set_source."""
        if not hasattr(self, "_source"):
            raise ValueError("no source")
        return self._source

    def label(self):
        """The extension's name."""
        if not hasattr(self, "name"):
            raise ValueError("unnamed")  # __init__ sets it: no first call needed
        return self.name

    def peek(self, other):
        """Look at another builder's source."""
        if not hasattr(other, "_source"):
            raise ValueError("no source there")  # not this object's state
        return other._source
'''})
    assert _guarded(res) == {("compile", "set_source")}


SESSION = '''
class Session:
    """A session with a server. `login` must be called before `query`."""

    def login(self, user):
        """Log in as user."""

    def query(self, sql):
        """Run a query."""

    def prepare(self, sql):
        """Prepare a statement. This should be called before :meth:`execute`."""

    def execute(self):
        """Execute the prepared statement."""

    def fetch(self):
        """Fetch the rows.

        Raises RuntimeError if `execute` has not been called.
        """

    def export(self, path):
        """Export the result. Must be called after :meth:`~db.Session.fetch`."""

    def close(self):
        """Close the session. This will call `flush` when done; you can call `commit()` first."""

    def flush(self):
        """Write buffers out. The hook will be called after calling `commit` on the session."""

    def commit(self):
        """Commit the work. The `flush()` should be called at a later point."""

    def replay(self):
        """Replay. If `execute` has been called before, its statement is reused."""

    def stats(self, verbose):
        """Statistics.

        Args:
            verbose: must be called before `fetch` (a parameter's prose, not read).
        """


def init_pool():
    """Set the pool up."""


def get_pool():
    """The pool. ``init_pool()`` must have been called."""
'''


def test_a_docstring_that_says_which_call_comes_first_gives_the_pair(tmp_path: Path) -> None:
    """docstring_order: a sentence of a function's or class's docstring that names the other function and says
    which comes first; what only may happen, a conditional without a requirement, a "should be called" that says
    no order, an "after calling" that states no rule and parameter prose are not read."""
    from tasks.mining.state import DOCSTRING_ORDER

    res = mine_tree(tmp_path, {"db.py": SESSION})
    said = {(o.consumer.rsplit(".", 1)[-1], o.producer.rsplit(".", 1)[-1]) for o in res.orders if DOCSTRING_ORDER in o.patterns}
    assert said == {("query", "login"),       # the class docstring: `login` before `query`
                    ("execute", "prepare"),   # this (prepare) before execute
                    ("fetch", "execute"),     # raises if execute has not been called
                    ("export", "fetch"),      # after :meth:`~db.Session.fetch`
                    ("get_pool", "init_pool")}  # module functions
    one = next(o for o in res.orders if o.consumer == "db.Session.fetch")
    assert one.support == 1 and one.patterns == (DOCSTRING_ORDER,) and one.record_id.startswith("db:Session.fetch:")
    # stated: kept at the default support, where a lone call order is not
    kept, rare = precondition_pairs(res, min_support=2)
    assert len(kept) == len(said) and not rare
    assert len(res.orders) + len(res.order_rejections) == res.order_candidates
