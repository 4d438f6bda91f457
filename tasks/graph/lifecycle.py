"""Which of two tools comes first in the life of what they act on, read from their names.

A catalog that declares no inputs (UltraTool's, TMDB's) leaves the cross-encoder a tool's name and a line of
description, and there it can tell that two tools depend far better than which way (bench/RESULTS.md, "The
direction from the names' lifecycle"). The names still say what a tool does to what: ``flight_search``,
``book_flight``, ``flight_ticket_changing``, ``SearchMovie``, ``GetMovieCredit``. What is acted on is found first;
a thing is made before it is changed, and changed before it is removed. So between two tools whose names act on a
common object at two such stages, the earlier one is called first (``BEFORE``; a read has no side).

Used only where both tools declare no inputs (``pair_orders``): the parameter level decides a consumer with
inputs from what its inputs take. The names decide the direction, never whether there is a dependency: the
cross-encoder's p(a->b) and p(b->a) are swapped where it says the other way (``orient``), so its dependency mass
and the calibrated cut read as before."""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from schemas.tdi import LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A
from schemas.toolset import Tool

# stage -> the words (verbs and their nouns) a name uses for it
STAGES: dict[str, tuple[str, ...]] = {
    "find": ("search", "find", "lookup", "locate", "discover", "browse", "list"),
    "read": ("get", "retrieve", "fetch", "read", "view", "detail", "status", "query", "tracking"),
    "create": ("create", "creation", "add", "new", "make", "book", "booking", "reserve", "reservation", "set",
               "register", "registration", "request", "apply", "submit", "write", "upload", "post", "insert",
               "open", "start", "buy", "purchase"),
    "change": ("modify", "modification", "change", "changing", "update", "edit", "rename", "reschedule", "extend",
               "renew", "adjust"),
    "remove": ("cancel", "cancellation", "delete", "deletion", "del", "remove", "removal", "unsubscribe", "close",
               "terminate", "stop"),
}
# (earlier, later): a search comes before whatever acts on what it finds; a thing is made before it is changed,
# changed before it is removed. A read has no side: one reads a catalog before booking from it, and a booking's
# status after making it (NesTools' gold has both: ``get_insurance_quotes`` then ``apply_for_insurance``,
# ``book_ride`` then ``track_ride``), so the names order no read against a create, change or remove.
BEFORE = frozenset({("find", "read"), ("find", "create"), ("find", "change"), ("find", "remove"),
                    ("create", "change"), ("create", "remove"), ("change", "remove")})
STAGE_OF_WORD = {word: name for name, words in STAGES.items() for word in words}
# words that name no object a tool acts on
NOT_OBJECTS = frozenset("tool tools api apis info information service services system manager management the a an "
                        "of for to by and or with from in on at my your its all each every any some".split())
IRREGULAR = {"people": "person", "children": "child", "men": "man", "women": "woman", "news": "news",
             "series": "series"}


@dataclass(frozen=True)
class Action:
    """What a tool's name says it does: the ``stage`` of its head word and the objects it names."""

    stage: str
    verb: str  # the head word as the name spells it (after plural folding)
    objects: frozenset[str]


def _singular(word: str) -> str:
    if word in IRREGULAR:
        return IRREGULAR[word]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-3] + "y" if word.endswith("ies") else word[:-1]
    return word


def name_words(name: str) -> list[str]:
    """The words of a tool name, lower case and singular: snake, kebab, camel and ``Tool::API`` names alike (the
    API part of a ``Tool::API`` name)."""
    name = name.split("::")[-1]
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", name))
    return [_singular(w) for w in re.split(r"[^A-Za-z0-9]+", name.lower()) if w]


def action(name: str) -> Action | None:
    """The stage and objects of a tool name, or None when no word of it names a stage. The head word is the first
    when it names a stage (``book_flight``, ``GetMovieCredit``), else the last that does (``flight_search``,
    ``hotel_booking_modification``: the modification acts on a booking); the other words are its objects."""
    words = name_words(name)
    staged = [n for n, w in enumerate(words) if w in STAGE_OF_WORD]
    if not staged:
        return None
    head = 0 if staged[0] == 0 else staged[-1]
    objects = frozenset(w for n, w in enumerate(words) if n != head and w not in NOT_OBJECTS and not w.isdigit())
    return Action(STAGE_OF_WORD[words[head]], words[head], objects)


def first_of(name_a: str, name_b: str) -> int | None:
    """The class of the pair <a, b> the names' lifecycle says (``LABEL_A_DEPENDS_ON_B`` when b comes first,
    ``LABEL_B_DEPENDS_ON_A`` when a does), or None: a name without a stage, no common object, two stages ``BEFORE``
    does not order, or ``Tool::API`` names of two providers."""
    if "::" in name_a and "::" in name_b and name_a.split("::")[0] != name_b.split("::")[0]:
        return None  # ``Tool::API`` names of two providers: no object of one service's life
    a, b = action(name_a), action(name_b)
    if a is None or b is None or not a.objects & b.objects:
        return None
    if (b.stage, a.stage) in BEFORE:
        return LABEL_A_DEPENDS_ON_B
    return LABEL_B_DEPENDS_ON_A if (a.stage, b.stage) in BEFORE else None


def reason(prerequisite: str, dependent: str) -> str:
    """One line for an edge whose direction the names gave (``edges.evidence``)."""
    p, d = action(prerequisite), action(dependent)
    assert p is not None and d is not None
    common = ", ".join(sorted(p.objects & d.objects))
    return f"direction from the names' lifecycle: {p.stage} ({p.verb}) before {d.stage} ({d.verb}) of {common}"


def orient(probs: np.ndarray, orders: Sequence[int | None]) -> tuple[np.ndarray, np.ndarray]:
    """``probs`` (n, 3) with p(a->b) and p(b->a) swapped on each row whose ``orders`` entry (``first_of``) says the
    direction the larger of the two does not, and a mask of the rows the names ordered (swapped or not)."""
    out = np.array(probs, dtype=np.float64).reshape(-1, 3)
    ordered = np.array([o is not None for o in orders], dtype=bool)
    for n, order in enumerate(orders):
        if order is None:
            continue
        p0, p2 = out[n, LABEL_A_DEPENDS_ON_B], out[n, LABEL_B_DEPENDS_ON_A]
        if p0 == p2 and order == LABEL_B_DEPENDS_ON_A:  # a tie reads as a->b (``decide``): tip it the names' way
            out[n, LABEL_A_DEPENDS_ON_B], out[n, LABEL_B_DEPENDS_ON_A] = np.nextafter(p0, 0.0), np.nextafter(p2, 1.0)
        elif (p0 >= p2) != (order == LABEL_A_DEPENDS_ON_B):
            out[n, LABEL_A_DEPENDS_ON_B], out[n, LABEL_B_DEPENDS_ON_A] = p2, p0
    return out, ordered


def describe(name: str, before: np.ndarray, after: np.ndarray, named: np.ndarray, cut: float | None) -> str:
    """One log line: how many scored pairs the names ordered, how many of those the cross-encoder had the other way
    round (``before``; ``after``: ``orient``'s), and how many of them are edges at ``cut`` (argmax without one)."""
    from models.discriminator import decide

    way = LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A
    swapped = int(np.sum(named & ((before[:, way[0]] >= before[:, way[1]]) != (after[:, way[0]] >= after[:, way[1]]))))
    edges = int(np.sum(decide(after[named], cut) != 1)) if named.any() else 0
    return (f"{name}: the names' lifecycle orders {int(named.sum())} of {len(named)} pairs the cross-encoder scored "
            f"(both tools without inputs); it had {swapped} of them the other way round; {edges} of them are edges")


def pair_orders(tools: Sequence[Tool], pairs: Sequence[tuple[int, int]]) -> list[int | None]:
    """``first_of`` per pair (i, j) of ``tools`` where neither declares inputs, None for the rest."""
    bare = [not t.doc.get("input_params") for t in tools]
    return [first_of(tools[i].tool_id, tools[j].tool_id) if bare[i] and bare[j] else None for i, j in pairs]


def _declares_inputs(doc_json: str) -> bool:
    try:
        doc = json.loads(doc_json)
    except ValueError:
        return True  # not a doc: leave the pair to the model
    return not isinstance(doc, dict) or bool(doc.get("input_params"))


def example_orders(examples: Sequence) -> list[int | None]:
    """``first_of`` per ``PairExample`` whose two tools declare no inputs (by their docs) and are named
    (``tool_a``, ``tool_b``: pairs from tool sets), None for the rest (TDI rows carry no tool names)."""
    return [first_of(e.tool_a, e.tool_b)
            if e.tool_a and e.tool_b and not _declares_inputs(e.doc_a) and not _declares_inputs(e.doc_b) else None
            for e in examples]
