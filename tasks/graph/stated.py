"""Dependencies a tool's own docs state: an input's description, or the tool's, names another tool of the same
provider as the source of a value or as a step to take first ("The value of sku fields returned in
.../products/search endpoint", "identifier: the id you got before from getListings", "ID is got from 'Get All'
endpoint", "you must first generate a Token with Get search token"). No name rule finds these (the input is
``sku``, ``identifier``, ``id``; the producer declares no such output) and the models miss most of them, while
the catalog's authors wrote them down.

The rule is a reading of the text, so it guards its precision:
- only tools of one provider: the same group and, for a catalog name ``Tool::API``, the same ``Tool`` (a
  ToolBench category holds many providers, and "Search" names one in each);
- a tool is named by its name or its API part, matched whole (a longer name that holds a shorter one wins:
  ``products/search`` over ``search``); a name of plain words ("Get All", "Languages": also a sentence's words)
  only when quoted or followed by "endpoint", "API", "method", "function", "tool" or "call"; a name two tools of
  the provider share names neither;
- the tool's own name is never a mention of another (``/titles`` in ``/titles/series/{seriesId}``);
- in an input's description any mention is a source of that input's value (kind ``data``); in the tool's own
  description only a sentence that says so ("from", "returned", "first", "before", "requires", "use ... to",
  ...): ``precondition`` when it states an order (first, before, requires, after...) and names no value (id,
  token, code, ``region_code``...), else ``data``;
- a sentence that says the named tool comes after ("and then", "the result ... by calling X", "IDs, which must be
  provided in the X endpoint") makes the named tool the dependent;
- a pointer to a related tool ("unlike", "the same algorithm as", "a multiget version of", "to get further
  details, use X") states no need;
- a sentence that names more than ``MAX_NAMED`` tools lists them, and states nothing.
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from schemas.name_rule import identifier_tokens
from schemas.tdi import LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A
from schemas.toolset import DependencyEdge, ParameterEdge, Tool
from tasks.graph.scoring import PredictedEdge

STATED_PROB = 1.0  # the probability a stated edge carries in the graph: the docs' word, above any model's
MAX_NAMED = 3  # a sentence naming more tools than this is a list of the provider's endpoints
MAX_SENTENCE = 1000  # characters: longer "sentences" are not read (and no regex runs over them)
_ENDPOINT_WORDS = r"(?:endpoint|end-point|api|method|function|tool|call|operation|route|service)s?"
_QUOTES = "'\"`‘’“”"
_SOURCE_CUES = re.compile(
    r"\b(?:from|returned|returns?|obtained|obtain|got|get|gets|retrieved|retrieve|fetched|found|provided|given|"
    r"generated|generate|first|before|after|prior|requires?|required|must|needs?|use|using|call|calling|via|through|"
    r"output|result)\b", re.IGNORECASE)
# the named tool comes after this one: its result is fetched by calling it, or this tool's values go into it
_FORWARD_CUES = re.compile(
    r"\b(?:and then|afterwards|subsequently|followed by|after (?:this|that|which|calling this))\b"
    r"|\bresults?\b[^.]*\b(?:obtained|retrieved|fetched|available|collected)\b[^.]*\b(?:calling|call|using)\b"
    r"|\b(?:can|could|to) be used (?:as \w+ )?(?:in|with|for|by)\b|\bsuggestions? for\b"
    r"|\buse (?:it|them|these|this|those)(?: \w+)? (?:in|with|for)\b", re.IGNORECASE)
# a pointer to a related tool, not a need of it ("In the case you want real time data check ...", "Unlike ...")
_SEE_ALSO = re.compile(
    r"\b(?:in (?:the )?case you want|if you (?:want|need|wish|would like)|instead|alternatively|unlike|similar to|"
    r"see also|compared? (?:to|with)|same (?:\w+ )?as|differs? from|like the|version of|variant of|"
    r"(?:to get|for) (?:further|more) (?:details?|information))\b", re.IGNORECASE)
# right before a name: this tool's values go into the named one ("IDs, which must be provided in the X endpoint")
_INTO = re.compile(r"\b(?:provided|passed|fed|given|used|entered|supplied)\s+(?:in|into|to|with)\s+(?:the\s+)?"
                   rf"(?:\.\.\./)?[{_QUOTES}]?$", re.IGNORECASE)
# a value named (in words or inside identifiers: region_code, APP_IDs, secUid): the statement is of data
_VALUE_WORDS = frozenset({
    "id", "ids", "identifier", "identifiers", "uuid", "uid", "token", "tokens", "key", "keys", "value", "values",
    "code", "codes", "number", "numbers", "name", "names", "handle", "slug", "url", "urls", "hash", "returned",
    "returns", "output", "result", "results", "field", "fields", "item", "items", "retrieve", "retrieved",
    "fetch", "fetched", "populated"})
# an order without a value: the named tool must run first (a precondition)
_ORDER_WORDS = re.compile(r"\b(?:first|before|prior|requires?|required|must|after)\b", re.IGNORECASE)
_SENTENCES = re.compile(r"(?<=[.!?])\s+(?=[A-Z*`'\"(])|\n+")


@dataclass(frozen=True)
class StatedDependency:
    """``dependent`` needs ``prerequisite`` (indices into the tool list), as the dependent's docs say."""
    dependent: int
    prerequisite: int
    param: str | None  # the dependent's input whose description says so; None: its own description does
    kind: str  # "data" (a value passes) | "precondition" (called first, no value named)
    sentence: str  # the words that say so


def api_name(tool: Tool) -> str:
    """The part of a tool's name that names it inside its provider: the API of ``Tool::API``, else the name."""
    name = str(tool.doc.get("name") or tool.tool_id)
    return name.split("::", 1)[1].strip() if "::" in name else name.strip()


def provider(tool: Tool) -> tuple[str, str]:
    """(group, the ``Tool`` of a ``Tool::API`` name, else "")."""
    name = str(tool.doc.get("name") or tool.tool_id)
    return tool.group, (name.split("::", 1)[0].strip() if "::" in name else "")


def _distinctive(name: str) -> bool:
    """A name that reads as a name wherever it stands: an identifier's marks (``get_user``, ``getListings``,
    ``products/search``). Plain words ("Stock Price", "All Airplanes") are also a sentence's words."""
    return " " not in name.strip() and bool(re.search(r"[_\-/.{}:]|[a-z][A-Z]|\d", name))


def _pattern(name: str) -> re.Pattern[str] | None:
    if len(name) < 3 or not re.search(r"[A-Za-z]", name):
        return None
    body = re.escape(name)
    # not inside a longer identifier or path: no word character (or path step) glued on either side
    whole = rf"(?<![\w\-]){body}(?![\w\-]|/[\w{{])"
    if _distinctive(name):
        return re.compile(whole, re.IGNORECASE)
    quoted = rf"[{_QUOTES}]{body}[{_QUOTES}]"
    return re.compile(rf"{quoted}|{whole}(?=\s*[{_QUOTES}]?\s*{_ENDPOINT_WORDS}\b)", re.IGNORECASE)


def _named(text: str, patterns: list[tuple[int, re.Pattern[str]]]) -> dict[int, int]:
    """The tools ``text`` names, each with where it is first named, a match inside a longer match dropped."""
    spans = [(m.start(), m.end(), j) for j, p in patterns for m in p.finditer(text)]
    kept = [s for s in spans if not any(o[0] <= s[0] and s[1] <= o[1] and (o[1] - o[0]) > (s[1] - s[0])
                                        for o in spans)]
    out: dict[int, int] = {}
    for start, _, j in sorted(kept):
        out.setdefault(j, start)
    return out


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCES.split(text or "") if s and s.strip()]


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def stated_dependencies(tools: Sequence[Tool]) -> list[StatedDependency]:
    """Every dependency the tools' docs state between two tools of one provider (see the module's docstring),
    one per (dependent, prerequisite): an input's statement before the tool description's.

    Linear in the text: a sentence is matched only against the names all of whose words it holds (indexed by
    their first word), so a provider of 10^4 tools costs what one of ten does per sentence."""
    by_provider: dict[tuple[str, str], list[int]] = defaultdict(list)
    for n, t in enumerate(tools):
        by_provider[provider(t)].append(n)
    found: dict[tuple[int, int], StatedDependency] = {}
    for members in by_provider.values():
        if len(members) < 2:
            continue
        names = {n: api_name(tools[n]) for n in members}
        shared = Counter(name.lower() for name in names.values())
        patterns = {n: p for n, name in names.items() if shared[name.lower()] == 1 and (p := _pattern(name))}
        if not patterns:
            continue
        words_of = {n: frozenset(_tokens(names[n])) for n in patterns}
        by_first: dict[str, list[int]] = defaultdict(list)
        for n in patterns:
            by_first[_tokens(names[n])[0]].append(n)
        for n in members:
            own = patterns.get(n)
            texts = [(q.get("name"), _text(q.get("description"))) for q in tools[n].doc.get("input_params") or []
                     if isinstance(q, dict)]
            for param, text in [*texts, (None, _text(tools[n].doc.get("description")))]:
                for sentence in _sentences(text):
                    if len(sentence) > MAX_SENTENCE:
                        continue  # a statement of where a value comes from is short; this is prose or data
                    words = set(_tokens(sentence))
                    others = [(j, patterns[j]) for j in sorted({j for w in words for j in by_first.get(w, ())})
                              if j != n and words_of[j] <= words]
                    if not others:
                        continue
                    plain = own.sub(" ", sentence) if own is not None else sentence
                    named = _named(plain, others)
                    if not named or len(named) > MAX_NAMED or _SEE_ALSO.search(plain):
                        continue
                    said_after = bool(_FORWARD_CUES.search(plain))
                    ordered = bool(_ORDER_WORDS.search(plain))
                    valued = bool(_VALUE_WORDS & set(identifier_tokens(plain)))
                    if param is None and not said_after and not _SOURCE_CUES.search(plain) and not any(
                            _INTO.search(plain[:at]) for at in named.values()):
                        continue  # a tool description that names another tool without saying why
                    for j, at in named.items():
                        forward = said_after or bool(_INTO.search(plain[max(0, at - 60):at]))
                        dep, pre = (j, n) if forward else (n, j)
                        via = None if forward else param
                        kind = "precondition" if via is None and ordered and not valued else "data"
                        found.setdefault((dep, pre), StatedDependency(dep, pre, via, kind, sentence[:300]))
    return sorted(_one_direction(found).values(), key=lambda s: (s.dependent, s.prerequisite))


def _one_direction(found: dict[tuple[int, int], StatedDependency]) -> dict[tuple[int, int], StatedDependency]:
    """Where the docs state both directions of a pair, the one an input's description states; neither when both
    (or neither) are an input's: the docs contradict themselves."""
    out = {}
    for (a, b), s in found.items():
        other = found.get((b, a))
        if other is None or (s.param is not None and other.param is None):
            out[(a, b)] = s
    return out


def _pair(tools: Sequence[Tool], s: StatedDependency) -> frozenset[str]:
    return frozenset((tools[s.dependent].tool_id, tools[s.prerequisite].tool_id))


def with_stated(tools: Sequence[Tool], predicted: Sequence[PredictedEdge],
                stated: Sequence[StatedDependency]) -> list[PredictedEdge]:
    """The decided edges with what the docs state: a stated dependency replaces the models' edge between the same
    two tools (either direction) and carries ``STATED_PROB``; its kind is the statement's."""
    said = {_pair(tools, s) for s in stated}
    kept = [p for p in predicted if frozenset((p.edge.dependent, p.edge.prerequisite)) not in said]
    return kept + [PredictedEdge(DependencyEdge(tools[s.dependent].group, tools[s.dependent].tool_id,
                                                tools[s.prerequisite].tool_id, "discriminator", s.kind),
                                 STATED_PROB, LABEL_A_DEPENDS_ON_B, STATED_PROB) for s in stated]


def stated_probs(ordered: Sequence[tuple[int, int]], probs: np.ndarray,
                 stated: Sequence[StatedDependency]) -> np.ndarray:
    """Class probabilities of the ordered pairs (a, b) with each pair the docs state a dependency of decided so
    (all mass on that class), as ``with_stated`` decides build-graph's edges."""
    said = {(s.dependent, s.prerequisite) for s in stated}
    out = np.array(probs, dtype=np.float64, copy=True).reshape(-1, 3)
    for k, (a, b) in enumerate(ordered):
        cls = LABEL_A_DEPENDS_ON_B if (a, b) in said else LABEL_B_DEPENDS_ON_A if (b, a) in said else None
        if cls is not None:
            out[k] = np.eye(3)[cls]
    return out


def stated_edges(tools: Sequence[Tool], stated: Sequence[StatedDependency]) -> list[tuple[DependencyEdge, str]]:
    """The statements as edges of their own (source 'stated'), each with its sentence."""
    return [(DependencyEdge(tools[s.dependent].group, tools[s.dependent].tool_id, tools[s.prerequisite].tool_id,
                            "stated", s.kind), s.sentence) for s in stated]


def stated_parameter_edges(tools: Sequence[Tool], stated: Sequence[StatedDependency]) -> list[ParameterEdge]:
    """The statements an input's description makes, as parameter edges (source 'stated')."""
    return [ParameterEdge(tools[s.dependent].tool_id, tools[s.prerequisite].tool_id, s.param, None, "stated")
            for s in stated if s.param is not None]


def describe(name: str, tools: Sequence[Tool], stated: Sequence[StatedDependency],
             predicted: Sequence[PredictedEdge]) -> str:
    """The build log's line: how many statements, where, and how many join tools the models' ``predicted`` join."""
    joined = {frozenset((p.edge.dependent, p.edge.prerequisite)) for p in predicted}
    replaced = sum(_pair(tools, s) in joined for s in stated)
    inputs = sum(s.param is not None for s in stated)
    return (f"{name}: {len(stated)} dependencies stated in the tools' docs ({inputs} in an input's description, "
            f"{len(stated) - inputs} in a tool's), {replaced} of them between tools the models had joined")
