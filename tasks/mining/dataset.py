"""Mined flows -> three balanced TDI classes with hard negatives, split without doc leakage.

Class 0 is each mined flow as <consumer, producer> (origin ``mined``; LLM pairs mixed in keep
``validated``), class 2 its swap (``mined_swapped`` / ``swapped``). Class 1 is, per split, a
``hard_negative_share`` of *hard negatives* (two docs of the same top-level package that no mined
flow links, in either direction) and the rest *reshuffles* across packages (``shuffled``). Splits
are whole doc-connected components (tasks/dataset/balance.py), so no doc is in two splits.
Classes 0 and 2 keep the flow's consumer parameter and, where the producer doc names its single
output, that output (``consumer_param``, ``producer_output``), and the pair's dependency ``kind``
("data", or "precondition": called first, no value passed, no parameters) and ``support``; class 1 rows
have none of them. Two pairs of the same docs (either direction) are one: data pairs come first, so a
precondition pair of docs a data pair already links is rejected (``balance_kind_conflict``).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from schemas.docs import canonical_doc_json, doc_id
from schemas.parameters import input_param_names, match_param, output_param_names
from schemas.tdi import (DEPENDENCY_KINDS, KIND_DATA, KIND_PRECONDITION, LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A,
                         LABEL_NO_DEPENDENCY, check_kind)
from tasks.dataset.balance import KIND_CONFLICT_DETAIL, _assign_splits, _Doc, _Pair, _row  # the shared split/row logic of build-tdi
from tasks.mining.sources import top_package
from tasks.mining.state import stated

if TYPE_CHECKING:
    from tasks.common.progress import CountProgress
    from tasks.mining.mine import MineResult

ORIGIN_MINED, ORIGIN_MINED_SWAPPED = "mined", "mined_swapped"
ORIGIN_HARD_NEGATIVE, ORIGIN_SHUFFLED = "hard_negative", "shuffled"
ORIGIN_LLM, ORIGIN_LLM_SWAPPED = "validated", "swapped"


@dataclass(frozen=True)
class MinedBalanceConfig:
    per_class: int | None = None  # cap per class over both splits; None: every usable pair
    validation_fraction: float = 0.1
    seed: int = 13
    output_dropout: float = 0.3  # share of docs whose declared outputs are removed
    hard_negative_share: float = 0.5  # share of class 1 that are same-package hard negatives


@dataclass(frozen=True)
class DependencyPair:
    """One <dependent, prerequisite> pair of docs, mined or from an LLM dataset."""

    record_id: str
    dependent_key: str  # where the doc came from (module.qualname, or an LLM pair's tool id)
    prerequisite_key: str
    origin: str  # mined | validated
    package: str = ""  # top-level package of the two functions ("" for LLM pairs)
    consumer_param: str | None = None  # the dependent's input parameter the prerequisite's output reaches
    producer_output: str | None = None  # the prerequisite's output that reaches it, where its doc names one
    kind: str = KIND_DATA  # schemas.tdi.DEPENDENCY_KINDS; a precondition names neither parameter
    support: int | None = None  # distinct functions/runs that show it (>= 1); None: not counted (LLM pairs)

    def __post_init__(self) -> None:
        check_kind(self.kind, self.consumer_param, self.producer_output)
        if self.support is not None and self.support < 1:
            raise ValueError(f"{self.record_id}: support {self.support!r} must be >= 1 or None (not counted)")


def single_output(doc: dict[str, Any] | None) -> str | None:
    """The name of a producer doc's one declared output (what a mined flow hands over); None when the
    doc declares none or several: which one flows is then not known."""
    outputs = (doc or {}).get("output_params") or []
    return outputs[0]["name"] if len(outputs) == 1 else None


def pair_docs(result: MineResult, workers: int, progress: CountProgress | None = None) -> dict[str, dict[str, Any]]:
    """The API doc of every function a mined data-flow pair or precondition pair touches, by target key;
    ``progress``: its total set to those functions, advanced as they are done."""
    from tasks.mining.mine import build_docs

    targets = sorted({**result.order_targets, **result.targets}.values(), key=lambda t: t.key)
    if progress is not None:
        progress.set_total(len(targets))
    return build_docs(targets, workers=workers, output_names=result.output_names, progress=progress)


def flow_pairs(result: MineResult, docs: dict[str, dict[str, Any]]) -> list[DependencyPair]:
    """The accepted data flows as dependency pairs of kind data: the consumer's parameter the value reaches, and
    the producer doc's one output where it declares exactly one."""
    return [DependencyPair(f.record_id, f.consumer, f.producer, ORIGIN_MINED, top_package(f.consumer), f.param,
                           single_output(docs.get(f.producer))) for f in result.flows]


RARE_ORDER = "rare_order"  # a precondition pair seen in fewer functions than --min-order-support


def precondition_pairs(result: MineResult, min_support: int) -> tuple[list[DependencyPair], list[tuple[str, str, str]]]:
    """Accepted precondition pairs (``MinedOrder``) as dependency pairs of kind precondition with their support;
    those seen in fewer than ``min_support`` functions as (record id, reason, detail) rejections, except a pair
    a state guard, an error message, a fitted check or a docstring states (tasks/mining/state.py): the code itself
    says the producer must come first."""
    pairs, rare = [], []
    for o in result.orders:
        if o.support < min_support and not stated(o.patterns):  # stated in code: no habit to count
            rare.append((o.record_id, RARE_ORDER, f"{o.producer} before {o.consumer} in {o.support} function(s), "
                                                  f"fewer than --min-order-support {min_support}"))
        else:
            pairs.append(DependencyPair(o.record_id, o.consumer, o.producer, ORIGIN_MINED, top_package(o.consumer),
                                        kind=KIND_PRECONDITION, support=o.support))
    return pairs, rare


@dataclass
class MinedBalanced:
    rows: list[dict]
    rejections: list[tuple[str, str, str]]  # (record_id, reason, detail) of pairs not used
    per_class: int
    per_split: dict[str, int]
    negatives: dict[str, int] = field(default_factory=dict)  # origin -> rows
    dropped_outputs: int = 0  # docs whose outputs were removed
    # dependent pairs in the rows, with each parameter column set, and per kind (``by_kind``)
    parameters: dict[str, Any] = field(default_factory=dict)


def drop_outputs(docs: dict[str, dict[str, Any]], fraction: float, seed: int) -> tuple[dict[str, dict[str, Any]], int]:
    """Remove the declared outputs of a seeded ``fraction`` of docs (chosen by key, not order), so a
    discriminator also learns to read what a tool returns from its name."""
    out, dropped = {}, 0
    for key, doc in docs.items():
        h = int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:8], "big") / 2**64
        if h < fraction and doc["output_params"]:
            doc = {**doc, "output_params": []}
            dropped += 1
        out[key] = doc
    return out, dropped


def _draw(pool: Sequence[_Doc], count: int, ok: Callable[[_Doc, _Doc], bool], known: set[frozenset[str]],
          chosen: set[frozenset[str]], rng: np.random.Generator, pick_second: Callable[[int], int] | None = None) -> list[tuple[_Doc, _Doc]]:
    """Up to ``count`` new random pairs passing ``ok``, never known, never a doc with itself."""
    out: list[tuple[_Doc, _Doc]] = []
    if len(pool) < 2 or count <= 0:
        return out
    for _ in range(40):
        need = count - len(out)
        firsts = rng.integers(0, len(pool), size=2 * need + 16).tolist()
        seconds = [pick_second(i) for i in firsts] if pick_second else rng.integers(0, len(pool), size=len(firsts)).tolist()
        for i, j in zip(firsts, seconds):
            a, b = pool[i], pool[j]
            key = frozenset((a.doc_id, b.doc_id))
            if a.doc_id == b.doc_id or key in known or key in chosen or not ok(a, b):
                continue
            chosen.add(key)
            out.append((a, b))
            if len(out) == count:
                return out
    return out


def _negatives(pool: list[_Doc], package: dict[str, str], count: int, share: float, known: set[frozenset[str]],
               rng: np.random.Generator) -> list[tuple[_Doc, _Doc, str]]:
    chosen: set[frozenset[str]] = set()
    by_package: dict[str, list[int]] = {}
    for i, d in enumerate(pool):
        by_package.setdefault(package.get(d.doc_id, ""), []).append(i)
    members = {i: by_package[package.get(d.doc_id, "")] for i, d in enumerate(pool)}

    def same_package_partner(i: int) -> int:
        group = members[i]
        return group[int(rng.integers(0, len(group)))]

    n_hard = round(count * share)
    hard = _draw(pool, n_hard, lambda a, b: True, known, chosen, rng, same_package_partner)
    cross = _draw(pool, count - len(hard), lambda a, b: package.get(a.doc_id) != package.get(b.doc_id), known, chosen, rng)
    # one package only, or too few cross pairs: any unknown pair fills the class
    rest = _draw(pool, count - len(hard) - len(cross), lambda a, b: True, known, chosen, rng)
    out = [(a, b, ORIGIN_HARD_NEGATIVE) for a, b in hard] + [(a, b, ORIGIN_SHUFFLED) for a, b in cross + rest]
    if len(out) < count:
        raise ValueError(f"cannot draw {count} 'no dependency' pairs from {len(pool)} docs: too few unlinked docs")
    return out


def balance_mined(pairs: Sequence[DependencyPair], docs: dict[str, dict[str, Any]], cfg: MinedBalanceConfig,
                  excluded: Sequence[DependencyPair] = (), progress: CountProgress | None = None) -> MinedBalanced:
    """Balanced TDI rows from dependency pairs whose docs are in ``docs`` (by key).

    ``excluded``: mined pairs kept out of the rows (rejected elsewhere, e.g. by the LLM judge) that
    still count as known links, so no negative is drawn from them; they get no rejection here.
    ``progress``: its total is the pairs given (``pairs`` and ``excluded``), advanced as each is placed
    (kept or rejected), then the rows of the kept ones are drawn (said in its detail)."""
    rng = np.random.default_rng(cfg.seed)
    docs, dropped = drop_outputs(docs, cfg.output_dropout, cfg.seed)
    made: dict[str, _Doc] = {}
    package: dict[str, str] = {}

    def as_doc(key: str, pkg: str) -> _Doc:
        if key not in made:
            text = canonical_doc_json(docs[key])
            made[key] = _Doc(doc_id(text), text, key)
            package.setdefault(made[key].doc_id, pkg)
        return made[key]

    rejections: list[tuple[str, str, str]] = []
    known: set[frozenset[str]] = set()
    unique: list[tuple[_Pair, str]] = []
    seen: dict[frozenset[str], str] = {}  # kept pair's docs -> its kind
    kept_out = {p.record_id for p in excluded}
    # data pairs first (by record id), then precondition pairs: of two pairs of the same docs the data one is kept
    for p in sorted([*pairs, *excluded], key=lambda p: (p.kind != KIND_DATA, p.record_id)):
        if progress is not None:
            progress.advance(1)
        if p.dependent_key not in docs or p.prerequisite_key not in docs:
            if p.record_id not in kept_out:
                rejections.append((p.record_id, "balance_missing_doc", "no doc could be built for a side of the pair"))
            continue
        # checked against the docs the rows get (after output dropout or an LLM rewrite): a name
        # that is no longer the doc's becomes unknown
        consumer_param = match_param(p.consumer_param, input_param_names(docs[p.dependent_key]))
        producer_output = match_param(p.producer_output, output_param_names(docs[p.prerequisite_key]))
        pair = _Pair(p.record_id, as_doc(p.dependent_key, p.package), as_doc(p.prerequisite_key, p.package),
                     consumer_param, producer_output, p.kind, p.support)
        key = frozenset((pair.dependent.doc_id, pair.prerequisite.doc_id))
        known.add(key)
        if p.record_id in kept_out:
            continue
        if pair.dependent.doc_id == pair.prerequisite.doc_id:
            rejections.append((p.record_id, "balance_self_pair", "dependent and prerequisite docs are identical"))
        elif key in seen and seen[key] != p.kind:
            rejections.append((p.record_id, "balance_kind_conflict", f"{p.kind} pair {p.dependent_key} / {p.prerequisite_key}: "
                                                                      f"{KIND_CONFLICT_DETAIL}"))
        elif key in seen:  # same docs again, or the reverse direction (its label would contradict)
            rejections.append((p.record_id, "balance_duplicate_pair", f"docs already paired: {p.dependent_key} / {p.prerequisite_key}"))
        else:
            seen[key] = p.kind
            unique.append((pair, p.origin))

    order = rng.permutation(len(unique))
    per_class = len(unique) if cfg.per_class is None else min(cfg.per_class, len(unique))
    selected = [unique[i] for i in order[:per_class]]
    for i in order[per_class:]:
        rejections.append((unique[i][0].record_id, "balance_surplus", f"class cap {cfg.per_class} reached"))
    if len(selected) < 2:
        rejections += [(p.record_id, "balance_too_few_pairs", "a balanced set needs at least 2 pairs") for p, _ in selected]
        selected, per_class = [], 0
    if progress is not None:
        progress.detail = f"rows and negatives of {per_class} pairs per class"
    splits = _assign_splits([p for p, _ in selected], cfg.validation_fraction, rng, known)
    rows: list[dict] = []
    per_split: dict[str, int] = {}
    negatives: dict[str, int] = {}
    for split in ("train", "validation"):
        in_split = [(p, o) for (p, o), s in zip(selected, splits) if s == split]
        if not in_split:
            continue
        per_split[split] = len(in_split)
        pool: dict[str, _Doc] = {}
        for p, origin in in_split:
            llm = origin == ORIGIN_LLM
            rows.append(_row(p.dependent, p.prerequisite, LABEL_A_DEPENDS_ON_B, split, ORIGIN_LLM if llm else ORIGIN_MINED,
                             p.consumer_param, p.producer_output, p.kind, p.support))
            rows.append(_row(p.prerequisite, p.dependent, LABEL_B_DEPENDS_ON_A, split, ORIGIN_LLM_SWAPPED if llm else ORIGIN_MINED_SWAPPED,
                             p.consumer_param, p.producer_output, p.kind, p.support))
            pool.setdefault(p.dependent.doc_id, p.dependent)
            pool.setdefault(p.prerequisite.doc_id, p.prerequisite)
        docs_in_split = [pool[k] for k in sorted(pool)]
        for a, b, origin in _negatives(docs_in_split, package, len(in_split), cfg.hard_negative_share, known, rng):
            rows.append(_row(a, b, LABEL_NO_DEPENDENCY, split, origin))
            negatives[origin] = negatives.get(origin, 0) + 1
    used = [p for p, _ in selected]
    parameters = {"dependent_pairs": len(used), "consumer_param": sum(p.consumer_param is not None for p in used),
                  "producer_output": sum(p.producer_output is not None for p in used),
                  "by_kind": {kind: sum(p.kind == kind for p in used) for kind in DEPENDENCY_KINDS}}
    return MinedBalanced(rows, rejections, per_class, per_split, negatives, dropped, parameters)
