"""Tools that verify: the second kind of dependency in TGR's definition ("Login needs Validate to check the
credentials"; the shared data's edge files: "or A is B's prior verification"). A tool checks when its name or
its description starts with a checking verb (``check_customs_status``, ``VerifyAccount``, ``user_login``:
"Authenticate the user's login credentials."); a predicate (``is_available``, ``has_access``) checks too.

``build-graph --cross-encoder-preconditions checks`` lets the cross-encoder add a precondition edge between two
tools that declare inputs only where the prerequisite checks and the dependent does not (docs/preconditions.md).
Verbs whose result is an appraisal (assess, evaluate, analyze) are left out on purpose: such a tool is as often
called after the work it judges as before it."""
from __future__ import annotations

import re
from collections.abc import Sequence

from schemas.toolset import Tool

CHECKING_VERBS = frozenset({
    "check", "verify", "validate", "authenticate", "authorize", "authorise", "confirm", "ensure", "login", "signin",
    "inspect", "test", "is", "has", "can"})
_FORMS = {"checks": "check", "verifies": "verify", "validates": "validate", "authenticates": "authenticate",
          "authorizes": "authorize", "authorises": "authorise", "confirms": "confirm", "ensures": "ensure",
          "inspects": "inspect", "tests": "test"}
_PREDICATES = frozenset({"is", "has", "can"})  # only as a name's first word: "Is" opens few descriptions of a check


def _first_word(text: str) -> str:
    words = re.findall(r"[a-z]+", re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text).lower())
    return _FORMS.get(words[0], words[0]) if words else ""


def checks(tool: Tool) -> bool:
    """Whether ``tool`` verifies something: its name's first word is a checking verb or a predicate's ``is``,
    ``has``, ``can``, or its description's first word is a checking verb."""
    name = _first_word(str(tool.doc.get("name") or tool.tool_id))
    if name in CHECKING_VERBS:
        return True
    said = _first_word(str(tool.doc.get("description") or ""))
    return said in CHECKING_VERBS and said not in _PREDICATES


def checking(tools: Sequence[Tool]) -> list[bool]:
    """``checks`` per tool."""
    return [checks(t) for t in tools]


def check_pairs(tools: Sequence[Tool]) -> list[tuple[int, int]]:
    """Every same-group pair (i < j) of tools that both declare inputs where exactly one checks: the pairs where
    ``--cross-encoder-preconditions checks`` can add an edge. build-graph scores them beside the pruned candidates,
    which follow values and text and keep few preconditions; a group has few checks, so they are few."""
    verifies = checking(tools)
    by_group: dict[str, list[int]] = {}
    for n, t in enumerate(tools):
        if t.doc.get("input_params"):
            by_group.setdefault(t.group, []).append(n)
    return sorted((min(i, j), max(i, j)) for members in by_group.values() for i in members if verifies[i]
                  for j in members if not verifies[j])
