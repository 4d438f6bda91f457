"""Schema (parameter-match) edges: ``schemas.name_rule``'s rule on same-group pairs as an edge source
(the per-group names too common to be evidence: ``schemas.name_rule.group_common_names``)."""
from __future__ import annotations

import re
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


# words of a type's text that wrap or qualify the type it names: "array of Repository", "Pet | null"
_TYPE_WRAPPERS = frozenset({"array", "of", "list", "null", "none", "optional", "nullable"})
# Python's generic names: CamelCase, yet no schema's
_GENERIC_TYPES = frozenset({"Any", "Optional", "Union", "List", "Dict", "Tuple", "Set", "FrozenSet", "Sequence",
                            "Mapping", "Iterable", "Iterator", "Literal", "Type", "Callable", "NoneType"})


def named_types(type_text: str) -> frozenset[str] | None:
    """The schema types a parameter's type names (``array of FlowRunSlotSummary`` -> FlowRunSlotSummary; pydantic's
    ``-Input`` / ``-Output`` halves of one model read as the model), or None where it names a primitive type (any
    value of that kind may be the one) or nothing."""
    words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", re.sub(r"-(Input|Output)\b", "", type_text))
    named = {w for w in words if w[0].isupper() and not w.isupper() and w not in _GENERIC_TYPES}
    primitive = [w for w in words if w not in named and w not in _GENERIC_TYPES and w.lower() not in _TYPE_WRAPPERS]
    return frozenset(named) if named and not primitive else None


def types_agree(output_type: str | None, input_type: str | None) -> bool:
    """Whether an output and an input of one name may carry one value by their types: not when both name schema
    types and share none (``DeploymentsSettings`` is no ``DeploymentFilter``, though both are ``deployments``)."""
    out, into = named_types(output_type or ""), named_types(input_type or "")
    return out is None or into is None or bool(out & into)


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
    Names that more than ``max_producers`` tools of the group output are no evidence (None: all are); nor is a
    name whose output and input both name schema types that differ (``types_agree``: an HTTP API's ``deployments``
    settings are no ``deployments`` filter). Every edge is found through a parameter, so its kind is "data"
    (``tasks.graph.kinds``).
    """
    common = group_common_names(tools, max_producers)
    outs = [output_names(t.doc, derive=True, ignore=common[t.group]) for t in tools]
    ins = [input_names(t.doc) for t in tools]
    out_types = [_types(t.doc, "output_params") for t in tools]
    in_types = [_types(t.doc, "input_params") for t in tools]

    def fed(producer: int, consumer: int) -> set[str]:
        return {n for n in outs[producer] & ins[consumer]
                if any(types_agree(out_types[producer].get(n, [None])[0], t) for t in in_types[consumer][n])}

    found = []
    for i, j in iter_same_group_pairs(tools) if pairs is None else pairs:
        a_needs_b, b_needs_a = fed(j, i), fed(i, j)
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


def _types(doc: dict, side: str) -> dict[str, list[str]]:
    """Normalised parameter name -> the types declared under it, in order."""
    found: dict[str, list[str]] = {}
    for p in doc.get(side) or []:
        found.setdefault(normalise_param_name(p["name"]), []).append(str(p.get("type") or ""))
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
