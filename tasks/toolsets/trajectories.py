"""Call trajectories for ToolNet's transition graph: read, validate, split, order.

A trajectory is one run of an agent: the tool ids it called, in order. Two sources:

- a benchmark's gold call orders in its ``queries.jsonl`` (API-Bank ``gold_calls_in_order``,
  UltraTool and TMDB ``gold_nodes_in_order``): one successful run per query, ``run_id`` = query id;
- a user file, JSON Lines, one run per line (docs/warehouse.md, "Trajectories")::

    {"run_id": "r1", "tools": ["SearchMovie", "GetMovieCredit"], "success": true}
    {"tools": ["SearchPerson"], "success": false, "scores": {"SearchPerson": -2}}

  ``tools`` (required): tool ids of the tool set, in call order; ``run_id`` (default ``line-N``);
  ``success`` (default true; Eq. 5 counts successful runs only); ``scores`` (optional evaluator
  scores, integers in [-3, 3], for tools of the run: they replace the rule evaluator for it).

A line that is not a run at all (not UTF-8, not JSON, not an object, fields of the wrong type,
a repeated run_id) is a ``TrajectoryFormatError`` naming file and line. A well-formed run that
cannot be used (no tools, unknown tool ids, the reserved ``<start>``/``<end>``, scores for tools
it did not call) is a ``Rejection`` naming file and line, kept for the warehouse
(``trajectory_rejections``); a file with no usable run is an error.

Splits are seeded and stable: a run's split is a hash of (seed, source, run_id), so adding runs
never moves the others. Eq. 5 is built from ``train``; α and β are chosen on ``validation``;
next-tool hit@k and held-out retrieval use ``test``.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.toolsets.doc_import import numbered_rows
from tasks.toolsets.readers import ToolSetFormatError, _as_id

START, END = "<start>", "<end>"  # ToolNet's extra nodes; no tool may use these ids
RESERVED = (START, END)
SPLITS = ("train", "validation", "test")
DEFAULT_FRACTIONS = (0.6, 0.2, 0.2)
ORDER_FIELDS = ("gold_calls_in_order", "gold_nodes_in_order")  # API-Bank; UltraTool / TMDB
SCORE_RANGE = (-3, 3)  # ToolNet's evaluator scale


class TrajectoryFormatError(ToolSetFormatError):
    """A trajectories file breaks the documented format; the message names file and line."""


@dataclass(frozen=True)
class Trajectory:
    run_id: str
    tools: tuple[str, ...]
    origin: str  # the file it was read from
    line: int
    source: str  # 'gold' (a benchmark's call order) or 'user'
    success: bool = True
    query_id: str | None = None  # gold runs: the query whose call order this is
    scores: tuple[tuple[str, int], ...] = ()  # evaluator scores given with the run

    @property
    def key(self) -> str:
        """Identity inside a dataset: the split hash and the stream order use it."""
        return f"{self.source}:{Path(self.origin).name}:{self.run_id}"


@dataclass(frozen=True)
class Rejection:
    origin: str
    line: int
    run_id: str | None
    reason: str

    def __str__(self) -> str:
        return f"{self.origin}:{self.line}: run {self.run_id!r} rejected: {self.reason}"


@dataclass
class Trajectories:
    runs: list[Trajectory]
    rejections: list[Rejection]
    files: list[str]  # every file read, in order


def _rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, JSON value) of each non-blank line; not UTF-8 or not JSON: an error naming the line."""
    try:
        yield from numbered_rows(path)
    except ToolSetFormatError as exc:
        raise TrajectoryFormatError(str(exc)) from None


def _id(value: Any, field: str, where: str) -> str:
    """A run or tool id: a non-empty string or an integer (read as a string, as tool sets do)."""
    try:
        return _as_id(value, field, where)
    except ToolSetFormatError as exc:
        raise TrajectoryFormatError(str(exc)) from None


def _problem(tools: Sequence[str], known: set[str]) -> str | None:
    """Why a well-formed run cannot be used, or None."""
    if not tools:
        return "empty run (no tools)"
    reserved = sorted({t for t in tools if t in RESERVED})
    if reserved:
        return f"reserved node ids {reserved} are not tools"
    unknown = list(dict.fromkeys(t for t in tools if t not in known))
    if unknown:
        return f"unknown tool ids {unknown[:5]}" + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
    return None


def gold_trajectories(queries_file: Path, known: set[str]) -> Trajectories:
    """The gold call order of every query of a benchmark ``queries.jsonl`` that has one."""
    runs, rejections, first_line = [], [], {}
    for lineno, rec in _rows(queries_file):
        where = f"{queries_file}:{lineno}"
        if not isinstance(rec, dict):
            raise TrajectoryFormatError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        field = next((f for f in ORDER_FIELDS if f in rec), None)
        if field is None:
            continue
        qid = _id(rec.get("qid", rec.get("query_id")), "qid", where)
        if qid in first_line:  # the query id is the run id: two runs would share one identity
            raise TrajectoryFormatError(f"{where}: duplicate query id {qid!r} (first on line {first_line[qid]})")
        first_line[qid] = lineno
        order = rec[field]
        if not isinstance(order, list):
            raise TrajectoryFormatError(f"{where}: field {field!r} must be a list, got {type(order).__name__}")
        tools = tuple(_id(t, field, where) for t in order)
        problem = _problem(tools, known)
        if problem:
            rejections.append(Rejection(str(queries_file), lineno, qid, problem))
            continue
        runs.append(Trajectory(qid, tools, str(queries_file), lineno, "gold", True, qid))
    # a queries file without call orders is no input of the graph (lineage lists inputs only)
    return Trajectories(runs, rejections, [str(queries_file)] if runs or rejections else [])


def _scores(value: Any, where: str) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, dict):
        raise TrajectoryFormatError(f"{where}: field 'scores' must be an object tool id -> integer")
    out = []
    for tool, score in value.items():
        lo, hi = SCORE_RANGE
        if isinstance(score, bool) or not isinstance(score, int) or not lo <= score <= hi:
            raise TrajectoryFormatError(f"{where}: score of {tool!r} must be an integer in [{lo}, {hi}], got {score!r}")
        out.append((tool, score))
    return tuple(out)


def read_trajectories(path: Path, known: set[str]) -> Trajectories:
    """Runs of a user trajectories file (module docstring); format errors raise, unusable runs are rejected."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: trajectories file not found")
    runs, rejections, first_line = [], [], {}
    for lineno, rec in _rows(path):
        where = f"{path}:{lineno}"
        if not isinstance(rec, dict):
            raise TrajectoryFormatError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        if "tools" not in rec:
            raise TrajectoryFormatError(f"{where}: missing field 'tools' (the run's tool ids in call order)")
        if not isinstance(rec["tools"], list):
            raise TrajectoryFormatError(f"{where}: field 'tools' must be a list, got {type(rec['tools']).__name__}")
        run_id = _id(rec["run_id"], "run_id", where) if "run_id" in rec else f"line-{lineno}"
        if run_id in first_line:
            raise TrajectoryFormatError(f"{where}: duplicate run_id {run_id!r} (first on line {first_line[run_id]})")
        first_line[run_id] = lineno
        success = rec.get("success", True)
        if not isinstance(success, bool):
            raise TrajectoryFormatError(f"{where}: field 'success' must be true or false, got {success!r}")
        tools = tuple(_id(t, "tools", where) for t in rec["tools"])
        scores = _scores(rec["scores"], where) if rec.get("scores") is not None else ()
        problem = _problem(tools, known)
        stray = [t for t, _ in scores if t not in tools]
        if problem is None and stray:
            problem = f"scores for tools the run did not call: {stray[:5]}"
        if problem:
            rejections.append(Rejection(str(path), lineno, run_id, problem))
            continue
        runs.append(Trajectory(run_id, tools, str(path), lineno, "user", success, None, scores))
    if not runs:
        detail = "; ".join(str(r) for r in rejections[:3]) or "the file has no runs"
        raise TrajectoryFormatError(f"{path}: no usable run ({len(rejections)} rejected): {detail}")
    return Trajectories(runs, rejections, [str(path)])


def merge(parts: Iterable[Trajectories]) -> Trajectories:
    out = Trajectories([], [], [])
    for part in parts:
        out.runs += part.runs
        out.rejections += part.rejections
        out.files += part.files
    return out


def _unit(seed: int, purpose: str, key: str) -> float:
    """A seeded hash of ``key`` in [0, 1)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{purpose}:{key}".encode()).digest()[:8], "big") / 2**64


def split_of(run: Trajectory, seed: int, fractions: Sequence[float] = DEFAULT_FRACTIONS) -> str:
    """'train', 'validation' or 'test' by a seeded hash of the run's key (stable when runs are added)."""
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError(f"split fractions {tuple(fractions)}: need three non-negative numbers summing to 1")
    u = _unit(seed, "split", run.key)
    return "train" if u < fractions[0] else "validation" if u < fractions[0] + fractions[1] else "test"


def stream_order(runs: Iterable[Trajectory], seed: int) -> list[Trajectory]:
    """The fixed, seeded order in which held-out runs update the dynamic weights (ToolNet learns on
    the stream itself, so the order must be reproducible)."""
    return sorted(runs, key=lambda r: (_unit(seed, "stream", r.key), r.key))
