"""The rules that accept or reject a candidate once its targets are resolved (:func:`judge_candidate`,
:func:`reject_generic_sinks`, :func:`judge_order` for precondition pairs): an accepted :class:`MinedFlow` (or
:class:`MinedOrder`) or a :class:`CandidateRejection` with its reason."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from tasks.mining.docs import FunctionFacts
from tasks.mining.facts import RawFlow, RawOrder
from tasks.mining.reasons import MineReason
from tasks.mining.resolve import SymbolTable, Target


# A parameter that receives values from more than this many distinct producers takes anything
# (``assert_equal(actual)``, ``dumps(obj)``, ``latex(expr)``, ``deepcopy(x)``): a flow into it says
# nothing about what the consumer needs, and such sinks, test assertions above all, taught the model
# noise (pretraining stayed at chance). API dependencies have few producers per input.
DEFAULT_MAX_PRODUCERS_PER_PARAM = 8


@dataclass(frozen=True)
class MinedFlow:
    """An accepted candidate: ``consumer`` depends on ``producer`` through parameter ``param``."""

    record_id: str
    consumer: str
    producer: str
    param: str
    via: str


@dataclass(frozen=True)
class CandidateRejection:
    record_id: str
    stage: str  # parse | resolve
    reason: str
    detail: str


def _consumer_param(consumer: FunctionFacts, slot: str, bound: bool) -> str | None:
    """The parameter name a call argument binds to; None when the signature has no such slot."""
    if not slot.isdigit():
        return slot if consumer.accepts_keyword(slot) else None
    index = int(slot)
    if consumer.binding == "instance" and not bound:
        index -= 1  # Class.method(obj, x): the first argument is the instance
        if index < 0:
            return None
    return consumer.param_for_position(index)


def _documented_param(consumer: FunctionFacts, param: str) -> bool:
    """*args/**kwargs count only when the docstring names them (as the doc does)."""
    kind = next((p.kind for p in consumer.params if p.name == param), "var_keyword")
    if not kind.startswith("var_"):
        return True
    return param in _docstring_param_names(consumer.docstring)


@functools.lru_cache(maxsize=65536)
def _docstring_param_names(docstring: str) -> frozenset[str]:
    import docstring_parser  # rare path: parse only here, once per docstring

    try:
        return frozenset(p.arg_name.lstrip("*") for p in docstring_parser.parse(docstring).params if p.arg_name)
    except Exception:
        return frozenset()


def resolve_sides(raw: RawFlow | RawOrder, table: SymbolTable) -> tuple[Target, Target] | CandidateRejection:
    """The (consumer, producer) targets of a flow or order candidate, or the rejection of the first step that
    fails: a reason known at parse time, then the consumer's resolution, then the producer's."""
    if raw.reason:
        return CandidateRejection(raw.record_id, "parse", raw.reason, raw.detail)
    consumer, why_c, detail_c = table.resolve(raw.consumer)  # type: ignore[arg-type]
    if consumer is None:
        return CandidateRejection(raw.record_id, "resolve", why_c, f"consumer: {detail_c}")
    producer, why_p, detail_p = table.resolve(raw.producer)  # type: ignore[arg-type]
    if producer is None:
        return CandidateRejection(raw.record_id, "resolve", why_p, f"producer: {detail_p}")
    return consumer, producer


def judge_candidate(raw: RawFlow, table: SymbolTable
                    ) -> tuple[MinedFlow | None, CandidateRejection | None, Target | None, Target | None]:
    def reject(reason: str, detail: str, stage: str = "resolve") -> tuple[None, CandidateRejection, None, None]:
        return None, CandidateRejection(raw.record_id, stage, reason, detail), None, None

    sides = resolve_sides(raw, table)
    if isinstance(sides, CandidateRejection):
        return None, sides, None, None
    consumer, producer = sides
    if consumer.key == producer.key:
        return reject(MineReason.SELF_FLOW, consumer.key)
    if not consumer.facts.documented:
        return reject(MineReason.UNDOCUMENTED_CONSUMER, consumer.key)
    if not producer.facts.documented:
        return reject(MineReason.UNDOCUMENTED_PRODUCER, producer.key)
    if not producer.facts.returns_value:
        return reject(MineReason.PRODUCER_RETURNS_NOTHING, producer.key)
    if raw.unpack == -1 and not producer.facts.returns_items:  # for a in f(x): f must give like items
        return reject(MineReason.LOOP_ITEM, f"{producer.key} is not known to give items to iterate (no generator, list or Iterator)")
    if raw.unpack > 0 and producer.facts.tuple_arity != raw.unpack and table.documented_arity(producer) != raw.unpack:
        arity = producer.facts.tuple_arity or table.documented_arity(producer)  # a, b = f(x): f must give that many items
        return reject(MineReason.TUPLE_UNPACK, f"{raw.detail} unpacked from {producer.key}, which "
                      + (f"returns {arity}-item tuples" if arity else "is not known to return a tuple"))
    param = _consumer_param(consumer.facts, raw.slot, raw.bound or consumer.via_instance)
    if param is None:
        return reject(MineReason.BAD_ARGUMENT_POSITION, f"argument {raw.slot} of {consumer.key}{'' if raw.slot.isdigit() else ' (unknown keyword)'}")
    if not _documented_param(consumer.facts, param):
        return reject(MineReason.UNDOCUMENTED_PARAMETER, f"{consumer.key}(*{param})")
    return MinedFlow(raw.record_id, consumer.key, producer.key, param, raw.via), None, consumer, producer


def reject_generic_sinks(flows: list[MinedFlow], max_producers: int | None) -> tuple[list[MinedFlow], list[CandidateRejection]]:
    """Flows into a (consumer, parameter) that more than ``max_producers`` distinct producers reach
    become ``generic_sink`` rejections; None keeps every flow."""
    if max_producers is None:
        return flows, []
    producers: dict[tuple[str, str], set[str]] = {}
    for f in flows:
        producers.setdefault((f.consumer, f.param), set()).add(f.producer)
    kept, rejected = [], []
    for f in flows:
        n = len(producers[(f.consumer, f.param)])
        if n > max_producers:
            rejected.append(CandidateRejection(f.record_id, "resolve", MineReason.GENERIC_SINK,
                                               f"{f.consumer}({f.param}) takes values from {n} producers (> {max_producers})"))
        else:
            kept.append(f)
    return kept, rejected


# -- precondition pairs (call order without data flow) ----------------------------------------------
# A producer that precedes more than this many distinct consumers (or a consumer preceded by more than this
# many distinct producers) is paired by habit, not need: ``log.debug(x)`` before anything, ``assertEqual``
# after anything. Flows allow 8 per parameter; a setup call (``connect``) legitimately precedes many actions.
DEFAULT_MAX_ORDER_PARTNERS = 16
# The reverse order seen in at least this share of the functions showing the pair: the order is not a rule.
CONFLICT_SHARE = 1 / 3


# Calls that only report (``log.debug(x); save(x)``, ``self._dbg(..); self.add(..)``) precede anything and are needed
# by nothing; test assertions check, they need no setup of their own beyond what the test does.
_REPORTING_PRODUCER = re.compile(r"^_*(log(?!_?in)|debug|dbg|print|pprint|warn|trace|announce|report)", re.IGNORECASE)
_ASSERTION = re.compile(r"^_*(assert|fail)", re.IGNORECASE)
# A teardown follows whatever was done with the object (``zf.writestr(..); zf.close()``): its prerequisite is
# the matching setup (``open``/``connect``/``start``/``acquire``), not the last action before it.
_TEARDOWN = re.compile(r"^_*(close|quit|destroy|shutdown|stop|cleanup|clean_up|teardown|tear_down|dispose|release|"
                       r"terminate|disconnect|kill|join|logout|log_out|exit|finish|unlock|unregister|unsubscribe)", re.IGNORECASE)
_SETTER = re.compile(r"^_*set(_|[A-Z])")
_SETUP = re.compile(r"^_*(open|connect|start|acquire|begin|login|log_in|init|create|enter|bind|listen|lock|mount|spawn|"
                    r"launch|register|setup|set_up|subscribe|run)", re.IGNORECASE)


def _logging(key: str) -> bool:
    """A logging call (``log.error(..)``, ``logger.debug(..)``): needs nothing, and nothing needs it."""
    return key.startswith("logging.") and key.rsplit(".", 1)[-1] in _LOG_METHODS


_LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log"})


def _special(key: str) -> bool:
    name = key.rsplit(".", 1)[-1]
    return name.startswith("__") and name.endswith("__")


@dataclass(frozen=True)
class MinedOrder:
    """An accepted precondition pair: ``consumer`` is called after ``producer`` (the prerequisite) with no
    value of the producer reaching it, in ``support`` distinct functions, by ``patterns``
    (guard | same_receiver | validate_first, ``doctest:guard`` and the like, or a stated one: tasks/mining/state.py);
    ``record_id`` is its first candidate's."""

    record_id: str
    consumer: str
    producer: str
    support: int
    patterns: tuple[str, ...]


def judge_order(raw: RawOrder, table: SymbolTable) -> tuple[tuple[Target, Target] | None, CandidateRejection | None]:
    """The resolved (consumer, producer) of a precondition candidate, or its rejection: the flows' rules
    of resolution and documentation, and a function is no prerequisite of itself."""
    def reject(reason: str, detail: str, stage: str = "resolve") -> tuple[None, CandidateRejection]:
        return None, CandidateRejection(raw.record_id, stage, reason, detail)

    sides = resolve_sides(raw, table)
    if isinstance(sides, CandidateRejection):
        return None, sides
    consumer, producer = sides
    c_name, p_name = consumer.key.rsplit(".", 1)[-1], producer.key.rsplit(".", 1)[-1]
    if consumer.key == producer.key or (c_name == p_name and consumer.facts.binding == producer.facts.binding == "instance"):
        return reject(MineReason.SELF_ORDER, f"{producer.key} -> {consumer.key}")  # ``for p in plugins: p.feed(x)``: one step
    if not consumer.facts.documented:
        return reject(MineReason.UNDOCUMENTED_CONSUMER, consumer.key)
    if not producer.facts.documented:
        return reject(MineReason.UNDOCUMENTED_PRODUCER, producer.key)
    if raw.pattern.endswith("validate_first") and producer.facts.returns_value:  # ``est.fit(X); other.score(X)``: X shared, no setup
        return reject(MineReason.DROPPED_VALUE, f"{producer.key} returns a value; dropped before {consumer.key}")
    if _special(consumer.key) or _special(producer.key):
        return reject(MineReason.SPECIAL_METHOD, f"{producer.key} -> {consumer.key}")
    if (_REPORTING_PRODUCER.match(p_name) or _ASSERTION.match(p_name) or _ASSERTION.match(c_name)
            or _logging(producer.key) or _logging(consumer.key)):
        return reject(MineReason.REPORTING_CALL, f"{producer.key} -> {consumer.key}")
    if _SETTER.match(c_name) and _SETTER.match(p_name):
        return reject(MineReason.INDEPENDENT_SETTERS, f"{producer.key} -> {consumer.key}")
    if _TEARDOWN.match(c_name) and not _SETUP.match(p_name):
        return reject(MineReason.TEARDOWN_AFTER_ACTION, f"{producer.key} -> {consumer.key}")
    return (consumer, producer), None
