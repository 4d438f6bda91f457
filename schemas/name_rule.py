"""The parameter-match rule: a dependency when an output of one tool names an input of the other.

This is the baseline every discriminator figure is reported beside (``source='schema'`` edges in
the warehouse), and a candidate rule for pair pruning. Tools that declare no outputs get one
derived from their name (``get_user_token`` / ``GetUserToken`` -> ``user_token``), because many
real tool sets (UltraTool, TMDB, most REST catalogues) list inputs only.
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from schemas.tdi import LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY

if TYPE_CHECKING:
    from schemas.toolset import Tool

# Output names that say how a call went, not what it produced: matching on them links everything.
GENERIC_OUTPUT_NAMES = frozenset(
    {"status", "message", "msg", "success", "error", "errors", "code", "result", "results", "data",
     "response", "ok", "detail", "details", "info", "meta", "type", "count", "total", "value", "output",
     "return", "returns", "none", "self", "args", "kwargs"}
)
# Leading verbs that say "this call produces X": dropped to get X from the name.
PRODUCER_VERBS = frozenset(
    {"get", "fetch", "retrieve", "query", "search", "find", "list", "load", "read", "create", "make", "build",
     "generate", "compute", "calculate", "calc", "lookup", "obtain", "request", "parse", "new", "open", "acquire",
     "extract", "resolve", "select", "download", "export", "convert", "to", "as", "from"}
)
# A name that more than this many tools of one group output does not say which tool produced a
# value (ToolBench: `id`, `url`, `symbol` are outputs of dozens of services in a category), so the
# graph step ignores it as evidence (`common_output_names`). Two keeps API-Bank's `token`, which
# GetUserToken and RegisterUser both return.
DEFAULT_MAX_PRODUCERS = 2
# Partial matches (``partial_feeds``): an input that names a reference to the output (``movie`` ->
# ``movie_id``, ``members`` -> ``member_name``) ...
REFERENCE_SUFFIXES = frozenset({"id", "ids", "name", "names", "key", "keys", "code", "codes", "number", "no", "num",
                                "url", "uri", "path", "list", "token"})
# ... or the output's last words (``user_token`` -> ``token``), unless those words name too little to
# point at a producer (``check_in_date`` -> ``date``).
VAGUE_INPUT_WORDS = frozenset({"id", "name", "type", "date", "time", "key", "code", "number", "no", "num", "url", "uri",
                               "path", "list", "text", "content", "query", "location", "start", "end", "limit",
                               "page", "size", "format", "mode", "level", "language", "lang", "title", "description"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NON_WORD = re.compile(r"[^a-z0-9]+")


def identifier_tokens(name: str) -> list[str]:
    """``GetUserToken``, ``get_user_token``, ``get-user token`` -> ``['get', 'user', 'token']``."""
    return [t for t in _NON_WORD.split(_CAMEL.sub("_", name).lower()) if t]


def normalise_param_name(name: str) -> str:
    """``userId``, ``user_id``, ``User-ID`` -> ``userid``."""
    return "".join(identifier_tokens(name))


def name_derived_output(tool_name: str) -> str | None:
    """What a tool's name says it returns: the name without a leading producer verb, snake_case.

    ``GetUserToken`` -> ``user_token``; ``geocoding`` -> ``geocoding``; ``get`` -> None.
    """
    tokens = identifier_tokens(tool_name)
    while len(tokens) > 1 and tokens[0] in PRODUCER_VERBS:
        tokens = tokens[1:]
    if not tokens or tokens[0] in PRODUCER_VERBS:
        return None
    return "_".join(tokens)


def raw_output_names(doc: dict[str, Any], derive: bool = True, ignore: Collection[str] = frozenset()) -> set[str]:
    """``output_names`` before normalisation (``user_token``, not ``usertoken``): word boundaries kept."""
    names = {p["name"] for p in doc.get("output_params") or [] if normalise_param_name(p["name"])}
    if not names and derive:
        derived = name_derived_output(doc.get("name", ""))
        names = {derived} if derived else set()
    return {n for n in names if (k := normalise_param_name(n)) not in GENERIC_OUTPUT_NAMES and k not in ignore}


def output_names(doc: dict[str, Any], derive: bool = True, ignore: Collection[str] = frozenset()) -> set[str]:
    """Normalised, non-generic output names; the name-derived one when none is declared.

    ``ignore``: names not to count as evidence in this context (``common_output_names``).
    """
    return {normalise_param_name(n) for n in raw_output_names(doc, derive, ignore)}


def common_output_names(docs: Iterable[dict[str, Any]], max_producers: int | None = DEFAULT_MAX_PRODUCERS,
                        derive: bool = True) -> frozenset[str]:
    """Output names that more than ``max_producers`` of ``docs`` (one tool group) produce.

    A shared name is evidence of a hand-over only when it points at few producers: when 40 services
    of a category all return an ``id``, a tool that takes an ``id`` depends on one of them at most,
    and matching on the name links it to all 40. None: no name is common.
    """
    if max_producers is None:
        return frozenset()
    counts = Counter(n for doc in docs for n in output_names(doc, derive))
    return frozenset(n for n, c in counts.items() if c > max_producers)


def common_partial_inputs(docs: Sequence[dict[str, Any]], max_producers: int | None = DEFAULT_MAX_PRODUCERS,
                          derive: bool = True) -> frozenset[str]:
    """Normalised input names that outputs of more than ``max_producers`` of ``docs`` (one tool group)
    partly match (``partial_match``): ``count`` <- ``char_count``, ``review_count``, ``view_count`` names no
    producer, as ``common_output_names`` does for exact names. None: no input is common."""
    if max_producers is None:
        return frozenset()
    by_first: dict[str, set[tuple[int, str]]] = defaultdict(set)  # an input that extends an output shares its first word
    by_last: dict[str, set[tuple[int, str]]] = defaultdict(set)  # an input that ends an output shares its last word
    for k, doc in enumerate(docs):
        for name in raw_output_names(doc, derive):
            words = [_singular(t) for t in identifier_tokens(name)]
            if words:
                by_first[words[0]].add((k, name))
                by_last[words[-1]].add((k, name))
    common = set()
    for name in {p["name"] for doc in docs for p in doc.get("input_params") or []}:
        words = [_singular(t) for t in identifier_tokens(name)]
        if not words:
            continue
        producers = {k for k, out in by_first.get(words[0], set()) | by_last.get(words[-1], set())
                     if partial_match(out, name)}
        if len(producers) > max_producers:
            common.add(normalise_param_name(name))
    return frozenset(common)


def input_names(doc: dict[str, Any]) -> set[str]:
    return {n for n in (normalise_param_name(p["name"]) for p in doc.get("input_params") or []) if n}


def feeds(producer: dict[str, Any], consumer: dict[str, Any], derive: bool = True,
          ignore: Collection[str] = frozenset()) -> set[str]:
    """Normalised names through which ``producer``'s outputs can reach ``consumer``'s inputs."""
    return output_names(producer, derive, ignore) & input_names(consumer)


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def name_words(name: str) -> frozenset[str]:
    """The singular words ``partial_match`` compares: two names that share none never match partially."""
    return frozenset(_singular(t) for t in identifier_tokens(name))


def partial_match(output: str, input_name: str) -> bool:
    """An input that names the output less specifically or as a reference to it, but not by the
    same name: ``user_token`` -> ``token``, ``movie`` -> ``movie_id``, ``members`` -> ``member_name``."""
    out = [_singular(t) for t in identifier_tokens(output)]
    inp = [_singular(t) for t in identifier_tokens(input_name)]
    if not out or not inp or normalise_param_name(output) == normalise_param_name(input_name):
        return False
    if out == inp:  # plural / singular
        return True
    if len(out) > len(inp) and out[-len(inp):] == inp:
        return not (len(inp) == 1 and inp[0] in VAGUE_INPUT_WORDS)
    return len(inp) > len(out) and inp[:len(out)] == out and set(inp[len(out):]) <= REFERENCE_SUFFIXES


def partial_feeds(producer: dict[str, Any], consumer: dict[str, Any], derive: bool = True,
                  ignore: Collection[str] = frozenset(), ignore_inputs: Collection[str] = frozenset()) -> list[tuple[str, str]]:
    """(input, output) name pairs joined only by ``partial_match``: weaker evidence than ``feeds``,
    for tool sets whose outputs come from the tool names (``GetUserToken`` -> ``user_token``, which an
    input ``token`` takes). Inputs that ``feeds`` already matches exactly are left out, and so are
    ``ignore_inputs`` (normalised; ``common_partial_inputs``: too many producers partly match them)."""
    exact = feeds(producer, consumer, derive, ignore)
    outputs = raw_output_names(producer, derive, ignore)
    return sorted({(p["name"], o) for p in consumer.get("input_params") or [] for o in outputs
                   if (k := normalise_param_name(p["name"])) not in exact and k not in ignore_inputs
                   and partial_match(o, p["name"])})


def schema_rule_label(doc_a: dict[str, Any], doc_b: dict[str, Any], derive: bool = True,
                      ignore: Collection[str] = frozenset(), partial: bool = False) -> int:
    """The rule's 3-class label of <a, b>: 0 when b's outputs feed a's inputs, 2 for the reverse.

    When both directions match, the one with more matching names wins; a tie is "no dependency"
    (the rule cannot tell the direction). ``partial``: partial name matches count too
    (``partial_feeds``; the looser rule, reported beside the exact one).
    """
    def matches(producer: dict[str, Any], consumer: dict[str, Any]) -> int:
        n = len(feeds(producer, consumer, derive, ignore))
        return n + len(partial_feeds(producer, consumer, derive, ignore)) if partial else n

    a_needs_b, b_needs_a = matches(doc_b, doc_a), matches(doc_a, doc_b)
    if a_needs_b > b_needs_a:
        return LABEL_A_DEPENDS_ON_B
    if b_needs_a > a_needs_b:
        return LABEL_B_DEPENDS_ON_A
    return LABEL_NO_DEPENDENCY


def schema_rule_labels(docs_a: Sequence[dict[str, Any]], docs_b: Sequence[dict[str, Any]], derive: bool = True) -> list[int]:
    return [schema_rule_label(a, b, derive) for a, b in zip(docs_a, docs_b)]


# Words that say nothing about data flow between two tools (matching on them links everything).
STOP_WORDS = frozenset(
    {"a", "an", "the", "of", "for", "to", "and", "or", "in", "on", "by", "with", "from", "into", "is", "are", "be",
     "this", "that", "it", "its", "as", "at", "all", "any", "one", "some", "based", "given", "specified",
     "specific", "api", "apis", "tool", "tools", "id", "ids", "key", "name", "names", "list", "lists", "get",
     "set", "info", "information", "detail", "details", "about", "new", "user", "users", "query", "request",
     "service", "function", "current", "can", "you", "your", "s", "e", "g", "i", "t"}
    | GENERIC_OUTPUT_NAMES
)
_IRREGULAR = {"people": "person", "children": "child", "men": "man", "women": "woman", "data": "data"}


def stem(word: str) -> str:
    """Plural to singular, enough to match ``members`` with ``member_name`` (no dictionary)."""
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def content_words(text: str) -> set[str]:
    """Lower-case words of an identifier or sentence, singular, without stop words."""
    return {stem(w) for w in identifier_tokens(text) if w not in STOP_WORDS and len(w) > 1} - STOP_WORDS


def mentioned_outputs(consumer: dict[str, Any], producer: dict[str, Any]) -> list[str]:
    """``producer``'s declared or name-derived outputs whose every content word ``consumer``'s name or
    description uses (``SearchMovie`` -> ``movie`` in "GetMovieCredit: the cast of a movie"): evidence
    that ``consumer`` depends on ``producer`` when neither declares any parameter (UltraTool, TMDB).
    Where parameters are declared, they say what flows: a mention hint for consumers with inputs
    lowered the discriminator's F1 on API-Bank with its outputs removed from 0.762 to 0.672
    (``QueryReminder`` "mentions" the reminder that ``AddReminder`` returns), and one for consumers
    without inputs lowered ToolBench retrieval, where an endpoint without inputs takes nothing.

    The whole output, not any of its words: ``GetMovieCredit`` -> ``movie_credit`` shares ``movie``
    with SearchMovie's text too, and a word shared both ways says nothing about the direction. On the
    gold edges of UltraTool (TMDB) it fires for 37 (31) dependents the right way round and 11 (9) the
    wrong way, at precision 0.33 against a base rate of 0.04 (0.03).
    """
    if any(doc.get("input_params") or doc.get("output_params") for doc in (consumer, producer)):
        return []  # declared parameters say what flows (``feeds``, ``partial_feeds``); prose would add false edges
    output = name_derived_output(producer.get("name", "")) or ""  # no declared outputs past the gate
    parts = content_words(output)
    consumer_words = content_words(consumer.get("name", "")) | content_words(consumer.get("description", ""))
    if not parts or not parts <= consumer_words:
        return []
    return [" ".join(w for w in identifier_tokens(output) if stem(w) in parts)]


# -- per tool group: the names too common to be evidence (the graph's schema rule, call-order candidates) --
def _per_group(tools: Sequence[Tool], compute: Callable[[list[dict]], frozenset[str]]) -> dict[str, frozenset[str]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for t in tools:
        groups[t.group].append(t.doc)
    return {g: compute(docs) for g, docs in groups.items()}


def group_common_names(tools: Sequence[Tool], max_producers: int | None = DEFAULT_MAX_PRODUCERS) -> dict[str, frozenset[str]]:
    """Per tool group, the output names too common to be evidence (``common_output_names``)."""
    return _per_group(tools, lambda docs: common_output_names(docs, max_producers))


def group_common_partial_inputs(tools: Sequence[Tool], max_producers: int | None = DEFAULT_MAX_PRODUCERS) -> dict[str, frozenset[str]]:
    """Per tool group, the input names too many tools partly match to be evidence (``common_partial_inputs``)."""
    return _per_group(tools, lambda docs: common_partial_inputs(docs, max_producers))
