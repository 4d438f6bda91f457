"""TDI pair labels, the dependent pair the agents produce, and the explicit Arrow schema of the Parquet shards."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

# the kind of a dependency (the ``kind`` column on labels 0 and 2); re-exported for the dataset code
from schemas.kinds import DEPENDENCY_KINDS, KIND_DATA, KIND_PRECONDITION  # noqa: F401

# Paper's three classes on an ordered pair <t_a, t_b> (paper-notes.md, "Labels").
LABEL_A_DEPENDS_ON_B = 0  # t_a -> t_b
LABEL_NO_DEPENDENCY = 1  # t_a x t_b
LABEL_B_DEPENDS_ON_A = 2  # t_a <- t_b
ID2LABEL = {0: "a_depends_on_b", 1: "no_dependency", 2: "b_depends_on_a"}
LABEL2ID = {v: k for k, v in ID2LABEL.items()}
NUM_LABELS = 3
# A discriminator with the kind head splits each dependency class by kind: five outputs, a joint distribution
# whose sums over kind are the three classes above (models.discriminator.class_logits).
KIND_HEAD_ID2LABEL = {0: "a_depends_on_b_data", 1: "no_dependency", 2: "b_depends_on_a_data",
                      3: "a_depends_on_b_precondition", 4: "b_depends_on_a_precondition"}


def check_kind(kind: str | None, consumer_param: str | None = None, producer_output: str | None = None) -> None:
    """Raise ValueError unless ``kind`` is a dependency kind, and a precondition names no parameter
    (no value is passed, so no input takes one)."""
    if kind not in DEPENDENCY_KINDS:
        raise ValueError(f"dependency kind {kind!r} is none of {list(DEPENDENCY_KINDS)}")
    if kind == KIND_PRECONDITION and (consumer_param is not None or producer_output is not None):
        raise ValueError(f"a precondition passes no value: consumer_param {consumer_param!r} and "
                         f"producer_output {producer_output!r} must be null")


def swap_label(label: int) -> int:
    """Label of the swapped pair <t_b, t_a>: classes 0 and 2 trade places, 1 stays."""
    return {0: 2, 1: 1, 2: 0}[label]


@dataclass(frozen=True)
class DependentPair:
    """A generated pair, oriented by ``satisfied``: ``dependent`` depends on ``prerequisite``."""

    record_id: str
    given: dict[str, Any]
    generated: dict[str, Any]
    satisfied: int  # 1: generated depends on given; 2: given depends on generated
    consumer_param: str | None = None  # the dependent doc's input parameter that takes the prerequisite's output
    producer_output: str | None = None  # the prerequisite doc's output that feeds it, where known
    kind: str = KIND_DATA  # DEPENDENCY_KINDS; a precondition has neither consumer_param nor producer_output

    def __post_init__(self) -> None:
        check_kind(self.kind, self.consumer_param, self.producer_output)

    @property
    def dependent(self) -> dict[str, Any]:
        return self.generated if self.satisfied == 1 else self.given

    @property
    def prerequisite(self) -> dict[str, Any]:
        return self.given if self.satisfied == 1 else self.generated


# Shard schema versions. 1: the first 11 columns; 2 adds ``consumer_param`` and ``producer_output``
# (parameter-level dependency data); 3 adds ``kind`` and ``support``. Readers accept every version in
# READABLE_SCHEMA_VERSIONS and need only the version-1 columns (TDI_V1_COLUMNS). Versions 1 and 2 held
# only data-flow pairs (agent 2 and the miner both asked for an output feeding an input), so a reader
# takes a dependent row of theirs as kind "data" (kind_of_row).
TDI_SCHEMA_VERSION = "3"
READABLE_SCHEMA_VERSIONS = ("1", "2", "3")
TDI_V1_COLUMNS = ("pair_id", "doc_a", "doc_b", "tool_a_id", "tool_b_id", "label", "label_name", "split", "origin",
                  "source_a", "source_b")

TDI_PAIR_SCHEMA = pa.schema(
    [
        pa.field("pair_id", pa.string(), nullable=False),  # sha of (doc_a, doc_b)
        pa.field("doc_a", pa.string(), nullable=False),  # canonical JSON of t_a's API doc
        pa.field("doc_b", pa.string(), nullable=False),
        pa.field("tool_a_id", pa.string(), nullable=False),  # schemas.docs.doc_id
        pa.field("tool_b_id", pa.string(), nullable=False),
        pa.field("label", pa.int8(), nullable=False),
        pa.field("label_name", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),  # "train" | "validation"
        # "validated" | "swapped" | "shuffled" (build-tdi's LLM); "mined" | "mined_swapped" | "hard_negative" (mine-tdi,
        # and build-tdi's --mined-per-class, whose cross-package negatives are "mined_shuffled")
        pa.field("origin", pa.string(), nullable=False),
        pa.field("source_a", pa.string(), nullable=False),  # record id t_a's doc came from
        pa.field("source_b", pa.string(), nullable=False),
        # Parameter level (version 2). The consumer is the dependent side: doc_a for label 0 (a depends
        # on b), doc_b for label 2; both are null for label 1. consumer_param: the consumer's input
        # parameter that takes the other tool's output, exactly as the consumer doc names it (null when
        # unknown); producer_output: the other tool's output that feeds it, exactly as the producer doc
        # names it (a declared output, or the name-derived one when it declares none: schemas/parameters.py
        # names the allowed ones); null when unknown, never guessed.
        pa.field("consumer_param", pa.string(), nullable=True),
        pa.field("producer_output", pa.string(), nullable=True),
        # Dependency kind (version 3), on labels 0 and 2, null on label 1: "data" (an output of the
        # prerequisite feeds an input of the dependent) or "precondition" (the prerequisite must be
        # called first and passes no value: consumer_param and producer_output are null). support: how
        # many distinct functions (mined) or runs show this dependency; null where not counted (LLM pairs)
        # and on label 1, >= 1 when set.
        pa.field("kind", pa.string(), nullable=True),
        pa.field("support", pa.int32(), nullable=True),
    ],
    metadata={"tgr.schema_version": TDI_SCHEMA_VERSION},
)


def kind_of_row(label: int, kind: str | None, schema_version: str) -> str | None:
    """A shard row's dependency kind: its ``kind`` column from version 3 on; "data" for a dependent row
    of versions 1 and 2 (they held only data-flow pairs); None for a "no dependency" row."""
    if label == LABEL_NO_DEPENDENCY:
        return None
    return kind if schema_version not in ("1", "2") else KIND_DATA
