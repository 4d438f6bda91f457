"""Precondition pairs from state used before it is set (tasks/mining/state.py ``state_use``): a method that
dereferences ``self.X`` unguarded, where nothing at construction sets X and another method binds it."""
from __future__ import annotations

from pathlib import Path

from tasks.mining.dataset import precondition_pairs
from tasks.mining.mine import MineResult
from tasks.mining.reasons import MineReason
from tasks.mining.state import STATE_GUARD, STATE_USE
from tests.mining_trees import mine_tree

PLAYER = '''
class Player:
    """Plays a stream."""

    def __init__(self, url):
        self.url = url
        self._stream = None

    def open(self):
        """Open the stream."""
        self._stream = object()

    def play(self):
        """Play the open stream."""
        return self._stream.read()

    def stop(self):
        """Stop the stream and forget it."""
        self._stream.close()
        self._stream = None

    def pause(self):
        """Pause if playing."""
        if self._stream is not None:
            self._stream.pause()

    def rewind(self):
        """Rewind, opening the stream when needed."""
        if not self._stream:
            self.open()
        self._stream.seek(0)

    def buffer(self):
        """Fill the buffer, opening a stream of its own."""
        self._stream = object()
        return self._stream.read()

    def skip(self, n):
        """Skip n frames when asked to."""
        if n:
            self._stream.skip(n)  # in a branch: not every call needs the stream

    def peek(self):
        """Look ahead without failing."""
        try:
            return self._stream.peek()
        except AttributeError:
            return None

    def url_length(self):
        """Length of the URL."""
        return self.url.count("/")
'''


def _used(res: MineResult) -> set[tuple[str, str]]:
    return {(o.consumer.rsplit(".", 1)[-1], o.producer.rsplit(".", 1)[-1]) for o in res.orders if STATE_USE in o.patterns}


def test_a_method_that_uses_state_only_another_method_sets_needs_that_method_first(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"media.py": PLAYER})
    # rewind (through open) and buffer set the stream too; stop unsets it after use but still needs it set first,
    # and a teardown after an action is no precondition (the order books' rule)
    assert _used(res) == {("play", "open"), ("play", "rewind"), ("play", "buffer"), ("stop", "open")}
    assert {r.detail for r in res.order_rejections if r.reason == "teardown_after_action"} == {
        "media.Player.rewind -> media.Player.stop", "media.Player.buffer -> media.Player.stop"}
    play = next(o for o in res.orders if o.consumer == "media.Player.play")
    assert play.support == 1 and play.patterns == (STATE_USE,) and play.record_id.startswith("media:Player.play:")
    assert len(res.orders) + len(res.order_rejections) == res.order_candidates


def test_a_method_that_tests_makes_catches_or_branches_on_the_state_is_no_consumer(tmp_path: Path) -> None:
    consumers = {c for c, _ in _used(mine_tree(tmp_path, {"media.py": PLAYER}))}
    assert "pause" not in consumers and "rewind" not in consumers  # it tests the state: copes with it unset
    assert "buffer" not in consumers  # it binds the state itself first
    assert "skip" not in consumers  # used in a branch only
    assert "peek" not in consumers  # catches the AttributeError
    assert "url_length" not in consumers  # __init__ sets url


def test_state_set_at_construction_or_by_an_outside_base_gives_no_pair(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"jobs.py": '''
        from threading import Thread


        class Job:
            """A job with a worker."""
            worker = object()  # a class-level default: set before any call

            def start(self):
                """Start the worker."""
                self.worker = Thread()

            def join(self):
                """Wait for the worker."""
                self.worker.join()


        class Task(Thread):
            """A thread with a result."""

            def prepare(self):
                """Make the result holder."""
                self.holder = []
                self.holder = [0]

            def result(self):
                """The result."""
                return self.holder[0]  # Thread (another module) may set it in its __init__


        class Compiler:
            """Compiles with include dirs."""

            def __init__(self):
                self.include_dirs = []  # empty, yet usable: add_include_dir works without set_include_dirs

            def set_include_dirs(self, dirs):
                """Replace the include dirs."""
                self.include_dirs = list(dirs)

            def add_include_dir(self, d):
                """Add an include dir."""
                self.include_dirs.append(d)


        class Session:
            """A session used in a with block."""

            def __enter__(self):
                self.conn = object()
                return self

            def login(self):
                """Log in again."""
                self.conn = object()

            def query(self, q):
                """Run a query."""
                return self.conn.run(q)  # __enter__ sets it: "call login first" is not the requirement
        '''})
    assert _used(res) == set()


def test_state_the_class_sets_to_none_at_construction_is_its_own_whatever_its_bases(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"workers.py": '''
        from threading import Thread


        class Worker(Thread):
            """A thread with a queue."""

            def __init__(self):
                super().__init__()
                self._queue = None  # its own state, unset until attach

            def attach(self, queue):
                """Attach a queue."""
                self._queue = queue

            def put(self, item):
                """Queue an item."""
                self._queue.put(item)
        '''})
    assert _used(res) == {("put", "attach")}


def test_a_same_module_base_and_a_helper_are_followed_and_a_shared_state_is_rejected(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"est.py": '''
        class Base:
            """An estimator."""

            def fit(self, X):
                """Learn from X."""
                self._learn(X)
                return self

            def _learn(self, X):
                self.model = [X]


        class Linear(Base):
            """A linear estimator."""

            def predict(self, X):
                """Predict for X with the learned model."""
                return self.model[0]


        class Builder:
            """Builds a buffer."""

            def __init__(self):
                self.head = None

            def a(self):
                """Start a."""
                self.head = 1

            def b(self):
                """Start b."""
                self.head = 2

            def c(self):
                """Start c."""
                self.head = 3

            def d(self):
                """Start d."""
                self.head = 4

            def end(self):
                """End what was started."""
                return self.head.bit_length()
        '''})
    assert _used(res) == {("predict", "fit")}  # through its helper; the helper itself has no docstring
    assert any(r.reason == MineReason.UNDOCUMENTED_PRODUCER and "_learn" in r.detail for r in res.order_rejections)
    assert not any(o.consumer.endswith("Builder.end") for o in res.orders)
    shared = [r for r in res.order_rejections if r.reason == MineReason.SHARED_STATE]
    assert len(shared) == 4 and "self.head is set by 4 methods" in shared[0].detail


def test_state_use_pairs_are_kept_at_the_default_support_and_a_raising_guard_stays_a_state_guard(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"media.py": PLAYER, "net.py": '''
        class Conn:
            """A connection."""

            def __init__(self):
                self._sock = None

            def connect(self):
                """Connect."""
                self._sock = object()

            def send(self, data):
                """Send data."""
                if self._sock is None:
                    raise ConnectionError("not connected")
                return self._sock.send(data)
        '''})
    kept, rare = precondition_pairs(res, min_support=2)
    kept_pairs = {(p.dependent_key.rsplit(".", 1)[-1], p.prerequisite_key.rsplit(".", 1)[-1]) for p in kept}
    assert {("play", "open"), ("stop", "open"), ("send", "connect")} <= kept_pairs
    send = next(o for o in res.orders if o.consumer == "net.Conn.send")
    assert send.patterns == (STATE_GUARD,)  # it tests the state, so the guard speaks, not the use


def test_state_a_base_constructor_sets_is_set_though_the_subclass_overrides_init(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"box.py": '''
        class Mailbox:
            """A mailbox file."""

            def __init__(self, path):
                self._file = None
                self._setup(path)

            def _setup(self, path):
                self._toc = {}
                self._file = open(path)

            def flush(self):
                """Write the changes and reopen the file."""
                self._file = open("new")

            def get(self, key):
                """Read a message."""
                return self._file.read()


        class Babyl(Mailbox):
            """A Babyl mailbox."""

            def __init__(self, path):
                Mailbox.__init__(self, path)  # the base's __init__, not a self.h() call
                self._labels = set()

            def get_bytes(self, key):
                """Read a message's bytes."""
                self._file.seek(0)
                return self._toc[key]
        '''})
    assert _used(res) == set()  # the base's __init__ opens the file (through _setup): flush is no "call first"


def test_state_made_two_calls_deep_at_construction_or_by_the_consumer_gives_no_pair(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"toc.py": '''
        class Box:
            """A box with a table of contents."""

            def __init__(self):
                self._toc = None
                self._draw()

            def _draw(self):
                self._layout()

            def _layout(self):
                self.lines = [1]

            def _lookup(self):
                self._generate()

            def _generate(self):
                self._toc = {}

            def flush(self):
                """Rewrite and rebuild the table."""
                self._toc = {"k": 1}

            def add(self, key):
                """Add a key, building the table when needed."""
                self._lookup()
                self._toc[key] = 1

            def redraw_lines(self):
                """Draw the lines again."""
                return self.lines[0]
        '''})
    assert _used(res) == set()  # add makes the table through _lookup -> _generate; __init__ lays out the lines


def test_a_module_global_used_unguarded_needs_the_function_that_sets_it(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"client.py": '''
        _client = None
        CONFIG = None
        try:
            CONFIG = dict(a=1)
        except ImportError:
            pass


        def init(url):
            """Make the client for url."""
            global _client
            _client = {"url": url}


        def reset():
            """Drop the client."""
            global _client
            _client = None


        def get(key):
            """Fetch a key with the client."""
            return _client.get(key)


        def get_or_init(key):
            """Fetch a key, making the client first."""
            init("default")
            return _client.get(key)


        def safe_get(key):
            """Fetch a key when there is a client."""
            if _client is None:
                return None
            return _client.get(key)


        def _ensure():
            if _client is None:
                raise RuntimeError("no client")


        def checked_get(key):
            """Fetch a key, checking for the client first."""
            _ensure()
            return _client.get(key)


        def get_with(_client, key):
            """Fetch a key with a client of one's own."""
            return _client.get(key)


        def setting(name):
            """A setting from the configuration."""
            return CONFIG[name]  # bound at import, in a try: not only None
        '''})
    assert _used(res) == {("get", "init")}
    get = next(o for o in res.orders if o.consumer == "client.get")
    assert get.patterns == (STATE_USE,) and get.record_id.startswith("client:get:")


def test_a_consumer_whose_helper_checks_the_state_copes_with_it_unset(tmp_path: Path) -> None:
    res = mine_tree(tmp_path, {"single.py": '''
        class SingleFile:
            """A mailbox in one file; subclasses build the table of contents."""

            def __init__(self):
                self._toc = None

            def flush(self):
                """Write the changes and rebuild the table."""
                self._toc = {"k": 1}

            def _lookup(self):
                if self._toc is None:
                    self._generate_toc()  # defined by the subclasses, in other modules

            def add(self, key):
                """Add a key."""
                self._lookup()
                self._toc[key] = 1
        '''})
    assert _used(res) == set()  # add checks the table through _lookup: flush is no "call first"
