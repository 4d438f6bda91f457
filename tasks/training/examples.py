"""Discriminator examples: TDI and tool-set pairs as ``PairExample``s, grouped splits, both orders of
every pair, and the none-per-dependency class prior."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pyarrow.parquet as pq

from schemas.docs import canonical_doc_json
from schemas.tdi import (ID2LABEL, LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY, NUM_LABELS,
                         READABLE_SCHEMA_VERSIONS, TDI_V1_COLUMNS, kind_of_row, swap_label)
from schemas.toolset import ToolSet


@dataclass(frozen=True)
class PairExample:
    doc_a: str  # canonical doc JSON, the same text form as the TDI shards
    doc_b: str
    label: int
    group: str  # split unit: "<dataset>/<tool set group>" (or "tdi")
    tool_a: str = ""
    tool_b: str = ""
    # the dependency kind of a pair labelled 0 or 2 ("data" | "precondition", schemas/kinds.py): a TDI row's,
    # or a tool-set edge's where the set says (API-Bank, NesTools: data); None on label 1 and where unknown
    # (UltraTool's and TMDB's call-order links). The kind head trains on it (models.discriminator.kind_code).
    kind: str | None = None

    @property
    def data_set(self) -> str:
        """The tool set the pair comes from: ``group`` before its first "/"."""
        return self.group.split("/", 1)[0]


# ---------------------------------------------------------------------------------------------
# Pairs from tool sets


def pair_label(a: str, b: str, depends: set[tuple[str, str]]) -> int:
    """Label of <a, b> given (dependent, prerequisite) edges: 0 a->b, 2 a<-b, 1 otherwise."""
    if (a, b) in depends:
        return LABEL_A_DEPENDS_ON_B
    if (b, a) in depends:
        return LABEL_B_DEPENDS_ON_A
    return LABEL_NO_DEPENDENCY


def build_pairs(toolset: ToolSet, max_none: int | None = None, seed: int = 0) -> list[PairExample]:
    """Every ordered pair of distinct tools inside each group, labelled from the edges.

    Unlisted pairs are "no dependency", so the result is imbalanced like real use. With
    ``max_none`` the none class is subsampled (seeded) to at most that many pairs while every
    dependency pair is kept in both directions (the paper's API-Bank test set: 60/500/60).
    """
    depends = {(e.dependent, e.prerequisite) for e in toolset.edges}
    kinds = {(e.dependent, e.prerequisite): e.kind for e in toolset.edges}
    if any(a == b for a, b in depends):
        raise ValueError(f"{toolset.name}: an edge has the same tool on both sides")
    by_group: dict[str, list] = {}
    for tool in toolset.tools:
        by_group.setdefault(tool.group, []).append(tool)
    text = {t.tool_id: canonical_doc_json(t.doc) for t in toolset.tools}
    pairs = []
    for group in sorted(by_group):
        tools = by_group[group]
        for a in tools:
            for b in tools:
                if a.tool_id != b.tool_id:
                    label = pair_label(a.tool_id, b.tool_id, depends)
                    kind = kinds.get((a.tool_id, b.tool_id) if label == LABEL_A_DEPENDS_ON_B else (b.tool_id, a.tool_id))
                    pairs.append(PairExample(text[a.tool_id], text[b.tool_id], label, f"{toolset.name}/{group}",
                                             a.tool_id, b.tool_id, kind if label != LABEL_NO_DEPENDENCY else None))
    return sample_none(pairs, max_none, seed)


def sample_none(pairs: Sequence[PairExample], max_none: int | None, seed: int) -> list[PairExample]:
    """``pairs`` with their none pairs subsampled (seeded) to at most ``max_none`` (None: all); every dependency
    pair kept, the order kept."""
    none = [i for i, p in enumerate(pairs) if p.label == LABEL_NO_DEPENDENCY]
    if max_none is None or len(none) <= max_none:
        return list(pairs)
    keep = set(random.Random(seed).sample(none, max_none))
    return [p for i, p in enumerate(pairs) if p.label != LABEL_NO_DEPENDENCY or i in keep]


def label_counts(examples: Sequence[PairExample]) -> dict[str, int]:
    counts = np.bincount([e.label for e in examples], minlength=NUM_LABELS)
    return {ID2LABEL[k]: int(counts[k]) for k in range(NUM_LABELS)}


def grouped_split(
    examples: Sequence[PairExample], valid_fraction: float = 0.2, seed: int = 0
) -> tuple[list[PairExample], list[PairExample], str]:
    """Train/validation split where no group straddles the split, made in each data set on its own.

    A group is "<data set>/<group>"; each data set (the part before "/") holds out about ``valid_fraction`` of its
    own pairs, so every data set is measured on something it was not trained on (before, one data set of a single
    group, TMDB beside UltraTool's seventeen, was never held out). Within a data set of several groups, groups are
    shuffled (seeded) and moved to validation until it holds ``valid_fraction`` of the pairs; a group that would
    push validation past 1.25 x the target is skipped, so one large group does not turn a 20% split into 35%.
    In a data set of one group the unit becomes the tool: a seeded ~10.6% of its tools are held out and every pair
    touching one of them goes to validation (1 - 0.894^2 = 20% of pairs), so validation always contains a tool
    never seen in training. Both sides keep the order of ``examples``.
    """
    held, note = _held_out_units(examples, valid_fraction, seed)
    train = [e for e in examples if not held(e)]
    valid = [e for e in examples if held(e)]
    if len({e.data_set for e in examples}) > 1:
        note += f"; {len(valid) / len(examples):.1%} of pairs in all"
    return train, valid, note


def held_out_pairs(examples: Sequence[PairExample], pool: Sequence[PairExample], valid_fraction: float = 0.2,
                   seed: int = 0, max_none: int | None = None) -> list[PairExample]:
    """The pairs of ``pool`` inside the units (groups; tools in a one-group set) that ``grouped_split`` holds out of
    ``examples``, in ``pool``'s order, at most ``max_none`` none pairs per data set (a seeded sample). ``pool``: the
    same tool sets' pairs with every none pair, where ``examples`` holds a sample of them (``build_pairs(max_none=)``):
    the held-out groups then report on the pairs they hold, where the sample left UltraTool's held-out groups 24
    none pairs for 178 dependencies."""
    return _pool_side(examples, pool, valid_fraction, seed, max_none, held_out=True)


def training_pairs(examples: Sequence[PairExample], pool: Sequence[PairExample], valid_fraction: float = 0.2,
                   seed: int = 0, max_none: int | None = None) -> list[PairExample]:
    """``held_out_pairs``' other side: the pairs of ``pool`` outside the held-out units, at most ``max_none`` none
    pairs per data set, so training can see more of a set's none pairs than the sample the split was made on."""
    return _pool_side(examples, pool, valid_fraction, seed, max_none, held_out=False)


def _pool_side(examples: Sequence[PairExample], pool: Sequence[PairExample], valid_fraction: float, seed: int,
               max_none: int | None, held_out: bool) -> list[PairExample]:
    held = _held_out_units(examples, valid_fraction, seed)[0]
    by_set: dict[str, list[PairExample]] = {}
    for e in pool:
        if held(e) == held_out:
            by_set.setdefault(e.data_set, []).append(e)
    kept = {id(e) for pairs in by_set.values() for e in sample_none(pairs, max_none, seed)}
    return [e for e in pool if id(e) in kept]


def _held_out_units(examples: Sequence[PairExample], valid_fraction: float, seed: int
                    ) -> tuple[Callable[[PairExample], bool], str]:
    """Whether a pair falls in a held-out unit of its data set (``grouped_split``), and a note saying what was held
    out."""
    by_set: dict[str, list[PairExample]] = {}
    for e in examples:
        by_set.setdefault(e.data_set, []).append(e)
    held_groups, held_tools, notes = set(), {}, []
    for name in sorted(by_set):
        groups, tools, note = _held_out(by_set[name], valid_fraction, seed)
        held_groups |= groups
        if tools:
            held_tools[name] = tools
        notes.append(note if len(by_set) == 1 else f"{name}: {note}")

    def held(e: PairExample) -> bool:
        tools = held_tools.get(e.data_set)
        return e.group in held_groups or bool(tools) and (e.tool_a in tools or e.tool_b in tools)

    return held, "; ".join(notes)


def _held_out(examples: Sequence[PairExample], valid_fraction: float, seed: int) -> tuple[set[str], set[str], str]:
    """The held-out groups, or in a one-group data set the held-out tools, of one data set's pairs
    (``grouped_split``), and a note saying what was held out."""
    groups = sorted({e.group for e in examples})
    if len(groups) > 1:
        rng = random.Random(seed)
        rng.shuffle(groups)
        sizes = {g: 0 for g in groups}
        for e in examples:
            sizes[e.group] += 1
        target, held, total = valid_fraction * len(examples), set(), 0
        for g in groups:
            if total >= target or len(held) == len(groups) - 1:
                break
            if total + sizes[g] <= 1.25 * target:
                held.add(g)
                total += sizes[g]
        if not held:  # every group is larger than the margin: hold out the smallest one
            smallest = min(groups, key=lambda g: (sizes[g], g))
            held, total = {smallest}, sizes[smallest]
        return held, set(), (f"grouped by tool set: {len(held)} of {len(groups)} groups held out "
                             f"({sorted(held)}), {total / len(examples):.1%} of pairs")
    tools = sorted({e.tool_a for e in examples} | {e.tool_b for e in examples})
    n_held = max(1, round(len(tools) * (1 - math.sqrt(1 - valid_fraction))))
    held_tools = set(random.Random(seed).sample(tools, n_held))
    n_valid = sum(e.tool_a in held_tools or e.tool_b in held_tools for e in examples)
    return set(), held_tools, (f"one group only: split by tool, {n_held} of {len(tools)} tools held out "
                               f"({n_valid / len(examples):.1%} of pairs)")


# ---------------------------------------------------------------------------------------------
# TDI shards


def load_tdi_examples(tdi_dir: Path) -> tuple[list[PairExample], list[PairExample]]:
    """Train and validation pairs of a build-tdi dataset (``<tdi_dir>/shards/*.parquet``), of any schema
    version in ``READABLE_SCHEMA_VERSIONS`` (published version-1 datasets keep working); the
    parameter-level columns of version 2 are not read yet. Each example carries its dependency ``kind``
    (``schemas.tdi.kind_of_row``: "data" on the dependent rows of versions 1 and 2)."""
    files = sorted((Path(tdi_dir) / "shards").glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"no Parquet shards under {Path(tdi_dir) / 'shards'}; run make build-tdi first")
    out: dict[str, list[PairExample]] = {"train": [], "validation": []}
    for file in files:
        schema = pq.read_schema(file)
        version = (schema.metadata or {}).get(b"tgr.schema_version", b"1").decode()
        if version not in READABLE_SCHEMA_VERSIONS:
            raise ValueError(f"{file}: TDI schema version {version!r}, this code reads {list(READABLE_SCHEMA_VERSIONS)}")
        missing = set(TDI_V1_COLUMNS) - set(schema.names)
        if missing:
            raise ValueError(f"{file}: not a TDI shard, missing columns {sorted(missing)}")
        names = ["doc_a", "doc_b", "label", "split", "tool_a_id", "tool_b_id"]
        if version not in ("1", "2"):
            if "kind" not in schema.names:
                raise ValueError(f"{file}: a version-{version} TDI shard without the kind column")
            names.append("kind")
        cols = pq.read_table(file, columns=names).to_pydict()
        kinds = cols.pop("kind", None) or [None] * len(cols["label"])
        for doc_a, doc_b, label, split, ta, tb, kind in zip(*cols.values(), kinds):
            if label not in ID2LABEL:
                raise ValueError(f"{file}: label {label!r} outside {sorted(ID2LABEL)}")
            if split not in out:
                raise ValueError(f"{file}: split {split!r} is neither train nor validation")
            out[split].append(PairExample(doc_a, doc_b, int(label), "tdi", ta, tb, kind_of_row(label, kind, version)))
    return out["train"], out["validation"]


# ---------------------------------------------------------------------------------------------
# Direction: both orders of every pair


def with_both_orders(examples: Sequence[PairExample]) -> list[PairExample]:
    """``examples`` plus the swapped copy of every pair whose swap is missing (the swap is free data).

    <a, b> labelled 0 gives <b, a> labelled 2 and vice versa; "none" stays "none". Tool-set pairs
    and balanced TDI shards already hold both orders, so for them this adds nothing.
    """
    present = {(e.doc_a, e.doc_b) for e in examples}
    out = list(examples)
    for e in examples:
        if (e.doc_b, e.doc_a) not in present:
            present.add((e.doc_b, e.doc_a))
            out.append(PairExample(e.doc_b, e.doc_a, swap_label(e.label), e.group, e.tool_b, e.tool_a, e.kind))
    return out


def swap_partners(examples: Sequence[PairExample]) -> np.ndarray:
    """Index of each pair's swapped pair in ``examples``, or -1 when it is absent."""
    index = {(e.doc_a, e.doc_b): i for i, e in enumerate(examples)}
    return np.array([index.get((e.doc_b, e.doc_a), -1) for e in examples], dtype=np.int64)


def symmetrize(probs: np.ndarray, partners: np.ndarray) -> np.ndarray:
    """Test-time symmetry: average p(a, b) with the label-swapped p(b, a) where the swap was scored."""
    probs = np.asarray(probs, dtype=np.float64)
    out = probs.copy()
    has = partners >= 0
    out[has] = (probs[has] + probs[partners[has]][:, [LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY, LABEL_A_DEPENDS_ON_B]]) / 2
    return out


# ---------------------------------------------------------------------------------------------
# Class prior: "none" pairs per dependency pair


def natural_none_ratio(toolset: ToolSet) -> float:
    """"No dependency" pairs per dependency pair among all ordered same-group pairs of a tool set:
    the class prior a graph build meets, before any subsampling."""
    sizes: dict[str, int] = {}
    for t in toolset.tools:
        sizes[t.group] = sizes.get(t.group, 0) + 1
    total, dependent = sum(n * (n - 1) for n in sizes.values()), 2 * len(toolset.edges)
    return (total - dependent) / max(dependent, 1)


def none_weights(examples: Sequence[PairExample], ratio: float) -> np.ndarray:
    """Per-example weights that give the "none" pairs of each group source (``<dataset>`` of the
    ``group`` field) the ``ratio`` none-per-dependency prior; dependency pairs weigh 1."""
    weights = np.ones(len(examples))
    sources: dict[str, list[int]] = {}
    for i, e in enumerate(examples):
        sources.setdefault(e.data_set, []).append(i)
    for idx in sources.values():
        n_none = sum(examples[i].label == LABEL_NO_DEPENDENCY for i in idx)
        n_dep = len(idx) - n_none
        if n_none and n_dep:
            for i in idx:
                if examples[i].label == LABEL_NO_DEPENDENCY:
                    weights[i] = ratio * n_dep / n_none
    return weights
