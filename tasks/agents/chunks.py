"""Streaming, chunked build-tdi (docs/build-tdi.md): lazy record chunks, the three agents pipelined
per record, per-chunk Parquet outputs with a completion marker, and the books built from them.

* :func:`iter_record_chunks` reads a source lazily and yields :class:`RecordChunk` s of
  ``chunk_size`` accepted records (plus the items rejected on the way). It is the pipeline of
  :func:`tasks.sources.read_function_records` (``tasks.sources.read_items``: same order, same
  reasons, same details, deduplication in compact 64-bit hash tables and an on-disk string spill,
  ~40 bytes per accepted record), and it never holds more than one chunk.
* :func:`run_chunk` runs one chunk: for every record, agent 1 (extract), then agent 2 (generate)
  as soon as agent 1 answered, then agent 3 (validate): ``concurrency`` records are in flight, so
  the endpoint stays full instead of draining between agents. It writes ``validated.parquet``,
  ``outcomes.parquet``, ``ledger.parquet`` and ``given_docs.parquet`` (every API doc agent 1 wrote: the
  "no dependency" pool of a run too small to balance alone) into the chunk's folder, then ``done.json`` (the
  completion marker, with the chunk's fingerprint) last. While it runs, a progress line (records
  done, requests in flight, pairs accepted, rejections, rate, time left) at most every ``every_s``
  seconds (``tasks.common.progress``).
* :func:`finished` tells whether a chunk's marker matches its fingerprint: a rerun skips it and
  sends nothing for it.
* ``tasks.dataset.accounting.write_records_db_from_parquet`` builds ``records.duckdb`` from the chunk
  files with DuckDB, out of core, and checks the books.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from schemas.docs import canonical_doc_json, doc_id
from tasks.dataset.accounting import LEDGER_SCHEMA, OUTCOME_SCHEMA, AccountingError, check_read_ids
from schemas.tdi import DependentPair
from tasks.agents.requests import (
    ANSWER_CHECKS_VERSION,
    ExtractedDoc,
    extract_request,
    generate_request,
    interpret_extract,
    interpret_generate,
    interpret_validate,
    repair_request,
    validate_request,
)
from tasks.llm.client import StructuredLLM, run_workers
from tasks.llm.config import LLMConfig
from tasks.llm.ledger import ledger_rows, usage_summary
from tasks.llm.structured import StructuredRequest, StructuredResult
from tasks.agents.prompts import PROMPT_VERSIONS
from tasks.common.outcome import Outcome
from tasks.common.progress import EVERY_S, ProgressSnapshot, RecordProgress
from tasks.sources.filters import SourceFilter
from tasks.sources.read import read_items
from tasks.sources.spec import SourceConfigError, SourceSpec

CHUNKS = ".chunks"  # <dataset>/.chunks/chunk-NNNNNN/: the staging area of the chunk outputs
MARKER = "done.json"
CHUNK_FORMAT = "tgr-tdi-chunk-v4"  # bump when a chunk's outputs change meaning: old markers then mismatch (v4: given_docs)
CHUNK_FILES = ("validated.parquet", "outcomes.parquet", "ledger.parquet", "given_docs.parquet")
# A chunk closes at chunk_size accepted records, or at this many items read (a run of rejects).
MAX_ITEMS_PER_ACCEPTED = 4
# Request failures that a later run may not repeat (the endpoint was down or overloaded): a chunk
# that had any is redone by the next run (answered requests come from the cache).
_log = logging.getLogger(__name__)
TRANSIENT_REASONS = frozenset({"llm_timeout", "llm_connection", "llm_http_5xx", "llm_http_429", "llm_unavailable", "llm_bad_response"})

VALIDATED_SCHEMA = pa.schema(
    [
        pa.field("record_id", pa.string(), nullable=False),
        pa.field("satisfied", pa.int8(), nullable=False),  # 1: generated depends on given; 2: the reverse
        pa.field("dep_id", pa.string(), nullable=False),  # schemas.docs.doc_id of the dependent doc
        pa.field("dep_json", pa.string(), nullable=False),  # its canonical JSON
        pa.field("pre_id", pa.string(), nullable=False),
        pa.field("pre_json", pa.string(), nullable=False),
        pa.field("consumer_param", pa.string(), nullable=True),  # the dependent doc's input fed by the prerequisite
        pa.field("producer_output", pa.string(), nullable=True),  # the prerequisite doc's output that feeds it, where known
        pa.field("kind", pa.string(), nullable=False),  # schemas.tdi.DEPENDENCY_KINDS: DependentPair.kind
    ]
)
# Every API doc agent 1 wrote in the chunk (its record's "given" doc), whatever became of the record.
GIVEN_DOCS_SCHEMA = pa.schema(
    [
        pa.field("record_id", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),  # schemas.docs.doc_id
        pa.field("doc_json", pa.string(), nullable=False),  # its canonical JSON
    ]
)


# -- lazy record chunks ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ChunkRecord:
    """What the agents need of a function record."""

    record_id: str
    code: str
    language: str


@dataclass
class RecordChunk:
    """One chunk of the read: its accepted records and the items rejected while reading it."""

    index: int
    records: list[ChunkRecord]
    rejected: list[Outcome]  # stage read, each at its locator
    n_read: int
    fingerprint: str  # sha256 of the chunk's input (ids, code, rejections)


def iter_record_chunks(
    spec: SourceSpec, limit: int | None = None, source_filter: SourceFilter | None = None, chunk_size: int = 1000
) -> Iterator[RecordChunk]:
    """The records of ``spec`` in chunks, read lazily (``read_function_records`` semantics: the same
    pipeline, ``tasks.sources.read_items``).

    Every item read is in exactly one chunk, accepted or rejected; ``sum(c.n_read)`` is the items
    read. Chunk k holds the items read after chunk k-1 until ``chunk_size`` records were accepted
    (or ``4 * chunk_size`` items were read), so chunks depend only on the source, the filter, the
    limit and ``chunk_size``.

    ``spec.sample_seed`` samples records only when there is a ``limit``: the candidate list is then
    shuffled in memory first, exactly as ``read_function_records`` does. Without a limit every
    record is read anyway, in file order, so memory stays flat (which of two duplicates is kept
    then follows file order).
    """
    if chunk_size < 1:
        raise SourceConfigError(f"chunk_size must be >= 1, got {chunk_size}")
    index = chunk_read = 0
    records: list[ChunkRecord] = []
    rejected: list[Outcome] = []
    digest = hashlib.sha256()

    def close_chunk() -> RecordChunk:
        nonlocal records, rejected, digest, chunk_read, index
        chunk = RecordChunk(index, records, rejected, chunk_read, digest.hexdigest())
        records, rejected, digest, chunk_read = [], [], hashlib.sha256(), 0
        index += 1
        return chunk

    # code_tokens (the tree sources' costly ``finish``) are not needed by the agents
    for got in read_items(spec, limit, source_filter, sample_whole_source=False, finish=False):
        chunk_read += 1
        if isinstance(got, Outcome):
            rejected.append(got)
            digest.update(f"R\0{got.locator}\0{got.reason}\0".encode("utf-8", "surrogatepass"))
        else:
            records.append(ChunkRecord(got.record_id, got.code, got.language))
            digest.update(f"A\0{got.record_id}\0{got.language}\0".encode("utf-8", "surrogatepass"))
            digest.update(got.code.encode("utf-8", "surrogatepass"))
        if len(records) >= chunk_size or chunk_read >= MAX_ITEMS_PER_ACCEPTED * chunk_size:
            yield close_chunk()
    if chunk_read:
        yield close_chunk()


# -- fingerprints and markers ---------------------------------------------------------------------
def work_fingerprint(llm: LLMConfig, max_code_chars: int) -> str:
    """What, besides its input, determines a chunk's outputs (not the endpoint, cache or concurrency)."""
    material = {
        "format": CHUNK_FORMAT,
        "model": llm.model,
        "temperature": llm.temperature,
        "max_tokens": llm.max_tokens,
        "strict": llm.strict_schema,
        "parse_attempts": llm.parse_attempts,
        "prompts": PROMPT_VERSIONS,
        "answer_checks": ANSWER_CHECKS_VERSION,
        "max_code_chars": max_code_chars,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def chunk_dir(root: Path, index: int) -> Path:
    return root / f"chunk-{index:06d}"


def read_marker(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / MARKER).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def finished(folder: Path, fingerprint: str) -> dict[str, Any] | None:
    """The chunk's marker when its outputs are complete and were made from this very input and
    work, with no request left failed by a transient error; else None (the chunk is redone)."""
    marker = read_marker(folder)
    if marker is None or marker.get("fingerprint") != fingerprint or marker.get("transient_failures", 0):
        return None
    if not all((folder / name).exists() for name in CHUNK_FILES):
        return None
    return marker


@dataclass(frozen=True)
class ChunkJob:
    """Everything a worker needs to run one chunk (picklable: it travels to Dask workers)."""

    chunk: RecordChunk
    folder: str
    llm: LLMConfig
    max_code_chars: int
    fingerprint: str
    precondition_share: float = 0.0  # records sent to agent 2's precondition mode (tasks.agents.requests.pair_kind)
    generate_repairs: int = 0  # times agent 2 is asked again after a check in code discarded its answer


@dataclass
class StageCounts:
    requests: int = 0
    ok: int = 0
    reasons: Counter = field(default_factory=Counter)
    repairs: int = 0  # generate: requests that asked again after a check discarded an answer (in ``requests`` too)
    repaired: int = 0  # ... whose answer then passed the checks

    def add(self, result: StructuredResult) -> None:
        self.requests += 1
        if result.ok:
            self.ok += 1
        else:
            self.reasons[result.reason] += 1


# -- the agents, pipelined per record -------------------------------------------------------------
async def _with_repairs(extracted: ExtractedDoc, asked: StructuredRequest, answer: StructuredResult,
                        ask: Callable[[StructuredRequest], Awaitable[StructuredResult]], repairs: int,
                        counts: StageCounts) -> DependentPair | Outcome:
    """Agent 2's answer as a pair, asking again up to ``repairs`` times while a check in code discards it
    (:func:`tasks.agents.requests.repair_request`); the last rejection says how many times it was asked again."""
    pair = interpret_generate(extracted, answer)
    for n in range(1, repairs + 1):
        again = repair_request(asked, answer, pair) if isinstance(pair, Outcome) else None
        if again is None:
            break
        asked, answer = again, await ask(again)
        pair = _repaired(interpret_generate(extracted, answer), n, repairs, counts)
    return pair


def _repaired(pair: DependentPair | Outcome, n: int, repairs: int, counts: StageCounts) -> DependentPair | Outcome:
    """The answer to repair round ``n`` of ``repairs``, counted; a rejection after the last round says so."""
    counts.repairs += 1
    if not isinstance(pair, Outcome):
        counts.repaired += 1
        return pair
    return replace(pair, detail=f"{pair.detail} (asked {n} more time{'s' * (n > 1)})") if n == repairs else pair


def _from_cache(result: StructuredResult) -> bool:
    """Whether the answer came from the LLM cache without a call (``tasks.llm.client``: outcome ``cache_hit``)."""
    return bool(result.calls) and all(c.outcome == "cache_hit" for c in result.calls)


async def _pipelined(llm: StructuredLLM, records: Sequence[ChunkRecord], max_code_chars: int,
                     counts: dict[str, StageCounts], precondition_share: float = 0.0,
                     progress: RecordProgress | None = None, generate_repairs: int = 0,
                     given: list[ExtractedDoc] | None = None) -> list[DependentPair | Outcome]:
    """extract -> generate -> validate per record, ``concurrency`` records at a time: a record's
    next call goes out as soon as its previous one answered; a generate answer a check discards is asked
    again up to ``generate_repairs`` times. Every doc agent 1 wrote is appended to ``given``."""
    out: list[DependentPair | Outcome] = []
    given = given if given is not None else []
    todo = iter(records)
    progress = progress or RecordProgress(len(records))

    async def call(stage: str, request: StructuredRequest, answered: list[bool]) -> StructuredResult:
        progress.request_started()
        try:
            result = await llm.run_one(request)
        finally:
            progress.request_ended()
        counts[stage].add(result)
        answered.append(not _from_cache(result))
        return result

    def finish(item: DependentPair | Outcome, answered: list[bool]) -> None:
        out.append(item)
        progress.record_done(accepted=not isinstance(item, Outcome), replayed=not any(answered))

    async def worker() -> None:
        for rec in todo:
            answered: list[bool] = []  # per request of this record: did the LLM answer it (not the cache)
            extracted = interpret_extract(await call("extract", extract_request(rec.record_id, rec.code, rec.language, max_code_chars),
                                                     answered), precondition_share)
            if isinstance(extracted, Outcome):
                finish(extracted, answered)
                continue
            given.append(extracted)
            asked = generate_request(extracted)
            if isinstance(asked, Outcome):  # no value can pass to or from the given API
                finish(asked, answered)
                continue
            pair = await _with_repairs(extracted, asked, await call("generate", asked, answered),
                                       lambda r: call("generate", r, answered), generate_repairs, counts["generate"])
            if isinstance(pair, Outcome):
                finish(pair, answered)
                continue
            finish(interpret_validate(pair, await call("validate", validate_request(pair), answered)), answered)

    try:
        await run_workers(worker, min(max(1, llm.cfg.in_flight), len(records)))
    finally:
        await llm.aclose()  # commits queued answers, closes the HTTP transport on this loop
    return out


async def _stagewise(llm: StructuredLLM, records: Sequence[ChunkRecord], max_code_chars: int,
                     counts: dict[str, StageCounts], precondition_share: float = 0.0,
                     progress: RecordProgress | None = None, generate_repairs: int = 0,
                     given: list[ExtractedDoc] | None = None) -> list[DependentPair | Outcome]:
    """Batch API mode: one batch per agent and chunk (a batch needs all its requests up front); the
    generate answers a check discards go in one more batch per repair round. Every doc agent 1 wrote is
    appended to ``given``."""
    out: list[DependentPair | Outcome] = []
    given = given if given is not None else []
    progress = progress or RecordProgress(len(records))

    async def stage(name: str, requests: list[StructuredRequest]) -> list[StructuredResult]:
        progress.request_started(len(requests))
        try:
            results = await llm.run_many(requests) if requests else []
        finally:
            progress.request_ended(len(requests))
        for r in results:
            counts[name].add(r)
        return results

    def rejected(item: Any) -> bool:
        if isinstance(item, Outcome):
            out.append(item)
            progress.record_done(accepted=False)
            return True
        return False

    answers = await stage("extract", [extract_request(r.record_id, r.code, r.language, max_code_chars) for r in records])
    extracted = [e for e in (interpret_extract(a, precondition_share) for a in answers) if not rejected(e)]
    given.extend(extracted)
    kept = [(e, r) for e in extracted if not rejected(r := generate_request(e))]  # rejected: no value can pass
    extracted, asked = [e for e, _ in kept], [r for _, r in kept]
    answers = await stage("generate", asked)
    pairs = list(map(interpret_generate, extracted, answers))
    for n in range(1, generate_repairs + 1):  # one batch per round: the answers a check discarded, asked again
        again = {i: r for i, p in enumerate(pairs) if isinstance(p, Outcome)
                 and (r := repair_request(asked[i], answers[i], p)) is not None}
        if not again:
            break
        for (i, request), answer in zip(again.items(), await stage("generate", list(again.values()))):
            asked[i], answers[i] = request, answer
            pairs[i] = _repaired(interpret_generate(extracted[i], answer), n, generate_repairs, counts["generate"])
    generated = [p for p in pairs if not rejected(p)]
    for item in map(interpret_validate, generated, await stage("validate", [validate_request(p) for p in generated])):
        out.append(item)
        progress.record_done(accepted=not isinstance(item, Outcome))
    return out


async def _reporting(work: Awaitable[Any], progress: RecordProgress) -> Any:
    """``work``, with a progress report whenever one is due: a timer, since on a slow endpoint no record
    may finish for minutes. Reports run in a thread: a sink may block (a Prefect API call), and Prefect's
    sync functions called on a running loop would hand back a coroutine instead of running."""
    async def tick() -> None:
        while True:
            await asyncio.sleep(max(progress.due_in(), 0.05))
            await asyncio.to_thread(progress.maybe_report)

    ticker = asyncio.create_task(tick())
    try:
        return await work
    finally:
        ticker.cancel()


def _write_parquet(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def validated_row(p: DependentPair) -> dict[str, Any]:
    dep_json, pre_json = canonical_doc_json(p.dependent), canonical_doc_json(p.prerequisite)
    return {"record_id": p.record_id, "satisfied": p.satisfied, "dep_id": doc_id(dep_json), "dep_json": dep_json,
            "pre_id": doc_id(pre_json), "pre_json": pre_json, "consumer_param": p.consumer_param,
            "producer_output": p.producer_output, "kind": p.kind}


def given_doc_row(e: ExtractedDoc) -> dict[str, Any]:
    doc_json = canonical_doc_json(e.doc)
    return {"record_id": e.record_id, "doc_id": doc_id(doc_json), "doc_json": doc_json}


def write_chunk_outputs(folder: Path, validated: Sequence[dict], outcomes: Sequence[dict], ledger: Sequence[dict],
                        marker: dict[str, Any], given_docs: Sequence[dict] = ()) -> None:
    """The chunk's Parquet files (each atomically), then its marker, last."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).unlink(missing_ok=True)
    _write_parquet(pa.Table.from_pylist(sorted(validated, key=lambda r: r["record_id"]), schema=VALIDATED_SCHEMA), folder / "validated.parquet")
    _write_parquet(pa.Table.from_pylist(sorted(outcomes, key=lambda r: r["record_id"]), schema=OUTCOME_SCHEMA), folder / "outcomes.parquet")
    _write_parquet(pa.Table.from_pylist(list(ledger), schema=LEDGER_SCHEMA), folder / "ledger.parquet")
    _write_parquet(pa.Table.from_pylist(sorted(given_docs, key=lambda r: r["record_id"]), schema=GIVEN_DOCS_SCHEMA),
                   folder / "given_docs.parquet")
    tmp = folder / (MARKER + ".tmp")
    tmp.write_text(json.dumps(marker, indent=1, sort_keys=True))
    os.replace(tmp, folder / MARKER)


def run_chunk(job: ChunkJob, say: Callable[[str], None] | None = None,
              progress_sinks: tuple[Callable[[ProgressSnapshot], None], ...] = (), every_s: float = EVERY_S) -> dict[str, Any]:
    """Run the three agents over one chunk, write its outputs and marker; returns the marker. While it
    runs, a progress line goes to ``say`` (default: this module's logger) and its snapshot to each of
    ``progress_sinks`` at most every ``every_s`` seconds, and once at the end."""
    chunk = job.chunk
    check_read_ids([r.record_id for r in chunk.records] + [r.key for r in chunk.rejected], chunk.n_read,
                   f"chunk {chunk.index}: ")
    llm = StructuredLLM(job.llm)
    counts = {stage: StageCounts() for stage in ("extract", "generate", "validate")}
    runner = _stagewise if job.llm.batch else _pipelined
    progress = RecordProgress(len(chunk.records), f"chunk {chunk.index}", say=say or _log.info, sinks=progress_sinks,
                              every_s=every_s)
    if chunk.records:
        progress.report()  # a first line as the chunk starts: its first answer can be a minute away on a small model
    try:
        given: list[ExtractedDoc] = []
        results = asyncio.run(_reporting(runner(llm, chunk.records, job.max_code_chars, counts, job.precondition_share, progress,
                                                job.generate_repairs, given), progress)) if chunk.records else []
        ledger = ledger_rows(llm.ledger)
    finally:
        llm.cache.close()
    progress.report()  # the chunk's last line: its rate over the whole chunk
    # the books key a read rejection by its locator (file:line): unique even for repeated bad lines
    outcomes = [r.row() for r in chunk.rejected]
    validated = []
    for item in results:
        if isinstance(item, Outcome):
            outcomes.append(item.row())
        else:
            validated.append(validated_row(item))
    marker = {
        "format": CHUNK_FORMAT,
        "index": chunk.index,
        "fingerprint": job.fingerprint,
        "n_read": chunk.n_read,
        "records": len(chunk.records),
        "read_rejected": len(chunk.rejected),
        "validated": len(validated),
        "rejected": len(outcomes),
        "stages": {s: {"requests": c.requests, "ok": c.ok, "failed_by_reason": dict(c.reasons),
                       **({"repairs": c.repairs, "repaired": c.repaired} if s == "generate" else {})}
                   for s, c in counts.items()},
        "transient_failures": sum(n for c in counts.values() for r, n in c.reasons.items() if r in TRANSIENT_REASONS),
        "llm_usage": usage_summary(ledger),
    }
    if len(validated) + len(outcomes) != chunk.n_read:
        raise AccountingError(f"chunk {chunk.index}: read {chunk.n_read} items but {len(validated)} validated + "
                              f"{len(outcomes)} rejected")
    write_chunk_outputs(Path(job.folder), validated, outcomes, ledger, marker, [given_doc_row(e) for e in given])
    return marker


def stage_totals(markers: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for m in markers:
        for stage, c in m["stages"].items():
            t = out.setdefault(stage, {"requests": 0, "ok": 0, "failed_by_reason": Counter()})
            t["requests"] += c["requests"]
            t["ok"] += c["ok"]
            t["failed_by_reason"].update(c["failed_by_reason"])
            for key in ("repairs", "repaired"):  # generate's, in markers written since repairs exist
                if key in c:
                    t[key] = t.get(key, 0) + c[key]
    return out
