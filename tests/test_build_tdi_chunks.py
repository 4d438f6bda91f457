"""Streaming, chunked build-tdi: the lazy reader, pipelined agents, chunk markers and resume,
columnar balancing and shards, and the Dask engine (same shards as the sequential run)."""
from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tests.openai_server as openai_server
from schemas.tdi import KIND_PRECONDITION, DependentPair
from tasks.dataset.balance import BalanceConfig, balance_pairs, plan_balance, plan_rows
from tasks.agents.chunks import (
    CHUNKS,
    MARKER,
    VALIDATED_SCHEMA,
    ChunkJob,
    iter_record_chunks,
    run_chunk,
    validated_row,
)
from tasks.llm.config import LLMConfig
from tasks.llm.errors import LLMEndpointError, LLMStageFailed
from tasks.dataset.quality import validate_shards
from tasks.dataset.shards import ShardConfig, write_planned_shards, write_shards
from tasks.sources.dedup import StringSpill, U64Map
from tasks.sources.filters import SourceFilter
from tasks.sources.read import read_function_records
from tasks.sources.spec import SourceSpec
from tests.openai_server import FakeOpenAIServer, FaultPlan, given_doc
from tests.test_balance_shards import _pairs

DATA_FLOW_AGENT_2 = ("consumer_api_doc", "producer_api_doc")  # agent 2's data-flow schema names, one per direction


# -- the lazy reader ----------------------------------------------------------------------------
def _same_read(spec: SourceSpec, limit: int | None, flt: SourceFilter, chunk_size: int) -> list:
    eager = read_function_records(spec, limit=limit, source_filter=flt)
    chunks = list(iter_record_chunks(spec, limit, flt, chunk_size))
    assert [r.record_id for c in chunks for r in c.records] == [r.record_id for r in eager.accepted]
    assert [r for c in chunks for r in c.rejected] == eager.rejected  # same ids, locators, reasons, details
    assert sum(c.n_read for c in chunks) == eager.n_read
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert all(len(c.records) <= chunk_size for c in chunks)
    assert all(len(c.records) == chunk_size for c in chunks[:-1] if c.n_read < 4 * chunk_size)
    codes = {r.record_id: r.code for r in eager.accepted}
    assert all(r.code == codes[r.record_id] for c in chunks for r in c.records)
    return chunks


@pytest.mark.parametrize("sample_seed,limit,chunk_size", [(None, None, 7), (13, 100, 16), (None, 50, 1000), (5, 1, 3)])
def test_streaming_reader_reads_what_read_function_records_reads(shared_data, sample_seed, limit, chunk_size):
    spec = SourceSpec(kind="codesearchnet", path=shared_data / "codesearchnet", sample_seed=sample_seed)
    _same_read(spec, limit, SourceFilter(max_chars=1800), chunk_size)


def _csn_line(repo: str, func: str, code: str, doc: str = "Does a thing.") -> bytes:
    rec = {"repo": repo, "path": "m.py", "func_name": func, "original_string": code, "language": "python", "code": code,
           "code_tokens": code.split(), "docstring": doc, "docstring_tokens": doc.split(), "sha": "0" * 40,
           "url": "https://example.invalid", "partition": "train"}
    return json.dumps(rec).encode() + b"\n"


def _body(name: str, extra: str = "") -> str:
    return f'def {name}(a, b):\n    """Adds."""\n    total = a + b{extra}\n    return total * 2 + len(str(total))\n'


def test_streaming_reader_keeps_every_rejection_reason_and_detail(tmp_path):
    folder = tmp_path / "python" / "final" / "jsonl" / "train"
    folder.mkdir(parents=True)
    lines = [
        _csn_line("r", "f0", _body("f0")),
        _csn_line("r", "f0", _body("f0b")),  # duplicate id
        _csn_line("r", "f1", _body("f0")),  # exact duplicate code
        _csn_line("r", "f2", _body("f0", "  # a comment")),  # same tokens
        b"{not json\n", b"{not json\n",  # two identical bad lines: distinct locators
        b"[1, 2]\n",
        _csn_line("r", "f3", _body("f3"), doc=""),  # no docstring
        _csn_line("r", "f4", "def f4(): pass"),  # too short
        *[_csn_line("r", f"g{i}", _body(f"g{i}")) for i in range(9)],
    ]
    with gzip.open(folder / "part_0.jsonl.gz", "wb") as fh:
        fh.writelines(lines)
    spec = SourceSpec(kind="codesearchnet", path=tmp_path, partitions=("train",))
    chunks = _same_read(spec, None, SourceFilter(), 2)
    reasons = Counter(r.reason for c in chunks for r in c.rejected)
    assert reasons == {"duplicate_id": 1, "duplicate_exact": 1, "duplicate_normalized": 1, "malformed_json": 2,
                       "not_an_object": 1, "no_docstring": 1, "too_short": 1}
    # a run of rejections closes a chunk after 4 x chunk_size items, so a chunk stays small
    assert max(c.n_read for c in chunks) <= 8
    _same_read(spec, 4, SourceFilter(), 3)


def test_compact_dedup_structures_grow_and_answer_exactly():
    m = U64Map(capacity=4)
    for k in range(1, 5000):
        m.put(k * 0x9E3779B97F4A7C15 % (1 << 64) or 1, k)
    assert len(m) == 4999 and all(m.get(k * 0x9E3779B97F4A7C15 % (1 << 64) or 1) == k for k in range(1, 5000, 97))
    assert m.get(12345) is None
    spill = StringSpill()
    idx = [spill.append(f"id-{i}-é") for i in range(10_000)]
    assert spill.get(idx[0]) == "id-0-é" and spill.get(idx[-1]) == "id-9999-é" and spill.get(4321) == "id-4321-é"
    spill.close()


# -- columnar balancing and shards ----------------------------------------------------------------
def _validated_files(folder: Path, pairs: list[DependentPair], parts: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [validated_row(p) for p in pairs]
    files = []
    for k in range(parts):
        f = folder / f"validated-{k}.parquet"
        pq.write_table(pa.Table.from_pylist(rows[k::parts], schema=VALIDATED_SCHEMA), f)
        files.append(f)
    return files


def _with_defects(n: int) -> list[DependentPair]:
    p = _pairs(n, shared_every=5)
    return [*p, DependentPair("rec-dup", p[0].given, p[0].generated, p[0].satisfied), DependentPair("rec-self", p[1].given, p[1].given, 1)]


def _with_kinds(n: int) -> list[DependentPair]:
    """Data and precondition pairs, with precondition pairs of the same docs as a data pair (sorting before
    and after it: the data pair is kept either way) and a duplicate precondition pair."""
    p = _pairs(n, precondition_every=3)
    data = [q for q in p if q.kind != KIND_PRECONDITION]
    pre = next(q for q in p if q.kind == KIND_PRECONDITION)
    return [*p, DependentPair("rec-0000-a", data[1].given, data[1].generated, data[1].satisfied, kind=KIND_PRECONDITION),
            DependentPair("rec-zzzz", data[2].given, data[2].generated, data[2].satisfied, kind=KIND_PRECONDITION),
            DependentPair("rec-pre-dup", pre.given, pre.generated, pre.satisfied, kind=KIND_PRECONDITION)]


@pytest.mark.parametrize("pairs,cfg", [
    (_with_defects(4), BalanceConfig(per_class=10, validation_fraction=0)),
    (_pairs(200, shared_every=7), BalanceConfig(per_class=150, validation_fraction=0.2, seed=3)),
    (_pairs(300, shared_every=3), BalanceConfig(per_class=300, validation_fraction=0.25, seed=1)),
    (_pairs(1), BalanceConfig(per_class=10)),
    (_pairs(3), BalanceConfig(per_class=3, validation_fraction=0.1, seed=13)),
    (_pairs(5), BalanceConfig(per_class=5, validation_fraction=0.1, seed=13)),
    (_with_defects(3000), BalanceConfig(per_class=2000, validation_fraction=0.1, seed=4)),
    (_with_kinds(60), BalanceConfig(per_class=50, validation_fraction=0.2, seed=6)),
])
def test_columnar_balance_makes_the_rows_and_rejections_of_balance_pairs(tmp_path, pairs, cfg):
    plan = plan_balance(_validated_files(tmp_path, pairs, parts=3), cfg)
    old = balance_pairs(pairs, cfg)
    as_set = lambda rows: sorted(json.dumps(r, sort_keys=True) for r in rows)  # noqa: E731  (None-safe)
    assert as_set(plan_rows(plan, plan.rows)) == as_set(old.rows)
    assert (plan.per_class, plan.per_split) == (old.per_class, old.per_split)
    outcomes = plan.outcomes().to_dicts()
    assert {o["record_id"]: (o["reason"], o["detail"]) for o in outcomes if o["status"] == "rejected"} == \
        {r.record_id: (r.reason, r.detail) for r in old.rejections}
    assert len(outcomes) == len({o["record_id"] for o in outcomes}) == len(pairs)
    assert {o["reason"] for o in outcomes if o["status"] == "accepted"} <= {"in_dataset"}
    if any(p.kind == KIND_PRECONDITION for p in pairs):
        reasons = {o["record_id"]: o["reason"] for o in outcomes}
        assert (reasons["rec-0000-a"], reasons["rec-zzzz"], reasons["rec-pre-dup"]) == \
            ("balance_kind_conflict", "balance_kind_conflict", "balance_duplicate_pair")
        assert {r["kind"] for r in plan_rows(plan, plan.rows) if r["label"] != 1} == {"data", KIND_PRECONDITION}


def _given_docs_file(folder: Path, pairs: list[DependentPair], others: int) -> Path:
    """A chunk's given_docs.parquet: the given doc of every pair's record, and ``others`` records whose pair
    did not pass (their agent-1 doc only)."""
    from tasks.agents.chunks import GIVEN_DOCS_SCHEMA, given_doc_row
    from tasks.agents.requests import ExtractedDoc
    from tests.test_balance_shards import _doc

    rows = [given_doc_row(ExtractedDoc(p.record_id, p.given)) for p in pairs]
    rows += [given_doc_row(ExtractedDoc(f"rec-other-{i}", _doc(f"other_{i}", [f"x_{i}"], [f"y_{i}"]))) for i in range(others)]
    path = folder / "given_docs.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=GIVEN_DOCS_SCHEMA), path)
    return path


@pytest.mark.parametrize("pairs", [_pairs(1), _pairs(1) + [  # gen_1 takes gen_0's report: 3 docs, 1 free pair of them
    DependentPair("rec-0001", _pairs(1)[0].generated, _pairs(2)[1].generated, 1, "out_1", "report")]],
    ids=["one pair", "two pairs of three docs"])
def test_a_run_too_small_to_balance_draws_no_dependency_partners_from_its_other_agent_1_docs(tmp_path, pairs):
    cfg = BalanceConfig(per_class=10, validation_fraction=0.1)
    files = _validated_files(tmp_path, pairs, parts=1)
    given = _given_docs_file(tmp_path, pairs, others=3)
    plan = plan_balance(files, cfg, [given])
    rows = plan_rows(plan, plan.rows)
    assert plan.per_class == len(pairs) and Counter(r["label"] for r in rows) == {0: len(pairs), 1: len(pairs), 2: len(pairs)}
    assert {o["reason"] for o in plan.outcomes().to_dicts()} == {"in_dataset"}
    own = {r["tool_a_id"] for r in rows if r["label"] == 0} | {r["tool_b_id"] for r in rows if r["label"] == 0}
    known = {frozenset((r["tool_a_id"], r["tool_b_id"])) for r in rows if r["label"] == 0}
    for r in (r for r in rows if r["label"] == 1):
        assert r["tool_a_id"] in own and r["tool_a_id"] != r["tool_b_id"]  # one side is a pair's doc
        assert frozenset((r["tool_a_id"], r["tool_b_id"])) not in known
        if r["tool_b_id"] not in own:  # the other an agent-1 doc of a record without a pair, named by its record
            assert r["source_b"].startswith("rec-other-") and r["source_b"].endswith("#given")
            assert json.loads(r["doc_b"])["name"].startswith("other_")
    assert plan.spare.height == len({r["tool_b_id"] for r in rows if r["label"] == 1} - own)
    infos = write_planned_shards(plan, tmp_path / "out", ShardConfig(rows_per_shard=100))
    assert sum(i.rows for i in infos) == 3 * len(pairs)
    report = validate_shards(tmp_path / "out" / "shards")
    assert report.success, report.failures()


def test_a_lone_pair_with_no_other_agent_1_doc_is_still_rejected_with_its_reason(tmp_path):
    pairs = _pairs(1)
    files = _validated_files(tmp_path, pairs, parts=1)
    plan = plan_balance(files, BalanceConfig(per_class=10), [_given_docs_file(tmp_path, pairs, others=0)])
    assert plan.per_class == 0 and plan.n_rows == 0
    assert [(o["record_id"], o["reason"]) for o in plan.outcomes().to_dicts()] == [("rec-0000", "balance_too_few_pairs")]


def test_planned_shards_are_the_rows_of_write_shards_and_depend_only_on_rows_and_seed(tmp_path):
    pairs = _pairs(700, shared_every=4, precondition_every=5)
    cfg, shards = BalanceConfig(per_class=600, validation_fraction=0.2, seed=5), ShardConfig(rows_per_shard=500, seed=5)
    a = plan_balance(_validated_files(tmp_path / "a", pairs, parts=3), cfg)
    b = plan_balance(_validated_files(tmp_path / "b", list(reversed(pairs)), parts=7), cfg)  # other chunking and order
    infos_a = write_planned_shards(a, tmp_path / "a", shards, row_group_rows=128)
    infos_b = write_planned_shards(b, tmp_path / "b", shards, row_group_rows=128)
    assert [(i.file, i.sha256, i.rows) for i in infos_a] == [(i.file, i.sha256, i.rows) for i in infos_b]
    c = write_planned_shards(a, tmp_path / "c", ShardConfig(rows_per_shard=500, seed=6), row_group_rows=128)
    assert [i.sha256 for i in c] != [i.sha256 for i in infos_a]
    assert pq.read_metadata(tmp_path / "a" / infos_a[0].file).num_row_groups == -(-infos_a[0].rows // 128)
    # the same rows, in the same order, as the in-memory path
    old = write_shards(balance_pairs(pairs, cfg).rows, tmp_path / "old", shards)
    assert [(i.file, i.rows, i.label_counts, i.kind_counts) for i in old] == \
        [(i.file, i.rows, i.label_counts, i.kind_counts) for i in infos_a]
    assert sum(i.kind_counts[KIND_PRECONDITION] for i in infos_a) > 0
    for info in infos_a:
        assert pq.read_table(tmp_path / "a" / info.file).equals(pq.read_table(tmp_path / "old" / info.file))
    report = validate_shards(tmp_path / "a" / "shards")
    assert report.success, report.failures()


# -- one chunk: the agents pipelined per record ---------------------------------------------------
def test_a_records_next_agent_starts_as_soon_as_its_previous_one_answered(shared_data, tmp_path, monkeypatch):
    arrivals: list[str] = []
    real = openai_server.canned_answer

    def recording(agent, user_text):
        arrivals.append(agent)
        return real(agent, user_text)

    monkeypatch.setattr(openai_server, "canned_answer", recording)
    spec = SourceSpec(kind="codesearchnet", path=shared_data / "codesearchnet")
    chunk = next(iter_record_chunks(spec, 40, SourceFilter(max_chars=1800), 40))
    with FakeOpenAIServer(delay_s=0.02) as server:
        llm = LLMConfig(model="fake", base_url=server.base_url, concurrency=4, cache_dir=str(tmp_path / "cache"))
        marker = run_chunk(ChunkJob(chunk, str(tmp_path / "chunk"), llm, 1800, "fp"))
    # with a barrier between agents, no generate request could arrive before the last extract one
    first_generate = min(i for i, agent in enumerate(arrivals) if agent in DATA_FLOW_AGENT_2)
    assert first_generate < len(arrivals) - 1 - arrivals[::-1].index("api_doc")
    assert arrivals.index("dependency_verdict") < len(arrivals) - 1 - arrivals[::-1].index("api_doc")
    assert marker["stages"]["extract"]["requests"] == 40 and marker["validated"] + marker["rejected"] == chunk.n_read
    assert json.loads((tmp_path / "chunk" / MARKER).read_text()) == marker
    out = pl.read_parquet(tmp_path / "chunk" / "outcomes.parquet")
    assert out.height == marker["rejected"] and pl.read_parquet(tmp_path / "chunk" / "validated.parquet").height == marker["validated"]
    assert pl.read_parquet(tmp_path / "chunk" / "ledger.parquet").height == sum(s["requests"] for s in marker["stages"].values())


def run_codesearchnet_chunk(shared_data, tmp_path, n: int, generate_repairs: int = 0, batch: bool = False) -> dict:
    """One chunk of the first ``n`` CodeSearchNet records through the three agents on the fake server (whatever
    its ``canned_answer`` is patched to), into ``tmp_path/chunk``; returns the chunk's marker."""
    spec = SourceSpec(kind="codesearchnet", path=shared_data / "codesearchnet")
    chunk = next(iter_record_chunks(spec, n, SourceFilter(max_chars=1800), n))
    with FakeOpenAIServer() as server:
        llm = LLMConfig(model="fake", base_url=server.base_url, concurrency=4, cache_dir=str(tmp_path / "cache"), batch=batch)
        return run_chunk(ChunkJob(chunk, str(tmp_path / "chunk"), llm, 1800, "fp", generate_repairs=generate_repairs))


@pytest.mark.parametrize("batch", [False, True], ids=["pipelined", "batch"])
def test_agent_2_asked_again_after_a_check_discards_its_answer(shared_data, tmp_path, monkeypatch, batch):
    """An echo of the given API (renamed ``_v2``) is discarded by the check; with one repair agent 2 hears why
    in the same conversation, after its own answer, and its second answer goes on to the judge; without, the
    echo is the record's outcome."""
    real = openai_server.canned_answer
    echoed: set[str] = set()
    repairs_seen: list[str] = []

    def echo_first(agent, user_text):
        answer = real(agent, user_text)
        if agent not in DATA_FLOW_AGENT_2:
            return answer
        given = given_doc(user_text)
        if "That answer is discarded" in user_text:  # the repair turn: a proper answer, except for stubborn ones
            repairs_seen.append(user_text.rsplit("\n\n", 1)[-1])
            if given["name"] in stubborn:
                return {**answer, "name": f"{given['name']}_copy"}
            return answer
        if openai_server._h(given["name"]) % 3 == 0:
            echoed.add(given["name"])
            return {**answer, "name": f"{given['name']}_v2"}
        return answer

    stubborn: set[str] = set()
    monkeypatch.setattr(openai_server, "canned_answer", echo_first)
    marker = run_codesearchnet_chunk(shared_data, tmp_path / "off", 40, 0, batch)
    off = Counter(pl.read_parquet(tmp_path / "off" / "chunk" / "outcomes.parquet")["reason"].to_list())
    assert echoed and off["generate_echoed_input"] == len(echoed) and not repairs_seen
    assert marker["stages"]["generate"]["repairs"] == 0

    marker = run_codesearchnet_chunk(shared_data, tmp_path / "on", 40, 1, batch)
    on = pl.read_parquet(tmp_path / "on" / "chunk" / "outcomes.parquet")
    assert "generate_echoed_input" not in on["reason"].to_list()
    s = marker["stages"]["generate"]
    assert s["repairs"] == s["repaired"] == len(echoed) == len(repairs_seen)
    assert s["requests"] == marker["stages"]["extract"]["ok"] + len(echoed)  # one more request per echo, in the books
    assert all("is the given API" in text and text.startswith("That answer is discarded: ") for text in repairs_seen)
    validated = pl.read_parquet(tmp_path / "on" / "chunk" / "validated.parquet")
    # an answer echoed again after its repair stays rejected, and says it was asked again
    stubborn.update(sorted(echoed)[:2])
    marker = run_codesearchnet_chunk(shared_data, tmp_path / "stubborn", 40, 1, batch)
    again = pl.read_parquet(tmp_path / "stubborn" / "chunk" / "outcomes.parquet").filter(pl.col("reason") == "generate_echoed_input")
    assert again.height == 2 and all(d.endswith("(asked 1 more time)") and "_copy" in d for d in again["detail"])
    assert (marker["stages"]["generate"]["repairs"], marker["stages"]["generate"]["repaired"]) == (len(echoed), len(echoed) - 2)
    assert marker["validated"] > pl.read_parquet(tmp_path / "off" / "chunk" / "validated.parquet").height
    names = [json.loads(d)["name"] for d in validated["dep_json"].to_list() + validated["pre_json"].to_list()]
    assert not [n for n in names if n.endswith("_v2")]  # no echo reached the judge, or the dataset


def test_agent_2s_parameter_reaches_the_rows_and_a_wrong_one_is_rejected_with_its_reason(shared_data, tmp_path, monkeypatch):
    real = openai_server.canned_answer

    def some_wrong(agent, user_text):
        answer = real(agent, user_text)
        if agent == "producer_api_doc" and openai_server._h(answer["name"]) % 4 == 0:
            answer = {**answer, "consumer_param": "no_such_parameter"}  # outside the request's enum
        return answer

    monkeypatch.setattr(openai_server, "canned_answer", some_wrong)
    run_codesearchnet_chunk(shared_data, tmp_path, 40)
    # the given API's end is an enum in the request's schema: a server that ignores it gets a schema rejection
    bad = pl.read_parquet(tmp_path / "chunk" / "outcomes.parquet").filter(pl.col("reason") == "generate_schema_invalid")
    assert bad.height > 0 and all("no_such_parameter" in d for d in bad["detail"])
    validated = pl.read_parquet(tmp_path / "chunk" / "validated.parquet")
    assert validated.height > 0 and validated["consumer_param"].null_count() == 0
    for row in validated.iter_rows(named=True):
        assert row["consumer_param"] in [p["name"] for p in json.loads(row["dep_json"])["input_params"]]
        assert row["producer_output"] is None or row["producer_output"] in [p["name"] for p in json.loads(row["pre_json"])["output_params"]]
    # through balance and the planned shards into the rows: the dependent side's input, both orders
    plan = plan_balance([tmp_path / "chunk" / "validated.parquet"], BalanceConfig(per_class=100, validation_fraction=0))
    write_planned_shards(plan, tmp_path / "ds", ShardConfig(rows_per_shard=1000))
    rows = pl.read_parquet(tmp_path / "ds" / "shards" / "*.parquet")
    by_docs = {(r["dep_id"], r["pre_id"]): r["consumer_param"] for r in validated.iter_rows(named=True)}
    dependent = rows.filter(pl.col("label") != 1)
    assert dependent.height == 2 * plan.per_class > 0
    for r in dependent.iter_rows(named=True):
        key = (r["tool_a_id"], r["tool_b_id"]) if r["label"] == 0 else (r["tool_b_id"], r["tool_a_id"])
        assert r["consumer_param"] == by_docs[key]
    assert rows.filter(pl.col("label") == 1)["consumer_param"].null_count() == plan.per_class
    assert validate_shards(tmp_path / "ds" / "shards").success


def test_the_handover_check_rejects_bent_answers_before_the_judge_is_asked(shared_data, tmp_path, monkeypatch):
    """Agent 2's data-flow answers bent four ways (the given API's end named outside the request's enum: one of
    its inputs as its output, or an unknown name; a type that disagrees; the given API renamed): each is
    rejected at generate with its reason, and agent 3 gets no request for it."""
    real = openai_server.canned_answer
    bent: dict[str, str] = {}  # given API name -> how its answer was bent

    def bend(agent, user_text):
        answer = real(agent, user_text)
        if agent not in DATA_FLOW_AGENT_2:
            return answer
        given = given_doc(user_text)
        way = ("input_as_output", "type", "renamed", "unknown_name", None)[openai_server._h(given["name"]) % 5]
        end = "producer_output" if agent == "consumer_api_doc" else "consumer_param"  # the given API's end
        fed = "fed_input" if agent == "consumer_api_doc" else "fed_output"  # the new API's end
        if way == "input_as_output" and agent == "consumer_api_doc" and given["input_params"]:
            answer = {**answer, end: given["input_params"][0]["name"]}
        elif way == "type":
            answer = {**answer, fed: {**answer[fed], "type": "datetime"}}
        elif way == "renamed":
            answer = {**answer, "name": f"{given['name']}_v2"}
        elif way == "unknown_name":
            answer = {**answer, end: "no_such_name"}
        else:
            return answer
        bent[given["name"]] = way
        return answer

    monkeypatch.setattr(openai_server, "canned_answer", bend)
    marker = run_codesearchnet_chunk(shared_data, tmp_path, 60)
    outcomes = pl.read_parquet(tmp_path / "chunk" / "outcomes.parquet").filter(pl.col("stage") == "generate")
    by_reason = Counter(outcomes["reason"].to_list())
    ways = Counter(bent.values())
    want = {"generate_schema_invalid": ways["input_as_output"] + ways["unknown_name"],
            "generate_type_mismatch": ways["type"], "generate_echoed_input": ways["renamed"]}
    assert all(n > 0 for n in want.values()), want
    assert {r: by_reason[r] for r in want} == want
    details = dict(zip(outcomes["reason"], outcomes["detail"]))
    assert "is not one of" in details["generate_schema_invalid"] and "datetime" in details["generate_type_mismatch"]
    # the judge was asked only for the answers that passed: one validate request per generate answer kept (an answer
    # outside the schema is no answer: the stage counts it as not ok)
    rejected_at_generate = outcomes.height - by_reason["generate_schema_invalid"]
    s = marker["stages"]
    assert s["validate"]["requests"] == s["generate"]["ok"] - rejected_at_generate
    validated = pl.read_parquet(tmp_path / "chunk" / "validated.parquet")
    assert validated.height > 0 and validated.filter(pl.col("kind") == "data")["producer_output"].null_count() == 0


# -- the flow: resume by chunk, faults, Dask --------------------------------------------------------
def _cli(shared_data: Path, server: FakeOpenAIServer, tmp: Path, name: str, *extra: str, limit: int = 60, chunk_size: int = 10,
         cache: str = "cache") -> list[str]:
    return ["--source", "codesearchnet", "--source-path", str(shared_data / "codesearchnet"), "--limit", str(limit),
            "--base-url", server.base_url, "--model", "fake", "--concurrency", "4", "--cache-dir", str(tmp / cache),
            "--output-root", str(tmp / "out"), "--dataset", name, "--rows-per-shard", "40", "--per-class", "1000",
            "--chunk-size", str(chunk_size), *extra]


def _shas(manifest: dict) -> list[tuple[str, str]]:
    return [(s["file"], s["sha256"]) for s in manifest["shards"]]


@pytest.mark.slow
def test_a_rerun_skips_finished_chunks_and_redoes_only_unfinished_ones_from_the_cache(shared_data, tmp_path, prefect_harness):
    from flows.build_tdi import build_tdi, config_from_args

    with FakeOpenAIServer() as server:
        args = _cli(shared_data, server, tmp_path, "chunked")
        first = build_tdi(config_from_args(args))
        sent = server.requests
        again = build_tdi(config_from_args(args))
        assert server.requests == sent  # every chunk was finished: nothing is sent, nothing is redone
        chunks = tmp_path / "out" / "chunked" / CHUNKS
        (chunks / "chunk-000002" / MARKER).unlink()  # as if killed before chunk 2's marker
        marker = json.loads((chunks / "chunk-000004" / MARKER).read_text())
        (chunks / "chunk-000004" / MARKER).write_text(json.dumps({**marker, "fingerprint": "other input"}))
        third = build_tdi(config_from_args(args))
        assert server.requests == sent  # redone from the cache
    assert first["execution"] == {"task_runner": "sequential", "chunk_size": 10, "chunks": 6, "chunks_reused": 0}
    assert again["execution"]["chunks_reused"] == 6 and third["execution"]["chunks_reused"] == 4
    assert _shas(first) == _shas(again) == _shas(third)
    assert first["accounting"] == again["accounting"] == third["accounting"]
    assert first["accounting"]["read"] == sum(json.loads((chunks / f"chunk-{i:06d}" / MARKER).read_text())["n_read"] for i in range(6))
    con = duckdb.connect(str(tmp_path / "out" / "chunked" / "records.duckdb"), read_only=True)
    assert con.execute("SELECT count(*), count(DISTINCT record_id) FROM record_outcomes").fetchone() == (first["accounting"]["read"],) * 2
    assert con.execute("SELECT count(*) FROM llm_calls").fetchone()[0] > 0


@pytest.mark.slow
def test_a_wrong_key_fails_the_run_at_once_and_all_failed_calls_fail_it_too(shared_data, tmp_path, prefect_harness):
    from flows.build_tdi import build_tdi, config_from_args

    with FakeOpenAIServer(api_key="right-key") as server:
        with pytest.raises(LLMEndpointError, match="HTTP 401"):
            build_tdi(config_from_args(_cli(shared_data, server, tmp_path, "bad-key", limit=40)))
        assert server.requests <= 4  # the requests in flight, not 40 x retries
    with FakeOpenAIServer(faults=FaultPlan(invalid_json=10_000)) as server:
        with pytest.raises(LLMStageFailed, match="extract: all 12 LLM requests failed"):
            build_tdi(config_from_args(_cli(shared_data, server, tmp_path, "all-fail", limit=12)))
    assert not (tmp_path / "out" / "all-fail" / "manifest.json").exists()
    con = duckdb.connect(str(tmp_path / "out" / "all-fail" / "records.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM record_outcomes WHERE reason = 'extract_invalid_json'").fetchone()[0] == 12


@pytest.mark.slow
def test_a_two_worker_dask_cluster_makes_the_same_shards_as_the_sequential_run(shared_data, tmp_path, prefect_harness):
    from flows.build_tdi import build_tdi, config_from_args

    with FakeOpenAIServer() as server:
        sequential = build_tdi(config_from_args(_cli(shared_data, server, tmp_path, "sequential", limit=-1, chunk_size=40)))
        sent = server.requests
        dask = build_tdi(config_from_args(_cli(shared_data, server, tmp_path, "dask", "--task-runner", "dask", "--dask-workers", "2",
                                               limit=-1, chunk_size=40, cache="cache-dask")))
        assert server.requests - sent == dask["llm_usage"]["requests_sent"]
    assert dask["execution"] == {"task_runner": "dask", "chunk_size": 40, "chunks": sequential["execution"]["chunks"], "chunks_reused": 0}
    assert sequential["execution"]["chunks"] >= 8
    assert _shas(dask) == _shas(sequential)
    assert dask["accounting"] == sequential["accounting"] and dask["accounting"]["read"] == 370
    # the same calls; which of two identical requests (two records with equal docs) is answered by the
    # cache depends on timing when their chunks run at the same time on two workers
    usage = lambda m: m["llm_usage"]["requests_sent"] + m["llm_usage"]["cache_hits"]  # noqa: E731
    assert usage(dask) == usage(sequential)
    assert abs(dask["llm_usage"]["requests_sent"] - sequential["llm_usage"]["requests_sent"]) <= 8


@pytest.mark.slow
def test_a_local_ray_instance_makes_the_same_shards_as_the_sequential_run(shared_data, tmp_path, prefect_harness):
    pytest.importorskip("prefect_ray", reason="task_runner ray needs the optional extra: pip install -e '.[ray]'")
    from flows.build_tdi import build_tdi, config_from_args

    with FakeOpenAIServer() as server:
        sequential = build_tdi(config_from_args(_cli(shared_data, server, tmp_path, "sequential", limit=120, chunk_size=40)))
        sent = server.requests
        ray = build_tdi(config_from_args(_cli(shared_data, server, tmp_path, "ray", "--task-runner", "ray", "--ray-cpus", "2",
                                              limit=120, chunk_size=40, cache="cache-ray")))
        assert server.requests - sent == ray["llm_usage"]["requests_sent"] > 0
    assert ray["execution"] == {"task_runner": "ray", "chunk_size": 40, "chunks": sequential["execution"]["chunks"], "chunks_reused": 0}
    assert sequential["execution"]["chunks"] >= 3
    assert _shas(ray) == _shas(sequential)
    assert ray["accounting"] == sequential["accounting"]


def test_reading_in_chunks_keeps_memory_flat_as_the_input_grows(tmp_path):
    import tracemalloc

    from bench.bench_build_tdi_scale import write_records

    write_records(tmp_path / "records", 6_000)
    spec = SourceSpec(kind="codesearchnet", path=tmp_path / "records", partitions=("train",))

    def peak(limit: int) -> int:
        tracemalloc.start()
        n = 0
        for chunk in iter_record_chunks(spec, limit, SourceFilter(max_chars=1800), 250):
            n += len(chunk.records)
        size, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert n == limit
        return top

    small, large = peak(1_000), peak(6_000)
    # 6x the records: only the dedup tables grow (~40-150 bytes a record: numpy arrays that double);
    # holding the records, as read_function_records does, would cost ~2 KB a record
    assert large - small < 5_000 * 300, (small, large)


def test_the_cli_passes_rate_limits_and_batch_mode_to_the_llm_layer(capsys):
    from flows.build_tdi import config_from_args

    endpoint = ["--base-url", "http://127.0.0.1:9/v1", "--model", "m"]
    cfg = config_from_args(endpoint + ["--rpm", "600", "--tpm", "90000", "--batch", "--batch-poll-s", "5"])
    assert (cfg.llm.rpm_limit, cfg.llm.tpm_limit, cfg.llm.batch, cfg.llm.batch_poll_s) == (600, 90000, True, 5.0)
    plain = config_from_args(endpoint)
    assert (plain.llm.rpm_limit, plain.llm.tpm_limit, plain.llm.batch) == (None, None, False)
    for argv, message in ((["--base-url", "embedded", "--batch"], "--batch needs an endpoint with the OpenAI Batch API"),
                          (endpoint + ["--rpm", "0"], "--rpm must be a positive number, got 0")):
        with pytest.raises(SystemExit) as exit_info:
            config_from_args(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
