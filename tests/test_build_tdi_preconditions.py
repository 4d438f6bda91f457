"""build-tdi's precondition mode with the local OpenAI server: the share splits the records between the
data-flow and the precondition prompts (stably), precondition pairs come out with kind precondition and
no parameter, each rejection keeps its reason in the books, and the config refuses a share outside [0, 1]."""
from __future__ import annotations

import json
from collections import Counter

import duckdb
import polars as pl
import pytest

import tests.openai_server as openai_server
from flows.build_tdi import PRECONDITION_SHARE, BuildTDIConfig
from schemas.tdi import KIND_DATA, KIND_PRECONDITION
from tasks.agents.chunks import ChunkJob, iter_record_chunks, run_chunk
from tasks.agents.prompts import GENERATE_PRECONDITION, VALIDATE_PRECONDITION
from tasks.agents.requests import pair_kind
from tasks.llm.config import LLMConfig
from tasks.sources.filters import SourceFilter
from tasks.sources.spec import SourceSpec
from tests.openai_server import FakeOpenAIServer, given_doc

PRECONDITION_SCHEMAS = ("precondition_api_doc", "precondition_verdict")


@pytest.fixture
def arrivals(monkeypatch):
    """The schema name of every answer the fake server gives, in order."""
    seen: list[str] = []
    real = openai_server.canned_answer

    def recording(agent, user_text):
        seen.append(agent)
        return real(agent, user_text)

    monkeypatch.setattr(openai_server, "canned_answer", recording)  # the server thread looks it up per request
    return seen


def _chunk(shared_data, n: int = 60):
    spec = SourceSpec(kind="codesearchnet", path=shared_data / "codesearchnet")
    return next(iter_record_chunks(spec, n, SourceFilter(max_chars=1800), n))


def _run(chunk, tmp_path, share: float, name: str = "chunk", **llm) -> tuple[dict, pl.DataFrame, pl.DataFrame]:
    with FakeOpenAIServer() as server:
        cfg = LLMConfig(model="fake", base_url=server.base_url, concurrency=4, cache_dir=str(tmp_path / f"cache-{name}"), **llm)
        marker = run_chunk(ChunkJob(chunk, str(tmp_path / name), cfg, 1800, "fp", share))
    folder = tmp_path / name
    return marker, pl.read_parquet(folder / "validated.parquet"), pl.read_parquet(folder / "outcomes.parquet")


def _check_books(chunk, marker, validated, outcomes):
    assert validated.height + outcomes.height == chunk.n_read == marker["validated"] + marker["rejected"]
    assert outcomes.filter(pl.col("reason") == "").height == 0


@pytest.mark.parametrize("batch", [False, True], ids=["online", "batch"])
def test_one_build_sends_each_record_to_the_mode_its_share_picks(shared_data, tmp_path, arrivals, batch):
    chunk = _chunk(shared_data)
    llm = {"batch": True, "batch_poll_s": 0.01} if batch else {}
    marker, validated, outcomes = _run(chunk, tmp_path, 0.5, **llm)
    _check_books(chunk, marker, validated, outcomes)
    extract_failed = set(outcomes.filter(pl.col("stage") == "extract")["record_id"])
    extracted = [r.record_id for r in chunk.records if r.record_id not in extract_failed]
    wanted = Counter(pair_kind(r, 0.5) for r in extracted)
    asked = Counter(arrivals)
    assert asked["precondition_api_doc"] == wanted[KIND_PRECONDITION] > 10
    assert asked["consumer_api_doc"] + asked["producer_api_doc"] == wanted[KIND_DATA] > 10
    assert marker["stages"]["generate"]["requests"] == len(extracted)  # one agent 2 call per extracted doc, either mode

    # every pair is of its record's kind; a precondition pair names no parameter
    kinds = dict(zip(validated["record_id"], validated["kind"]))
    assert set(kinds.values()) == {KIND_DATA, KIND_PRECONDITION}
    assert all(kind == pair_kind(rid, 0.5) for rid, kind in kinds.items())
    pre = validated.filter(pl.col("kind") == KIND_PRECONDITION)
    assert pre["consumer_param"].null_count() == pre["producer_output"].null_count() == pre.height > 0
    assert validated.filter(pl.col("kind") == KIND_DATA)["consumer_param"].null_count() == 0
    # the canned check is the prerequisite when called first, the canned confirmation the dependent
    for row in pre.iter_rows(named=True):
        pre_name, dep_name = json.loads(row["pre_json"])["name"], json.loads(row["dep_json"])["name"]
        assert (pre_name.startswith("check_") and row["satisfied"] == 2) or (dep_name.startswith("confirm_") and row["satisfied"] == 1)
    # the precondition judge saw every precondition pair, and its refusals are rejections with its reason
    generated_pre = asked["precondition_api_doc"] - outcomes.filter(pl.col("stage") == "generate")["record_id"].map_elements(
        lambda r: pair_kind(r, 0.5) == KIND_PRECONDITION, return_dtype=pl.Boolean).sum()
    assert asked["precondition_verdict"] == generated_pre
    refused = outcomes.filter(pl.col("reason") == "validate_order_not_required")
    assert refused.height == asked["precondition_verdict"] - pre.height > 0
    assert set(refused["detail"]) == {"the order is usual, not required"}
    assert all(pair_kind(r, 0.5) == KIND_PRECONDITION for r in refused["record_id"])


def test_share_zero_sends_nothing_to_the_precondition_prompts_and_share_one_everything(shared_data, tmp_path, arrivals):
    chunk = _chunk(shared_data, 30)
    _, validated, _ = _run(chunk, tmp_path, 0.0, "zero")
    assert not set(arrivals) & set(PRECONDITION_SCHEMAS) and set(validated["kind"]) == {KIND_DATA}
    arrivals.clear()
    _, validated, _ = _run(chunk, tmp_path, 1.0, "one")
    assert not {"consumer_api_doc", "producer_api_doc", "dependency_verdict"} & set(arrivals)
    assert set(validated["kind"]) == {KIND_PRECONDITION}


def test_precondition_answers_that_pass_a_value_or_echo_the_given_api_are_rejected_with_their_reason(shared_data, tmp_path, monkeypatch):
    real = openai_server.canned_answer
    bent = Counter()

    def some_wrong(agent, user_text):
        answer = real(agent, user_text)
        if agent != "precondition_api_doc":
            return answer
        given = given_doc(user_text)
        turn = openai_server._h(given["name"]) % 4
        if turn == 0:  # the check hands the given API its first input: a data-flow pair
            if not given["input_params"]:
                return answer
            bent["value"] += 1
            return {**answer, "called_first": "new", "output_params": [given["input_params"][0]]}
        if turn == 1:  # the given API again, under its own name
            bent["echo"] += 1
            return {**answer, **given}
        return answer

    monkeypatch.setattr(openai_server, "canned_answer", some_wrong)
    chunk = _chunk(shared_data)
    marker, validated, outcomes = _run(chunk, tmp_path, 1.0)
    _check_books(chunk, marker, validated, outcomes)
    by_reason = Counter(outcomes.filter(pl.col("stage") == "generate")["reason"])
    assert by_reason["generate_precondition_passes_value"] == bent["value"] > 0
    assert by_reason["generate_echoed_input"] == bent["echo"] > 0
    passed = outcomes.filter(pl.col("reason") == "generate_precondition_passes_value")
    assert all("a data-flow pair, not a precondition" in d for d in passed["detail"]) and passed["raw_text"].null_count() == 0
    assert validated.height > 0 and set(validated["kind"]) == {KIND_PRECONDITION}


@pytest.mark.parametrize("share", [-0.1, 1.5, float("nan")])
def test_the_config_refuses_a_share_outside_zero_to_one(share):
    with pytest.raises(ValueError, match=r"--precondition-share .*: must lie in \[0, 1\]"):
        BuildTDIConfig(precondition_share=share)
    assert BuildTDIConfig(precondition_share=0.0).precondition_share == 0.0
    assert BuildTDIConfig(precondition_share=1).precondition_share == 1


def test_the_share_defaults_to_half_on_an_endpoint_and_none_on_the_embedded_model(monkeypatch):
    from flows.build_tdi import EMBEDDED_PRECONDITION_SHARE, config_from_args
    from tasks.llm.config import EMBEDDED

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert BuildTDIConfig().precondition_share is None  # resolved per endpoint
    assert BuildTDIConfig().resolved().precondition_share == EMBEDDED_PRECONDITION_SHARE == 0.0
    assert config_from_args(["--base-url", EMBEDDED]).resolved().precondition_share == 0.0
    assert config_from_args(["--base-url", "http://127.0.0.1:9/v1"]).resolved().precondition_share == PRECONDITION_SHARE
    assert config_from_args(["--precondition-share", "0.3"]).resolved().precondition_share == 0.3


@pytest.mark.slow
def test_the_flow_publishes_both_kinds_and_a_new_share_redoes_the_chunks(shared_data, tmp_path, prefect_harness):
    from flows.build_tdi import build_tdi, config_from_args

    with FakeOpenAIServer() as server:
        args = ["--source", "codesearchnet", "--source-path", str(shared_data / "codesearchnet"), "--limit", "60",
                "--base-url", server.base_url, "--model", "fake", "--cache-dir", str(tmp_path / "cache"),
                "--output-root", str(tmp_path / "out"), "--dataset", "kinds", "--per-class", "1000"]
        manifest = build_tdi(config_from_args(args))
        assert manifest["config"]["precondition_share"] == PRECONDITION_SHARE  # an endpoint's default
        shards = pl.read_parquet(tmp_path / "out" / "kinds" / "shards" / "*.parquet")
        assert set(shards.filter(pl.col("label") != 1)["kind"]) == {KIND_DATA, KIND_PRECONDITION}
        pre = shards.filter(pl.col("kind") == KIND_PRECONDITION)
        assert pre["consumer_param"].null_count() == pre["producer_output"].null_count() == pre.height
        again = build_tdi(config_from_args([*args, "--precondition-share", "0"]))
    assert manifest["prompt_versions"]["generate-precondition"] == GENERATE_PRECONDITION.version
    assert manifest["prompt_versions"]["validate-precondition"] == VALIDATE_PRECONDITION.version
    assert again["execution"]["chunks_reused"] == 0  # another share: other prompts, so the chunk is redone
    for m in (manifest, again):
        assert m["accounting"]["accepted"] + m["accounting"]["rejected"] == m["accounting"]["read"]
    con = duckdb.connect(str(tmp_path / "out" / "kinds" / "records.duckdb"), read_only=True)
    assert {a for (a,) in con.execute("SELECT DISTINCT agent FROM llm_calls").fetchall()} == {"extract", "generate", "validate"}
    con.close()
    shards = pl.read_parquet(tmp_path / "out" / "kinds" / "shards" / "*.parquet")
    assert set(shards.filter(pl.col("label") != 1)["kind"]) == {KIND_DATA}  # the share-0 run published data pairs only
