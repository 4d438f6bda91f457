"""bench/handover_check.py: the hand-over check replayed over the pairs a build-tdi dataset accepted, from the
chunk outputs and from the published shards alike."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.handover_check import NULL_OUTPUT, handover_report, main
from schemas.docs import canonical_doc_json, doc_id
from schemas.tdi import KIND_DATA, KIND_PRECONDITION
from tasks.agents.chunks import VALIDATED_SCHEMA
from tasks.dataset.balance import BalanceConfig, plan_balance
from tasks.dataset.shards import ShardConfig, write_planned_shards


def _doc(name, inputs, outputs):
    p = lambda n, t: {"name": n, "type": t, "description": f"the {n}"}  # noqa: E731
    return {"name": name, "description": f"{name} does its work.", "input_params": [p(*i) for i in inputs],
            "output_params": [p(*o) for o in outputs]}


# (record id, given, generated, satisfied, consumer_param, producer_output, kind): what an older build accepted
PAIRS = [
    ("r-good", _doc("login", [("user", "string")], [("token", "string")]),
     _doc("update_email", [("token", "string"), ("email", "string")], [("ok", "boolean")]), 1, "token", "token", KIND_DATA),
    ("r-good2", _doc("read_config", [("path", "string")], [("config", "dict")]),
     _doc("locate_config", [("app", "string")], [("path", "string")]), 2, "path", "path", KIND_DATA),
    ("r-renamed", _doc("break_here", [("frame", "object")], [("stopped", "boolean")]),
     _doc("break_here_v2", [("stopped", "boolean")], [("note", "string")]), 1, "stopped", "stopped", KIND_DATA),
    ("r-type", _doc("astimezone", [("tz", "string")], [("dt", "datetime")]),
     _doc("tzname_to_datetime", [("tzname", "string")], [("moment", "datetime")]), 1, "tzname", "dt", KIND_DATA),
    ("r-null", _doc("lognormvariate", [("mu", "number"), ("sigma", "number")], [("value", "number")]),
     _doc("lognormvariate_inverse", [("mu", "number")], [("x", "number")]), 1, "mu", None, KIND_DATA),
    ("r-pre-ok", _doc("open_db", [("dsn", "string")], [("conn", "object")]),
     _doc("check_dsn_reachable", [("host", "string")], [("reachable", "boolean")]), 2, None, None, KIND_PRECONDITION),
    ("r-pre-copy", _doc("close_db", [("conn", "object")], [("closed", "boolean")]),
     _doc("close_db_copy", [("handle", "object")], [("done", "boolean")]), 1, None, None, KIND_PRECONDITION),
]
EXPECTED = {"generate_echoed_input": 2, "generate_type_mismatch": 1, "generate_bad_producer_output": 1}


def _write_chunk(dataset: Path) -> Path:
    rows = []
    for rid, given, generated, satisfied, consumer, producer, kind in PAIRS:
        dep, pre = (generated, given) if satisfied == 1 else (given, generated)
        rows.append({"record_id": rid, "satisfied": satisfied, "dep_id": doc_id(canonical_doc_json(dep)),
                     "dep_json": canonical_doc_json(dep), "pre_id": doc_id(canonical_doc_json(pre)),
                     "pre_json": canonical_doc_json(pre), "consumer_param": consumer, "producer_output": producer, "kind": kind})
    path = dataset / ".chunks" / "chunk-000000" / "validated.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=VALIDATED_SCHEMA), path)
    return path


def test_the_replay_counts_what_the_check_would_reject_by_reason_with_examples(tmp_path, capsys):
    dataset = tmp_path / "ds"
    validated = _write_chunk(dataset)
    report = handover_report(dataset)
    assert report["read_from"] == "chunks" and report["accepted_pairs"] == len(PAIRS)
    assert report["accepted_by_kind"] == {KIND_DATA: 5, KIND_PRECONDITION: 2}
    assert report["would_reject_by_reason"] == EXPECTED and report["would_keep"] == 3
    assert report["would_reject"] + report["would_keep"] == report["accepted_pairs"]
    assert report["would_reject_by_kind"] == {KIND_DATA: {"generate_echoed_input": 1, "generate_type_mismatch": 1,
                                                          "generate_bad_producer_output": 1},
                                              KIND_PRECONDITION: {"generate_echoed_input": 1}}
    examples = {ex["record_id"]: ex for reason in report["examples"].values() for ex in reason}
    assert set(examples) == {"r-renamed", "r-type", "r-null", "r-pre-copy"}
    assert "'break_here_v2' is the given API 'break_here' renamed" in examples["r-renamed"]["detail"]
    assert examples["r-type"]["detail"].endswith("takes 'string'") and examples["r-null"]["detail"] == NULL_OUTPUT

    # the published shards hold the same pairs (balanced, as label-0 rows of origin validated): the same counts
    plan = plan_balance([validated], BalanceConfig(per_class=100, validation_fraction=0))
    write_planned_shards(plan, dataset, ShardConfig(rows_per_shard=100))
    from_shards = handover_report(dataset, "shards")
    assert from_shards["accepted_pairs"] == len(PAIRS) and from_shards["would_reject_by_reason"] == EXPECTED
    assert {ex["record_id"] for r in from_shards["examples"].values() for ex in r} == set(examples)

    main([str(dataset), "--examples", "1"])
    printed = capsys.readouterr().out
    assert "would reject 4 (57%), keep 3" in printed and "generate_type_mismatch: 1" in printed
    main([str(dataset), "--json", "--from", "shards"])
    assert json.loads(capsys.readouterr().out)["would_reject"] == 4
