"""The names a TDI row's ``consumer_param`` and ``producer_output`` may take (schemas/tdi.py): a
consumer doc's inputs, a producer doc's outputs, and a name matched to a doc's own spelling."""
from __future__ import annotations

import re
from typing import Any

from schemas.name_rule import name_derived_output, normalise_param_name


OPTIONAL = "(optional)"  # opens the description of an input a tool does not require (every importer writes it)


def is_optional(param: dict[str, Any]) -> bool:
    """Whether an input's description marks it as not required."""
    return str(param.get("description") or "").startswith(OPTIONAL)


def input_param_names(doc: dict[str, Any]) -> list[str]:
    """The names a ``consumer_param`` may take: the doc's input parameters, as it spells them."""
    return [p["name"] for p in doc.get("input_params") or []]


def output_param_names(doc: dict[str, Any]) -> list[str]:
    """The names a ``producer_output`` may take: the doc's declared outputs, as it spells them, or,
    when it declares none, the output its name says it returns (``GetUserToken`` -> ``user_token``)."""
    declared = [p["name"] for p in doc.get("output_params") or []]
    if declared:
        return declared
    derived = name_derived_output(doc.get("name", ""))
    return [derived] if derived else []


def doc_without_outputs(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as a tool set that documents no outputs shows it: name, description and inputs only."""
    return {k: v for k, v in doc.items() if k != "output_params"}


def match_param(name: str | None, names: list[str]) -> str | None:
    """``name`` as ``names`` spell it: an exact match, else the one match after
    ``schemas.name_rule.normalise_param_name`` (``userId`` -> ``user_id``); None when none or ambiguous."""
    if not name or not name.strip():
        return None
    name = name.strip()
    if name in names:
        return name
    key = normalise_param_name(name)
    hits = {n for n in names if key and normalise_param_name(n) == key}
    return hits.pop() if len(hits) == 1 else None


# The type families a hand-over's two ends are compared in (``types_compatible``): the doc schema's short
# names (agent 1 is asked for string, integer, number, boolean, list, dict, bytes, object, none) and the
# Python and JSON-schema spellings of the same. A type outside the table is its own family.
TYPE_FAMILIES = {
    **dict.fromkeys(("str", "string", "text"), "string"),
    **dict.fromkeys(("int", "integer", "long"), "integer"),
    **dict.fromkeys(("float", "number", "double", "decimal", "real"), "number"),
    **dict.fromkeys(("bool", "boolean"), "boolean"),
    **dict.fromkeys(("list", "array", "tuple", "sequence"), "array"),
    **dict.fromkeys(("dict", "mapping", "map", "json", "ordereddict", "defaultdict"), "mapping"),
    "object": "object",  # an instance of some class: takes an unlisted type or a mapping, not a string or a number
    **dict.fromkeys(("none", "null", "void", "nonetype"), "none"),
}
ANY_TYPES = frozenset({"", "any", "unknown", "mixed", "various", "typing.any"})
_TYPE_HEAD = re.compile(r"[a-z_][a-z0-9_.]*")


def _type_alternatives(declared: str | None) -> list[str]:
    """The types a declared type allows, each by its head name: ``Optional[int]`` -> ``['int', 'none']``,
    ``list of str`` -> ``['list']``, ``str | None`` -> ``['str', 'none']``, ``datetime.datetime`` ->
    ``['datetime']``; ``[]`` for a missing or empty type."""
    text = (declared or "").strip().lower()
    optional = re.fullmatch(r"(?:typing\.)?optional\[(.*)\]", text)
    if optional:
        return [*_type_alternatives(optional.group(1)), "none"]
    union = re.fullmatch(r"(?:typing\.)?union\[(.*)\]", text)
    parts = re.split(r"\s*(?:\||,|\bor\b)\s*", union.group(1)) if union else re.split(r"\s*(?:\||\bor\b)\s*", text)
    heads = []
    for part in parts:
        head = _TYPE_HEAD.match(part.strip())
        if head:
            name = head.group(0).removeprefix("typing.")
            heads.append(name if name in ANY_TYPES else name.rsplit(".", 1)[-1])
    return heads


def _one_type_fits(produced: str, consumed: str) -> bool:
    if produced in ANY_TYPES or consumed in ANY_TYPES:
        return True
    p, c = TYPE_FAMILIES.get(produced), TYPE_FAMILIES.get(consumed)
    if p is None and c is None:  # two types outside the table (Path, PathLike): no rule says they differ
        return True
    if p is None or c is None:  # one outside the table: only a generic object takes it (datetime into object, not into dict)
        return (p or c) == "object" and "none" not in (p, c)
    # an integer is a number, not the other way round; a dict is an object, and an object may be a dict
    return p == c or (p, c) == ("integer", "number") or {p, c} == {"mapping", "object"}


def types_compatible(produced: str | None, consumed: str | None) -> bool:
    """Whether a value of the producer output's declared type ``produced`` may be the consumer parameter's
    declared type ``consumed``: True when either is missing or any/unknown, else when some alternative of
    each (``Optional[int]``: int or none) falls in one family of TYPE_FAMILIES (an integer also fits a
    number). A type outside the table fits only its own kind of name, another type outside the table (no
    rule says they differ) or an ``object``; against a tabled type (``datetime`` into ``string``) it fails."""
    produced_alts, consumed_alts = _type_alternatives(produced), _type_alternatives(consumed)
    if not produced_alts or not consumed_alts:
        return True
    produced_values = [t for t in produced_alts if TYPE_FAMILIES.get(t) != "none"] or produced_alts
    return any(_one_type_fits(p, c) for p in produced_values for c in consumed_alts)


def is_none_type(declared: str | None) -> bool:
    """Whether a declared type says there is no value (``None``, ``void``; not ``Optional[int]``)."""
    alternatives = _type_alternatives(declared)
    return bool(alternatives) and all(TYPE_FAMILIES.get(t) == "none" for t in alternatives)


def param_type(doc: dict[str, Any], side: str, name: str | None) -> str | None:
    """The declared type of the parameter ``name`` on ``side`` (input_params / output_params) of ``doc``;
    None when the doc has no such parameter (a name-derived output) or declares no type."""
    for p in doc.get(side) or []:
        if p["name"] == name:
            return p.get("type") or None
    return None
