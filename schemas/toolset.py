"""Tool sets: real tools with API docs, labelled dependency edges and retrieval queries.

On disk a tool set is a folder of JSON Lines files (see docs/toolsets.md):
  tools.jsonl    {"tool_id", "group", "doc": <api_doc>, "returns_nothing"?: true}
  edges.jsonl    {"group", "dependent", "prerequisite", "source", "kind"?}   dependent depends on prerequisite;
                 kind "data" (an output of the prerequisite feeds an input of the dependent), "precondition"
                 (the prerequisite must run first, no value passed) or absent/null (the source does not say)
  queries.jsonl  {"query_id", "text", "gold_tools": [tool_id, ...]} (optional)
  param_edges.jsonl {"producer", "consumer", "consumer_param", "producer_field"?, ...} (optional):
                 which argument of the consumer the producer's output feeds
Every ordered pair of tools inside one group that is not an edge counts as "no dependency".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas.kinds import DEPENDENCY_KINDS  # an edge's kind; None: the source does not say (gold links that follow call order)


@dataclass(frozen=True)
class Tool:
    tool_id: str
    group: str
    doc: dict[str, Any]  # validates against schemas/api_doc.schema.json
    # the catalog says the tool returns no value (an OpenAPI operation whose success has no body), so it feeds no
    # input; False: it returns its output_params, or the catalog does not say (no outputs declared is not "none")
    returns_nothing: bool = False




def dependency_kind_problem(kind: object) -> str | None:
    """Why ``kind`` is no dependency kind (None when it is one, or None itself: unknown)."""
    if kind is None or (isinstance(kind, str) and kind in DEPENDENCY_KINDS):
        return None
    return f"dependency kind {kind!r} is not one of {', '.join(DEPENDENCY_KINDS)} (or null: not known)"


@dataclass(frozen=True)
class DependencyEdge:
    group: str
    dependent: str  # tool_id of t_a: it depends on ...
    prerequisite: str  # ... t_b (paper label t_a -> t_b)
    source: str = "manual"
    kind: str | None = None  # one of DEPENDENCY_KINDS; None: not known

    def __post_init__(self) -> None:
        problem = dependency_kind_problem(self.kind)
        if problem:
            raise ValueError(f"edge {self.dependent!r} -> {self.prerequisite!r}: {problem}")


@dataclass(frozen=True)
class ParameterEdge:
    """A parameter-level dependency: ``dependent``'s input ``consumer_param`` takes a value that
    ``prerequisite`` produces (its output ``producer_output``; None when unknown or not declared)."""

    dependent: str  # the consumer's tool_id
    prerequisite: str  # the producer's tool_id
    consumer_param: str  # a name among the dependent's input_params
    producer_output: str | None = None  # a name among the prerequisite's output_params
    source: str = "manual"


@dataclass(frozen=True)
class Query:
    query_id: str
    text: str
    gold_tools: tuple[str, ...]


@dataclass
class ToolSet:
    name: str
    tools: list[Tool]
    edges: list[DependencyEdge] = field(default_factory=list)
    queries: list[Query] = field(default_factory=list)
    parameter_edges: tuple[ParameterEdge, ...] = ()

    def only_groups(self, groups) -> "ToolSet":
        """The tools of ``groups`` with the edges and parameter edges among them (queries are dropped:
        their gold may name tools of other groups)."""
        groups = set(groups)
        tools = [t for t in self.tools if t.group in groups]
        ids = {t.tool_id for t in tools}
        return ToolSet(self.name, tools, [e for e in self.edges if e.group in groups],
                       parameter_edges=tuple(e for e in self.parameter_edges if e.dependent in ids and e.prerequisite in ids))
