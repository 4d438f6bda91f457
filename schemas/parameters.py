"""The names a TDI row's ``consumer_param`` and ``producer_output`` may take (schemas/tdi.py): a
consumer doc's inputs, a producer doc's outputs, and a name matched to a doc's own spelling."""
from __future__ import annotations

from typing import Any

from schemas.name_rule import name_derived_output, normalise_param_name


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
