"""Precondition edges of the graph from the training runs' call order (build-graph, docs/preconditions.md,
"In the graph").

``call_order_edges`` counts the call order of the **training** runs only (``order_statistics``: the
validation runs choose ToolNet's alpha and beta, the test runs' queries are what eval-retrieval scores the
graph on, so neither may shape it) and turns every accepted ``precondition_candidates`` pair into a
``DependencyEdge(kind="precondition", source="call_order")``. Whether a value passes between two tools is
judged by the name rule and by **this build's data edges** (schema, discriminator: what the graph already
has), never by the tool set's gold edges: the graph it joins is a predicted one, scored against gold.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from schemas.toolset import DependencyEdge, ToolSet
from tasks.toolsets.call_order import (
    ACCEPTED,
    REASONS,
    CandidateReport,
    PreconditionCandidate,
    order_statistics,
    precondition_candidates,
)
from tasks.toolsets.trajectories import Trajectory

SOURCE = "call_order"
TRAIN = "train"


@dataclass(frozen=True)
class CallOrderEdge:
    edge: DependencyEdge  # kind "precondition", source "call_order"
    candidate: PreconditionCandidate  # support and consistency over the training runs

    @property
    def prob(self) -> float:
        """The edge's ``prob`` in the warehouse: the share of the joint training runs with the prerequisite first."""
        return self.candidate.consistency


@dataclass
class CallOrderEdges:
    edges: list[CallOrderEdge]
    report: CandidateReport  # one decision per ordered pair of the training runs
    train_runs: int  # training runs counted (successful ones)
    failed_train_runs: int  # training runs left out (success = false)
    other_runs: int  # validation and test runs: never counted

    def counts(self) -> dict:
        """Pairs considered = accepted + every rejection reason (each pair ends in exactly one)."""
        by = self.report.counts()
        return {"train_runs": self.train_runs, "failed_train_runs": self.failed_train_runs,
                "runs_not_train": self.other_runs, "pairs": len(self.report.decisions),
                "accepted": by.get(ACCEPTED, 0), "rejected": {r: by.get(r, 0) for r in REASONS},
                "generic_first_steps": dict(self.report.generic_steps)}

    def describe(self, dataset: str) -> str:
        c = self.counts()
        rejected = ", ".join(f"{r} {n}" for r, n in c["rejected"].items())
        return (f"{dataset}: call-order precondition edges from {c['train_runs']} training runs "
                f"({c['failed_train_runs']} failed left out, {c['runs_not_train']} validation/test runs not read): "
                f"{c['pairs']} ordered pairs, {c['accepted']} accepted; rejected: {rejected}")


def call_order_edges(toolset: ToolSet, runs: Sequence[Trajectory], splits: Mapping[str, str],
                     data_edges: Iterable[DependencyEdge], min_support: int, min_consistency: float,
                     generic_share: float, generic_min_tools: int) -> CallOrderEdges:
    """Precondition edges from the runs whose split (``splits``: run key -> split, as ToolNet made it) is
    ``train``; ``data_edges``: the build's data edges, a pair joined by one either way is no precondition."""
    train = [r for r in runs if splits[r.key] == TRAIN]
    stats = order_statistics(train)
    # the build's edges replace the gold ones: judged by what the predicted graph knows, not by gold
    judged = ToolSet(toolset.name, toolset.tools, list(data_edges))
    report = precondition_candidates(stats, judged, min_support, min_consistency, generic_share, generic_min_tools)
    group_of = {t.tool_id: t.group for t in toolset.tools}

    def group(c: PreconditionCandidate) -> str:  # as transition edges: '*' across groups
        g = group_of[c.consumer]
        return g if g == group_of[c.producer] else "*"

    edges = [CallOrderEdge(c.dependency_edge(group(c), SOURCE), c) for c in report.candidates]
    return CallOrderEdges(edges, report, stats.n_runs, stats.n_skipped, len(runs) - len(train))


def with_call_order(data: Iterable[DependencyEdge], order: Iterable[CallOrderEdge]) -> list[DependencyEdge]:
    """The union graph of TGR over both kinds: the data edges, then the precondition edges (no pair is in
    both: a pair a data edge joins is rejected as a candidate)."""
    return list(data) + [e.edge for e in order]
