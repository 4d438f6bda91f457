"""A dependency dev set labelled by kind (``data``, ``precondition``, ``none``) from a benchmark whose gold
calls are recorded (API-Bank), and per-kind scores of predicted edges on it. Rule and known errors:
docs/preconditions.md.

The folder holds ``tools.jsonl``, ``queries.jsonl`` (``gold_calls_in_order`` per dialogue) and
``dependency_edges.jsonl`` (``producer`` -> ``consumer`` pairs where the consumer reused a value the
producer returned, with the ``params`` reused). Labels, for ordered pairs (producer, consumer):

- ``data``: a pair of the edge file;
- ``precondition``: the producer comes first in every (``min_consistency``) gold dialogue with both, in
  at least ``min_support`` dialogues, is no generic first step, and no value is recorded as reused
  between the two (either way): ``tasks.toolsets.call_order.precondition_candidates`` with the edge file
  as the only evidence of value passing (no name rule: the dev set must not be built from a rule it scores);
- ``none``: a seeded sample of same-group pairs of tools that each occur in some gold dialogue but never
  in the same one (and are no edge of the file).

Every ordered pair that occurs together in the dialogues read ends as an item or unlabelled with a reason
(``KindDevSet.unlabelled``; the reverse of a data pair, a generic first step, low support, an
inconsistent order), and ``KindDevSet.accounting`` adds them up.
"""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from schemas.toolset import DependencyEdge
from tasks.toolsets.call_order import (
    ACCEPTED,
    DATA_EDGE,
    DEFAULT_GENERIC_MIN_TOOLS,
    DEFAULT_GENERIC_SHARE,
    OrderStatistics,
    order_statistics,
    precondition_candidates,
)
from tasks.toolsets.doc_import import numbered_rows
from tasks.toolsets.readers import ToolSetFormatError, load_benchmark_with_report
from tasks.toolsets.trajectories import Trajectory, gold_trajectories

DATA, PRECONDITION, NONE = "data", "precondition", "none"
KINDS = (DATA, PRECONDITION, NONE)
EDGE_FILE = "dependency_edges.jsonl"
REVERSE_OF_DATA = "reverse of a data pair"
DEFAULT_LABEL_MIN_SUPPORT = 2
DEFAULT_LABEL_MIN_CONSISTENCY = 1.0  # every dialogue with both: a label, not a guess
DEFAULT_NONE_PER_LABELLED = 2.0  # none items per data + precondition item


@dataclass(frozen=True)
class KindItem:
    producer: str  # the prerequisite (called first / returns the value)
    consumer: str  # the dependent
    kind: str  # one of KINDS
    support: int  # dialogues (of those read) with both tools
    consistency: float | None  # share of them with the producer first; None when they never co-occur
    params: tuple[str, ...] = ()  # data: the consumer inputs the edge file says were reused
    same_group: bool = True


@dataclass
class KindDevSet:
    name: str
    items: list[KindItem]  # sorted by (kind, producer, consumer)
    unlabelled: list[tuple[str, str, str]]  # (a, b, reason): co-occurring ordered pairs that got no label
    stats: OrderStatistics  # of the dialogues read (``keep_run``)
    runs: list[Trajectory]  # the dialogues read
    rejected_edges: list[str] = field(default_factory=list)  # edge-file lines not used, with why
    none_pool: int = 0  # never-co-occurring pairs the none items were sampled from

    def counts(self) -> Counter:
        return Counter(i.kind for i in self.items)

    def accounting(self) -> dict[str, int]:
        """Every co-occurring ordered pair of ``stats``: labelled data, labelled precondition, or unlabelled
        (by reason); data pairs that do not co-occur in the dialogues read and none items are extra."""
        items = {(i.producer, i.consumer): i.kind for i in self.items}
        out = Counter(items.get(pair, "?") for pair in self.stats.pairs if pair in items)
        out.update(reason for _, _, reason in self.unlabelled)
        return dict(sorted(out.items()))


def read_value_edges(file: Path, known: set[str]) -> tuple[dict[tuple[str, str], tuple[str, ...]], list[str]]:
    """(producer, consumer) -> reused params of an API-Bank ``dependency_edges.jsonl``; lines naming unknown
    tools, self loops and repeats are left out with a reason. A line that is not such an edge is an error."""
    edges: dict[tuple[str, str], tuple[str, ...]] = {}
    rejected = []
    for lineno, rec in numbered_rows(file):
        where = f"{file}:{lineno}"
        if not isinstance(rec, dict):
            raise ToolSetFormatError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        producer, consumer, params = rec.get("producer"), rec.get("consumer"), rec.get("params", [])
        if not isinstance(producer, str) or not producer or not isinstance(consumer, str) or not consumer:
            raise ToolSetFormatError(f"{where}: 'producer' and 'consumer' must be non-empty strings")
        if not isinstance(params, list) or not all(isinstance(p, str) for p in params):
            raise ToolSetFormatError(f"{where}: 'params' must be a list of parameter names")
        if producer not in known or consumer not in known:
            rejected.append(f"{where}: unknown tool {sorted({producer, consumer} - known)}")
        elif producer == consumer:
            rejected.append(f"{where}: self loop {producer}")
        elif (producer, consumer) in edges:
            rejected.append(f"{where}: repeats {producer}->{consumer}")
        else:
            edges[producer, consumer] = tuple(params)
    return edges, rejected


def build_kind_devset(
    folder: Path | str,
    keep_run: Callable[[Trajectory], bool] | None = None,
    min_support: int = DEFAULT_LABEL_MIN_SUPPORT,
    min_consistency: float = DEFAULT_LABEL_MIN_CONSISTENCY,
    none_per_labelled: float = DEFAULT_NONE_PER_LABELLED,
    seed: int = 0,
    generic_share: float = DEFAULT_GENERIC_SHARE,
    generic_min_tools: int = DEFAULT_GENERIC_MIN_TOOLS,
) -> KindDevSet:
    """The kind-labelled dev set of an API-Bank-layout ``folder`` (module docstring); deterministic.

    ``keep_run``: read only these dialogues for the precondition labels (e.g. one half, to score a rule
    built from the other half); data labels come from the edge file, none items from all dialogues.
    """
    folder = Path(folder)
    edge_file = folder / EDGE_FILE
    if not edge_file.is_file():
        raise FileNotFoundError(f"{edge_file} not found: a kind dev set needs the recorded value reuse")
    toolset, _ = load_benchmark_with_report(folder)
    group = {t.tool_id: t.group for t in toolset.tools}
    all_runs = gold_trajectories(folder / "queries.jsonl", set(group)).runs
    if not all_runs:
        raise ValueError(f"{folder / 'queries.jsonl'}: no gold call orders (gold_calls_in_order)")
    runs = [r for r in all_runs if keep_run is None or keep_run(r)]
    value_edges, rejected = read_value_edges(edge_file, set(group))
    stats = order_statistics(runs)

    # the edge file is the only evidence of value passing here (crossing-group edges included)
    evidence = replace(toolset, edges=[DependencyEdge(group[c], c, p, "manual") for p, c in value_edges],
                       parameter_edges=())
    report = precondition_candidates(stats, evidence, min_support, min_consistency, generic_share,
                                     generic_min_tools, use_name_rule=False)
    items, unlabelled = [], []
    for (p, c), params in value_edges.items():
        order = stats.get(p, c)
        items.append(KindItem(p, c, DATA, order.both if order else 0, order.consistency if order else None,
                              params, group[p] == group[c]))
    for d in report.decisions:
        a, b = d.order.a, d.order.b
        if (a, b) in value_edges:
            continue
        if d.reason == ACCEPTED:
            items.append(KindItem(a, b, PRECONDITION, d.order.both, d.order.consistency, (), group[a] == group[b]))
        else:
            unlabelled.append((a, b, REVERSE_OF_DATA if d.reason == DATA_EDGE else d.reason))

    all_stats = order_statistics(all_runs)
    seen = sorted(all_stats.tool_runs)
    pool = [(a, b) for a in seen for b in seen
            if a != b and group[a] == group[b] and (a, b) not in all_stats.pairs
            and (a, b) not in value_edges and (b, a) not in value_edges]
    n_none = min(len(pool), round(none_per_labelled * len(items)))
    items += [KindItem(a, b, NONE, 0, None) for a, b in sorted(random.Random(seed).sample(pool, n_none))]
    items.sort(key=lambda i: (KINDS.index(i.kind), i.producer, i.consumer))
    return KindDevSet(toolset.name, items, sorted(unlabelled), stats, runs, rejected, len(pool))


@dataclass(frozen=True)
class KindScore:
    kind: str
    precision: float
    recall: float
    f1: float
    true_positive: int
    predicted: int  # dev items predicted this kind
    gold: int  # dev items of this kind


def kind_scores(predicted: Iterable[tuple[str, str, str]], devset: KindDevSet) -> tuple[dict[str, KindScore], int]:
    """Precision, recall and F1 per kind of ``predicted`` (producer, consumer, kind) edges on the dev
    set's items; an item no edge names is predicted ``none``. Returns the scores and the number of
    predicted edges that are no dev item (unjudged: the none items are a sample). A pair predicted
    with two kinds, or a kind not in KINDS, is an error."""
    guess: dict[tuple[str, str], str] = {}
    for producer, consumer, kind in predicted:
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r} for {producer}->{consumer}; known: {', '.join(KINDS)}")
        if guess.setdefault((producer, consumer), kind) != kind:
            raise ValueError(f"{producer}->{consumer} predicted both {guess[producer, consumer]!r} and {kind!r}")
    items = {(i.producer, i.consumer): i.kind for i in devset.items}
    outside = sum(1 for pair in guess if pair not in items)
    scores = {}
    for kind in KINDS:
        pred = {pair for pair in items if guess.get(pair, NONE) == kind}
        gold = {pair for pair, k in items.items() if k == kind}
        tp = len(pred & gold)
        p = tp / len(pred) if pred else 0.0
        r = tp / len(gold) if gold else 0.0
        scores[kind] = KindScore(kind, p, r, 2 * p * r / (p + r) if p + r else 0.0, tp, len(pred), len(gold))
    return scores, outside
