"""The texts a dependency retriever embeds: what a producer offers (name, description, outputs) and what a
consumer input asks for ("name: description (input of tool)"; a tool that declares no inputs asks with its
name and description), and the input as a bare value ("name: description", for the parameter head). The
retrieval pruning rule (tasks/graph/candidates.py) and the retriever's training (tasks/training/retriever.py)
both use these, so a trained encoder sees at build time what it learned on."""
from __future__ import annotations

from typing import Any

from schemas.name_rule import identifier_tokens


def readable_name(name: str) -> str:
    """An identifier as words (``GetUserToken`` -> "get user token"), so the encoder's word pieces see words."""
    return " ".join(identifier_tokens(name)) or name


def _sentence(name: str, description: str | None) -> str:
    description = (description or "").strip()
    return f"{readable_name(name)}: {description}" if description else readable_name(name)


def producer_text(doc: dict[str, Any]) -> str:
    """What a tool offers as a producer: its name, description and declared outputs (each with its description)."""
    text = _sentence(doc.get("name", ""), doc.get("description"))
    outputs = doc.get("output_params") or []
    if outputs:
        text += "; returns " + "; ".join(_sentence(p["name"], p.get("description")) for p in outputs)
    return text


def tool_query(doc: dict[str, Any]) -> str:
    """The query of a tool that declares no inputs: its name and description."""
    return _sentence(doc.get("name", ""), doc.get("description"))


def value_query(param: dict[str, Any]) -> str:
    """One input as the value it asks for, "name: description", without the tool that asks: the parameter
    head compares it with each producer too, since "(input of tool)" pulls a query toward tools like the
    consumer (tasks/training/param_head.py, the ``value_*`` columns)."""
    return _sentence(param["name"], param.get("description"))


def parameter_query(doc: dict[str, Any], param: dict[str, Any], show_name: bool = True) -> str:
    """One input of ``doc`` as a query, "name: description (input of tool)". ``show_name`` False (identifier
    dropout in training): the description alone where there is one, so meaning, not spelling, is learned."""
    tool = readable_name(doc.get("name", ""))
    description = (param.get("description") or "").strip()
    head = description if not show_name and description else _sentence(param["name"], param.get("description"))
    return f"{head} (input of {tool})"


def parameter_queries(doc: dict[str, Any]) -> list[str]:
    """One query per input parameter; a tool that declares no inputs asks once with its name and description."""
    params = doc.get("input_params") or []
    if not params:
        return [tool_query(doc)]
    return [parameter_query(doc, p) for p in params]
