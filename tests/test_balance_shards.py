"""Balancing invariants, shard schema/manifest/determinism, and the great-expectations gate."""
from __future__ import annotations

import json
from collections import Counter

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from schemas.docs import canonical_doc_json, doc_id, schema_errors
from schemas.tdi import KIND_DATA, KIND_PRECONDITION, TDI_PAIR_SCHEMA, swap_label
from schemas.tdi import DependentPair
from tasks.dataset.balance import BalanceConfig, _Doc, _row, balance_pairs
from tasks.dataset.quality import validate_shards
from tasks.dataset.shards import ShardConfig, write_dataset_card, write_manifest, write_shards


def _doc(name: str, inputs: list[str], outputs: list[str]) -> dict:
    p = lambda n: {"name": n, "type": "string", "description": n}  # noqa: E731
    return {"name": name, "description": f"{name} does work", "input_params": [p(i) for i in inputs], "output_params": [p(o) for o in outputs]}


def _pairs(n: int, shared_every: int = 0, precondition_every: int = 0) -> list[DependentPair]:
    """``n`` data pairs; with ``precondition_every`` every such pair (i % k == 0) is a precondition pair
    instead (no parameters)."""
    pairs = []
    for i in range(n):
        given = _doc(f"api_{i}", [f"in_{i}"], [f"out_{i}"])
        if shared_every and i % shared_every == 1:  # reuse the previous given doc: docs shared across pairs
            given = _doc(f"api_{i - 1}", [f"in_{i - 1}"], [f"out_{i - 1}"])
        generated = _doc(f"gen_{i}", [f"out_{i}"], ["report"])
        satisfied = 1 + i % 2  # 1: generated takes the given's output; 2: the given takes the generated's report
        consumer_param, producer_output = (f"out_{i}", f"out_{i}") if satisfied == 1 else (given["input_params"][0]["name"], "report")
        if precondition_every and i % precondition_every == 0:
            pairs.append(DependentPair(f"rec-{i:04d}", given, generated, satisfied, kind=KIND_PRECONDITION))
        else:
            pairs.append(DependentPair(f"rec-{i:04d}", given, generated, satisfied, consumer_param, producer_output))
    return pairs


def test_classes_are_exactly_balanced_and_none_pairs_are_never_dependent():
    validated = _pairs(200, shared_every=7)
    out = balance_pairs(validated, BalanceConfig(per_class=150, validation_fraction=0.2, seed=3))
    counts = Counter((r["split"], r["label"]) for r in out.rows)
    for split in ("train", "validation"):
        assert counts[(split, 0)] == counts[(split, 1)] == counts[(split, 2)] == out.per_split[split] > 0
    assert sum(counts[(s, 0)] for s in ("train", "validation")) == 150
    known = {frozenset((doc_id(p.dependent), doc_id(p.prerequisite))) for p in validated}
    for r in out.rows:
        assert r["tool_a_id"] != r["tool_b_id"]
        if r["label"] == 1:
            assert frozenset((r["tool_a_id"], r["tool_b_id"])) not in known
    assert len({(r["tool_a_id"], r["tool_b_id"]) for r in out.rows}) == len(out.rows)
    # surplus pairs are recorded, never dropped silently
    used = {r["source_a"].split("#")[0] for r in out.rows if r["origin"] == "validated"}
    assert len(used) + len(out.rejections) == len(validated)
    assert {r.reason for r in out.rejections} <= {"balance_surplus", "balance_duplicate_pair"}


def test_direction_follows_satisfied_and_swap_flips_the_label():
    given, generated = _doc("login", ["user"], ["token"]), _doc("update_email", ["token"], ["status"])
    out = balance_pairs([DependentPair("r1", given, generated, 1), DependentPair("r2", _doc("validate", ["x"], ["ok"]), _doc("check", ["y"], ["x"]), 2)],
                        BalanceConfig(per_class=10, validation_fraction=0.0))
    by_origin = {(r["source_a"].split("#")[0], r["origin"]): r for r in out.rows}
    # satisfied 1: generated depends on given -> <generated, given> is class 0
    assert json.loads(by_origin[("r1", "validated")]["doc_a"])["name"] == "update_email"
    # satisfied 2: given depends on generated -> <given, generated> is class 0
    assert json.loads(by_origin[("r2", "validated")]["doc_a"])["name"] == "validate"
    for rid in ("r1", "r2"):
        v, s = by_origin[(rid, "validated")], by_origin[(rid, "swapped")]
        assert (s["doc_a"], s["doc_b"]) == (v["doc_b"], v["doc_a"]) and s["label"] == swap_label(v["label"]) == 2


def test_no_doc_appears_in_two_splits():
    out = balance_pairs(_pairs(300, shared_every=3), BalanceConfig(per_class=300, validation_fraction=0.25, seed=1))
    docs = {}
    for r in out.rows:
        for t in (r["tool_a_id"], r["tool_b_id"]):
            docs.setdefault(t, set()).add(r["split"])
    assert all(len(s) == 1 for s in docs.values())
    assert 0.15 < out.per_split["validation"] / 300 < 0.35


def test_balancing_is_seeded_and_deterministic():
    a = balance_pairs(_pairs(80), BalanceConfig(per_class=50, seed=9))
    b = balance_pairs(list(reversed(_pairs(80))), BalanceConfig(per_class=50, seed=9))
    c = balance_pairs(_pairs(80), BalanceConfig(per_class=50, seed=10))
    key = lambda rows: sorted(r["pair_id"] for r in rows)  # noqa: E731
    assert key(a.rows) == key(b.rows) != key(c.rows)


def test_duplicate_and_self_pairs_are_rejected_with_reasons():
    p = _pairs(4)
    same = DependentPair("rec-dup", p[0].given, p[0].generated, p[0].satisfied)
    selfp = DependentPair("rec-self", p[1].given, p[1].given, 1)
    out = balance_pairs([*p, same, selfp], BalanceConfig(per_class=10, validation_fraction=0))
    reasons = {r.record_id: r.reason for r in out.rejections}
    assert reasons == {"rec-dup": "balance_duplicate_pair", "rec-self": "balance_self_pair"}


def test_a_single_pair_is_rejected_with_a_reason_not_a_crash():
    out = balance_pairs(_pairs(1), BalanceConfig(per_class=10))
    assert out.rows == [] and out.per_class == 0
    assert [(r.record_id, r.reason) for r in out.rejections] == [("rec-0000", "balance_too_few_pairs")]


def _write(tmp_path, per_class=120, seed=5, rows_per_shard=100):
    out = balance_pairs(_pairs(per_class + 10), BalanceConfig(per_class=per_class, validation_fraction=0.2, seed=seed))
    infos = write_shards(out.rows, tmp_path, ShardConfig(rows_per_shard=rows_per_shard, seed=seed))
    return out, infos


def test_shards_have_the_explicit_schema_and_load_with_datasets_and_polars(tmp_path):
    out, infos = _write(tmp_path)
    files = sorted((tmp_path / "shards").glob("*.parquet"))
    assert [f"shards/{f.name}" for f in files] == sorted(i.file for i in infos)
    assert len([i for i in infos if i.split == "train"]) == 3  # 288 train rows, 100 a shard
    for f in files:
        meta = pq.read_metadata(f)
        assert pq.read_schema(f).remove_metadata().equals(TDI_PAIR_SCHEMA.remove_metadata())
        assert meta.row_group(0).column(0).compression == "ZSTD"
    df = pl.read_parquet(tmp_path / "shards" / "*.parquet")
    assert df.height == len(out.rows) and df["label"].value_counts().height == 3
    assert all(not schema_errors(json.loads(d), "api_doc") for d in df["doc_a"].to_list())

    import datasets

    ds = datasets.load_dataset(
        "parquet",
        data_files={"train": str(tmp_path / "shards" / "train-*.parquet"), "validation": str(tmp_path / "shards" / "validation-*.parquet")},
        cache_dir=str(tmp_path / "hf-cache"),
    )
    assert ds["train"].num_rows + ds["validation"].num_rows == len(out.rows)
    assert set(ds["train"].column_names) == set(TDI_PAIR_SCHEMA.names)


def test_shard_bytes_depend_only_on_rows_and_seed(tmp_path):
    _, a = _write(tmp_path / "a")
    _, b = _write(tmp_path / "b")
    _, c = _write(tmp_path / "c", seed=6)
    assert [i.sha256 for i in a] == [i.sha256 for i in b]
    assert [i.sha256 for i in a] != [i.sha256 for i in c]


def test_manifest_and_card(tmp_path):
    out, infos = _write(tmp_path)
    written = write_manifest(tmp_path, infos, {"config": {"balance": {"seed": 5}}, "prompt_versions": {"extract": "extract-v1"}, "accounting": {"read": 1, "accepted": 1, "rejected": 0}})
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert written == manifest
    assert manifest["counts"]["train"] == {"a_depends_on_b": 96, "no_dependency": 96, "b_depends_on_a": 96}
    assert manifest["total_rows"] == len(out.rows) == sum(s["rows"] for s in manifest["shards"])
    card = write_dataset_card(tmp_path, manifest).read_text()
    assert "| train | 96 | 96 | 96 |" in card and "load_dataset" in card


def test_quality_gate_passes_clean_shards_and_catches_each_defect(tmp_path):
    out, _ = _write(tmp_path / "clean", rows_per_shard=1000)
    report = validate_shards(tmp_path / "clean" / "shards")
    assert report.success, report.failures()

    rows = [dict(r) for r in out.rows]
    train_doc = next(r for r in rows if r["split"] == "train")
    val_row = next(r for r in rows if r["split"] == "validation" and r["label"] == 1)
    val_row.update(doc_a=train_doc["doc_a"], tool_a_id=train_doc["tool_a_id"])  # leakage
    rows[0] = {**rows[0], "tool_b_id": rows[0]["tool_a_id"], "doc_b": rows[0]["doc_a"]}  # self pair
    broken = {**rows[1], "doc_a": canonical_doc_json({"name": "x", "description": "y", "input_params": [], "output_params": []}).replace('"input_params":[]', '"input_params":"none"')}
    rows[1] = broken  # doc not valid against the schema
    rows[2] = {**rows[2], "label_name": "b_depends_on_a" if rows[2]["label"] != 2 else "no_dependency"}  # wrong name
    rows.append({**rows[5], "pair_id": "extra-row"})  # duplicate pair + imbalance
    write_shards(rows, tmp_path / "bad", ShardConfig(rows_per_shard=1000))
    failed = {(c["frame"], c["expectation"]) for c in validate_shards(tmp_path / "bad" / "shards").failures()}
    assert ("leaked_tools", "expect_table_row_count_to_equal") in failed
    assert ("self_pairs", "expect_table_row_count_to_equal") in failed
    assert ("mislabelled", "expect_table_row_count_to_equal") in failed
    assert ("invalid_docs", "expect_table_row_count_to_equal") in failed
    invalid = next(c for c in validate_shards(tmp_path / "bad" / "shards").failures() if c["frame"] == "invalid_docs")
    assert invalid["observed_value"] == 1 and "input_params" in invalid["examples"][0]["error"]
    assert ("pairs", "expect_compound_columns_to_be_unique") in failed
    assert any(f == "balance" for f, _ in failed)


def test_rows_carry_the_consumer_parameter_on_the_dependent_side_only():
    out = balance_pairs(_pairs(40), BalanceConfig(per_class=40, validation_fraction=0.2, seed=1))
    for r in out.rows:
        if r["label"] == 1:
            assert r["consumer_param"] is None and r["producer_output"] is None
            continue
        consumer, producer = (r["doc_a"], r["doc_b"]) if r["label"] == 0 else (r["doc_b"], r["doc_a"])
        assert r["consumer_param"] in [p["name"] for p in json.loads(consumer)["input_params"]]
        assert r["producer_output"] in [p["name"] for p in json.loads(producer)["output_params"]]
    # a pair and its swap carry the same parameter
    by_pair = {frozenset((r["tool_a_id"], r["tool_b_id"])): [] for r in out.rows if r["label"] != 1}
    for r in out.rows:
        if r["label"] != 1:
            by_pair[frozenset((r["tool_a_id"], r["tool_b_id"]))].append((r["consumer_param"], r["producer_output"]))
    assert all(len(v) == 2 and v[0] == v[1] for v in by_pair.values())


def test_quality_gate_fails_on_a_parameter_the_docs_do_not_have(tmp_path):
    out, _ = _write(tmp_path / "clean", rows_per_shard=1000)
    rows = [dict(r) for r in out.rows]
    dependent = [i for i, r in enumerate(rows) if r["label"] == 2]
    # label 2: the consumer is doc_b; doc_a's input is no input of doc_b
    i = dependent[0]
    rows[i]["consumer_param"] = json.loads(rows[i]["doc_a"])["input_params"][0]["name"]
    j = dependent[1]
    rows[j]["producer_output"] = "no_such_output"
    k = next(i for i, r in enumerate(rows) if r["label"] == 1)
    rows[k]["consumer_param"] = json.loads(rows[k]["doc_a"])["input_params"][0]["name"]
    write_shards(rows, tmp_path / "bad", ShardConfig(rows_per_shard=1000))
    failures = validate_shards(tmp_path / "bad" / "shards").failures()
    assert {c["frame"] for c in failures} == {"bad_consumer_param", "bad_producer_output", "parameters_on_none"}
    bad = next(c for c in failures if c["frame"] == "bad_consumer_param")
    assert bad["observed_value"] == 1 and bad["examples"][0]["pair_id"] == rows[i]["pair_id"]
    assert bad["examples"][0]["consumer_param"] == rows[i]["consumer_param"]
    # a producer that declares no outputs may name the output its name says it returns
    rows = [dict(r) for r in out.rows]
    for r in rows:
        if r["label"] != 1:
            side = "doc_b" if r["label"] == 0 else "doc_a"
            doc = json.loads(r[side])
            r[side] = canonical_doc_json({**doc, "name": f"get_{doc['name']}_token", "output_params": []})
            r["producer_output"] = f"{doc['name']}_token"
    rows = [r for r in rows if r["label"] != 1]  # the edited docs no longer match the none rows' ids; skip balance
    write_shards(rows, tmp_path / "derived", ShardConfig(rows_per_shard=1000))
    frames = {c["frame"] for c in validate_shards(tmp_path / "derived" / "shards").failures()}
    assert "bad_producer_output" not in frames and "bad_consumer_param" not in frames


def test_a_shard_without_the_parameter_columns_fails_the_gate(tmp_path):
    out, _ = _write(tmp_path / "clean", rows_per_shard=1000)
    table = pa.Table.from_pylist(out.rows, schema=TDI_PAIR_SCHEMA).drop_columns(["consumer_param", "producer_output"])
    (tmp_path / "v1").mkdir()
    pq.write_table(table, tmp_path / "v1" / "train-00000-of-00001.parquet")
    failed = {(c["frame"], c["expectation"]) for c in validate_shards(tmp_path / "v1").failures()}
    assert ("pairs", "expect_table_columns_to_match_set") in failed


def test_small_runs_get_a_validation_split_when_both_splits_can_form_none_pairs():
    # 3 lone pairs: validation needs 2 (one pair's docs depend on each other), train would keep 1
    assert balance_pairs(_pairs(3), BalanceConfig(per_class=3, validation_fraction=0.1, seed=13)).per_split == {"train": 3}
    for n in (4, 5, 9):
        out = balance_pairs(_pairs(n), BalanceConfig(per_class=n, validation_fraction=0.1, seed=13))
        assert out.per_split["validation"] >= 2 and out.per_split["train"] >= 2
        assert sum(out.per_split.values()) == n
        counts = Counter((r["split"], r["label"]) for r in out.rows)
        assert all(counts[(s, 0)] == counts[(s, 1)] == counts[(s, 2)] for s in ("train", "validation"))


@pytest.mark.parametrize("pairs", [3, 9])
def test_the_cards_load_snippet_runs(tmp_path, monkeypatch, pairs):
    out = balance_pairs(_pairs(pairs), BalanceConfig(per_class=pairs, validation_fraction=0.1, seed=13))
    infos = write_shards(out.rows, tmp_path, ShardConfig(rows_per_shard=100, seed=13))
    manifest = write_manifest(tmp_path, infos, {})
    card = write_dataset_card(tmp_path, manifest).read_text()
    code = card.split("## Load\n```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    scope: dict = {}
    exec(code, scope)  # the snippet a user copies: it must load every split the dataset has
    assert set(scope["ds"]) == set(manifest["counts"]) == set(out.per_split)
    assert sum(scope["ds"][s].num_rows for s in scope["ds"]) == scope["df"].height == len(out.rows)


def test_a_second_run_on_a_locked_dataset_folder_fails_at_once(tmp_path):
    import subprocess
    import sys

    from tasks.dataset.publish import DatasetBusyError, dataset_lock

    with dataset_lock(tmp_path / "ds"):
        with pytest.raises(DatasetBusyError, match="being written by another run"):
            with dataset_lock(tmp_path / "ds"):
                pass
        # another process sees the same lock
        probe = ("import sys; from pathlib import Path; from tasks.dataset.publish import dataset_lock, DatasetBusyError\n"
                 "try:\n    dataset_lock(Path(sys.argv[1])).__enter__()\nexcept DatasetBusyError as e:\n    print(e); sys.exit(3)")
        other = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "ds")], capture_output=True, text=True)
        assert other.returncode == 3 and "pid" in other.stdout
    with dataset_lock(tmp_path / "ds"):  # released on exit
        pass


def test_quality_gate_reads_shards_from_a_folder_with_a_quote(tmp_path):
    out = balance_pairs(_pairs(20), BalanceConfig(per_class=20, validation_fraction=0.2, seed=2))
    folder = tmp_path / "bob's-run"
    write_shards(out.rows, folder, ShardConfig(rows_per_shard=100, seed=2))
    report = validate_shards(folder / "shards")
    assert report.success, report.failures()


def test_quality_gate_reports_a_missing_doc_as_a_failed_check_not_a_crash(tmp_path):
    out, _ = _write(tmp_path / "clean", rows_per_shard=1000)
    rows = [dict(r) for r in out.rows]
    rows[0]["doc_b"] = None  # a hand-made shard: the writer's schema would refuse it
    table = pa.Table.from_pylist(rows, schema=pa.schema([f.with_nullable(True) for f in TDI_PAIR_SCHEMA]))
    (tmp_path / "bad").mkdir()
    pq.write_table(table, tmp_path / "bad" / "train-00000-of-00001.parquet")
    failed = {(c["frame"], c["expectation"], c["kwargs"].get("column")) for c in validate_shards(tmp_path / "bad").failures()}
    assert failed == {("pairs", "expect_column_values_to_not_be_null", "doc_b")}


# -- dependency kind (schema version 3) -------------------------------------------------------------
def test_rows_carry_the_dependency_kind_on_both_dependent_rows_and_none_on_class_1(tmp_path):
    pairs = _pairs(60, precondition_every=3)
    kind_of = {p.record_id: p.kind for p in pairs}
    out = balance_pairs(pairs, BalanceConfig(per_class=60, validation_fraction=0.2, seed=2))
    assert not out.rejections
    by_docs: dict[frozenset, list[str]] = {}
    for r in out.rows:
        if r["label"] == 1:
            assert (r["kind"], r["support"]) == (None, None)
            continue
        assert r["kind"] == kind_of[r["source_a"].split("#")[0]] and r["support"] is None  # LLM pairs: not counted
        if r["kind"] == KIND_PRECONDITION:
            assert (r["consumer_param"], r["producer_output"]) == (None, None)
        else:
            assert r["consumer_param"] is not None
        by_docs.setdefault(frozenset((r["tool_a_id"], r["tool_b_id"])), []).append(r["kind"])
    assert all(len(k) == 2 and k[0] == k[1] for k in by_docs.values())  # a pair and its swap: one kind
    kinds = Counter(r["kind"] for r in out.rows if r["label"] == 0)
    assert kinds == {KIND_DATA: 40, KIND_PRECONDITION: 20}
    # written, gated, counted per split in the manifest and on the card
    infos = write_shards(out.rows, tmp_path, ShardConfig(rows_per_shard=50, seed=2))
    assert pq.read_schema(next((tmp_path / "shards").glob("*.parquet"))).metadata[b"tgr.schema_version"] == b"3"
    report = validate_shards(tmp_path / "shards")
    assert report.success, report.failures()
    manifest = write_manifest(tmp_path, infos, {})
    expected = {s: dict(Counter(r["kind"] for r in out.rows if r["label"] == 0 and r["split"] == s)) for s in out.per_split}
    assert manifest["dependent_pairs_by_kind"] == expected
    assert {s: sum(per.values()) for s, per in manifest["dependent_pairs_by_kind"].items()} == out.per_split
    card = write_dataset_card(tmp_path, manifest).read_text()
    assert "## Dependent pairs by kind" in card
    for split, per in expected.items():
        assert f"| {split} | {per[KIND_DATA]} | {per[KIND_PRECONDITION]} |" in card


def test_a_precondition_pair_of_the_same_docs_as_a_data_pair_is_rejected_for_the_data_pair():
    pairs = _pairs(8)
    data = pairs[5]
    # the same docs as a precondition pair, with a record id that sorts before the data pair's
    shadow = DependentPair("rec-0000-pre", data.given, data.generated, data.satisfied, kind=KIND_PRECONDITION)
    out = balance_pairs([*pairs, shadow], BalanceConfig(per_class=10, validation_fraction=0.0))
    assert [(r.record_id, r.reason) for r in out.rejections] == [("rec-0000-pre", "balance_kind_conflict")]
    assert "data pair" in out.rejections[0].detail
    kept = [r for r in out.rows if r["origin"] == "validated" and r["source_a"].startswith("rec-0005")]
    assert len(kept) == 1 and kept[0]["kind"] == KIND_DATA and kept[0]["consumer_param"] == data.consumer_param
    assert {r["kind"] for r in out.rows if r["label"] != 1} == {KIND_DATA}
    assert out.per_class + len(out.rejections) == len(pairs) + 1  # every pair accounted for


def test_kind_rules_are_enforced_where_pairs_and_rows_are_made():
    with pytest.raises(ValueError, match="none of"):
        DependentPair("r", {}, {}, 1, kind="ordering")
    with pytest.raises(ValueError, match="precondition passes no value"):
        DependentPair("r", {}, {}, 1, "token", kind=KIND_PRECONDITION)
    a, b = _Doc("a" * 16, "{}", "r#given"), _Doc("b" * 16, "{}", "r#generated")
    assert _row(a, b, 0, "train", "validated", "x", None, KIND_DATA, 3)["support"] == 3
    for args, message in [((0, "train", "validated", None, None, None), "none of"),  # a dependent row needs its kind
                          ((2, "train", "swapped", "x", None, KIND_PRECONDITION), "precondition passes no value"),
                          ((1, "train", "shuffled", None, None, KIND_DATA), "no dependency kind"),
                          ((1, "train", "shuffled", None, None, None, 2), "no dependency kind"),
                          ((0, "train", "validated", "x", None, KIND_DATA, 0), "support")]:
        with pytest.raises(ValueError, match=message):
            _row(a, b, *args)


@pytest.mark.parametrize("defect,frames", [
    ("dependent_row_without_kind", {"bad_kind"}),
    ("unknown_kind", {"bad_kind"}),
    ("kind_on_a_none_row", {"kind_on_none"}),
    ("support_on_a_none_row", {"kind_on_none"}),
    ("precondition_with_parameters", {"parameters_on_precondition"}),
    ("support_below_one", {"bad_support"}),
])
def test_quality_gate_fails_on_each_kind_defect(tmp_path, defect, frames):
    out = balance_pairs(_pairs(30, precondition_every=4), BalanceConfig(per_class=30, validation_fraction=0.2, seed=4))
    rows = [dict(r) for r in out.rows]
    data = next(r for r in rows if r["label"] == 2 and r["kind"] == KIND_DATA)
    none = next(r for r in rows if r["label"] == 1)
    {"dependent_row_without_kind": lambda: data.update(kind=None),
     "unknown_kind": lambda: data.update(kind="ordering"),
     "kind_on_a_none_row": lambda: none.update(kind=KIND_DATA),
     "support_on_a_none_row": lambda: none.update(support=2),
     "precondition_with_parameters": lambda: data.update(kind=KIND_PRECONDITION),  # keeps its (valid) parameters
     "support_below_one": lambda: data.update(support=0)}[defect]()
    write_shards(rows, tmp_path, ShardConfig(rows_per_shard=1000))
    failures = validate_shards(tmp_path / "shards").failures()
    assert {c["frame"] for c in failures} == frames
    assert failures[0]["observed_value"] == 1
    assert failures[0]["examples"][0]["pair_id"] == (none if "none" in defect else data)["pair_id"]


def test_a_version_2_shard_without_the_kind_columns_fails_the_gate(tmp_path):
    out, _ = _write(tmp_path / "clean", rows_per_shard=1000)
    table = pa.Table.from_pylist(out.rows, schema=TDI_PAIR_SCHEMA).drop_columns(["kind", "support"])
    (tmp_path / "v2").mkdir()
    pq.write_table(table.replace_schema_metadata({"tgr.schema_version": "2"}), tmp_path / "v2" / "train-00000-of-00001.parquet")
    failed = {(c["frame"], c["expectation"]) for c in validate_shards(tmp_path / "v2").failures()}
    assert failed == {("pairs", "expect_table_columns_to_match_set")}
