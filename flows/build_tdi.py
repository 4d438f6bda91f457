"""build-tdi: function records -> three LLM agents -> validated pairs -> balanced Parquet TDI shards.

Streaming and chunked (docs/build-tdi.md): records are read lazily in chunks; each chunk is a
Prefect task that runs the three agents pipelined per record and writes its validated pairs,
outcomes and LLM ledger to Parquet under ``<dataset>/.chunks`` plus a completion marker, so a
rerun skips finished chunks. Chunks run one after another in this process (``task_runner
'sequential'``) or as tasks on a Dask cluster (``'dask'``, prefect-dask) or a Ray cluster (``'ray'``,
prefect-ray, the optional extra ``ray``). Balancing and sharding
read the chunk outputs lazily with polars; the shards are staged, gated, then published with the
manifest last.

Run directly (``python -m flows.build_tdi --help``) or through the Prefect deployment in
prefect.yaml (``prefect deployment run build-tdi/stdlib-demo``).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from tasks.common.flow_cli import FlowCLI  # first: Prefect analytics off before Prefect loads
from models.embedded_llm.catalog import DEFAULT_MODEL
from tasks.dataset.accounting import AccountingError, AccountingSummary, ledger_usage, write_records_db_from_parquet
from tasks.dataset.balance import BalanceConfig, BalancePlan, plan_balance
from tasks.agents.chunks import (
    CHUNKS,
    ChunkJob,
    chunk_dir,
    finished,
    iter_record_chunks,
    run_chunk,
    stage_totals,
    work_fingerprint,
)
from tasks.common.cli import Flag, Help, parse_config
from tasks.common.progress import PrefectProgressArtifact, RecordProgress
from tasks.llm.config import EMBEDDED, EMBEDDED_CONCURRENCY, ENDPOINT_CONCURRENCY, LLMConfig
from tasks.llm.errors import LLMEndpointError, LLMStageFailed, LLMUnavailableError
from tasks.llm.preflight import preflight
from tasks.agents.prompts import PROMPT_VERSIONS
from tasks.dataset.hub import check_push, check_repo_id, push_dataset
from tasks.dataset.publish import dataset_lock, fresh_staging
from tasks.dataset.shards import ShardConfig, ShardInfo, build_manifest, write_dataset_card, write_planned_shards
from tasks.sources.filters import SourceFilter
from tasks.sources.read import check_source, nothing_read
from tasks.sources.spec import EmptySourceError, SourceSpec

MINING_WORKERS = 2  # parser processes of --mined-per-class (the project's 2 cores; the LLM server is stopped by then)
JOURNALS = "calls"  # <chunk>/calls/<fingerprint[:16]>-<attempt>.jsonl: the LLM calls of every attempt at the chunk
TASK_RUNNERS = ("sequential", "dask", "ray")

# The sub-fields of the nested configs that are on the command line, under their flat flag names.
SOURCE_FLAGS = {
    "kind": Flag("source", "where functions come from: the CodeSearchNet release layout, the hub copy (online), a local "
                           "Python tree, or this interpreter's standard library"),
    "path": Flag("source-path", "CodeSearchNet release root, or a source tree (stdlib: another stdlib folder)"),
    "languages": Flag(help="comma separated (codesearchnet, hf)"),
    "partitions": Flag(help="comma separated (codesearchnet, hf)"),
    "sample_seed": Flag(help="sample records across files when there is a limit (-1 or none: file order)", none_if_negative=True),
}
LLM_FLAGS = {
    "base_url": Flag("base-url", f"OpenAI-compatible endpoint, or '{EMBEDDED}' (the packaged llama.cpp server, started by "
                                 f"the run); none: OPENAI_BASE_URL when set, else {EMBEDDED} (BuildTDIConfig.resolved)"),
    "model": Flag(help="model name at --base-url (on the embedded server: --embedded-model)"),
    "concurrency": Flag(help=f"requests in flight per chunk; none: {EMBEDDED_CONCURRENCY} on the embedded server (one "
                             f"slot), {ENDPOINT_CONCURRENCY} on an endpoint"),
    "max_tokens": Flag(help="completion tokens per answer, at most"),
    "timeout_s": Flag("timeout-s", "seconds per request"),
    "cache_dir": Flag(help="LLM answer cache (a rerun repeats no answered request)"),
    "price_in_per_mtok": Flag("price-in", "USD per 1M prompt tokens (ledger cost estimate)"),
    "price_out_per_mtok": Flag("price-out", "USD per 1M completion tokens"),
    "rpm_limit": Flag("rpm", "requests per minute to stay under (the endpoint's x-ratelimit-* headers tighten it "
                             "further); none: no local limit"),
    "tpm_limit": Flag("tpm", "tokens per minute to stay under (prompt estimate + max tokens, as OpenAI counts); none: "
                             "no local limit"),
    "batch": Flag(help="OpenAI Batch API instead of online calls (half the price, answers within 24 h; a resume polls "
                       "the stored batches, docs/llm.md)"),
    "batch_poll_s": Flag("batch-poll-s", "seconds between batch status polls"),
}
BALANCE_FLAGS = {
    "per_class": Flag(help="target pairs per class (paper: 92000)"),
    "validation_fraction": Flag(help="share of pairs in the validation split"),
    "seed": Flag(help="seed of balancing and of the shard order"),
}
SHARD_FLAGS = {"rows_per_shard": Flag(help="rows per Parquet shard"), "seed": Flag(help="seed of balancing and of the shard order")}
# Mined pairs per class the embedded default adds (--mined-per-class none): a 1.5B model on 2 cores yields a
# handful of pairs in its 15 minutes, so the dataset "trains something" only with these. 500 of the ~1,200
# distinct pairs the stdlib gives; mining it takes about a minute on 2 cores (docs/build-tdi.md).
EMBEDDED_MINED_PER_CLASS = 500
# Agent 2's precondition mode: half the records on an endpoint; none on the embedded 1.5B model, whose judge found
# the order "not required" for 12 of its 12 precondition partners over two runs, so they only halved its pairs.
PRECONDITION_SHARE, EMBEDDED_PRECONDITION_SHARE = 0.5, 0.0


@dataclass(frozen=True)
class BuildTDIConfig:
    """The one config surface of build-tdi: the flow's parameter (Prefect UI, prefect.yaml) and, generated
    from it, the command line (``tasks/common/cli.py``). Every default is here; see :meth:`resolved` for the two
    that depend on the environment (the endpoint and the requests in flight)."""

    dataset: Annotated[str, Help("output folder name under --output-root")] = "tdi-stdlib-demo"
    output_root: Annotated[str, Help("where datasets are written")] = "artifacts/tdi"
    source: SourceSpec = field(default_factory=lambda: SourceSpec(kind="stdlib", sample_seed=13), metadata={"cli": SOURCE_FLAGS})
    source_filter: SourceFilter = field(default_factory=lambda: SourceFilter(max_chars=1800), metadata={"cli": {}})
    limit: Annotated[int | None, Help("function records to accept (-1 or none: all)")] = field(
        default=20, metadata={"cli": Flag(none_if_negative=True)})  # about 10 min on 2 cores, embedded
    max_code_chars: Annotated[int, Help("characters of a function agent 1 sees (prompt budget of small models)")] = 1800
    # About half of the dependencies in real tool sets carry no data (docs/build-tdi.md, "Two kinds of pair").
    precondition_share: Annotated[float | None, Help(
        "share of records whose agent 2 writes a precondition partner (an API that must be called before or after "
        "the given one, no parameter passed) instead of a data-flow partner, and whose agent 3 judges whether that "
        "order is required; chosen per record by a seeded hash of its id (stable across reruns); 0: data flow only; "
        f"none: {PRECONDITION_SHARE} on an endpoint, {EMBEDDED_PRECONDITION_SHARE} on the embedded server (its 1.5B "
        "judge accepted none)")] = None
    generate_repairs: Annotated[int, Help(
        "times agent 2 is asked again, in the same conversation, when a check in code discards its answer (the "
        "given API echoed, a hand-over naming no such parameter or joining two types): the reason is said and the "
        "task repeated; 0: never")] = 1
    mined_per_class: Annotated[int | None, Help(
        "mined pairs per class added to the LLM's: this interpreter's standard library mined as mine-tdi mines it "
        "(no LLM; about a minute on 2 cores), balanced into up to this many pairs per class with their own origins "
        "(mined, mined_swapped, hard_negative) and every mined pair in the books; 0: none; -1 or none: "
        f"{EMBEDDED_MINED_PER_CLASS} on the embedded server (a small model on 2 cores yields a handful of pairs), "
        "0 on an endpoint")] = field(default=None, metadata={"cli": Flag(none_if_negative=True)})
    llm: LLMConfig = field(default_factory=lambda: LLMConfig(model=DEFAULT_MODEL), metadata={"cli": LLM_FLAGS})
    embedded_model: Annotated[str, Help("packaged GGUF model the embedded server runs (--base-url embedded)")] = DEFAULT_MODEL
    balance: BalanceConfig = field(default_factory=BalanceConfig, metadata={"cli": BALANCE_FLAGS})
    shards: ShardConfig = field(default_factory=ShardConfig, metadata={"cli": SHARD_FLAGS})
    # -- execution at scale (docs/build-tdi.md) --
    chunk_size: Annotated[int, Help(
        "accepted records per chunk: the unit of work, of resume and of a Dask task. Each chunk's validated pairs, outcomes "
        "and LLM ledger go to Parquet under <dataset>/.chunks with a completion marker; a rerun skips finished chunks. "
        "Memory holds one chunk per chunk in flight")] = 1000
    task_runner: Annotated[Literal["sequential", "dask", "ray"], Help(
        "sequential: chunks one after another in this process; dask: chunks as Prefect tasks on a Dask cluster "
        "(prefect-dask), a local one or dask_address; ray: the same on a Ray cluster (prefect-ray, `pip install "
        "-e .[ray]`), a local one or ray_address")] = "sequential"
    dask_address: Annotated[str | None, Help(
        "scheduler address of a running Dask cluster (tcp://host:8786) for task_runner dask; none or empty: start a local "
        "cluster of dask_workers processes")] = None
    dask_workers: Annotated[int, Help("worker processes (1 thread each) of the local Dask cluster")] = 2
    ray_address: Annotated[str | None, Help(
        "address of a running Ray cluster (ray://host:10001, or auto) for task_runner ray; none or empty: start a local "
        "Ray instance of ray_cpus CPUs")] = None
    ray_cpus: Annotated[int, Help("CPUs of the local Ray instance (one chunk per CPU)")] = 2
    chunks_in_flight: Annotated[int | None, Help(
        "chunks submitted and not yet finished, at most (none: 2 per Dask worker thread, 1 sequential); bounds the "
        "flow's memory")] = None
    # -- the Hugging Face hub (docs/build-tdi.md, tasks/dataset/hub.py) --
    push_to_hub: Annotated[str | None, Help(
        "after a successful publish, upload the published dataset (shards, card, manifest, quality.json; not "
        "records.duckdb) to this hub dataset repo (namespace/name) as one commit; the token from HF_TOKEN only")] = None
    private: Annotated[bool, Help("with --push-to-hub: create the repo private (an existing one keeps its visibility)")] = False

    def __post_init__(self) -> None:
        check_repo_id(self.push_to_hub)
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, not {self.chunk_size}")
        if self.task_runner not in TASK_RUNNERS:
            raise ValueError(f"task_runner must be one of {', '.join(TASK_RUNNERS)}, not {self.task_runner!r}")
        if min(self.dask_workers, self.ray_cpus, self.chunks_in_flight or 1) < 1:
            raise ValueError("dask_workers, ray_cpus and chunks_in_flight must be >= 1")
        for name in ("dask_address", "ray_address"):
            if getattr(self, name) == "":
                object.__setattr__(self, name, None)
        for flag, value in (("--rpm", self.llm.rpm_limit), ("--tpm", self.llm.tpm_limit)):
            if value is not None and value <= 0:
                raise ValueError(f"{flag} must be a positive number, got {value}")
        # every other number of the command line in its range, before any work (nested configs included)
        for flag, value, least in (("--limit", self.limit, 1), ("--max-code-chars", self.max_code_chars, 1),
                                   ("--per-class", self.balance.per_class, 1),
                                   ("--rows-per-shard", self.shards.rows_per_shard, 1),
                                   ("--max-tokens", self.llm.max_tokens, 1), ("--concurrency", self.llm.concurrency, 1)):
            if value is not None and value < least:
                raise ValueError(f"{flag} {value}: must be at least {least}")
        if self.mined_per_class is not None and (isinstance(self.mined_per_class, bool) or self.mined_per_class < 0):
            raise ValueError(f"--mined-per-class {self.mined_per_class}: a count >= 0 (0: no mined pairs; none: "
                             f"{EMBEDDED_MINED_PER_CLASS} on the embedded server, 0 on an endpoint)")
        if self.generate_repairs < 0:
            raise ValueError(f"--generate-repairs {self.generate_repairs}: must be >= 0 (0: never ask again)")
        if self.precondition_share is not None and not 0.0 <= self.precondition_share <= 1.0:
            raise ValueError(f"--precondition-share {self.precondition_share}: must lie in [0, 1] (0: data-flow pairs only)")
        if not 0.0 <= self.balance.validation_fraction < 1.0:
            raise ValueError(f"--validation-fraction {self.balance.validation_fraction}: must lie in [0, 1) (0: no "
                             "validation split)")
        for flag, value in (("--timeout-s", self.llm.timeout_s), ("--batch-poll-s", self.llm.batch_poll_s)):
            if not value > 0:
                raise ValueError(f"{flag} {value}: must be above 0")
        for flag, value in (("--price-in", self.llm.price_in_per_mtok), ("--price-out", self.llm.price_out_per_mtok)):
            if not value >= 0:
                raise ValueError(f"{flag} {value}: must not be negative")

    def resolved(self) -> BuildTDIConfig:
        """The config a run uses, for the command line and a deployment alike: ``llm.base_url`` None
        is OPENAI_BASE_URL when set, else the embedded server; ``llm.concurrency`` None is
        ``LLMConfig.in_flight`` for that endpoint (1 embedded, 16 otherwise); ``mined_per_class`` None is
        EMBEDDED_MINED_PER_CLASS on the embedded server, 0 on an endpoint; ``precondition_share`` None is
        EMBEDDED_PRECONDITION_SHARE on the embedded server, PRECONDITION_SHARE on an endpoint."""
        llm = replace(self.llm, base_url=self.llm.base_url or os.environ.get("OPENAI_BASE_URL") or EMBEDDED)
        if llm.batch and llm.base_url == EMBEDDED:
            raise ValueError("--batch needs an endpoint with the OpenAI Batch API (--base-url URL); the embedded server has none")
        mined = self.mined_per_class if self.mined_per_class is not None else (
            EMBEDDED_MINED_PER_CLASS if llm.base_url == EMBEDDED else 0)
        share = self.precondition_share if self.precondition_share is not None else (
            EMBEDDED_PRECONDITION_SHARE if llm.base_url == EMBEDDED else PRECONDITION_SHARE)
        return replace(self, llm=replace(llm, concurrency=llm.in_flight), mined_per_class=mined, precondition_share=share)

    @property
    def out_dir(self) -> Path:
        return Path(self.output_root) / self.dataset


# -- tasks --------------------------------------------------------------------------------------
def _retry_unless_fatal(task: Any, task_run: Any, state: Any) -> bool:
    """Retry a chunk after a transient error, never after a wrong endpoint/key/model, an endpoint
    that is down, or books that do not balance."""
    try:
        state.result()
    except (LLMEndpointError, LLMUnavailableError, AccountingError):
        return False
    except BaseException:
        return True
    return True


def chunk_journals(folder: Path, fingerprint: str) -> list[Path]:
    """The call journals of every attempt at a chunk with this fingerprint (failed, killed or not)."""
    return sorted((folder / JOURNALS).glob(f"{fingerprint[:16]}-*.jsonl"))


def _check(cfg: BuildTDIConfig) -> None:
    """Before any work: the endpoint settings, the source (a wrong, missing or empty path) and a hub push's token."""
    cfg.resolved()
    check_source(cfg.source)
    check_push(cfg.push_to_hub)


def config_from_args(argv: Sequence[str] | None = None) -> BuildTDIConfig:
    """The command line, generated from BuildTDIConfig: its defaults, flags given override them."""
    return parse_config(BuildTDIConfig, argv, "python -m flows.build_tdi", __doc__, check=_check)


# python -m: --help and usage errors answer here, before the imports below (Prefect, models) are paid for
CLI = FlowCLI.start(__name__, config_from_args, "python -m flows.build_tdi")

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
# quote(x): Prefect passes x to the task without walking it for futures (a walk costs about 0.4 ms a row)
from prefect.utilities.annotations import quote  # noqa: E402
from tasks.dataset.gate import publish_with_card, quality_gate  # noqa: E402

push_to_hub = task(name="push-to-hub", cache_policy=NO_CACHE)(push_dataset)  # no retries: a failure says how to retry


@task(name="process-chunk", task_run_name="chunk-{job.chunk.index}", retries=2, retry_delay_seconds=10,
      retry_condition_fn=_retry_unless_fatal, cache_policy=NO_CACHE)
def process_chunk(job: ChunkJob) -> dict[str, Any]:
    """The three agents over one chunk, pipelined per record; writes the chunk's outputs and
    marker. Retries are cheap: answered requests come from the cache. Each attempt journals its
    LLM calls as they end, so the books count the requests of attempts that failed or were killed."""
    folder = Path(job.folder)
    for stale in (folder / JOURNALS).glob("*.jsonl"):  # of an earlier input or configuration, whose outputs this replaces
        if not stale.name.startswith(job.fingerprint[:16]):
            stale.unlink(missing_ok=True)
    journal = folder / JOURNALS / f"{job.fingerprint[:16]}-{uuid.uuid4().hex[:12]}.jsonl"
    marker = run_chunk(replace(job, llm=replace(job.llm, ledger_journal=str(journal))), say=get_run_logger().info,
                       progress_sinks=(PrefectProgressArtifact("build-tdi"),))
    s = marker["stages"]
    get_run_logger().info(
        "chunk %d: read %d, validated %d, rejected %d; extract %d/%d, generate %d/%d (%d asked again, %d then passed), "
        "validate %d/%d parsed; %s",
        job.chunk.index, marker["n_read"], marker["validated"], marker["rejected"], s["extract"]["ok"], s["extract"]["requests"],
        s["generate"]["ok"], s["generate"]["requests"], s["generate"].get("repairs", 0), s["generate"].get("repaired", 0),
        s["validate"]["ok"], s["validate"]["requests"], marker["llm_usage"],
    )
    return marker


@task(name="balance-classes", cache_policy=NO_CACHE)
def balance(validated_files: list[str], cfg: BalanceConfig, outcomes_file: Path, given_doc_files: list[str]) -> BalancePlan:
    """The balance plan; its outcomes (one row per validated pair) go to ``outcomes_file`` for the books. A run too
    small to draw its 'no dependency' pairs from its own pairs' docs draws them from its other agent-1 docs too."""
    plan = plan_balance(validated_files, cfg, given_doc_files)
    plan.write_outcomes(outcomes_file)
    get_run_logger().info("balanced: %d pairs per class, per split %s", plan.per_class, plan.per_split)
    return plan


@task(name="write-shards", cache_policy=NO_CACHE)
def write_dataset(plan: BalancePlan, out_dir: Path, cfg: ShardConfig, extra_rows: list[dict] | None = None) -> list[ShardInfo]:
    return write_planned_shards(plan, out_dir, cfg, extra_rows=extra_rows or ())


@task(name="mine-stdlib-pairs", cache_policy=NO_CACHE)
def mine_pairs(per_class: int, cfg: BalanceConfig, taken_doc_ids: list[str], outcomes_file: Path) -> Any:
    """``--mined-per-class``: the standard library mined (tasks/mining/mix.py) into up to ``per_class`` balanced
    pairs per class, the docs of the LLM's pairs (``taken_doc_ids``) kept apart; every mined pair's outcome goes
    to ``outcomes_file`` for the books. Returns the ``MinedMix``."""
    import pyarrow.parquet as pq

    from tasks.mining.mix import MinedMixConfig, mine_stdlib, mined_mix

    logger = get_run_logger()
    logger.info("mining this interpreter's standard library for up to %d mined pairs per class (about a minute on 2 cores)",
                per_class)
    t0 = time.perf_counter()
    mix = mined_mix(mine_stdlib(workers=MINING_WORKERS),
                    MinedMixConfig(per_class, cfg.validation_fraction, cfg.seed, workers=MINING_WORKERS), taken_doc_ids)
    mix.summary["seconds"] = round(time.perf_counter() - t0, 1)
    pq.write_table(mix.outcomes, outcomes_file)
    s = mix.summary
    logger.info("mined %d files in %.1f s: %d data-flow and %d precondition pairs; %d per class in the dataset, per split "
                "%s; of %d mined pairs %d in the dataset, rejected %s", s["files_read"], s["seconds"], s["data_flow_pairs"],
                s["precondition_pairs_kept"], mix.per_class, mix.per_split, s["pairs_read"], s["pairs_in_dataset"],
                s["pairs_rejected_by_reason"])
    return mix


@task(name="account-records", cache_policy=NO_CACHE)
def account(out_dir: Path, outcome_files: list[Path], ledger_files: list[Path], n_read: int) -> AccountingSummary:
    summary = write_records_db_from_parquet(out_dir / "records.duckdb", outcome_files, ledger_files, n_read)
    get_run_logger().info("accounting: read %d = accepted %d + rejected %d %s", summary.read, summary.accepted, summary.rejected, summary.by_reason)
    return summary


# -- helpers ------------------------------------------------------------------------------------
@contextlib.contextmanager
def llm_endpoint(cfg: BuildTDIConfig) -> Iterator[tuple[LLMConfig, Callable[[], None]]]:
    """The LLM config to use, starting the embedded llama.cpp server when asked to, plus a check
    that raises if that server died (else every request would just time out into a rejection)."""
    if cfg.llm.base_url != EMBEDDED:
        yield cfg.llm, lambda: None
        return
    from models.embedded_llm.server import EmbeddedLLMServer

    with EmbeddedLLMServer(model=cfg.embedded_model) as server:
        get_run_logger().info("embedded LLM %s ready at %s", cfg.embedded_model, server.base_url)
        llm = replace(cfg.llm, base_url=server.base_url, model=cfg.embedded_model)
        preflight(llm)
        yield llm, server.raise_if_exited


class _Done:
    """A finished sequential chunk, with the interface of a Prefect future."""

    def __init__(self, value: dict[str, Any]):
        self.value = value

    def result(self) -> dict[str, Any]:
        return self.value


@contextlib.contextmanager
def chunk_runner(cfg: BuildTDIConfig) -> Iterator[tuple[Callable[[ChunkJob], Any], int]]:
    """``(submit, slots)``: ``submit(job)`` starts a chunk and returns something with ``.result()``;
    ``slots`` is how many chunks run at once."""
    if cfg.task_runner == "sequential":
        yield (lambda job: _Done(process_chunk(job))), 1
        return
    from tasks.common.clusters import ClusterSpec, cluster_runner

    spec = ClusterSpec(cfg.task_runner, cfg.dask_address, cfg.ray_address,
                       cfg.dask_workers if cfg.task_runner == "dask" else cfg.ray_cpus)
    runner, slots_of = cluster_runner(spec)
    with runner:
        slots = max(1, slots_of(runner))
        get_run_logger().info("%s cluster %s: %d slots", cfg.task_runner, spec.where, slots)
        yield (lambda job: runner.submit(process_chunk, {"job": job})), slots


def run_chunks(cfg: BuildTDIConfig, llm_cfg: LLMConfig, root: Path, ensure_alive: Callable[[], None]) -> tuple[list[dict[str, Any]], int, int]:
    """Read the source chunk by chunk and run every chunk that is not finished yet; returns the
    chunks' markers in chunk order, the items read and the chunks reused from an earlier run."""
    logger = get_run_logger()
    # the precondition share decides which prompts a record gets: a chunk made under another share is redone
    work = hashlib.sha256(f"{work_fingerprint(llm_cfg, cfg.max_code_chars)}:precondition_share={cfg.precondition_share!r}"
                          f":generate_repairs={cfg.generate_repairs}"
                          .encode()).hexdigest()
    markers: dict[int, dict[str, Any]] = {}
    n_read = reused = 0
    # the run's bar in the UI, chunk by chunk, from this process (each chunk task has its own, record by record);
    # only with a limit: without one the number of records is known at the end only
    run_progress = RecordProgress(cfg.limit, "run", say=logger.info, sinks=(PrefectProgressArtifact("build-tdi"),),
                                  count_requests=False) if cfg.limit else None
    with chunk_runner(cfg) as (submit, slots):
        window = cfg.chunks_in_flight or (1 if cfg.task_runner == "sequential" else 2 * slots)
        pending: deque[tuple[int, Any]] = deque()

        def collect() -> None:
            index, future = pending.popleft()
            try:
                markers[index] = future.result()
            except LLMUnavailableError:
                ensure_alive()  # an embedded server that died says so (exit status, log) over 'cannot be reached'
                raise
            ensure_alive()
            done = sum(m["n_read"] for m in markers.values())
            logger.info("%d chunks done (%d reused), %d items read so far", len(markers), reused, done)
            if run_progress is not None:
                run_progress.records_done(markers[index]["validated"], markers[index]["records"] - markers[index]["validated"])
                run_progress.maybe_report()

        for chunk in iter_record_chunks(cfg.source, cfg.limit, cfg.source_filter, cfg.chunk_size):
            n_read += chunk.n_read
            folder = chunk_dir(root, chunk.index)
            fingerprint = hashlib.sha256(f"{chunk.fingerprint}:{work}".encode()).hexdigest()
            marker = finished(folder, fingerprint)
            if marker is not None:
                markers[chunk.index] = marker
                reused += 1
                if run_progress is not None:  # the bar, rate and time left are of this run's work
                    run_progress.total = max(0, run_progress.total - marker["records"])
                continue
            pending.append((chunk.index, submit(ChunkJob(chunk, str(folder), llm_cfg, cfg.max_code_chars, fingerprint, cfg.precondition_share,
                                                              cfg.generate_repairs))))
            while len(pending) >= window:
                collect()
        while pending:
            collect()
    if run_progress is not None:  # the read is over: the records there were are the total (a limit above the source's size)
        run_progress.total = run_progress.done
        run_progress.report()
    for stale in root.glob("chunk-*"):  # chunks of an earlier, longer read
        if stale.is_dir() and int(stale.name.split("-")[1]) >= len(markers):
            shutil.rmtree(stale, ignore_errors=True)
    return [markers[i] for i in range(len(markers))], n_read, reused


def _raise_if_every_call_failed(stages: dict[str, dict[str, Any]]) -> None:
    for stage, t in stages.items():
        if t["requests"] and not t["ok"]:
            reasons = dict(t["failed_by_reason"].most_common(6))
            raise LLMStageFailed(f"{stage}: all {t['requests']} LLM requests failed, by reason {reasons}; no answer was "
                                 "usable, so nothing is published (see records.duckdb, table llm_calls)")


# -- the flow -----------------------------------------------------------------------------------
@flow(name="build-tdi", log_prints=True)
def build_tdi(cfg: BuildTDIConfig = BuildTDIConfig()) -> dict[str, Any]:
    """Build a TDI dataset; returns the manifest. One run per dataset folder at a time."""
    check_source(cfg.source)  # the input first (local, cheap), then the endpoint: both before a lock or folder exists
    check_push(cfg.push_to_hub)
    endpoint_preflight(cfg)
    with dataset_lock(cfg.out_dir):
        manifest = _build_tdi(cfg)
        if cfg.push_to_hub:  # under the lock: no other run replaces the version being uploaded
            get_run_logger().info("pushed to the hub: %s", push_to_hub(cfg.out_dir, cfg.push_to_hub, cfg.private))
        return manifest


def endpoint_preflight(cfg: BuildTDIConfig) -> None:
    """An endpoint that cannot be reached, or a rejected key: one clear error before a lock or folder exists
    (the embedded server is checked once it runs, in :func:`llm_endpoint`)."""
    llm = cfg.resolved().llm
    if llm.base_url != EMBEDDED:
        preflight(llm)


def recorded_config(cfg: BuildTDIConfig) -> dict[str, Any]:
    """The config as the manifest records it: JSON types, no API key, no credentials in URLs."""
    config = json.loads(json.dumps(asdict(cfg), default=str))
    config["llm"] = cfg.llm.recorded()
    return config


def _build_tdi(cfg: BuildTDIConfig) -> dict[str, Any]:
    logger = get_run_logger()
    cfg = cfg.resolved()  # the endpoint (OPENAI_BASE_URL when unset) and requests in flight, as the command line
    out_dir = cfg.out_dir
    root = out_dir / CHUNKS
    check_source(cfg.source)  # a missing or empty path: one clear line before any work
    root.mkdir(parents=True, exist_ok=True)

    with llm_endpoint(cfg) as (llm_cfg, ensure_alive):
        markers, n_read, reused = run_chunks(cfg, llm_cfg, root, ensure_alive)
    if not n_read:
        raise EmptySourceError(nothing_read(cfg.source) if cfg.limit != 0 else "nothing was read: limit is 0")
    folders = [chunk_dir(root, i) for i in range(len(markers))]

    balance_outcomes = root / "balance-outcomes.parquet"
    plan = balance([str(f / "validated.parquet") for f in folders], cfg.balance, balance_outcomes,
                   [str(f / "given_docs.parquet") for f in folders])
    outcome_files = [f / "outcomes.parquet" for f in folders] + [balance_outcomes]
    mined = None
    if cfg.mined_per_class:  # after the chunks: the embedded server has stopped and the cores are free
        taken = plan.selected["dep_id"].to_list() + plan.selected["pre_id"].to_list() + plan.spare["doc_id"].to_list()
        mined = mine_pairs(cfg.mined_per_class, cfg.balance, quote(taken), root / "mined-outcomes.parquet")
        outcome_files.append(root / "mined-outcomes.parquet")
    # every attempt's journal of a chunk (chunks finished before journals existed: their ledger file)
    ledgers = [path for f, m in zip(folders, markers) for path in (chunk_journals(f, m["fingerprint"]) or [f / "ledger.parquet"])]
    # the books: every record read and every mined pair read ends accepted or rejected
    summary = account(out_dir, outcome_files, ledgers, n_read + (mined.n_read if mined else 0))
    _raise_if_every_call_failed(stage_totals(markers))
    if not plan.n_rows and not (mined and mined.rows):
        raise RuntimeError(f"no validated pairs: nothing to write (rejections by reason: {summary.by_reason}); see {out_dir / 'records.duckdb'}")

    staging = fresh_staging(out_dir)
    infos = write_dataset(quote(plan), staging, cfg.shards, quote(mined.rows) if mined else None)
    report = quality_gate(out_dir, staging)
    manifest = build_manifest(
        out_dir.name,
        infos,
        {
            "config": recorded_config(cfg),
            "llm": {"model": cfg.embedded_model if cfg.llm.base_url == EMBEDDED else cfg.llm.model, "base_url": cfg.llm.public_base_url() or ""},
            "prompt_versions": PROMPT_VERSIONS,
            "per_class": plan.per_class,  # the LLM's pairs; the mined ones: mined.per_class
            "per_class_target": cfg.balance.per_class,
            **({"mined": mined.summary} if mined else {}),
            "accounting": summary.as_dict(),
            "quality": {"success": report.success, "checks": len(report.checks)},
            "llm_usage": ledger_usage(out_dir / "records.duckdb"),  # every request of every attempt, as the books count them
            "execution": {"task_runner": cfg.task_runner, "chunk_size": cfg.chunk_size, "chunks": len(markers), "chunks_reused": reused},
        },
    )
    manifest = publish_with_card(out_dir, staging, manifest, write_dataset_card, "tdi-dataset")
    logger.info("wrote %d rows in %d shards to %s (%d chunks, %d reused)", manifest["total_rows"], len(infos), out_dir, len(markers), reused)
    return manifest


# -- command line -------------------------------------------------------------------------------
def show(manifest: dict[str, Any]) -> None:
    """What the command line prints of a published dataset's manifest."""
    print(json.dumps({"dataset": manifest["dataset"], "counts": manifest["counts"], "accounting": manifest["accounting"], "llm_usage": manifest["llm_usage"]}, indent=2))


def main(argv: Sequence[str] | None = None) -> None:
    show(build_tdi(config_from_args(argv)))


if __name__ == "__main__":
    CLI.run(lambda cfg: show(build_tdi(cfg)), first=endpoint_preflight)  # the preflight before Prefect starts too
