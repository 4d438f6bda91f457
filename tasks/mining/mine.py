"""Mining in two phases, so the costly one runs in parallel: parse files in worker processes, then resolve and
judge every candidate in the parent (:class:`MineResult`), data flows and precondition pairs (call order); every candidate ends accepted or rejected with a
reason (:class:`MineReason`), the counts add up. Also the API docs of the functions a dataset needs."""
from __future__ import annotations

import functools
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tasks.common.progress import CountProgress
from tasks.mining.docs import FunctionFacts, doc_from_facts
from tasks.mining.facts import FileRejection, ModuleFacts
from tasks.mining.filters import (
    CONFLICT_SHARE,
    DEFAULT_MAX_ORDER_PARTNERS,
    DEFAULT_MAX_PRODUCERS_PER_PARAM,
    CandidateRejection,
    MinedFlow,
    MinedOrder,
    judge_candidate,
    judge_order,
    reject_generic_sinks,
)
from tasks.mining.parse import parse_chunk
from tasks.mining.reasons import MineReason
from tasks.mining.resolve import SymbolTable, Target
from tasks.mining.sources import FileItem, tree_files
from tasks.mining.workers import map_chunks, no_gc


class MineResult:
    """What mining found. A plain class, not a dataclass, on purpose: Prefect walks dataclass task
    arguments field by field (to find futures), which over ~10^6 candidates costs minutes per task."""

    def __init__(self, flows: list[MinedFlow], rejections: list[CandidateRejection], file_rejections: list[FileRejection],
                 targets: dict[str, Target], documented: dict[str, Target], files_read: int, files_parsed: int,
                 candidates: int, parsed_ids: list[str] | None = None, output_names: dict[str, str] | None = None,
                 orders: list[MinedOrder] | None = None, order_rejections: list[CandidateRejection] | None = None,
                 order_candidates: int = 0, order_targets: dict[str, Target] | None = None, inherited_docs: int = 0,
                 test_files_orders_not_read: int = 0):
        self.flows = flows
        self.rejections = rejections
        self.file_rejections = file_rejections
        self.targets = targets  # every function a flow touches
        self.documented = documented  # every documented function read (for hard negatives)
        self.files_read = files_read
        self.files_parsed = files_parsed
        self.candidates = candidates
        self.parsed_ids = parsed_ids if parsed_ids is not None else []
        self.output_names = output_names if output_names is not None else {}  # target key -> what callers name its result
        # precondition pairs (call order, no data; tasks/mining/order.py), in books of their own:
        # len(orders) + len(order_rejections) == order_candidates
        self.orders = orders if orders is not None else []
        self.order_rejections = order_rejections if order_rejections is not None else []
        self.order_candidates = order_candidates
        self.order_targets = order_targets if order_targets is not None else {}  # every function an accepted order touches
        self.inherited_docs = inherited_docs  # undocumented overrides that took their base method's docstring
        # test files parsed without their call orders (they would all be ``test_order``; ``test_orders`` reads them)
        self.test_files_orders_not_read = test_files_orders_not_read

    def __repr__(self) -> str:
        return (f"MineResult(files_read={self.files_read}, candidates={self.candidates}, flows={len(self.flows)}, "
                f"rejections={len(self.rejections)}, order_candidates={self.order_candidates}, orders={len(self.orders)})")

    def reason_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(r.reason for r in self.rejections).items()))

    def order_reason_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(r.reason for r in self.order_rejections).items()))

    def file_reason_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(r.reason for r in self.file_rejections).items()))


def _merge(modules: Iterable[ModuleFacts | FileRejection], file_rejections: list[FileRejection],
           parsed_ids: list[str]) -> tuple[list[ModuleFacts], set[str]]:
    """Modules by name; a name read from two files is ambiguous (its flows still count as candidates),
    except function records of one file (CodeSearchNet), which are merged."""
    by_name: dict[str, ModuleFacts] = {}
    flows_only: list[ModuleFacts] = []
    ambiguous: set[str] = set()
    for m in modules:
        if isinstance(m, FileRejection):
            file_rejections.append(m)
            continue
        parsed_ids.append(m.source_id)
        if m.flows_only:
            flows_only.append(m)
            continue
        prev = by_name.get(m.module)
        if prev is None:
            by_name[m.module] = m
        elif m.origin == "codesearchnet" and prev.origin == "codesearchnet":
            for q, f in m.functions.items():
                if q in prev.functions:
                    prev.duplicated.add(q)
                prev.functions[q] = f
            prev.classes |= m.classes
            prev.flows += m.flows
            prev.orders += m.orders
        else:
            ambiguous.add(m.module)
            prev.flows += m.flows  # keep every candidate in the books
            prev.orders += m.orders
    return list(by_name.values()) + flows_only, ambiguous


def resolve_flows(parsed: Iterable[ModuleFacts | FileRejection], files_read: int,
                  max_producers_per_param: int | None = DEFAULT_MAX_PRODUCERS_PER_PARAM,
                  max_order_partners: int | None = DEFAULT_MAX_ORDER_PARTNERS,
                  progress: CountProgress | None = None, test_orders: bool = False, inherit_docs: bool = True) -> MineResult:
    """``progress``: advanced by the candidates judged (data flows, then call orders), module by module;
    ``test_orders``: call orders in test code count too (see :func:`resolve_orders`); ``inherit_docs``: an
    undocumented override takes its base method's docstring (:meth:`SymbolTable.inherit_docstrings`)."""
    with no_gc():
        return _resolve_flows(parsed, files_read, max_producers_per_param, max_order_partners, progress, test_orders, inherit_docs)


def _resolve_flows(parsed: Iterable[ModuleFacts | FileRejection], files_read: int,
                   max_producers_per_param: int | None = DEFAULT_MAX_PRODUCERS_PER_PARAM,
                   max_order_partners: int | None = DEFAULT_MAX_ORDER_PARTNERS,
                   progress: CountProgress | None = None, test_orders: bool = False, inherit_docs: bool = True) -> MineResult:
    file_rejections: list[FileRejection] = []
    parsed_ids: list[str] = []
    modules, ambiguous = _merge(parsed, file_rejections, parsed_ids)
    table = SymbolTable([m for m in modules if m.module not in ambiguous and not m.flows_only], ambiguous)
    inherited_docs = table.inherit_docstrings() if inherit_docs else 0
    flows: list[MinedFlow] = []
    rejections: list[CandidateRejection] = []
    targets: dict[str, Target] = {}
    accepted_pairs: dict[tuple[str, str], str] = {}
    candidates = 0
    for mod in modules:
        for raw in mod.flows:
            candidates += 1
            flow, rejection, consumer, producer = judge_candidate(raw, table)
            if flow is not None:
                first = accepted_pairs.get((flow.consumer, flow.producer))
                if first is not None:
                    rejection, flow = CandidateRejection(raw.record_id, "resolve", MineReason.DUPLICATE_FLOW, f"same pair as {first}"), None
                else:
                    accepted_pairs[(flow.consumer, flow.producer)] = flow.record_id
                    flows.append(flow)
                    targets[consumer.key] = consumer  # type: ignore[union-attr]
                    targets[producer.key] = producer  # type: ignore[union-attr]
            if rejection is not None:
                rejections.append(rejection)
        if progress is not None:
            progress.advance(len(mod.flows))
    flows, sinks = reject_generic_sinks(flows, max_producers_per_param)
    rejections += sinks
    used = {k for f in flows for k in (f.consumer, f.producer)}
    targets = {k: t for k, t in targets.items() if k in used}
    assert len(flows) + len(rejections) == candidates, "every candidate ends accepted or rejected"
    documented = {
        f"{m.module}.{q}": Target(f"{m.module}.{q}", m.module, f)
        for m in modules if m.module not in ambiguous and not m.flows_only
        for q, f in m.functions.items() if f.documented and q not in m.duplicated
    }
    assert len(parsed_ids) + len(file_rejections) == files_read, "every file ends parsed or rejected"
    orders, order_rejections, order_candidates, order_targets = resolve_orders(
        modules, table, {(f.consumer, f.producer) for f in flows}, max_order_partners, progress, test_orders)
    return MineResult(flows, rejections, file_rejections, targets, documented, files_read,
                      len(parsed_ids), candidates, parsed_ids, caller_output_names(modules, table, set(targets)),
                      orders, order_rejections, order_candidates, order_targets, inherited_docs,
                      sum(m.flows_only and not m.orders_read for m in modules))


def _function_of(record_id: str) -> str:
    """``module:function`` of an order's record id (module:function:line:col:after:line:col)."""
    return record_id.rsplit(":", 5)[0]


def resolve_orders(modules: Sequence[ModuleFacts], table: SymbolTable, flow_pairs: set[tuple[str, str]],
                   max_partners: int | None = DEFAULT_MAX_ORDER_PARTNERS, progress: CountProgress | None = None,
                   test_orders: bool = False) -> tuple[list[MinedOrder], list[CandidateRejection], int, dict[str, Target]]:
    """Precondition candidates -> accepted :class:`MinedOrder` (one per distinct (consumer, producer), its
    support the distinct functions showing it) and rejections; ``flow_pairs``: the accepted data flows'
    (consumer, producer), which are no bare preconditions. Returns (orders, rejections, candidates, targets).

    Call orders in test code (``FileItem.flows_only``) are rejected as ``test_order`` unless ``test_orders``:
    a test's steps are the ones it chose (set up, act, read back), and read by hand 21 of 23 were no
    requirement, against 47 of 67 in library code (bench/precondition_sample.md). Its data flows still count.
    (Parsing skips them there in the first place, ``parse_file``: this rule covers modules parsed with them.)"""
    rejections: list[CandidateRejection] = []
    first: dict[tuple[str, str], str] = {}  # pair -> record id of its first accepted candidate
    functions: dict[tuple[str, str], set[str]] = {}
    patterns: dict[tuple[str, str], set[str]] = {}
    beyond_self: set[tuple[str, str]] = set()  # pairs seen other than as ``self.a(); self.b()``
    targets: dict[str, Target] = {}
    candidates = 0
    for mod in modules:
        if mod.flows_only and not test_orders:
            candidates += len(mod.orders)
            rejections += [CandidateRejection(raw.record_id, "resolve", MineReason.TEST_ORDER, "call order in test code")
                           for raw in mod.orders]
            if progress is not None:
                progress.advance(len(mod.orders))
            continue
        for raw in mod.orders:
            candidates += 1
            resolved, rejection = judge_order(raw, table)
            if rejection is not None:
                rejections.append(rejection)
                continue
            consumer, producer = resolved  # type: ignore[misc]
            pair = (consumer.key, producer.key)
            if pair in flow_pairs:
                rejections.append(CandidateRejection(raw.record_id, "resolve", MineReason.DATA_FLOW_PAIR,
                                                     f"{consumer.key} takes a value of {producer.key} elsewhere"))
                continue
            functions.setdefault(pair, set()).add(_function_of(raw.record_id))
            patterns.setdefault(pair, set()).add(raw.pattern)
            if not raw.on_self:
                beyond_self.add(pair)
            if pair in first:
                rejections.append(CandidateRejection(raw.record_id, "resolve", MineReason.DUPLICATE_ORDER, f"same pair as {first[pair]}"))
                continue
            first[pair] = raw.record_id
            targets[consumer.key], targets[producer.key] = consumer, producer
        if progress is not None:
            progress.advance(len(mod.orders))
    kept = set(first)
    if max_partners is not None:  # a side paired with too many distinct others is paired by habit
        consumers_of: dict[str, set[str]] = {}
        producers_of: dict[str, set[str]] = {}
        for c, p in first:
            consumers_of.setdefault(p, set()).add(c)
            producers_of.setdefault(c, set()).add(p)
        for pair in first:
            c, p = pair
            n_c, n_p = len(consumers_of[p]), len(producers_of[c])
            if n_c > max_partners or n_p > max_partners:
                side = f"{p} precedes {n_c} consumers" if n_c > max_partners else f"{c} follows {n_p} producers"
                rejections.append(CandidateRejection(first[pair], "resolve", MineReason.GENERIC_PRECONDITION,
                                                     f"{side} (> {max_partners})"))
                kept.discard(pair)
    support = {pair: len(functions[pair]) for pair in first}
    orders: list[MinedOrder] = []
    for pair in first:
        if pair not in kept:
            continue
        c, p = pair
        if pair not in beyond_self and support[pair] < 2:  # a class's own steps, in one method: no rule shown
            rejections.append(CandidateRejection(first[pair], "resolve", MineReason.SELF_SEQUENCE,
                                                 f"self.{p.rsplit('.', 1)[-1]}() then self.{c.rsplit('.', 1)[-1]}() in one method only"))
            continue
        reverse = support[(p, c)] if (p, c) in kept else 0
        if reverse and reverse >= CONFLICT_SHARE * (reverse + support[pair]):
            rejections.append(CandidateRejection(first[pair], "resolve", MineReason.CONFLICTING_ORDER,
                                                 f"{p} after {c} in {reverse} functions, before it in {support[pair]}"))
            continue
        orders.append(MinedOrder(first[pair], c, p, support[pair], tuple(sorted(patterns[pair]))))
    assert len(orders) + len(rejections) == candidates, "every precondition candidate ends accepted or rejected"
    used = {k for o in orders for k in (o.consumer, o.producer)}
    return orders, rejections, candidates, {k: t for k, t in targets.items() if k in used}


# Variable names that say nothing about what a value is.
_UNINFORMATIVE_NAMES = frozenset({"res", "ret", "rv", "out", "val", "tmp", "temp", "obj", "item", "it", "resp", "retval",
                                  "rval", "new", "old", "cur", "ans"})


def caller_output_names(modules: Sequence[ModuleFacts], table: SymbolTable, keys: set[str]) -> dict[str, str]:
    """For each target in ``keys``: the variable name its callers most often give its result
    (``token = get_token(...)`` names the output ``token``). Real code names values after what they
    are, the way tool docs name outputs; one- and two-letter and generic names do not count."""
    from schemas.name_rule import GENERIC_OUTPUT_NAMES

    resolved: dict[str, str | None] = {}
    counts: dict[str, Counter[str]] = {}
    for mod in modules:
        for callee, var in mod.assigned:
            if len(var) < 3 or var.startswith("_") or var.lower() in _UNINFORMATIVE_NAMES or var.lower() in GENERIC_OUTPUT_NAMES:
                continue
            if callee not in resolved:
                target = table.resolve(callee)[0]
                resolved[callee] = target.key if target is not None else None
            key = resolved[callee]
            if key in keys:
                counts.setdefault(key, Counter())[var] += 1
    return {key: max(c.items(), key=lambda kv: (kv[1], kv[0]))[0] for key, c in counts.items()}


def mine_files(items: Sequence[FileItem], workers: int = 2, chunk_files: int = 64,
               max_producers_per_param: int | None = DEFAULT_MAX_PRODUCERS_PER_PARAM, orders: bool = True,
               max_order_partners: int | None = DEFAULT_MAX_ORDER_PARTNERS, test_orders: bool = False,
               inherit_docs: bool = True, doctests: bool = True, keyed_state: bool = False) -> MineResult:
    """Parse ``items`` in ``workers`` processes (in-process when workers <= 1), then resolve; ``orders``:
    also precondition pairs; ``test_orders``: call orders in test code count too; ``inherit_docs``: an
    undocumented override takes its base method's docstring; ``doctests``: call orders in docstrings' examples too;
    ``keyed_state``: the stated pattern ``keyed_state`` too."""
    parse = functools.partial(parse_chunk, orders=orders, test_orders=test_orders, doctests=doctests,
                              keyed_state=keyed_state)
    return resolve_flows(map_chunks(parse, items, workers, chunk_files), len(items), max_producers_per_param, max_order_partners,
                         test_orders=test_orders, inherit_docs=inherit_docs)


# -- docs for the functions a dataset needs -------------------------------------------------------
def _docs_chunk(facts: Sequence[tuple[FunctionFacts, str | None]]) -> list[dict[str, Any] | None]:
    with no_gc():
        return [doc_from_facts(f, output_hint=hint) for f, hint in facts]


def build_docs(targets: Sequence[Target], workers: int = 2, chunk: int = 512,
               output_names: dict[str, str] | None = None, progress: CountProgress | None = None
               ) -> dict[str, dict[str, Any]]:
    """API doc per target key, built in ``workers`` processes (docstring parsing is the cost).
    ``output_names``: the callers' name for a target's result (``MineResult.output_names``); ``progress``:
    advanced by the targets done."""
    facts = [(t.facts, (output_names or {}).get(t.key)) for t in targets]
    docs = map_chunks(_docs_chunk, facts, workers, chunk, progress)
    return {t.key: d for t, d in zip(targets, docs) if d is not None}


if __name__ == "__main__":  # quick look: python -m tasks.mining.mine DIR
    res = mine_files(tree_files(Path(sys.argv[1]), "tree"))
    print(len(res.flows), res.candidates, res.reason_counts())
