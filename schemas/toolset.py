"""Tool sets: real tools with API docs, labelled dependency edges and retrieval queries.

On disk a tool set is a folder of JSON Lines files (see docs/toolsets.md):
  tools.jsonl    {"tool_id", "group", "doc": <api_doc>}
  edges.jsonl    {"group", "dependent", "prerequisite", "source"}   dependent depends on prerequisite
  queries.jsonl  {"query_id", "text", "gold_tools": [tool_id, ...]} (optional)
Every ordered pair of tools inside one group that is not an edge counts as "no dependency".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Tool:
    tool_id: str
    group: str
    doc: dict[str, Any]  # validates against schemas/api_doc.schema.json


@dataclass(frozen=True)
class DependencyEdge:
    group: str
    dependent: str  # tool_id of t_a: it depends on ...
    prerequisite: str  # ... t_b (paper label t_a -> t_b)
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
