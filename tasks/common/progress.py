"""Progress of a long stage that you can see while it runs: counts, rate and time left, said at most
every ``every_s`` seconds (docs/build-tdi.md, "Progress"; docs/mining.md, docs/discriminator.md).

:class:`RecordProgress` is counters only (a record finished, accepted or rejected; a request sent or
answered), so the hot path costs an integer add; :meth:`RecordProgress.maybe_report` turns them into
one line and a :class:`ProgressSnapshot` for the sinks (a log line, a Prefect progress artifact) when
the throttle allows. :class:`CountProgress` is the same for any unit (files parsed, candidates judged,
training steps, pairs scored) with named side counts. :func:`ticking` reports from a timer thread, for
work whose counts move in large steps; :class:`PrefectProgressArtifact` is the UI's bar. The clock is
injectable, so rate, time left and throttling are tested without waiting.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

EVERY_S = 10.0  # seconds between two progress lines, at least


@dataclass(frozen=True)
class ProgressSnapshot:
    """The counts at one moment; ``rate_per_min`` and ``eta_s`` are None until a record finished that
    was not answered from the LLM cache (``replayed``, part of ``done``)."""

    what: str
    total: int
    done: int
    accepted: int
    rejected: int
    in_flight: int | None  # None: not counted (a run's progress, chunk by chunk)
    elapsed_s: float
    rate_per_min: float | None
    eta_s: float | None
    replayed: int = 0  # records whose every answer came from the LLM cache: done in no time, so not in the rate

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0

    def line(self) -> str:
        """``chunk 3: 120/1000 records (12%), 4 requests in flight, 37 pairs accepted, 83 rejected,
        9.6 records/min, about 1 h 32 min left``"""
        rate = f"{self.rate_per_min:.1f} records/min" if self.rate_per_min is not None else "rate not known yet"
        left = f"about {duration(self.eta_s)} left" if self.eta_s is not None else "time left not known yet"
        in_flight = f"{self.in_flight} requests in flight, " if self.in_flight is not None else ""
        replayed = f", {self.replayed} from the LLM cache" if self.replayed else ""
        return (f"{self.what}: {self.done}/{self.total} records ({100 * self.fraction:.0f}%{replayed}), {in_flight}"
                f"{self.accepted} pairs accepted, {self.rejected} rejected, {rate}, {left} ({duration(self.elapsed_s)} so far)")


def duration(seconds: float) -> str:
    """``45 s``, ``12 min 5 s``, ``3 h 20 min``: what a reader of a log wants, not more digits."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


class Snapshot(Protocol):
    """What a sink reads of a report: :class:`ProgressSnapshot` and :class:`CountSnapshot` both are one."""

    @property
    def fraction(self) -> float: ...

    def line(self) -> str: ...


class _Throttled:
    """The throttle and the sinks shared by the progress counters: a report (a line to ``say``, the
    snapshot to each sink) at most every ``every_s`` seconds, the first ``every_s`` after the start.
    A sink that raises is the sink's problem, not the run's: it is dropped after its first error, which
    ``say`` reports once. Reports may come from a timer thread: one at a time (a lock)."""

    what: str

    def __init__(self, what: str, say: Callable[[str], None] | None, sinks: tuple[Callable[[Any], None], ...],
                 every_s: float, clock: Callable[[], float]) -> None:
        if not every_s > 0:
            raise ValueError(f"every_s must be above 0, not {every_s}")
        self.what, self.every_s, self.clock = what, every_s, clock
        self.say = say or (lambda _line: None)
        self.sinks = list(sinks)
        self.started = self.last_report = clock()
        self.reports = 0
        self._reporting = threading.Lock()

    def snapshot(self) -> Any:
        raise NotImplementedError

    def due_in(self) -> float:
        """Seconds until the next report is allowed (0: now)."""
        return max(0.0, self.last_report + self.every_s - self.clock())

    def maybe_report(self) -> Any:
        """Report when ``every_s`` seconds passed since the start or the last report; the snapshot, or
        None (also while another thread is reporting: that one is the report)."""
        if self.due_in() > 0 or not self._reporting.acquire(blocking=False):
            return None
        try:
            return self._report() if self.due_in() <= 0 else None
        finally:
            self._reporting.release()

    def report(self) -> Any:
        """Report now, throttle or not (the end of the stage)."""
        with self._reporting:
            return self._report()

    def _report(self) -> Any:
        snap = self.snapshot()
        self.last_report = self.clock()
        self.reports += 1
        self.say(snap.line())
        for sink in list(self.sinks):
            try:
                sink(snap)
            except Exception as exc:  # noqa: BLE001 (a progress display must never fail the work it shows)
                self.sinks.remove(sink)
                self.say(f"{self.what}: progress display {getattr(sink, '__name__', type(sink).__name__)} turned off "
                         f"after an error: {type(exc).__name__}: {exc}")
        return snap


class RecordProgress(_Throttled):
    """Counts of ``total`` records as they finish, and a throttled report of them.

    ``sinks`` get each report's snapshot (``say`` gets its line); a sink that raises is the sink's
    problem, not the run's: it is dropped after its first error, which ``say`` reports once."""

    def __init__(self, total: int, what: str = "records", *, say: Callable[[str], None] | None = None,
                 sinks: tuple[Callable[[ProgressSnapshot], None], ...] = (), every_s: float = EVERY_S,
                 clock: Callable[[], float] = time.monotonic, count_requests: bool = True) -> None:
        if total < 0:
            raise ValueError(f"total must be >= 0, not {total}")
        super().__init__(what, say, sinks, every_s, clock)
        self.total, self.count_requests = total, count_requests
        self.accepted = self.rejected = self.in_flight = self.replayed = 0

    # -- the hot path: counters only --
    def request_started(self, n: int = 1) -> None:
        self.in_flight += n

    def request_ended(self, n: int = 1) -> None:
        self.in_flight -= n

    @property
    def done(self) -> int:  # a sum, not a third counter: a report from another thread sees done = accepted + rejected
        return self.accepted + self.rejected

    def record_done(self, accepted: bool, replayed: bool = False) -> None:
        """One record finished; ``replayed``: every answer it needed came from the LLM cache (a resumed or
        repeated run), so it took no time and stays out of the rate, or the time left would be minutes for hours."""
        if accepted:
            self.accepted += 1
        else:
            self.rejected += 1
        if replayed:
            self.replayed += 1

    def records_done(self, accepted: int, rejected: int) -> None:
        """Many at once (a finished chunk)."""
        self.accepted += accepted
        self.rejected += rejected

    # -- reports --
    def snapshot(self) -> ProgressSnapshot:
        elapsed = self.clock() - self.started
        accepted, rejected, replayed = self.accepted, self.rejected, self.replayed  # read once: the loop counts on
        done = accepted + rejected
        asked = done - replayed  # the records the LLM answered: the rate of the work still to do
        rate = asked / elapsed * 60 if asked > 0 and elapsed > 0 else None
        eta = max(0, self.total - done) / rate * 60 if rate else None
        return ProgressSnapshot(self.what, self.total, done, accepted, rejected,
                                self.in_flight if self.count_requests else None, elapsed, rate, eta, replayed)


def rate_text(per_s: float | None, unit: str) -> str:
    """``12.5 files/s``, or per minute under one a second (``9.6 steps/min``)."""
    if per_s is None:
        return "rate not known yet"
    return f"{per_s:.1f} {unit}/s" if per_s >= 1 else f"{per_s * 60:.1f} {unit}/min"


@dataclass(frozen=True)
class CountSnapshot:
    """The counts of a :class:`CountProgress` at one moment; ``rate_per_s`` and ``eta_s`` are None
    until a unit was done in this run."""

    what: str
    unit: str
    total: int
    done: int
    counts: tuple[tuple[str, int], ...]  # the named side counts, in the order given
    detail: str  # a value of the moment, said as is ("loss 0.4213"); "" for none
    elapsed_s: float
    rate_per_s: float | None
    eta_s: float | None

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 1.0

    def count(self, name: str) -> int:
        return dict(self.counts)[name]

    def line(self) -> str:
        """``mine-tdi parse: 640/2000 files (32%), 5120 pairs found, 3 rejected, 21.3 files/s, about 1 min 4 s left
        (30 s so far)``"""
        left = f"about {duration(self.eta_s)} left" if self.eta_s is not None else "time left not known yet"
        parts = [f"{self.what}: {self.done}/{self.total} {self.unit} ({100 * self.fraction:.0f}%)",
                 *(f"{n} {name}" for name, n in self.counts), *([self.detail] if self.detail else []),
                 rate_text(self.rate_per_s, self.unit), f"{left} ({duration(self.elapsed_s)} so far)"]
        return ", ".join(parts)


class CountProgress(_Throttled):
    """``total`` units of any kind (files, candidates, training steps, pairs) as they are done, named
    side counts (``counts=("pairs found", "rejected")``) and a free ``detail`` (the last loss), with the
    throttled report of :class:`RecordProgress`. The rate is over the units done since the start
    (``start``: units already done then, a resumed run's steps), the time left the rest at that rate."""

    def __init__(self, total: int, what: str, unit: str = "items", *, counts: tuple[str, ...] = (), start: int = 0,
                 say: Callable[[str], None] | None = None, sinks: tuple[Callable[[CountSnapshot], None], ...] = (),
                 every_s: float = EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        if total < 0:
            raise ValueError(f"total must be >= 0, not {total}")
        if start < 0:
            raise ValueError(f"start must be >= 0, not {start}")
        super().__init__(what, say, sinks, every_s, clock)
        self.total, self.unit, self.start = total, unit, start
        self.done = start
        self.counts = dict.fromkeys(counts, 0)
        self.detail = ""

    # -- the hot path: counters only --
    def advance(self, n: int = 1, **counts: int) -> None:
        """``n`` more units done; ``counts``: more of the named side counts (``pairs_found=3`` for
        "pairs found": a keyword cannot hold a space)."""
        self.done += n
        for key, value in counts.items():
            name = key.replace("_", " ")
            if name not in self.counts:
                raise KeyError(f"{self.what}: no count named {name!r} (the counts are {list(self.counts)})")
            self.counts[name] += value

    def set_done(self, done: int) -> None:
        """The units done so far, as a total (a trainer's global step)."""
        self.done = done

    def set_total(self, total: int) -> None:
        """The units to do, once the stage knows them (the checks of a quality gate, after its suites are made)."""
        if total < 0:
            raise ValueError(f"total must be >= 0, not {total}")
        self.total = total

    # -- reports --
    def snapshot(self) -> CountSnapshot:
        elapsed = self.clock() - self.started
        done = self.done  # read once: the loop may count on meanwhile
        ran = done - self.start
        rate = ran / elapsed if ran > 0 and elapsed > 0 else None
        eta = max(0, self.total - done) / rate if rate else None
        return CountSnapshot(self.what, self.unit, self.total, done, tuple(self.counts.items()), self.detail,
                             elapsed, rate, eta)


@contextlib.contextmanager
def ticking(progress: _Throttled, last_line: str = "always") -> Iterator[_Throttled]:
    """``progress`` reported by a timer thread whenever a report is due, while the block runs: for work
    whose counts move in large steps (a process-pool chunk, a batch of pairs) or not at all for a while,
    a line still comes every ``every_s`` seconds. ``last_line``: when the block ends without an error,
    one report (the stage's totals, its rate over the whole stage) "always", "if_long" (only when the
    stage ran ``every_s`` or longer, or reported already: a short pass says nothing) or "never". The
    thread runs in a copy of this context, so a sink sees the Prefect run of the code that started it."""
    if last_line not in ("always", "if_long", "never"):
        raise ValueError(f"last_line must be 'always', 'if_long' or 'never', not {last_line!r}")
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(max(progress.due_in(), 0.05)):
            progress.maybe_report()

    thread = threading.Thread(target=contextvars.copy_context().run, args=(tick,), daemon=True,
                              name=f"progress: {progress.what}")
    thread.start()
    try:
        yield progress
    finally:
        stop.set()
        thread.join(timeout=progress.every_s)  # a sink stuck on an API call must not hold the work up for long
    long = progress.reports > 0 or progress.clock() - progress.started >= progress.every_s
    if last_line == "always" or last_line == "if_long" and long:
        progress.report()


@contextlib.contextmanager
def stage_progress(what: str, total: int, unit: str, *, say: Callable[[str], None] | None = None,
                   every_s: float = EVERY_S) -> Iterator[CountProgress]:
    """A flow step that may run for more than ``every_s`` seconds (building docs, balancing, writing shards, the
    quality gate): a :class:`CountProgress` said to the run's log (``say``, else :func:`run_say`) and shown as a
    Prefect progress bar, reported by a timer while the block runs; a step that ends sooner says nothing."""
    progress = CountProgress(total, what, unit, say=say or run_say(logging.getLogger(__name__)),
                             sinks=(PrefectProgressArtifact(""),), every_s=every_s)
    with ticking(progress, last_line="if_long"):
        yield progress


def in_prefect_run() -> bool:
    """Whether this code runs inside a Prefect flow or task run (Prefect not even imported: no)."""
    if "prefect.context" not in sys.modules:
        return False
    from prefect.context import FlowRunContext, TaskRunContext

    return TaskRunContext.get() is not None or FlowRunContext.get() is not None


def run_say(fallback: logging.Logger) -> Callable[[str], None]:
    """Where progress lines go: the Prefect run's logger inside a run (the run log and the terminal), else
    ``fallback`` at INFO."""
    if in_prefect_run():
        from prefect import get_run_logger

        return get_run_logger().info
    return fallback.info


class PrefectProgressArtifact:
    """A Prefect progress artifact (the UI's bar, on the flow or task run that creates it) fed with
    snapshots: created at the first, updated at each later one, its description ``label`` and the line.
    Outside a Prefect run it does nothing, so the same code runs in a test or a bench; an API error turns
    it off (the progress drops a sink that raised, with one line) and never fails the run."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.artifact_id: Any = None

    def __call__(self, snap: Snapshot) -> None:
        if not in_prefect_run():
            return
        from prefect.artifacts import create_progress_artifact, update_progress_artifact

        percent = min(100.0, 100.0 * snap.fraction)
        description = f"{self.label} {snap.line()}" if self.label else snap.line()
        if self.artifact_id is None:
            self.artifact_id = create_progress_artifact(percent, description=description)
        else:
            update_progress_artifact(self.artifact_id, percent, description=description)
