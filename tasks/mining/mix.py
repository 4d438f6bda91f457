"""Mined pairs for build-tdi (``--mined-per-class``): this interpreter's standard library mined by mine-tdi's
miner (``tasks.mining.mine.mine_files``, the same pairs and docs as ``flows/mine_tdi.py``), balanced by
``balance_mined`` into up to N pairs per class, with their own origins (``mined``, ``mined_swapped``,
``hard_negative``), so a dataset's rows tell the LLM's pairs (``validated``, ``swapped``, ``shuffled``) from
the mined ones. Every mined pair (an accepted data flow or precondition pair of the miner) ends accepted or
rejected in the books, as in mine-tdi; the miner's files and candidates are counted in the manifest only."""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tasks.common.outcome import OUTCOME_SCHEMA
from tasks.mining.dataset import (ORIGIN_HARD_NEGATIVE, ORIGIN_SHUFFLED, MinedBalanceConfig, balance_mined, flow_pairs,
                                  pair_docs, precondition_pairs)
from tasks.mining.mine import MineResult, mine_files
from tasks.mining.sources import FileItem, default_roots, tree_files

MINED_ID_PREFIX = "mined:"  # a mined pair's record id in build-tdi's books: apart from the function records' ids
# Class 1 of the mined part: all hard negatives (two functions of one package, no flow either way); a
# cross-package pair is drawn only where a split has too few of them, and is then named apart from the
# LLM's 'shuffled' rows.
HARD_NEGATIVE_SHARE = 1.0
ORIGIN_MINED_SHUFFLED = "mined_shuffled"


@dataclass(frozen=True)
class MinedMixConfig:
    per_class: int  # mined pairs per class, at most (over both splits)
    validation_fraction: float = 0.1
    seed: int = 13
    workers: int = 2  # parser and doc-builder processes
    min_order_support: int = 2  # as mine-tdi's --min-order-support
    output_dropout: float = 0.3  # as mine-tdi's --output-dropout


@dataclass
class MinedMix:
    rows: list[dict]  # TDI_PAIR_SCHEMA rows, origins mined / mined_swapped / hard_negative (/ mined_shuffled)
    outcomes: pa.Table  # OUTCOME_SCHEMA: one row per mined pair read
    per_class: int
    per_split: dict[str, int]
    summary: dict[str, Any] = field(default_factory=dict)  # the manifest's "mined" section

    @property
    def n_read(self) -> int:
        return self.outcomes.num_rows


def stdlib_files() -> list[FileItem]:
    """This interpreter's standard library as mine-tdi lists it (``--source stdlib``: test folders read for
    their flows only)."""
    return [item for root in default_roots("stdlib") for item in tree_files(root, "stdlib")]


def mine_stdlib(workers: int) -> MineResult:
    """The standard library mined (parse in ``workers`` processes, then resolve), data flows and call orders."""
    return mine_files(stdlib_files(), workers)


def mined_mix(result: MineResult, cfg: MinedMixConfig, taken_doc_ids: Collection[str] = ()) -> MinedMix:
    """Up to ``cfg.per_class`` balanced mined pairs per class from ``result``, and one outcome per mined pair.
    ``taken_doc_ids``: the docs of the dataset's other rows; a mined doc among them would put one doc in two
    parts of the dataset (and maybe two splits), so that is refused (ValueError)."""
    t0 = time.perf_counter()
    docs = pair_docs(result, cfg.workers)
    pairs = flow_pairs(result, docs)
    orders, rare = precondition_pairs(result, cfg.min_order_support)
    balanced = balance_mined(pairs + orders, docs, MinedBalanceConfig(cfg.per_class, cfg.validation_fraction, cfg.seed,
                                                                       cfg.output_dropout, HARD_NEGATIVE_SHARE))
    rows = [{**r, "origin": ORIGIN_MINED_SHUFFLED} if r["origin"] == ORIGIN_SHUFFLED else r for r in balanced.rows]
    shared = {d for r in rows for d in (r["tool_a_id"], r["tool_b_id"])} & set(taken_doc_ids)
    if shared:
        raise ValueError(f"{len(shared)} mined docs are docs of the LLM's pairs too (e.g. {sorted(shared)[:3]}): one doc "
                         "would be in two parts of the dataset; build it without --mined-per-class")
    outcomes = _outcomes([p.record_id for p in pairs + orders], rare, balanced.rejections)
    negatives = Counter(r["origin"] for r in rows if r["origin"] in (ORIGIN_HARD_NEGATIVE, ORIGIN_MINED_SHUFFLED))
    rejected = Counter(reason for reason in outcomes.column("reason").to_pylist())
    del rejected["in_dataset"]
    summary = {
        "source": "stdlib", "per_class": balanced.per_class, "per_class_target": cfg.per_class, "per_split": balanced.per_split,
        "files_read": result.files_read, "files_parsed": result.files_parsed, "candidates": result.candidates,
        "data_flow_pairs": len(pairs), "precondition_candidates": result.order_candidates,
        "precondition_pairs": len(result.orders), "precondition_pairs_kept": len(orders),
        "pairs_read": outcomes.num_rows, "pairs_in_dataset": outcomes.num_rows - sum(rejected.values()),
        "pairs_rejected_by_reason": dict(sorted(rejected.items())), "negatives": dict(negatives),
        "docs": len(docs), "docs_outputs_dropped": balanced.dropped_outputs, "parameters": balanced.parameters,
        "seconds_docs_and_balance": round(time.perf_counter() - t0, 1),
    }
    return MinedMix(rows, outcomes, balanced.per_class, balanced.per_split, summary)


def _outcomes(pair_ids: list[str], rare: list[tuple[str, str, str]], unused: list[tuple[str, str, str]]) -> pa.Table:
    """One outcome per mined pair read: a precondition pair below the support floor rejected at resolve, one
    balancing did not use rejected at balance (its reason), every other accepted into the dataset."""
    balance = {rid: (reason, detail) for rid, reason, detail in unused}
    rows = [(rid, "rejected", "resolve", reason, detail) for rid, reason, detail in rare]
    rows += [(rid, "rejected", "balance", *balance[rid]) if rid in balance else (rid, "accepted", "dataset", "in_dataset", "")
             for rid in pair_ids]
    seen: Counter[str] = Counter()
    ids = []
    for rid, *_ in rows:  # two files of one module name can repeat a location: every outcome kept, ids unique
        seen[rid] += 1
        ids.append(f"{MINED_ID_PREFIX}{rid}" + (f"#{seen[rid]}" if seen[rid] > 1 else ""))
    columns = list(zip(*rows)) if rows else [[]] * 5
    return pa.table({"record_id": ids, "status": list(columns[1]), "stage": list(columns[2]), "reason": list(columns[3]),
                     "detail": list(columns[4]), "raw_text": [None] * len(rows)}, schema=OUTCOME_SCHEMA)
