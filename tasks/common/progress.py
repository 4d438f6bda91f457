"""Progress of a long stage that you can see while it runs: counts, rate and time left, said at most
every ``every_s`` seconds (docs/build-tdi.md, "Progress").

:class:`RecordProgress` is counters only (a record finished, accepted or rejected; a request sent or
answered), so the hot path costs an integer add; :meth:`RecordProgress.maybe_report` turns them into
one line and a :class:`ProgressSnapshot` for the sinks (a log line, a Prefect progress artifact) when
the throttle allows. The clock is injectable, so rate, time left and throttling are tested without
waiting.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

EVERY_S = 10.0  # seconds between two progress lines, at least


@dataclass(frozen=True)
class ProgressSnapshot:
    """The counts at one moment; ``rate_per_min`` and ``eta_s`` are None until a record finished."""

    what: str
    total: int
    done: int
    accepted: int
    rejected: int
    in_flight: int | None  # None: not counted (a run's progress, chunk by chunk)
    elapsed_s: float
    rate_per_min: float | None
    eta_s: float | None

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0

    def line(self) -> str:
        """``chunk 3: 120/1000 records (12%), 4 requests in flight, 37 pairs accepted, 83 rejected,
        9.6 records/min, about 1 h 32 min left``"""
        rate = f"{self.rate_per_min:.1f} records/min" if self.rate_per_min is not None else "rate not known yet"
        left = f"about {duration(self.eta_s)} left" if self.eta_s is not None else "time left not known yet"
        in_flight = f"{self.in_flight} requests in flight, " if self.in_flight is not None else ""
        return (f"{self.what}: {self.done}/{self.total} records ({100 * self.fraction:.0f}%), {in_flight}"
                f"{self.accepted} pairs accepted, {self.rejected} rejected, {rate}, {left} ({duration(self.elapsed_s)} so far)")


def duration(seconds: float) -> str:
    """``45 s``, ``12 min 5 s``, ``3 h 20 min``: what a reader of a log wants, not more digits."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


class RecordProgress:
    """Counts of ``total`` records as they finish, and a throttled report of them.

    ``sinks`` get each report's snapshot (``say`` gets its line); a sink that raises is the sink's
    problem, not the run's: it is dropped after its first error, which ``say`` reports once."""

    def __init__(self, total: int, what: str = "records", *, say: Callable[[str], None] | None = None,
                 sinks: tuple[Callable[[ProgressSnapshot], None], ...] = (), every_s: float = EVERY_S,
                 clock: Callable[[], float] = time.monotonic, count_requests: bool = True) -> None:
        if total < 0:
            raise ValueError(f"total must be >= 0, not {total}")
        if not every_s > 0:
            raise ValueError(f"every_s must be above 0, not {every_s}")
        self.total, self.what, self.every_s, self.clock, self.count_requests = total, what, every_s, clock, count_requests
        self.say = say or (lambda _line: None)
        self.sinks = list(sinks)
        self.accepted = self.rejected = self.in_flight = 0
        self.started = self.last_report = clock()
        self.reports = 0

    # -- the hot path: counters only --
    def request_started(self, n: int = 1) -> None:
        self.in_flight += n

    def request_ended(self, n: int = 1) -> None:
        self.in_flight -= n

    @property
    def done(self) -> int:  # a sum, not a third counter: a report from another thread sees done = accepted + rejected
        return self.accepted + self.rejected

    def record_done(self, accepted: bool) -> None:
        if accepted:
            self.accepted += 1
        else:
            self.rejected += 1

    def records_done(self, accepted: int, rejected: int) -> None:
        """Many at once (a finished chunk)."""
        self.accepted += accepted
        self.rejected += rejected

    # -- reports --
    def snapshot(self) -> ProgressSnapshot:
        elapsed = self.clock() - self.started
        accepted, rejected = self.accepted, self.rejected  # read once: the loop may count on meanwhile
        done = accepted + rejected
        rate = done / elapsed * 60 if done and elapsed > 0 else None
        eta = max(0, self.total - done) / rate * 60 if rate else None
        return ProgressSnapshot(self.what, self.total, done, accepted, rejected,
                                self.in_flight if self.count_requests else None, elapsed, rate, eta)

    def due_in(self) -> float:
        """Seconds until the next report is allowed (0: now)."""
        return max(0.0, self.last_report + self.every_s - self.clock())

    def maybe_report(self) -> ProgressSnapshot | None:
        """Report when ``every_s`` seconds passed since the start or the last report; the snapshot, or None."""
        return self.report() if self.due_in() <= 0 else None

    def report(self) -> ProgressSnapshot:
        """Report now, throttle or not (the end of the stage)."""
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
