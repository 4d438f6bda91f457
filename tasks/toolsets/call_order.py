"""Call-order statistics over runs, and precondition candidates from them (docs/preconditions.md).

A dependency is ``data`` (an output of the prerequisite feeds an input of the dependent) or
``precondition`` (the prerequisite must be called first: a check, a lookup of state, a login, with no
value passed). Data edges can be found from names (``schemas.name_rule``); a precondition passes no
value, so only the order in which agents call tools shows it. This module counts that order:

- ``order_statistics(runs)``: for each ordered pair (a, b) of distinct tools that occur together in a
  run, by the first occurrence of each in the run: runs where a comes before b, runs where b comes
  before a, runs with both, and runs in which b directly follows a somewhere (adjacent). The warehouse
  view ``call_order_pairs`` (warehouse/sql/040_call_order.sql) computes the same counts in SQL.
- ``precondition_candidates(stats, toolset)``: every ordered pair that occurs together ends accepted
  as a candidate or rejected with one reason (``REASONS``, in the order they are checked):
  a generic first step (a tool that comes first before most tools, decided by ``precedence_breadth``),
  too little support, an order that is not consistent enough, a data edge or parameter edge of the
  tool set between the two, or a name rule firing between them (a value may pass).

Only successful runs count by default (as Eq. 5 does): a failed run's order says what an agent tried.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from schemas.name_rule import (
    group_common_names,
    group_common_partial_inputs,
    feeds,
    mentioned_outputs,
    partial_feeds,
)
from schemas.toolset import DependencyEdge, Tool, ToolSet
from tasks.toolsets.trajectories import Trajectory

# Why a pair is not a precondition candidate, in the order the rule checks them (first that applies).
GENERIC_FIRST_STEP = "generic first step"
LOW_SUPPORT = "low support"
INCONSISTENT = "inconsistent order"
DATA_EDGE = "data edge in the tool set"
NAME_RULE = "name rule fires"
REASONS = (GENERIC_FIRST_STEP, LOW_SUPPORT, INCONSISTENT, DATA_EDGE, NAME_RULE)
ACCEPTED = "accepted"

DEFAULT_MIN_SUPPORT = 2  # runs with both tools
DEFAULT_MIN_CONSISTENCY = 0.9  # share of those runs with a before b
# A tool that consistently comes before more than this share of the other tools is a router or discovery
# step (API-Bank's ToolSearcher: 0.67 of 67 tools), not a prerequisite of each; GetUserToken, a real
# prerequisite of 20 tools, has 0.30. The count floor keeps a small tool set's login (3 tools, before both
# others: share 1.0) from being called generic.
DEFAULT_GENERIC_SHARE = 0.5
DEFAULT_GENERIC_MIN_TOOLS = 5


@dataclass(frozen=True)
class PairOrder:
    """Order counts of the ordered pair (a, b) over runs containing both (first occurrences)."""

    a: str
    b: str
    a_before_b: int
    b_before_a: int
    both: int
    adjacent: int  # runs in which b directly follows a at least once

    @property
    def consistency(self) -> float:
        """Share of the runs with both in which a comes first."""
        return self.a_before_b / self.both


@dataclass
class OrderStatistics:
    pairs: dict[tuple[str, str], PairOrder]  # every ordered pair of distinct tools that occur together
    tool_runs: Counter  # tool -> runs it occurs in
    n_runs: int  # runs counted
    n_skipped: int = 0  # runs left out (failed runs when only successful ones count)

    def get(self, a: str, b: str) -> PairOrder | None:
        return self.pairs.get((a, b))


def first_positions(tools: Iterable[str]) -> dict[str, int]:
    """Each tool's first position in a run (0-based)."""
    pos: dict[str, int] = {}
    for i, t in enumerate(tools):
        pos.setdefault(t, i)
    return pos


def order_statistics(runs: Iterable[Trajectory], successful_only: bool = True) -> OrderStatistics:
    """Counts of every ordered pair of distinct tools that occur in one run (module docstring)."""
    before: Counter = Counter()
    both: Counter = Counter()
    adjacent: Counter = Counter()
    tool_runs: Counter = Counter()
    n_runs = n_skipped = 0
    for run in runs:
        if successful_only and not run.success:
            n_skipped += 1
            continue
        n_runs += 1
        pos = first_positions(run.tools)
        tool_runs.update(pos.keys())  # a dict would add its values
        for a, pa in pos.items():
            for b, pb in pos.items():
                if a != b:
                    both[a, b] += 1
                    before[a, b] += pa < pb
        adjacent.update({(x, y) for x, y in zip(run.tools, run.tools[1:]) if x != y})
    pairs = {(a, b): PairOrder(a, b, before[a, b], n - before[a, b], n, adjacent[a, b])
             for (a, b), n in sorted(both.items())}
    return OrderStatistics(pairs, tool_runs, n_runs, n_skipped)


def precedence_breadth(stats: OrderStatistics, min_consistency: float = DEFAULT_MIN_CONSISTENCY) -> dict[str, tuple[int, float]]:
    """Per tool: how many other tools it consistently comes before (``min_consistency`` of their joint
    runs, any support), and that count as a share of the tools that occur with any other tool, less one.
    A router that every run starts with scores near 1; a prerequisite of one family of tools, low."""
    paired = {a for a, _ in stats.pairs}
    precedes = Counter(p.a for p in stats.pairs.values() if p.consistency >= min_consistency)
    others = max(len(paired) - 1, 1)
    return {t: (precedes[t], precedes[t] / others) for t in sorted(paired)}


@dataclass(frozen=True)
class PreconditionCandidate:
    """``consumer`` needs ``producer`` called first, by call order alone: a training pair
    (producer, consumer, support, consistency) and an edge of the graph (``dependency_edge``)."""

    producer: str
    consumer: str
    support: int  # runs with both
    consistency: float  # share of them with the producer first
    adjacent: int  # runs in which the consumer directly follows the producer

    def dependency_edge(self, group: str, source: str = "call_order") -> DependencyEdge:
        return DependencyEdge(group, self.consumer, self.producer, source, kind="precondition")


@dataclass(frozen=True)
class PairDecision:
    order: PairOrder
    reason: str  # ACCEPTED or one of REASONS
    detail: str = ""  # e.g. the names the rule matched, the generic tool's share

    @property
    def accepted(self) -> bool:
        return self.reason == ACCEPTED


@dataclass
class CandidateReport:
    candidates: list[PreconditionCandidate]
    decisions: list[PairDecision]  # one per ordered pair of the statistics, candidates included
    generic_steps: dict[str, float] = field(default_factory=dict)  # tool -> precedence share, generic ones only

    def counts(self) -> Counter:
        return Counter(d.reason for d in self.decisions)


def name_rule_context(toolset: ToolSet) -> tuple[dict[str, Tool], dict[str, frozenset[str]], dict[str, frozenset[str]]]:
    """Tools by id, and per group the output names and partial inputs too common to be evidence."""
    return ({t.tool_id: t for t in toolset.tools}, group_common_names(toolset.tools),
            group_common_partial_inputs(toolset.tools))


def name_rule_evidence(producer: Tool, consumer: Tool, common: dict[str, frozenset[str]],
                       common_inputs: dict[str, frozenset[str]]) -> list[str]:
    """What ``schemas.name_rule`` says can flow from ``producer`` to ``consumer``: exact output -> input
    names, partial matches, an output the consumer's text mentions (each as 'kind:name'); empty: none.
    Names too common in the producer's group (``common_output_names``) are no evidence, as in the graph."""
    ignore, ignore_in = common[producer.group], common_inputs[consumer.group]
    found = [f"exact:{n}" for n in sorted(feeds(producer.doc, consumer.doc, True, ignore))]
    found += [f"partial:{o}->{i}" for i, o in partial_feeds(producer.doc, consumer.doc, True, ignore, ignore_in)]
    found += [f"mention:{m}" for m in mentioned_outputs(consumer.doc, producer.doc)]
    return found


def precondition_candidates(
    stats: OrderStatistics,
    toolset: ToolSet,
    min_support: int = DEFAULT_MIN_SUPPORT,
    min_consistency: float = DEFAULT_MIN_CONSISTENCY,
    generic_share: float = DEFAULT_GENERIC_SHARE,
    generic_min_tools: int = DEFAULT_GENERIC_MIN_TOOLS,
    use_name_rule: bool = True,
) -> CandidateReport:
    """Decide every ordered pair of ``stats``: a precondition candidate (a before b in ``min_consistency``
    of at least ``min_support`` joint runs, a no generic first step, no value passed between them by the
    tool set's edges or the name rule, in either direction) or rejected with the first reason of
    ``REASONS`` that applies. ``toolset``: the docs of every tool in the runs, its edges and parameter
    edges (pass a copy without edges to judge by names alone). ``use_name_rule=False``: the tool set's
    edges alone say where a value passes (a dev set whose edges are all the value passing recorded)."""
    if min_support < 1:
        raise ValueError(f"min_support must be at least 1 run, got {min_support}")
    if not 0.5 < min_consistency <= 1:
        raise ValueError(f"min_consistency must be in (0.5, 1] (a share of runs with a first), got {min_consistency}")
    if not 0 < generic_share <= 1:
        raise ValueError(f"generic_share must be in (0, 1], got {generic_share}")
    tools, common, common_inputs = name_rule_context(toolset)
    unknown = sorted({t for pair in stats.pairs for t in pair} - set(tools))
    if unknown:
        raise ValueError(f"{toolset.name}: runs name tools the tool set does not have: {unknown[:5]}")
    linked = {frozenset((e.dependent, e.prerequisite)) for e in toolset.edges}
    linked |= {frozenset((e.dependent, e.prerequisite)) for e in toolset.parameter_edges}
    breadth = precedence_breadth(stats, min_consistency)
    generic = {t: share for t, (n, share) in breadth.items() if share > generic_share and n >= generic_min_tools}

    decisions, candidates = [], []
    for (a, b), order in stats.pairs.items():
        reason, detail = ACCEPTED, ""
        if a in generic:
            reason, detail = GENERIC_FIRST_STEP, f"{a} comes first before {breadth[a][0]} tools (share {generic[a]:.2f})"
        elif order.both < min_support:
            reason, detail = LOW_SUPPORT, f"{order.both} runs < {min_support}"
        elif order.consistency < min_consistency:
            reason, detail = INCONSISTENT, f"{a} first in {order.a_before_b} of {order.both} runs"
        elif frozenset((a, b)) in linked:
            reason = DATA_EDGE
        elif use_name_rule:
            fired = name_rule_evidence(tools[a], tools[b], common, common_inputs)
            fired += [f"reverse {x}" for x in name_rule_evidence(tools[b], tools[a], common, common_inputs)]
            if fired:
                reason, detail = NAME_RULE, ", ".join(fired)
        decisions.append(PairDecision(order, reason, detail))
        if reason == ACCEPTED:
            candidates.append(PreconditionCandidate(a, b, order.both, order.consistency, order.adjacent))
    return CandidateReport(candidates, decisions, generic)
