"""Turn validated dependent pairs into three exactly balanced classes, split without doc leakage.

Class 0 (a depends on b) is each validated pair as <dependent, prerequisite>; class 2 is its swap;
class 1 (no dependency) pairs docs of the same split at random, never a known dependent pair
(in either order) and never a doc with itself.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from schemas.docs import canonical_doc_json, doc_id
from schemas.tdi import ID2LABEL, LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY
from tasks.agents import DependentPair, Rejection


@dataclass(frozen=True)
class BalanceConfig:
    per_class: int = 92_000  # pairs per class over both splits (the paper's pretraining size)
    validation_fraction: float = 0.1
    seed: int = 13


@dataclass(frozen=True)
class _Doc:
    doc_id: str
    json: str
    source: str


@dataclass(frozen=True)
class _Pair:
    record_id: str
    dependent: _Doc
    prerequisite: _Doc


@dataclass
class BalancedPairs:
    rows: list[dict]  # TDI_PAIR_SCHEMA rows
    rejections: list[Rejection]  # validated pairs not used, with the reason
    per_class: int  # the size reached (≤ the configured target)
    per_split: dict[str, int]  # dependent pairs per split (= rows per class in that split)


def _as_pair(p: DependentPair) -> _Pair:
    tag_dep, tag_pre = ("generated", "given") if p.satisfied == 1 else ("given", "generated")
    dep_json, pre_json = canonical_doc_json(p.dependent), canonical_doc_json(p.prerequisite)
    return _Pair(
        p.record_id,
        _Doc(doc_id(dep_json), dep_json, f"{p.record_id}#{tag_dep}"),
        _Doc(doc_id(pre_json), pre_json, f"{p.record_id}#{tag_pre}"),
    )


def _row(a: _Doc, b: _Doc, label: int, split: str, origin: str) -> dict:
    return {
        "pair_id": hashlib.sha256(f"{a.doc_id}>{b.doc_id}".encode()).hexdigest()[:20],
        "doc_a": a.json,
        "doc_b": b.json,
        "tool_a_id": a.doc_id,
        "tool_b_id": b.doc_id,
        "label": label,
        "label_name": ID2LABEL[label],
        "split": split,
        "origin": origin,
        "source_a": a.source,
        "source_b": b.source,
    }


def _components(pairs: Sequence[_Pair]) -> list[list[int]]:
    """Groups of pair indices connected through shared docs (union-find), in first-seen order."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for p in pairs:
        parent[find(p.dependent.doc_id)] = find(p.prerequisite.doc_id)
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(pairs):
        groups.setdefault(find(p.dependent.doc_id), []).append(i)
    return list(groups.values())


def _none_pairs_possible(pairs: Sequence[_Pair], known: set[frozenset[str]]) -> int:
    """How many distinct 'no dependency' pairs the docs of ``pairs`` can form."""
    docs = {d for p in pairs for d in (p.dependent.doc_id, p.prerequisite.doc_id)}
    inside = sum(1 for k in known if k <= docs and len(k) == 2)
    return len(docs) * (len(docs) - 1) // 2 - inside


def _assign_splits(pairs: Sequence[_Pair], fraction: float, rng: np.random.Generator,
                   known: set[frozenset[str]] = frozenset()) -> list[str]:
    """Whole doc-connected components go to one split, so no doc is in both.

    Small runs get a validation split too, whenever there are at least 2 components and both
    splits can still form as many 'no dependency' pairs as they have dependency pairs (one lone
    pair cannot: its two docs depend on each other); otherwise everything stays in train.
    """
    splits = ["train"] * len(pairs)
    components = _components(pairs)
    if fraction <= 0 or len(components) < 2:
        return splits
    want = max(1, round(len(pairs) * fraction))
    taken = 0
    # smallest components first when the split is tiny, so a 3-pair run can still spare one
    order = rng.permutation(len(components))
    if want < 4:
        order = sorted(order, key=lambda ci: len(components[ci]))
    def feasible(split: str) -> bool:
        members = [p for p, s in zip(pairs, splits) if s == split]
        return bool(members) and _none_pairs_possible(members, known) >= len(members)

    for ci in order:
        if taken >= want and feasible("validation"):
            break
        if taken + len(components[ci]) > want + max(1, want // 10) and taken > 0 and feasible("validation"):
            continue  # don't overshoot with one giant component
        for i in components[ci]:
            splits[i] = "validation"
        taken += len(components[ci])
    if not (feasible("train") and feasible("validation")):
        return ["train"] * len(pairs)  # no feasible validation split at this size
    return splits


def _none_pairs(
    docs: Sequence[_Doc], count: int, known: set[frozenset[str]], rng: np.random.Generator, split: str
) -> list[tuple[_Doc, _Doc]]:
    """``count`` distinct random pairs of docs that are not known to depend on each other."""
    n = len(docs)
    chosen: set[frozenset[str]] = set()
    out: list[tuple[_Doc, _Doc]] = []
    attempts = 0
    while len(out) < count:
        attempts += 1
        if attempts > 50:
            raise ValueError(
                f"cannot draw {count} 'no dependency' pairs from {n} docs in split {split!r}: "
                "too few docs that are not already dependent pairs (build more pairs)"
            )
        need = count - len(out)
        firsts = rng.integers(0, n, size=2 * need + 16)
        seconds = rng.integers(0, n, size=2 * need + 16)
        for i, j in zip(firsts.tolist(), seconds.tolist()):
            a, b = docs[i], docs[j]
            key = frozenset((a.doc_id, b.doc_id))
            if a.doc_id == b.doc_id or key in known or key in chosen:
                continue
            chosen.add(key)
            out.append((a, b))
            if len(out) == count:
                break
    return out


def balance_pairs(validated: Sequence[DependentPair], cfg: BalanceConfig) -> BalancedPairs:
    rng = np.random.default_rng(cfg.seed)
    rejections: list[Rejection] = []
    known: set[frozenset[str]] = set()
    unique: list[_Pair] = []
    seen: set[tuple[str, str]] = set()
    for p in sorted((_as_pair(v) for v in validated), key=lambda p: p.record_id):
        key = (p.dependent.doc_id, p.prerequisite.doc_id)
        known.add(frozenset(key))
        if p.dependent.doc_id == p.prerequisite.doc_id:
            rejections.append(Rejection(p.record_id, "balance", "balance_self_pair", "dependent and prerequisite docs are identical"))
        elif key in seen:
            rejections.append(Rejection(p.record_id, "balance", "balance_duplicate_pair", f"same docs as an earlier pair {key}"))
        else:
            seen.add(key)
            unique.append(p)

    order = rng.permutation(len(unique))
    per_class = min(cfg.per_class, len(unique))
    selected = [unique[i] for i in order[:per_class]]
    for i in order[per_class:]:
        rejections.append(Rejection(unique[i].record_id, "balance", "balance_surplus", f"class target {cfg.per_class} reached"))

    if len(selected) == 1:  # two docs that depend on each other leave no "none" pair to draw
        only = selected.pop()
        rejections.append(Rejection(only.record_id, "balance", "balance_too_few_pairs", "a balanced set needs at least 2 validated pairs"))
        per_class = 0
    splits = _assign_splits(selected, cfg.validation_fraction, rng, known)
    rows: list[dict] = []
    per_split: dict[str, int] = {}
    for split in ("train", "validation"):
        in_split = [p for p, s in zip(selected, splits) if s == split]
        if not in_split:
            continue
        per_split[split] = len(in_split)
        docs: dict[str, _Doc] = {}
        for p in in_split:
            rows.append(_row(p.dependent, p.prerequisite, LABEL_A_DEPENDS_ON_B, split, "validated"))
            rows.append(_row(p.prerequisite, p.dependent, LABEL_B_DEPENDS_ON_A, split, "swapped"))
            docs.setdefault(p.dependent.doc_id, p.dependent)
            docs.setdefault(p.prerequisite.doc_id, p.prerequisite)
        pool = [docs[k] for k in sorted(docs)]
        for a, b in _none_pairs(pool, len(in_split), known, rng, split):
            rows.append(_row(a, b, LABEL_NO_DEPENDENCY, split, "shuffled"))
    return BalancedPairs(rows, rejections, per_class, per_split)
