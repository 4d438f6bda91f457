"""build-tdi end to end: real CodeSearchNet records, a real Prefect flow run, a local OpenAI server."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import polars as pl
import pytest

from flows.build_tdi import build_tdi, config_from_args
from tasks.llm.cache import ResponseCache
from tests.conftest import REPO_ROOT
from tests.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.slow


def _args(shared_data: Path, server: FakeOpenAIServer, tmp: Path, name: str, cache: str = "cache", limit: int = -1,
          chunk_size: int = 1000) -> list[str]:
    return [
        "--chunk-size", str(chunk_size),
        "--source", "codesearchnet", "--source-path", str(shared_data / "codesearchnet"), "--limit", str(limit),
        "--base-url", server.base_url, "--model", "fake", "--concurrency", "4",
        "--cache-dir", str(tmp / cache), "--output-root", str(tmp / "out"), "--dataset", name,
        "--rows-per-shard", "200", "--per-class", "1000",
    ]


def test_flow_on_real_codesearchnet_accounts_for_every_record(shared_data, tmp_path, prefect_harness):
    with FakeOpenAIServer() as server:
        manifest = build_tdi(config_from_args(_args(shared_data, server, tmp_path, "csn")))
    out = tmp_path / "out" / "csn"
    acc = manifest["accounting"]
    assert acc["read"] == 370  # 120 + 120 + 130 lines in the sample
    assert acc["accepted"] + acc["rejected"] == acc["read"] and acc["accepted"] > 100

    con = duckdb.connect(str(out / "records.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM record_outcomes").fetchone()[0] == 370
    assert con.execute("SELECT count(*) FROM record_outcomes WHERE status='rejected' AND reason = ''").fetchone()[0] == 0
    stages = dict(con.execute("SELECT stage, count(*) FROM record_outcomes WHERE status='rejected' GROUP BY stage").fetchall())
    assert stages.get("validate", 0) > 0  # the judge rejects some pairs, with its reason kept
    ledger_agents = {a for (a,) in con.execute("SELECT DISTINCT agent FROM llm_calls").fetchall()}
    assert ledger_agents == {"extract", "generate", "validate"}

    per_class = manifest["per_class"]
    for split, counts in manifest["counts"].items():
        assert len(set(counts.values())) == 1, f"unbalanced {split}: {counts}"
    assert sum(c["a_depends_on_b"] for c in manifest["counts"].values()) == per_class == acc["accepted"]
    assert manifest["quality"]["success"] and (out / "quality.json").exists() and (out / "README.md").exists()
    df = pl.read_parquet(out / "shards" / "*.parquet")
    assert df.height == manifest["total_rows"] == 3 * per_class


def _run_cli(args: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "flows.build_tdi", *args], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def test_resume_after_a_kill_repeats_no_answered_call_and_reproduces_the_shards(shared_data, tmp_path, prefect_harness):
    from prefect.settings import get_current_settings

    # The child runs report to the harness's API instead of each starting a temporary server.
    env = {**os.environ, "PREFECT_API_URL": str(get_current_settings().api.url), "PREFECT_LOGGING_LEVEL": "WARNING"}
    with FakeOpenAIServer(delay_s=0.05) as server:
        # A clean reference run.
        ref = _run_cli(_args(shared_data, server, tmp_path, "reference", cache="cache-ref", limit=30, chunk_size=8), env)
        assert ref.wait(timeout=300) == 0, ref.stdout.read().decode()[-3000:]
        clean_total = server.requests

        # Kill a second run mid-way, then resume it on the same cache.
        before = server.requests
        victim = _run_cli(_args(shared_data, server, tmp_path, "resumed", limit=30, chunk_size=8), env)
        deadline = time.time() + 300
        while server.requests - before < clean_total // 2 and time.time() < deadline:
            time.sleep(0.05)
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        sent_before_kill = server.requests - before
        assert 0 < sent_before_kill < clean_total
        answered = ResponseCache(tmp_path / "cache").count()  # answers committed before the kill

        before = server.requests
        resumed = _run_cli(_args(shared_data, server, tmp_path, "resumed", limit=30, chunk_size=8), env)
        assert resumed.wait(timeout=300) == 0, resumed.stdout.read().decode()[-3000:]
        sent_on_resume = server.requests - before

    # Only requests that never got an answer before the kill are sent again: chunks finished before
    # the kill are skipped (their markers match), the chunk cut short is redone from the cache.
    assert sent_on_resume == clean_total - answered
    # Lost to the kill: at most the 4 in flight, plus at most 4 answered in the event-loop tick whose group
    # commit had not run yet (StructuredLLM._store: a worker sends its next request before that commit).
    assert sent_before_kill - answered <= 2 * 4
    ref_manifest = json.loads((tmp_path / "out" / "reference" / "manifest.json").read_text())
    new_manifest = json.loads((tmp_path / "out" / "resumed" / "manifest.json").read_text())
    assert [s["sha256"] for s in new_manifest["shards"]] == [s["sha256"] for s in ref_manifest["shards"]]
    assert new_manifest["execution"]["chunks"] == 4 and new_manifest["execution"]["chunks_reused"] >= 1
    assert json.loads((tmp_path / "out" / "resumed" / "manifest.json").read_text())["accounting"] == ref_manifest["accounting"]


def test_a_run_that_fails_the_gate_leaves_the_published_dataset_as_it_was(shared_data, tmp_path, prefect_harness, monkeypatch):
    import tasks.dataset.gate as gate
    from flows.train_discriminator import published_tdi
    from tasks.dataset.quality import QualityGateError, QualityReport

    with FakeOpenAIServer() as server:
        args = _args(shared_data, server, tmp_path, "gated", limit=40)
        good = build_tdi(config_from_args(args))
        out = tmp_path / "out" / "gated"
        shards_before = {p.name: p.read_bytes() for p in (out / "shards").glob("*.parquet")}
        monkeypatch.setattr(gate, "validate_shards",
                            lambda d, progress=None: QualityReport(success=False, checks=[{"success": False, "expectation": "injected"}]))
        with pytest.raises(QualityGateError, match="nothing was published"):
            build_tdi(config_from_args([*args, "--seed", "99"]))  # other seed: other shard bytes if it got through
    assert json.loads((out / "manifest.json").read_text()) == good
    assert {p.name: p.read_bytes() for p in (out / "shards").glob("*.parquet")} == shards_before
    assert json.loads((out / "quality.json").read_text())["success"]
    assert list((out / ".failed" / "shards").glob("*.parquet")) and not (out / ".staging").exists()
    assert published_tdi(tmp_path / "out") == [out]  # `auto` still picks the dataset that passed
