"""build-tdi with mined pairs mixed in (--mined-per-class, tasks/mining/mix.py): a real flow run on the fake
OpenAI server, a small slice of the standard library mined, the origins and the books checked."""
from __future__ import annotations

import duckdb
import polars as pl
import pytest

from flows.build_tdi import EMBEDDED_MINED_PER_CLASS, BuildTDIConfig, build_tdi, config_from_args
from tasks.llm.config import EMBEDDED
from tasks.mining import mix
from tests.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.slow

LLM_ORIGINS = {"a_depends_on_b": {"validated"}, "b_depends_on_a": {"swapped"}, "no_dependency": {"shuffled"}}
MINED_ORIGINS = {"a_depends_on_b": {"mined"}, "b_depends_on_a": {"mined_swapped"},
                 "no_dependency": {"hard_negative", "mined_shuffled"}}
SLICE = ("email", "json", "urllib", "http")  # ~45 files, ~100 mined pairs: seconds, not the whole stdlib's minute


def test_the_mined_default_is_for_the_embedded_server_only(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert BuildTDIConfig().resolved().mined_per_class == EMBEDDED_MINED_PER_CLASS > 0
    assert config_from_args(["--base-url", EMBEDDED]).resolved().mined_per_class == EMBEDDED_MINED_PER_CLASS
    assert config_from_args(["--base-url", "http://127.0.0.1:9/v1"]).resolved().mined_per_class == 0
    assert config_from_args(["--mined-per-class", "7"]).resolved().mined_per_class == 7
    assert config_from_args(["--mined-per-class", "-1"]).mined_per_class is None  # -1: the default by endpoint
    with pytest.raises(ValueError, match="--mined-per-class -3: a count >= 0"):
        BuildTDIConfig(mined_per_class=-3)


def test_mined_pairs_join_the_llm_pairs_with_their_own_origins_and_every_one_is_in_the_books(
        shared_data, tmp_path, prefect_harness, monkeypatch):
    files = [item for item in mix.stdlib_files() if item.module.split(".")[0] in SLICE]
    monkeypatch.setattr(mix, "stdlib_files", lambda: files)
    per_class = 20
    with FakeOpenAIServer() as server:
        args = ["--source", "codesearchnet", "--source-path", str(shared_data / "codesearchnet"), "--limit", "30",
                "--base-url", server.base_url, "--model", "fake", "--concurrency", "4",
                "--cache-dir", str(tmp_path / "cache"), "--output-root", str(tmp_path / "out"), "--dataset", "mixed",
                "--rows-per-shard", "50", "--per-class", "1000", "--mined-per-class", str(per_class)]
        manifest = build_tdi(config_from_args(args))
        again = build_tdi(config_from_args(args))  # chunks reused, the slice mined again
    # the same mined pairs, so the same shards (in one process here; across hash seeds, as between two runs:
    # tests/test_mining_orders.py's hash-seed test)
    assert [(s["file"], s["sha256"]) for s in again["shards"]] == [(s["file"], s["sha256"]) for s in manifest["shards"]]
    out = tmp_path / "out" / "mixed"
    mined = manifest["mined"]
    assert mined["per_class"] == per_class and mined["files_read"] == len(files) and mined["pairs_in_dataset"] == per_class
    llm_per_class = manifest["per_class"]
    assert llm_per_class > 0

    # rows: each class has the LLM's pairs plus the mined ones, per split; the manifest's table is the shards'
    rows = pl.read_parquet(out / "shards" / "*.parquet")
    assert rows.height == manifest["total_rows"] == 3 * (llm_per_class + per_class)
    table = manifest["rows_by_class_and_origin"]
    from_rows = {}
    for split, label, origin, n in rows.group_by("split", "label_name", "origin").len().iter_rows():
        from_rows.setdefault(split, {}).setdefault(label, {})[origin] = n
    assert table == from_rows
    for label in LLM_ORIGINS:
        llm = sum(n for per in table.values() for o, n in per[label].items() if o in LLM_ORIGINS[label])
        mined_rows = sum(n for per in table.values() for o, n in per[label].items() if o in MINED_ORIGINS[label])
        assert (llm, mined_rows) == (llm_per_class, per_class), label
        assert {o for per in table.values() for o in per[label]} <= LLM_ORIGINS[label] | MINED_ORIGINS[label]
    for split, counts in manifest["counts"].items():
        assert len(set(counts.values())) == 1, (split, counts)  # still balanced, split by split
        assert counts["a_depends_on_b"] == sum(table[split]["a_depends_on_b"].values())
    assert mined["per_split"] == {s: table[s]["a_depends_on_b"].get("mined", 0) for s in table if "mined" in table[s]["a_depends_on_b"]}
    # the mined rows are the miner's: module-qualified sources, kinds, support on preconditions; docs apart from the LLM's
    mined_rows = rows.filter(pl.col("origin").is_in(["mined", "mined_swapped"]))
    assert mined_rows["source_a"].str.contains(r"^(email|json|urllib|http)\.").all()
    llm_docs = set(rows.filter(pl.col("origin").is_in(["validated", "swapped", "shuffled"]))["tool_a_id"])
    assert not llm_docs & set(rows.filter(~pl.col("origin").is_in(["validated", "swapped", "shuffled"]))["tool_a_id"])
    assert manifest["quality"]["success"]

    # the books: every record read and every mined pair read, once, accepted or rejected with a reason
    acc = manifest["accounting"]
    con = duckdb.connect(str(out / "records.duckdb"), read_only=True)
    mined_books = dict(con.execute("""SELECT reason, count(*) FROM record_outcomes WHERE record_id LIKE 'mined:%'
                                      GROUP BY reason""").fetchall())
    records = con.execute("SELECT count(*) FROM record_outcomes WHERE record_id NOT LIKE 'mined:%'").fetchone()[0]
    con.close()
    assert sum(mined_books.values()) == mined["pairs_read"] == mined["data_flow_pairs"] + mined["precondition_pairs"]
    assert mined_books.pop("in_dataset") == per_class and mined_books == mined["pairs_rejected_by_reason"]
    # the function records read: the 30 the limit accepts and the ones the read rejected (too long) before them
    assert records >= 30 and acc["read"] == records + mined["pairs_read"] == acc["accepted"] + acc["rejected"]

    card = (out / "README.md").read_text()
    assert "## Rows by class and origin" in card and f"(`--mined-per-class` {per_class}): {per_class} per class" in card
    assert f"records read {acc['read']} ({records} function records, {mined['pairs_read']} mined pairs)" in card
