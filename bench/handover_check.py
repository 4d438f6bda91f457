"""Replay the hand-over check of agent 2's answers (tasks/agents/requests.py: ``echo_reason``, with the
renamed-copy rule, ``check_handover`` and ``passthrough_reason``) over the dependent pairs a build-tdi dataset
accepted, to say how many the check would have stopped before agent 3 was asked (issue 23 item 3, "before/after").

    .venv/bin/python -m bench.handover_check artifacts/tdi/tdi-stdlib-demo [--examples 3] [--json]

The pairs are read from the run's chunk outputs (``<dataset>/.chunks/chunk-*/validated.parquet``: every pair
agent 3 accepted, the ones balancing left out included) when they are there, else (``--from shards``) from the
published shards (the label-0 rows of origin ``validated``: the LLM pairs in the dataset). ``records.duckdb``
holds outcomes without the docs, so there is nothing to replay in it. A dataset built before the check has a
null ``producer_output`` where agent 2 named an empty or unknown output (the name itself was not kept): the
check rejects both, and the replay counts those as ``generate_bad_producer_output`` ("null in the dataset").
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from schemas.tdi import KIND_DATA, LABEL_A_DEPENDS_ON_B
from tasks.agents.requests import (HandoverRejection, check_handover, copied_example_reason, echo_reason,
                                   handover_restatement, passthrough_reason)

ECHO = "generate_echoed_input"
COPIED = "generate_copied_example"
NULL_OUTPUT = "null in the dataset: agent 2 named no output, or one the prerequisite does not have"


@dataclass(frozen=True)
class AcceptedPair:
    """One accepted dependent pair as agent 2 wrote it: which doc was given, which generated."""

    record_id: str
    given: dict[str, Any]
    generated: dict[str, Any]
    dependent: dict[str, Any]
    prerequisite: dict[str, Any]
    consumer_param: str | None
    producer_output: str | None
    kind: str


def chunk_pairs(dataset: Path) -> Iterator[AcceptedPair]:
    """Every pair agent 3 accepted, from the chunks' ``validated.parquet`` (satisfied 1: the dependent is the
    generated doc)."""
    for path in sorted((dataset / ".chunks").glob("chunk-*/validated.parquet")):
        for row in pq.read_table(path).to_pylist():
            dep, pre = json.loads(row["dep_json"]), json.loads(row["pre_json"])
            given, generated = (pre, dep) if row["satisfied"] == 1 else (dep, pre)
            yield AcceptedPair(row["record_id"], given, generated, dep, pre, row["consumer_param"], row["producer_output"],
                               row["kind"])


def shard_pairs(dataset: Path) -> Iterator[AcceptedPair]:
    """The LLM pairs in the published dataset: label-0 rows of origin ``validated`` (doc_a the dependent);
    ``source_a``/``source_b`` end in ``#given`` or ``#generated``."""
    columns = ["doc_a", "doc_b", "label", "origin", "source_a", "source_b", "consumer_param", "producer_output", "kind"]
    table = pq.read_table(dataset / "shards", columns=columns)
    for row in table.to_pylist():
        if row["label"] != LABEL_A_DEPENDS_ON_B or row["origin"] != "validated":
            continue
        dep, pre = json.loads(row["doc_a"]), json.loads(row["doc_b"])
        given, generated = (pre, dep) if row["source_a"].endswith("#generated") else (dep, pre)
        yield AcceptedPair(row["source_a"].rsplit("#", 1)[0], given, generated, dep, pre, row["consumer_param"],
                           row["producer_output"], row["kind"] or KIND_DATA)


def replay(pair: AcceptedPair) -> tuple[str, str] | None:
    """(reason, detail) the check gives ``pair`` now, or None when it passes: the echo rule first, then a copy of
    a prompt's worked answer (both kinds), then, for a data-flow pair, a hand-over that restates the given API,
    the producer output and the two ends' types, and a hand-over that makes no new value."""
    echo = echo_reason(pair.given, pair.generated, pair.kind)
    if echo:
        return ECHO, echo
    copied = copied_example_reason(pair.generated)
    if copied:
        return COPIED, copied
    if pair.kind != KIND_DATA:
        return None
    restated = handover_restatement(pair.given, pair.generated, 1 if pair.generated is pair.dependent else 2,
                                    pair.consumer_param or "")
    if restated:
        return ECHO, restated
    if pair.producer_output is None:
        return "generate_bad_producer_output", NULL_OUTPUT
    checked = check_handover(pair.dependent, pair.prerequisite, pair.consumer_param or "", pair.producer_output)
    if isinstance(checked, HandoverRejection):
        return checked.reason, checked.detail
    passes_through = passthrough_reason(pair.dependent, pair.prerequisite, checked)
    return (ECHO, passes_through) if passes_through else None


def handover_report(dataset: Path, source: str = "auto", examples: int = 3) -> dict[str, Any]:
    """Accepted pairs per kind, how many the check rejects by reason (with up to ``examples`` of each:
    record id, the two API names, the detail), and the pairs it keeps."""
    if source == "auto":
        source = "chunks" if any((dataset / ".chunks").glob("chunk-*/validated.parquet")) else "shards"
    if source == "shards" and not any((dataset / "shards").glob("*.parquet")):
        raise SystemExit(f"{dataset}: no .chunks/chunk-*/validated.parquet and no shards/*.parquet (a build-tdi dataset folder?)")
    pairs = chunk_pairs(dataset) if source == "chunks" else shard_pairs(dataset)
    accepted: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    by_kind: dict[str, Counter[str]] = {}
    shown: dict[str, list[dict[str, str]]] = {}
    for pair in pairs:
        accepted[pair.kind] += 1
        verdict = replay(pair)
        if verdict is None:
            continue
        reason, detail = verdict
        rejected[reason] += 1
        by_kind.setdefault(pair.kind, Counter())[reason] += 1
        if len(shown.setdefault(reason, [])) < examples:
            shown[reason].append({"record_id": pair.record_id, "given": pair.given["name"], "generated": pair.generated["name"],
                                  "detail": detail})
    total = sum(accepted.values())
    return {"dataset": str(dataset), "read_from": source, "accepted_pairs": total, "accepted_by_kind": dict(accepted),
            "would_reject": sum(rejected.values()), "would_reject_by_reason": dict(rejected.most_common()),
            "would_reject_by_kind": {k: dict(c) for k, c in by_kind.items()},
            "would_keep": total - sum(rejected.values()), "examples": shown}


def show(report: dict[str, Any]) -> None:
    total = report["accepted_pairs"]
    print(f"{report['dataset']} ({report['read_from']}): {total} accepted dependent pairs {report['accepted_by_kind']}")
    share = f" ({report['would_reject'] / total:.0%})" if total else ""
    print(f"the hand-over check would reject {report['would_reject']}{share}, keep {report['would_keep']}")
    for reason, n in report["would_reject_by_reason"].items():
        print(f"  {reason}: {n}")
        for ex in report["examples"].get(reason, []):
            print(f"    {ex['record_id']}: given {ex['given']!r}, generated {ex['generated']!r}: {ex['detail']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path, help="a build-tdi dataset folder (artifacts/tdi/<dataset>)")
    parser.add_argument("--from", dest="source", choices=("auto", "chunks", "shards"), default="auto",
                        help="chunks: every pair agent 3 accepted; shards: the LLM pairs in the published dataset; "
                             "auto: chunks when there")
    parser.add_argument("--examples", type=int, default=3, help="examples shown per reason")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    report = handover_report(args.dataset, args.source, args.examples)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        show(report)


if __name__ == "__main__":
    main()
