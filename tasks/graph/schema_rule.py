"""Schema (parameter-match) edges: ``schemas.name_rule``'s rule on same-group pairs as an edge source
(the per-group names too common to be evidence: ``schemas.name_rule.group_common_names``)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schemas.name_rule import (  # group_common_*: re-exported, the graph's callers import them from here
    DEFAULT_MAX_PRODUCERS,
    group_common_names,
    group_common_partial_inputs,
    input_names,
    normalise_param_name,
    output_names,
)
from schemas.tdi import LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A
from schemas.toolset import DependencyEdge, ParameterEdge, Tool
from tasks.graph.kinds import dependency_kind
from tasks.graph.pruning import iter_same_group_pairs
from tasks.toolsets.call_order import name_rule_evidence


@dataclass(frozen=True)
class SchemaEdge:
    edge: DependencyEdge
    predicted_class: int  # the rule's class on <tools[i], tools[j]> (i < j)
    matched_params: tuple[str, ...]  # normalised names through which the prerequisite feeds the dependent


def schema_edges(tools: Sequence[Tool], pairs: Sequence[tuple[int, int]] | None = None,
                 max_producers: int | None = DEFAULT_MAX_PRODUCERS) -> list[SchemaEdge]:
    """``schemas.name_rule.schema_rule_label`` on every same-group pair (or ``pairs``), as edges.

    Per pair: b's outputs feeding a's inputs makes a depend on b (class 0), the reverse class 2; when
    both directions match, the one with more matching names wins, a tie is no edge (same rule as
    ``schema_rule_label``, computed from per-tool name sets so ToolBench's 161k pairs take a second).
    Names that more than ``max_producers`` tools of the group output are no evidence (None: all are).
    Every edge is found through a parameter, so its kind is "data" (``tasks.graph.kinds``).
    """
    common = group_common_names(tools, max_producers)
    outs = [output_names(t.doc, derive=True, ignore=common[t.group]) for t in tools]
    ins = [input_names(t.doc) for t in tools]
    found = []
    for i, j in iter_same_group_pairs(tools) if pairs is None else pairs:
        a_needs_b, b_needs_a = outs[j] & ins[i], outs[i] & ins[j]
        if len(a_needs_b) == len(b_needs_a):
            continue
        if len(a_needs_b) > len(b_needs_a):
            dep, pre, cls, names = i, j, LABEL_A_DEPENDS_ON_B, a_needs_b
        else:
            dep, pre, cls, names = j, i, LABEL_B_DEPENDS_ON_A, b_needs_a
        edge = DependencyEdge(tools[i].group, tools[dep].tool_id, tools[pre].tool_id, "schema",
                              dependency_kind(through_parameter=True))
        found.append(SchemaEdge(edge, cls, tuple(sorted(names))))
    return found


def schema_parameter_edges(tools: Sequence[Tool], schema: Sequence[SchemaEdge]) -> list[ParameterEdge]:
    """The schema edges at parameter level: each matched normalised name back to the dependent's
    input(s) of that name and the prerequisite's first declared output of that name (None when it
    declares none: the rule matched the output its tool name implies, ``name_derived_output``)."""
    docs = {t.tool_id: t.doc for t in tools}
    found = []
    for s in schema:
        dep, pre = s.edge.dependent, s.edge.prerequisite
        outputs = [p["name"] for p in docs[pre].get("output_params") or []]
        inputs = [p["name"] for p in docs[dep].get("input_params") or []]
        for name in s.matched_params:
            output = next((o for o in outputs if normalise_param_name(o) == name), None)
            found += [ParameterEdge(dep, pre, param, output, "schema")
                      for param in dict.fromkeys(inputs) if normalise_param_name(param) == name]
    return found


def value_pairs(tools: Sequence[Tool], pairs: Sequence[tuple[int, int]]) -> set[frozenset[int]]:
    """The pairs between which a name rule sees a value pass, either way (``name_rule_evidence``: an exact or
    partial output -> input match, or an output the other's text mentions): a dependency between them is data,
    which the parameter level decides, never a precondition."""
    common, common_inputs = group_common_names(tools), group_common_partial_inputs(tools)
    return {frozenset((i, j)) for i, j in pairs
            if name_rule_evidence(tools[i], tools[j], common, common_inputs)
            or name_rule_evidence(tools[j], tools[i], common, common_inputs)}
