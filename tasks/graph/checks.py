"""Tools that verify: the second kind of dependency in TGR's definition ("Login needs Validate to check the
credentials"; the shared data's edge files: "or A is B's prior verification"). A tool checks when its name or
its description starts with a checking verb (``check_customs_status``, ``VerifyAccount``, ``user_login``:
"Authenticate the user's login credentials."); a predicate (``is_available``, ``has_access``) checks too. A
catalog name ``Tool::API`` is read by its API part.

A check gates an action: ``may_gate`` lets a check be the prerequisite of a tool that neither checks (nor names
a check anywhere in its name: ``luggage_check``, ``Email Validator::Email``) nor only reads (its name or
description opens with get, search, list, view..., or its name is a lookup's: ``DNS Lookup``, ``EmailFinder``: a
lookup needs no prior check), except that authentication gates reads too (login before a query).
``build-graph --cross-encoder-preconditions checks`` lets the cross-encoder add a precondition edge between two
tools that declare inputs only where the prerequisite may gate the dependent (docs/preconditions.md). Verbs whose
result is an appraisal (assess, evaluate, analyze) are left out on purpose: such a tool is as often called after
the work it judges as before it."""
from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from schemas.toolset import Tool

PreconditionScope = Literal["off", "checks", "all"]  # where the cross-encoder may add a precondition edge
DEFAULT_CHECK_PARTNERS = 20  # tools a check may gate that build-graph scores with it: the most like it
CHECKING_VERBS = frozenset({
    "check", "verify", "validate", "authenticate", "authorize", "authorise", "confirm", "ensure", "login", "signin",
    "inspect", "test", "is", "has", "can"})
AUTHENTICATING_VERBS = frozenset({"authenticate", "authorize", "authorise", "login", "signin"})
READING_VERBS = frozenset({
    "get", "search", "find", "lookup", "look", "query", "list", "fetch", "retrieve", "read", "view", "show",
    "display", "browse", "return"})
_FORMS = {"checks": "check", "verifies": "verify", "validates": "validate", "authenticates": "authenticate",
          "authorizes": "authorize", "authorises": "authorise", "confirms": "confirm", "ensures": "ensure",
          "inspects": "inspect", "tests": "test", "gets": "get", "searches": "search", "finds": "find",
          "queries": "query", "lists": "list", "fetches": "fetch", "retrieves": "retrieve", "reads": "read",
          "views": "view", "shows": "show", "displays": "display", "browses": "browse", "returns": "return"}
# anywhere in an API's name, a lookup's word ("DNS Lookup", "EmailFinder", "Order List")
_READ_WORDS = READING_VERBS | {"lookup", "finder", "info", "information", "details"}
_PREDICATES = frozenset({"is", "has", "can"})  # only as a name's first word: "Is" opens few descriptions of a check
# anywhere in a name, a check's word: such a tool is never gated ("Email Validator::Email", "luggage_check")
_CHECK_WORDS = (CHECKING_VERBS - _PREDICATES - {"test"}) | {"validation", "validator", "verification", "verifier",
                                                             "checker", "authentication"}


@dataclass(frozen=True)
class Role:
    """What a tool's name and description say it does, as far as preconditions go."""
    checks: bool  # its name's first word is a checking verb or is/has/can, or its description's is a checking verb
    authenticates: bool
    reads: bool
    named_as_check: bool  # a check's word anywhere in its name: never gated by another check


def _words(text: str) -> list[str]:
    return [_FORMS.get(w, w) for w in re.findall(r"[a-z]+", re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text).lower())]


def _is_check_in(words: list[str], n: int) -> bool:
    """Whether ``words[n]`` opens "check in" or "check out": an action, not a check."""
    return words[n] == "check" and words[n + 1:n + 2] in (["in"], ["out"])


def _opening_verb(words: list[str]) -> str:
    return "" if not words or _is_check_in(words, 0) else words[0]


def role(tool: Tool) -> Role:
    """Read from the first word of the tool's name (its API part, for ``Tool::API``) and of its description, and
    from the words of its name."""
    label = str(tool.doc.get("name") or tool.tool_id)
    full, api = _words(label), _words(label.split("::")[-1])
    name, said = _opening_verb(api), _opening_verb(_words(str(tool.doc.get("description") or "")))
    checks = name in CHECKING_VERBS or (said in CHECKING_VERBS and said not in _PREDICATES)
    reads = not checks and bool(READING_VERBS & {name, said} or _READ_WORDS & set(api))
    named_as_check = checks or any(w in _CHECK_WORDS and not _is_check_in(full, n) for n, w in enumerate(full))
    return Role(checks, bool(AUTHENTICATING_VERBS & {name, said}), reads, named_as_check)


def roles(tools: Sequence[Tool]) -> list[Role]:
    return [role(t) for t in tools]


def may_gate(prerequisite: Role, dependent: Role) -> bool:
    """Whether a check may be the prerequisite of ``dependent``: it checks, the dependent is no check (not even
    by a word of its name), and the dependent acts (it does not only read) unless the check authenticates."""
    return prerequisite.checks and not dependent.named_as_check and (not dependent.reads or prerequisite.authenticates)


def check_pairs(tools: Sequence[Tool], embeddings: np.ndarray | Callable[[], np.ndarray] | None = None,
                per_check: int | None = DEFAULT_CHECK_PARTNERS) -> list[tuple[int, int]]:
    """The same-group pairs (i < j) of tools that both declare inputs where one may gate the other: the pairs
    where ``--cross-encoder-preconditions checks`` can add an edge. build-graph scores them beside the pruned
    candidates, which follow values and text and keep few preconditions.

    With ``embeddings`` (one row per tool, or a function that makes them: called only when some check may gate
    more than ``per_check`` tools), each check keeps only the ``per_check`` tools it may gate that are most like
    it (cosine; ties by position): a group's pairs then grow with its checks, not with checks times tools
    (NesTools read as one group has 302,369 such pairs: an hour and a half of scoring). On NesTools' and
    ToolBench's groups the 20 nearest keep every edge the cross-encoder added from all of them but four, all four
    wrong by reading (bench/RESULTS.md, "Check pairs bounded per check"). ``per_check`` None, or no embeddings:
    every pair."""
    said = roles(tools)
    by_group: dict[str, list[int]] = {}
    for n, t in enumerate(tools):
        if t.doc.get("input_params"):
            by_group.setdefault(t.group, []).append(n)
    gates = [(i, [j for j in members if may_gate(said[i], said[j])])
             for members in by_group.values() for i in members if said[i].checks]
    if embeddings is not None and per_check is not None and any(len(gated) > per_check for _, gated in gates):
        unit = np.asarray(embeddings() if callable(embeddings) else embeddings, dtype=np.float32)
        unit = unit / np.maximum(np.linalg.norm(unit, axis=1, keepdims=True), 1e-12)
        gates = [(i, _nearest(unit, i, gated, per_check)) for i, gated in gates]
    return sorted({(min(i, j), max(i, j)) for i, gated in gates for j in gated})


def _nearest(unit: np.ndarray, i: int, others: list[int], k: int) -> list[int]:
    """The ``k`` of ``others`` whose unit rows are most like row ``i`` (ties: the earlier first)."""
    if len(others) <= k:
        return others
    sims = unit[others] @ unit[i]
    return [others[n] for n in sorted(range(len(others)), key=lambda n: (-sims[n], n))[:k]]


def precondition_open(preconditions: PreconditionScope, said: Sequence[Role], producer: int, consumer: int,
                      gated: Collection[tuple[int, int]] | None = None) -> bool:
    """Whether ``preconditions`` lets the cross-encoder's edge (``consumer`` needs ``producer`` first) stand as a
    precondition between two tools that declare inputs and pass no value (``said``: ``roles(tools)``, read with
    "checks": the producer must be a check that may gate the consumer, and the pair among ``gated`` when given:
    ``check_pairs``' bounded pairs, those build-graph scores)."""
    if preconditions == "checks":
        return may_gate(said[producer], said[consumer]) and (
            gated is None or (min(producer, consumer), max(producer, consumer)) in gated)
    return preconditions == "all"
