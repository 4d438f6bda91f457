"""Turn validated dependent pairs into three exactly balanced classes, split without doc leakage.

Class 0 (a depends on b) is each validated pair as <dependent, prerequisite>; class 2 is its swap;
class 1 (no dependency) pairs docs of the same split at random, never a known dependent pair
(in either order) and never a doc with itself. Classes 0 and 2 carry the pair's ``consumer_param``
and ``producer_output`` (the dependent side's fed input) and its dependency ``kind`` ("data" or
"precondition", schemas/tdi.py) and ``support``; class 1 rows have none of them. Two pairs of the same
docs (in the same direction) are one: the first by record id is kept, a data pair before a precondition
pair (it says more: which value flows), the other is rejected.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from schemas.docs import canonical_doc_json, doc_id
from schemas.tdi import ID2LABEL, KIND_DATA, LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY
from schemas.tdi import DependentPair, check_kind
from tasks.common.outcome import Outcome

# why a pair of the same docs as a kept pair of the other kind is rejected (balance_kind_conflict)
KIND_CONFLICT_DETAIL = ("a data pair of the same docs is kept instead: one label per doc pair, and the data pair "
                        "also says which value flows")


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
    consumer_param: str | None = None  # the dependent doc's input that the prerequisite feeds
    producer_output: str | None = None  # the prerequisite doc's output that feeds it
    kind: str = KIND_DATA  # schemas.tdi.DEPENDENCY_KINDS
    support: int | None = None  # distinct functions/runs that show the dependency; None: not counted


@dataclass
class BalancedPairs:
    rows: list[dict]  # TDI_PAIR_SCHEMA rows
    rejections: list[Outcome]  # validated pairs not used, with the reason
    per_class: int  # the size reached (≤ the configured target)
    per_split: dict[str, int]  # dependent pairs per split (= rows per class in that split)


def _as_pair(p: DependentPair) -> _Pair:
    tag_dep, tag_pre = ("generated", "given") if p.satisfied == 1 else ("given", "generated")
    dep_json, pre_json = canonical_doc_json(p.dependent), canonical_doc_json(p.prerequisite)
    return _Pair(
        p.record_id,
        _Doc(doc_id(dep_json), dep_json, f"{p.record_id}#{tag_dep}"),
        _Doc(doc_id(pre_json), pre_json, f"{p.record_id}#{tag_pre}"),
        p.consumer_param,
        p.producer_output,
        p.kind,
    )


def _row(a: _Doc, b: _Doc, label: int, split: str, origin: str, consumer_param: str | None = None,
         producer_output: str | None = None, kind: str | None = None, support: int | None = None) -> dict:
    """A TDI_PAIR_SCHEMA row; ``consumer_param``/``producer_output`` belong to the dependent side
    (doc_a for label 0, doc_b for label 2); ``kind`` is required on labels 0 and 2 (a precondition
    with neither parameter); all four are null for label 1."""
    if label == LABEL_NO_DEPENDENCY:
        if consumer_param is not None or producer_output is not None:
            raise ValueError("a 'no dependency' row has no consumer parameter")
        if kind is not None or support is not None:
            raise ValueError(f"a 'no dependency' row has no dependency kind or support (got {kind!r}, {support!r})")
    else:
        check_kind(kind, consumer_param, producer_output)
        if support is not None and support < 1:
            raise ValueError(f"support counts the functions or runs that show a dependency: >= 1 or null, got {support!r}")
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
        "consumer_param": consumer_param,
        "producer_output": producer_output,
        "kind": kind,
        "support": support,
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
    rejections: list[Outcome] = []
    known: set[frozenset[str]] = set()
    unique: list[_Pair] = []
    seen: set[tuple[str, str]] = set()
    kind_of: dict[tuple[str, str], str] = {}
    # data pairs first (by record id), then precondition pairs: of two pairs of the same docs the data one is kept
    for p in sorted((_as_pair(v) for v in validated), key=lambda p: (p.kind != KIND_DATA, p.record_id)):
        key = (p.dependent.doc_id, p.prerequisite.doc_id)
        known.add(frozenset(key))
        if p.dependent.doc_id == p.prerequisite.doc_id:
            rejections.append(Outcome(p.record_id, "balance", "balance_self_pair", "dependent and prerequisite docs are identical"))
        elif key in seen and kind_of[key] != p.kind:
            rejections.append(Outcome(p.record_id, "balance", "balance_kind_conflict", KIND_CONFLICT_DETAIL))
        elif key in seen:
            rejections.append(Outcome(p.record_id, "balance", "balance_duplicate_pair", f"same docs as an earlier pair {key}"))
        else:
            seen.add(key)
            kind_of[key] = p.kind
            unique.append(p)

    order = rng.permutation(len(unique))
    per_class = min(cfg.per_class, len(unique))
    selected = [unique[i] for i in order[:per_class]]
    for i in order[per_class:]:
        rejections.append(Outcome(unique[i].record_id, "balance", "balance_surplus", f"class target {cfg.per_class} reached"))

    if len(selected) == 1:  # two docs that depend on each other leave no "none" pair to draw
        only = selected.pop()
        rejections.append(Outcome(only.record_id, "balance", "balance_too_few_pairs", "a balanced set needs at least 2 validated pairs"))
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
            rows.append(_row(p.dependent, p.prerequisite, LABEL_A_DEPENDS_ON_B, split, "validated", p.consumer_param, p.producer_output,
                             p.kind, p.support))
            rows.append(_row(p.prerequisite, p.dependent, LABEL_B_DEPENDS_ON_A, split, "swapped", p.consumer_param, p.producer_output,
                             p.kind, p.support))
            docs.setdefault(p.dependent.doc_id, p.dependent)
            docs.setdefault(p.prerequisite.doc_id, p.prerequisite)
        pool = [docs[k] for k in sorted(docs)]
        for a, b in _none_pairs(pool, len(in_split), known, rng, split):
            rows.append(_row(a, b, LABEL_NO_DEPENDENCY, split, "shuffled"))
    return BalancedPairs(rows, rejections, per_class, per_split)


# -- columnar balancing over chunk outputs (build-tdi at scale) --------------------------------------
# The same algorithm as ``balance_pairs`` (same rng draws, same row set for the same pairs), on
# polars/numpy columns read lazily from the chunks' ``validated.parquet`` files: the memory is a few
# integer and id columns per validated pair, plus the docs of the selected pairs only (at most
# 2 x per_class), never one Python object per pair.
SPLIT_NAMES = ("train", "validation")
ORIGINS = ("validated", "swapped", "shuffled")
_TAGS = ("given", "generated")


@dataclass
class BalancePlan:
    """Which rows the dataset has, as columns; ``tasks.dataset.shards.write_planned_shards`` writes them.

    A *source* is one side of a selected pair: source ``2*i`` is the dependent doc of selected pair
    ``i``, ``2*i + 1`` its prerequisite. ``rows`` holds ``split``, ``label``, ``origin``, ``a_src``,
    ``b_src`` (source numbers), ``consumer_param``, ``producer_output``, ``kind``, ``support`` (null on class 1) and
    ``pair_id``; ``selected`` holds per selected pair ``record_id``, ``satisfied``, ``dep_id``, ``pre_id`` (hex doc
    ids), its parameters and ``kind`` in selection order. What became of every
    validated pair is one byte a pair (``reason_codes``, in the files' row order); its rows for the
    books are read back file by file (:meth:`outcome_frames`), so the plan's memory does not grow
    with the input's text."""

    per_class: int
    per_split: dict[str, int]
    rows: pl.DataFrame
    selected: pl.DataFrame
    reason_codes: np.ndarray  # uint8 index into OUTCOME_REASONS per validated pair, files' row order
    validated_files: list[str]
    target: int  # the configured pairs per class (the surplus rejections say it)
    # agent-1 docs of other records a 'no dependency' row uses (record_id, doc_id; source 2 * len(selected) + j),
    # read back from ``given_doc_files``: only where a split's own docs cannot form enough such pairs (a lone pair)
    spare: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema={"record_id": pl.String, "doc_id": pl.String}))
    given_doc_files: list[str] = field(default_factory=list)

    @property
    def n_rows(self) -> int:
        return self.rows.height

    def outcome_frames(self) -> Iterator[pl.DataFrame]:
        """The books' rows (``tasks.common.outcome.OUTCOME_SCHEMA``) of the validated pairs, a frame per file."""
        start = 0
        for f in self.validated_files:
            part = pl.read_parquet(f, columns=["record_id", "dep_id", "pre_id"])
            codes = self.reason_codes[start:start + part.height]
            start += part.height
            yield _outcome_frame(part, codes, self.target)
        if start != len(self.reason_codes):
            raise RuntimeError(f"the validated files changed under the plan: {start} rows, planned {len(self.reason_codes)}")

    def write_outcomes(self, path: Path) -> None:
        """:meth:`outcome_frames` into one Parquet file, a file's rows at a time."""
        import pyarrow.parquet as pq

        from tasks.common.outcome import OUTCOME_SCHEMA

        with pq.ParquetWriter(path, OUTCOME_SCHEMA) as writer:
            for frame in self.outcome_frames():
                writer.write_table(frame.to_arrow().cast(OUTCOME_SCHEMA))

    def outcomes(self) -> pl.DataFrame:
        """All of :meth:`outcome_frames` in memory (tests, small runs)."""
        frames = list(self.outcome_frames())
        return pl.concat(frames) if frames else _outcome_frame(
            pl.DataFrame(schema={"record_id": pl.String, "dep_id": pl.String, "pre_id": pl.String}), np.zeros(0, np.uint8), self.target)

    def _column(self, name: str) -> np.ndarray:
        cache = self.__dict__.setdefault("_columns", {})
        if name not in cache:
            cache[name] = self.selected[name].to_numpy()
        return cache[name]

    def source_doc_ids(self, src: np.ndarray) -> list[str]:
        dep, pre = self._column("dep_id"), self._column("pre_id")
        src = np.asarray(src, np.int64)
        pair, spare = self._split_sources(src)
        out = np.where(src % 2 == 0, dep[pair // 2], pre[pair // 2]).astype(object)
        if spare.any():
            out[spare] = self.spare["doc_id"].to_numpy()[src[spare] - 2 * self.selected.height]
        return out.tolist()

    def source_names(self, src: np.ndarray) -> list[str]:
        rid, sat = self._column("record_id"), self._column("satisfied")
        src = np.asarray(src, np.int64)
        pair, spare = self._split_sources(src)
        i, side = pair // 2, pair % 2  # side 0: dependent, 1: prerequisite
        generated = (sat[i] == 1) == (side == 0)  # satisfied 1: the dependent is the generated doc
        names = np.array([f"{r}#{_TAGS[g]}" for r, g in zip(rid[i].tolist(), generated.tolist())], dtype=object)
        if spare.any():  # an agent-1 doc: its record's given doc
            names[spare] = [f"{r}#given" for r in self.spare["record_id"].to_numpy()[src[spare] - 2 * self.selected.height]]
        return names.tolist()

    def _split_sources(self, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``src`` with spare sources replaced by 0 (for the pair lookups), and where the spare ones are."""
        spare = src >= 2 * self.selected.height
        return np.where(spare, 0, src), spare


def _u64(hex_ids: pl.Series) -> np.ndarray:
    """16-hex-digit doc ids as uint64 (their order is the ids' string order)."""
    hi = hex_ids.str.slice(0, 8).str.to_integer(base=16).cast(pl.UInt64).to_numpy()
    lo = hex_ids.str.slice(8, 8).str.to_integer(base=16).cast(pl.UInt64).to_numpy()
    return (hi << np.uint64(32)) | lo


def _pair_keys(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each (a, b) uint64 pair as one 16-byte key. Byte order is no numeric order, but one total order
    for sorting, ``np.unique`` and binary search is all the keys need."""
    return np.stack([a, b], axis=1).view("V16").ravel()


class _KnownPairs:
    """The unordered doc pairs known to depend on each other, for exact membership tests: each pair
    (low id, high id) as a 16-byte key in one sorted array, found by binary search (16 bytes a pair;
    a hash table of the pairs took about 200)."""

    def __init__(self, dep: np.ndarray, pre: np.ndarray):
        lo, hi = np.minimum(dep, pre), np.maximum(dep, pre)
        keep = lo != hi
        self.keys = np.unique(_pair_keys(lo[keep], hi[keep]))

    def contains(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if not len(self.keys):
            return np.zeros(len(a), bool)
        probe = _pair_keys(np.minimum(a, b).astype(np.uint64), np.maximum(a, b).astype(np.uint64))
        at = np.searchsorted(self.keys, probe)
        at[at == len(self.keys)] = 0
        return self.keys[at] == probe

    def inside(self, docs: np.ndarray) -> int:
        """Known pairs of two distinct docs that are both in ``docs``."""
        lo_hi = self.keys.view(np.uint64).reshape(-1, 2)
        return int(np.count_nonzero(np.isin(lo_hi[:, 0], docs) & np.isin(lo_hi[:, 1], docs)))


def _components_of(dep: np.ndarray, pre: np.ndarray) -> tuple[np.ndarray, int]:
    """Per pair, its doc-connected component, numbered in first-seen pair order (as ``_components``)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    docs, inv = np.unique(np.concatenate([dep, pre]), return_inverse=True)
    n = len(dep)
    graph = coo_matrix((np.ones(n, np.int8), (inv[:n], inv[n:])), shape=(len(docs), len(docs)))
    _, labels = connected_components(graph, directed=False)
    pair_label = labels[inv[:n]]
    uniq, first = np.unique(pair_label, return_index=True)
    rank = np.empty(uniq.max() + 1 if len(uniq) else 0, np.int64)
    rank[uniq[np.argsort(first, kind="stable")]] = np.arange(len(uniq))
    return rank[pair_label], len(uniq)


def _free_pairs(docs: np.ndarray, known: _KnownPairs) -> int:
    """How many distinct 'no dependency' pairs the distinct ``docs`` can form (``_none_pairs_possible`` on columns)."""
    return len(docs) * (len(docs) - 1) // 2 - known.inside(docs)


def _assign_split_columns(dep: np.ndarray, pre: np.ndarray, fraction: float, rng: np.random.Generator,
                          known: _KnownPairs) -> np.ndarray:
    """``_assign_splits`` on columns: True where a selected pair goes to validation."""
    n = len(dep)
    none = np.zeros(n, bool)
    if n == 0:
        return none
    comp, n_comp = _components_of(dep, pre)
    if fraction <= 0 or n_comp < 2:
        return none
    sizes = np.bincount(comp, minlength=n_comp)
    want = max(1, round(n * fraction))
    order = rng.permutation(n_comp)
    if want < 4:
        order = order[np.argsort(sizes[order], kind="stable")]
    chosen = np.zeros(n_comp, bool)

    def feasible(validation: bool) -> bool:
        members = chosen[comp] if validation else ~chosen[comp]
        count = int(members.sum())
        if not count:
            return False
        return _free_pairs(np.unique(np.concatenate([dep[members], pre[members]])), known) >= count

    taken = 0
    slack = want + max(1, want // 10)
    for ci in order.tolist():
        if taken >= want and feasible(True):
            break
        size = int(sizes[ci])
        if taken + size > slack and taken > 0 and feasible(True):
            continue  # don't overshoot with one giant component
        chosen[ci] = True
        taken += size
    if not (feasible(False) and feasible(True)):
        return none
    return chosen[comp]


def _none_pair_columns(pool: np.ndarray, count: int, known: _KnownPairs, rng: np.random.Generator,
                       split: str, n_first: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``_none_pairs`` on columns: indices into ``pool`` (sorted doc keys) of ``count`` pairs; each pair's
    first doc is one of the first ``n_first`` (the split's own docs, where spare docs follow them)."""
    n = len(pool)
    n_first = n if n_first is None else n_first
    out_a: list[np.ndarray] = []
    out_b: list[np.ndarray] = []
    chosen = pl.DataFrame({"lo": np.zeros(0, np.uint64), "hi": np.zeros(0, np.uint64)})
    got, attempts = 0, 0
    while got < count:
        attempts += 1
        if attempts > 50:
            raise ValueError(
                f"cannot draw {count} 'no dependency' pairs from {n} docs in split {split!r}: "
                "too few docs that are not already dependent pairs (build more pairs)"
            )
        need = count - got
        firsts = rng.integers(0, n_first, size=2 * need + 16)
        seconds = rng.integers(0, n, size=2 * need + 16)
        a, b = pool[firsts], pool[seconds]
        ok = (a != b) & ~known.contains(a, b)
        cand = pl.DataFrame({"lo": np.minimum(a, b), "hi": np.maximum(a, b), "ok": ok}).with_row_index("i")
        cand = cand.filter("ok").join(chosen, on=["lo", "hi"], how="anti", maintain_order="left")
        cand = cand.filter(pl.struct("lo", "hi").is_first_distinct()).head(need)
        idx = cand["i"].to_numpy()
        out_a.append(firsts[idx])
        out_b.append(seconds[idx])
        chosen = pl.concat([chosen, cand.select("lo", "hi")])
        got += len(idx)
    return np.concatenate(out_a), np.concatenate(out_b)


def _pair_ids(a_hex: Sequence[str], b_hex: Sequence[str]) -> list[str]:
    return [hashlib.sha256(f"{a}>{b}".encode()).hexdigest()[:20] for a, b in zip(a_hex, b_hex)]


# What became of a validated pair (BalancePlan.reason_codes): in the dataset, or a balance rejection.
OUTCOME_REASONS = ("", "balance_self_pair", "balance_duplicate_pair", "balance_surplus", "balance_too_few_pairs",
                   "balance_kind_conflict")


def _outcome_frame(pairs: pl.DataFrame, codes: np.ndarray, target: int) -> pl.DataFrame:
    """Rows of ``tasks.common.outcome.OUTCOME_SCHEMA`` for ``pairs`` (record_id, dep_id, pre_id) and their codes."""
    reason = pl.Series("reason", codes, dtype=pl.UInt8).replace_strict(
        list(range(len(OUTCOME_REASONS))), list(OUTCOME_REASONS), return_dtype=pl.String)
    return pairs.with_columns(reason).select(
        "record_id",
        status=pl.when(pl.col("reason") == "").then(pl.lit("accepted")).otherwise(pl.lit("rejected")),
        stage=pl.when(pl.col("reason") == "").then(pl.lit("dataset")).otherwise(pl.lit("balance")),
        reason=pl.when(pl.col("reason") == "").then(pl.lit("in_dataset")).otherwise(pl.col("reason")),
        detail=pl.when(pl.col("reason") == "balance_self_pair").then(pl.lit("dependent and prerequisite docs are identical"))
        .when(pl.col("reason") == "balance_duplicate_pair").then(pl.format("same docs as an earlier pair ('{}', '{}')", "dep_id", "pre_id"))
        .when(pl.col("reason") == "balance_surplus").then(pl.lit(f"class target {target} reached"))
        .when(pl.col("reason") == "balance_too_few_pairs").then(pl.lit("a balanced set needs at least 2 validated pairs"))
        .when(pl.col("reason") == "balance_kind_conflict").then(pl.lit(KIND_CONFLICT_DETAIL))
        .otherwise(pl.lit("")),
        raw_text=pl.lit(None, dtype=pl.String),
    )


def _spare_docs(given_doc_files: Sequence[str], taken: np.ndarray) -> tuple[pl.DataFrame, np.ndarray]:
    """The agent-1 docs of ``given_doc_files`` (``tasks.agents.chunks.GIVEN_DOCS_SCHEMA``) that are in no selected
    pair, one per doc in record-id order: (record_id, doc_id) and their uint64 keys."""
    if not given_doc_files:
        return pl.DataFrame(schema={"record_id": pl.String, "doc_id": pl.String}), np.zeros(0, np.uint64)
    docs = (pl.scan_parquet(list(given_doc_files)).select("record_id", "doc_id").sort("record_id")
            .unique("doc_id", keep="first", maintain_order=True).collect())
    keys = _u64(docs["doc_id"])
    free = ~np.isin(keys, taken)
    return docs.filter(pl.Series(free)), keys[free]


def plan_balance(validated_files: Sequence[str | Path], cfg: BalanceConfig,
                 given_doc_files: Sequence[str | Path] = ()) -> BalancePlan:
    """Balance the validated pairs in ``validated_files`` (``tasks.agents.chunks.VALIDATED_SCHEMA``). The
    pairs are taken in record-id order (data pairs before precondition pairs, as ``balance_pairs``), so the plan
    does not depend on where chunks end.

    Where a split's own docs cannot form as many 'no dependency' pairs as it has dependent pairs (one lone pair:
    its two docs depend on each other), each such pair takes one of the split's docs and, as the other, may take
    an agent-1 doc of another record (``given_doc_files``: the run's docs that are in no selected pair). Without
    such docs a lone pair is rejected (``balance_too_few_pairs``)."""
    files = [str(f) for f in validated_files]
    given_files = [str(f) for f in given_doc_files]
    cols = ["record_id", "satisfied", "dep_id", "pre_id", "consumer_param", "producer_output", "kind"]
    if files:
        ids = pl.scan_parquet(files).select(cols).collect()  # the files' row order
    else:
        ids = pl.DataFrame(schema={"record_id": pl.String, "satisfied": pl.Int8, "dep_id": pl.String, "pre_id": pl.String,
                                   "consumer_param": pl.String, "producer_output": pl.String, "kind": pl.String})
    by_record = ids.select(order=pl.arg_sort_by(pl.col("kind") != KIND_DATA, "record_id", maintain_order=True))["order"].to_numpy()
    rng = np.random.default_rng(cfg.seed)
    dep, pre = _u64(ids["dep_id"])[by_record], _u64(ids["pre_id"])[by_record]
    known = _KnownPairs(dep, pre)
    self_pair = dep == pre
    first = np.zeros(len(dep), bool)  # the first pair of its (dependent, prerequisite) docs, by sorting
    _, first_at, key_of = np.unique(_pair_keys(dep, pre), return_index=True, return_inverse=True)
    first[first_at] = True
    is_data = (ids["kind"] == KIND_DATA).to_numpy()[by_record]  # one bool a pair, not a string
    other_kind = is_data != is_data[first_at[key_of.ravel()]]  # differs from the kept pair of its docs (a data pair)
    unique = np.flatnonzero(~self_pair & first)
    order = rng.permutation(len(unique))
    per_class = min(cfg.per_class, len(unique))
    selected, surplus = unique[order[:per_class]], unique[order[per_class:]]
    spare, spare_keys = _spare_docs(given_files, np.concatenate([dep[selected], pre[selected]])) if per_class == 1 else (None, None)
    too_few = np.zeros(0, np.int64)
    if per_class == 1 and not len(spare_keys):  # two docs that depend on each other leave no "none" pair to draw
        too_few, selected, per_class = selected, selected[:0], 0

    code = np.zeros(len(dep), np.uint8)  # record-id order
    code[self_pair] = OUTCOME_REASONS.index("balance_self_pair")
    code[~self_pair & ~first] = OUTCOME_REASONS.index("balance_duplicate_pair")
    code[~self_pair & ~first & other_kind] = OUTCOME_REASONS.index("balance_kind_conflict")
    code[surplus] = OUTCOME_REASONS.index("balance_surplus")
    code[too_few] = OUTCOME_REASONS.index("balance_too_few_pairs")
    reason_codes = np.empty_like(code)
    reason_codes[by_record] = code  # back to the files' row order, as outcome_frames reads them
    sel = ids[by_record[selected]]  # selection order (the permutation), as balance_pairs' ``selected``
    del ids  # the ids' text: the plan keeps one byte a validated pair, not ~100
    s_dep, s_pre = dep[selected], pre[selected]
    validation = _assign_split_columns(s_dep, s_pre, cfg.validation_fraction, rng, known)
    parts: list[pl.DataFrame] = []
    per_split: dict[str, int] = {}
    for split, in_val in zip(SPLIT_NAMES, (False, True)):
        members = np.flatnonzero(validation == in_val)
        if not len(members):
            continue
        per_split[split] = len(members)
        dep_src, pre_src = 2 * members, 2 * members + 1
        # each doc's source is its first appearance in selection order, dependent side first
        docs = np.stack([s_dep[members], s_pre[members]], axis=1).ravel()
        srcs = np.stack([dep_src, pre_src], axis=1).ravel()
        pool, first_at = np.unique(docs, return_index=True)
        pool_src = srcs[first_at]
        n_own = len(pool)
        if _free_pairs(pool, known) < len(members):  # a lone pair: other records' docs too
            if spare is None:
                spare, spare_keys = _spare_docs(given_files, np.concatenate([s_dep, s_pre]))
            pool = np.concatenate([pool, spare_keys])
            pool_src = np.concatenate([pool_src, 2 * len(selected) + np.arange(len(spare_keys))])
        ia, ib = _none_pair_columns(pool, len(members), known, rng, split, n_own)
        a_src = np.concatenate([dep_src, pre_src, pool_src[ia]])
        b_src = np.concatenate([pre_src, dep_src, pool_src[ib]])
        n = len(members)
        # the dependent pair's parameter and kind on its class 0 and class 2 rows, none on class 1; build-tdi's
        # LLM pairs are not counted (support null)
        params = {c: pl.concat([sel[c].gather(members), sel[c].gather(members), pl.Series(c, [None] * n, dtype=pl.String)])
                  for c in ("consumer_param", "producer_output", "kind")}
        parts.append(pl.DataFrame({
            "split": [split] * (3 * n),
            "label": np.concatenate([np.full(n, LABEL_A_DEPENDS_ON_B), np.full(n, LABEL_B_DEPENDS_ON_A), np.full(n, LABEL_NO_DEPENDENCY)]).astype(np.int8),
            "origin": np.repeat(np.array(ORIGINS), n).tolist(),
            "a_src": a_src.astype(np.uint32),
            "b_src": b_src.astype(np.uint32),
            **params,
            "support": pl.Series("support", [None] * (3 * n), dtype=pl.Int32),
        }))
    rows = pl.concat(parts) if parts else pl.DataFrame(schema={"split": pl.String, "label": pl.Int8, "origin": pl.String, "a_src": pl.UInt32, "b_src": pl.UInt32,
                                                               "consumer_param": pl.String, "producer_output": pl.String, "kind": pl.String,
                                                               "support": pl.Int32})
    plan = BalancePlan(per_class, per_split, rows, sel, reason_codes, files, cfg.per_class, given_doc_files=given_files)
    offsets = np.unique(np.concatenate([rows["a_src"].to_numpy(), rows["b_src"].to_numpy()]).astype(np.int64)) - 2 * len(selected)
    used = offsets[offsets >= 0]  # the spare docs a row names: only those stay in the plan
    if len(used):
        rows = rows.with_columns(pl.Series("a_src", _renumber(rows["a_src"].to_numpy(), used, len(selected)), pl.UInt32),
                                 pl.Series("b_src", _renumber(rows["b_src"].to_numpy(), used, len(selected)), pl.UInt32))
        plan.rows, plan.spare = rows, spare[used]
    a_hex, b_hex = plan.source_doc_ids(rows["a_src"].to_numpy()), plan.source_doc_ids(rows["b_src"].to_numpy())
    plan.rows = rows.with_columns(pair_id=pl.Series(_pair_ids(a_hex, b_hex), dtype=pl.String))
    return plan


def _renumber(src: np.ndarray, used: np.ndarray, n_selected: int) -> np.ndarray:
    """Spare sources renumbered to their place among the spare docs the rows use (``used``: sorted offsets)."""
    src = src.astype(np.int64)
    spare = src >= 2 * n_selected
    src[spare] = 2 * n_selected + np.searchsorted(used, src[spare] - 2 * n_selected)
    return src


def plan_rows(plan: BalancePlan, rows: pl.DataFrame, doc_json: dict[str, str] | None = None) -> list[dict]:
    """Plan rows as ``TDI_PAIR_SCHEMA`` dicts (tests and small runs; shards are written from columns)."""
    if doc_json is None:
        frame = selected_docs(plan)
        doc_json = dict(zip(frame["id"].to_list(), frame["json"].to_list()))
    docs = doc_json
    a_src, b_src = rows["a_src"].to_numpy(), rows["b_src"].to_numpy()
    a_id, b_id = plan.source_doc_ids(a_src), plan.source_doc_ids(b_src)
    a_name, b_name = plan.source_names(a_src), plan.source_names(b_src)
    return [
        {"pair_id": pid, "doc_a": docs[a], "doc_b": docs[b], "tool_a_id": a, "tool_b_id": b, "label": label,
         "label_name": ID2LABEL[label], "split": split, "origin": origin, "source_a": sa, "source_b": sb,
         "consumer_param": cp, "producer_output": po, "kind": kind, "support": support}
        for pid, a, b, label, split, origin, sa, sb, cp, po, kind, support in zip(
            rows["pair_id"].to_list(), a_id, b_id, rows["label"].to_list(), rows["split"].to_list(), rows["origin"].to_list(),
            a_name, b_name, rows["consumer_param"].to_list(), rows["producer_output"].to_list(), rows["kind"].to_list(),
            rows["support"].to_list())
    ]


def selected_docs(plan: BalancePlan) -> pl.DataFrame:
    """``id`` (hex doc id) and ``json`` of the docs of the selected pairs and the spare docs a row names, read
    lazily from the chunk files (at most 2 x per_class docs, plus a few spare: memory follows the dataset's size,
    not the input's)."""
    if not plan.selected.height:
        return pl.DataFrame(schema={"id": pl.String, "json": pl.String})
    docs = (
        pl.scan_parquet(plan.validated_files)
        .join(plan.selected.lazy().select("record_id"), on="record_id", how="semi")
        .select(pl.concat_list("dep_id", "pre_id").alias("id"), pl.concat_list("dep_json", "pre_json").alias("json"))
        .explode("id", "json")
        .unique("id")
        .collect()
    )
    if not plan.spare.height:
        return docs
    spare = (pl.scan_parquet(plan.given_doc_files).join(plan.spare.lazy().select("doc_id"), on="doc_id", how="semi")
             .select(id="doc_id", json="doc_json").unique("id").collect())
    return pl.concat([docs, spare]).unique("id")
