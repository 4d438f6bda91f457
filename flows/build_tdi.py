"""build-tdi: function records -> three LLM agents -> validated pairs -> balanced Parquet TDI shards.

Run directly (``python -m flows.build_tdi --help``) or through the Prefect deployment in
prefect.yaml (``prefect deployment run build-tdi/stdlib-demo``).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE

from tasks.accounting import AccountingSummary, check_read_ids, write_records_db
from tasks.agents import (
    DependentPair,
    ExtractedDoc,
    Rejection,
    extract_request,
    generate_request,
    interpret_extract,
    interpret_generate,
    interpret_validate,
    validate_request,
)
from tasks.balance import BalanceConfig, BalancedPairs, balance_pairs
from tasks.llm import LLMConfig, StructuredLLM, StructuredRequest, StructuredResult, ledger_rows, usage_summary
from tasks.prompts import PROMPT_VERSIONS
from tasks.publish import dataset_lock, fresh_staging, gate_staged, publish_staged
from tasks.quality import QualityReport, validate_shards
from tasks.shards import ShardConfig, ShardInfo, build_manifest, write_dataset_card, write_shards
from tasks.sources import FunctionRecord, SourceFilter, SourceReadResult, SourceSpec, read_function_records

EMBEDDED = "embedded"  # base_url value meaning: start the packaged local llama.cpp server


@dataclass(frozen=True)
class BuildTDIConfig:
    dataset: str = "tdi-stdlib-demo"
    output_root: str = "artifacts/tdi"
    source: SourceSpec = field(default_factory=lambda: SourceSpec(kind="stdlib", sample_seed=13))
    source_filter: SourceFilter = field(default_factory=lambda: SourceFilter(max_chars=1800))
    limit: int | None = 12
    max_code_chars: int = 1800  # what agent 1 sees of a function (prompt budget of small models)
    llm: LLMConfig = field(default_factory=lambda: LLMConfig(model="qwen2.5-coder-1.5b", base_url=EMBEDDED, concurrency=1))
    embedded_model: str = "qwen2.5-coder-1.5b"
    balance: BalanceConfig = field(default_factory=lambda: BalanceConfig(per_class=92_000))
    shards: ShardConfig = field(default_factory=ShardConfig)

    @property
    def out_dir(self) -> Path:
        return Path(self.output_root) / self.dataset


# -- tasks --------------------------------------------------------------------------------------
@task(name="read-function-records", cache_policy=NO_CACHE)
def read_records(spec: SourceSpec, limit: int | None, source_filter: SourceFilter) -> SourceReadResult:
    result = read_function_records(spec, limit=limit, source_filter=source_filter)
    get_run_logger().info(
        "read %d items from %s: %d accepted, %d rejected %s",
        result.n_read, result.source, len(result.accepted), len(result.rejected), result.reason_counts(),
    )
    return result


def _progress(stage: str, total: int) -> Callable[[StructuredResult], None]:
    """Live counts for the logs and a progress artifact in the Prefect UI."""
    logger = get_run_logger()
    artifact_id = create_progress_artifact(progress=0.0, key=f"{stage}-progress", description=f"agent {stage}")
    state = {"done": 0, "ok": 0}
    every = max(1, total // 20)

    def on_done(result: StructuredResult) -> None:
        state["done"] += 1
        state["ok"] += result.ok
        if state["done"] % every == 0 or state["done"] == total:
            logger.info("%s: %d/%d answered (%d parsed, %d failed)", stage, state["done"], total, state["ok"], state["done"] - state["ok"])
            update_progress_artifact(artifact_id, progress=100.0 * state["done"] / total)

    return on_done


@task(name="run-agent", retries=2, retry_delay_seconds=10, cache_policy=NO_CACHE)
def run_agent(stage: str, requests: Sequence[StructuredRequest], llm_config: LLMConfig) -> tuple[list[StructuredResult], list[dict]]:
    """One agent over all items; retries are cheap because answered requests come from the cache."""
    if not requests:
        return [], []
    llm = StructuredLLM(llm_config)
    results = asyncio.run(llm.run_many(requests, on_done=_progress(stage, len(requests))))
    return results, ledger_rows(llm.ledger)


@task(name="balance-classes", cache_policy=NO_CACHE)
def balance(validated: Sequence[DependentPair], cfg: BalanceConfig) -> BalancedPairs:
    balanced = balance_pairs(validated, cfg)
    get_run_logger().info("balanced: %d pairs per class, per split %s", balanced.per_class, balanced.per_split)
    return balanced


@task(name="write-shards", cache_policy=NO_CACHE)
def write_dataset(rows: list[dict], out_dir: Path, cfg: ShardConfig) -> list[ShardInfo]:
    return write_shards(rows, out_dir, cfg)


@task(name="quality-gate", cache_policy=NO_CACHE)
def quality_gate(out_dir: Path, staging: Path) -> QualityReport:
    """Validate the staged shards; a failure publishes nothing (``tasks.publish``)."""
    report = gate_staged(out_dir, staging, validate_shards)
    get_run_logger().info("quality gate: %d checks passed", len(report.checks))
    return report


@task(name="publish", cache_policy=NO_CACHE)
def publish(out_dir: Path, staging: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    write_dataset_card(out_dir, manifest, staging)
    return publish_staged(out_dir, staging, manifest)


@task(name="account-records", cache_policy=NO_CACHE)
def account(out_dir: Path, outcomes: list[dict], ledger: list[dict], n_read: int) -> AccountingSummary:
    summary = write_records_db(out_dir / "records.duckdb", outcomes, ledger, n_read)
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
    from models.embedded_llm import EmbeddedLLMServer

    with EmbeddedLLMServer(model=cfg.embedded_model) as server:
        get_run_logger().info("embedded LLM %s ready at %s", cfg.embedded_model, server.base_url)
        yield LLMConfig(**{**asdict(cfg.llm), "base_url": server.base_url, "model": cfg.embedded_model}), server.raise_if_exited


def _outcome(record_id: str, status: str, stage: str, reason: str, detail: str = "", raw: str | None = None) -> dict:
    return {"record_id": record_id, "status": status, "stage": stage, "reason": reason, "detail": detail, "raw_text": raw}


def _rejected(r: Rejection) -> dict:
    return _outcome(r.record_id, "rejected", r.stage, r.reason, r.detail, r.raw_text)


def _keep(outputs: Iterable[Any], outcomes: list[dict]) -> list[Any]:
    """Items that passed an agent; rejections go to the books."""
    kept = []
    for out in outputs:
        if isinstance(out, Rejection):
            outcomes.append(_rejected(out))
        else:
            kept.append(out)
    return kept


# -- the flow -----------------------------------------------------------------------------------
@flow(name="build-tdi", log_prints=True)
def build_tdi(cfg: BuildTDIConfig = BuildTDIConfig()) -> dict[str, Any]:
    """Build a TDI dataset; returns the manifest. One run per dataset folder at a time."""
    with dataset_lock(cfg.out_dir):
        return _build_tdi(cfg)


def _build_tdi(cfg: BuildTDIConfig) -> dict[str, Any]:
    logger = get_run_logger()
    out_dir = cfg.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)

    read = read_records(cfg.source, cfg.limit, cfg.source_filter)
    outcomes = [_outcome(r.source, "rejected", "read", r.reason, r.detail, r.raw_excerpt) for r in read.rejected]
    records: dict[str, FunctionRecord] = {r.record_id: r for r in read.accepted}
    check_read_ids([r.record_id for r in read.accepted] + [r.record_id for r in read.rejected], read.n_read)
    ledger: list[dict] = []

    with llm_endpoint(cfg) as (llm_cfg, ensure_alive):

        def stage(name: str, requests: list[StructuredRequest]) -> list[StructuredResult]:
            results, calls = run_agent(name, requests, llm_cfg)
            ensure_alive()
            ledger.extend(calls)
            return results

        requests = [extract_request(rid, r.code, r.language, cfg.max_code_chars) for rid, r in records.items()]
        extracted: list[ExtractedDoc] = _keep(map(interpret_extract, stage("extract", requests)), outcomes)
        generated: list[DependentPair] = _keep(
            map(interpret_generate, extracted, stage("generate", [generate_request(e) for e in extracted])), outcomes
        )
        validated: list[DependentPair] = _keep(
            map(interpret_validate, generated, stage("validate", [validate_request(p) for p in generated])), outcomes
        )

    balanced = balance(validated, cfg.balance)
    outcomes += [_rejected(r) for r in balanced.rejections]
    unused = {r.record_id for r in balanced.rejections}
    outcomes += [_outcome(p.record_id, "accepted", "dataset", "in_dataset") for p in validated if p.record_id not in unused]
    summary = account(out_dir, outcomes, ledger, read.n_read)

    if not balanced.rows:
        raise RuntimeError(f"no validated pairs: nothing to write (rejections by reason: {summary.by_reason}); see {out_dir / 'records.duckdb'}")
    staging = fresh_staging(out_dir)
    infos = write_dataset(balanced.rows, staging, cfg.shards)
    report = quality_gate(out_dir, staging)
    manifest = build_manifest(
        out_dir.name,
        infos,
        {
            "config": json.loads(json.dumps(asdict(cfg), default=str)),
            "llm": {"model": cfg.embedded_model if cfg.llm.base_url == EMBEDDED else cfg.llm.model, "base_url": cfg.llm.base_url or os.environ.get("OPENAI_BASE_URL", "")},
            "prompt_versions": PROMPT_VERSIONS,
            "per_class": balanced.per_class,
            "per_class_target": cfg.balance.per_class,
            "accounting": summary.as_dict(),
            "quality": {"success": report.success, "checks": len(report.checks)},
            "llm_usage": usage_summary(ledger),
        },
    )
    manifest = publish(out_dir, staging, manifest)
    create_markdown_artifact(key="tdi-dataset", markdown=(out_dir / "README.md").read_text(), description=str(out_dir))
    logger.info("wrote %d rows in %d shards to %s", manifest["total_rows"], len(infos), out_dir)
    return manifest


# -- command line -------------------------------------------------------------------------------
def config_from_args(argv: Sequence[str] | None = None) -> BuildTDIConfig:
    d = BuildTDIConfig()
    p = argparse.ArgumentParser(prog="python -m flows.build_tdi", description=__doc__)
    p.add_argument("--dataset", default=d.dataset, help="output folder name under --output-root")
    p.add_argument("--output-root", default=d.output_root)
    p.add_argument("--source", choices=["stdlib", "codesearchnet", "hf", "tree"], default="stdlib")
    p.add_argument("--source-path", help="CodeSearchNet release root, or a source tree")
    p.add_argument("--languages", default="python", help="comma-separated (codesearchnet, hf)")
    p.add_argument("--partitions", default="train,valid,test", help="comma-separated (codesearchnet, hf)")
    p.add_argument("--sample-seed", type=int, default=13, help="sample records across files (-1: file order)")
    p.add_argument("--limit", type=int, default=d.limit, help="function records to accept (-1: all)")
    p.add_argument("--per-class", type=int, default=d.balance.per_class, help="target pairs per class (paper: 92000)")
    p.add_argument("--validation-fraction", type=float, default=d.balance.validation_fraction)
    p.add_argument("--seed", type=int, default=d.balance.seed)
    p.add_argument("--rows-per-shard", type=int, default=d.shards.rows_per_shard)
    p.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", EMBEDDED), help="OpenAI-compatible endpoint, or 'embedded'")
    p.add_argument("--model", default=None, help="model name at --base-url (default: the embedded model)")
    p.add_argument("--embedded-model", default=d.embedded_model, help="packaged GGUF model for --base-url embedded")
    p.add_argument("--concurrency", type=int, default=None, help="requests in flight (default 1 embedded, 16 otherwise)")
    p.add_argument("--max-tokens", type=int, default=d.llm.max_tokens)
    p.add_argument("--timeout-s", type=float, default=d.llm.timeout_s)
    p.add_argument("--cache-dir", default=d.llm.cache_dir)
    p.add_argument("--price-in", type=float, default=0.0, help="USD per 1M prompt tokens (ledger cost estimate)")
    p.add_argument("--price-out", type=float, default=0.0, help="USD per 1M completion tokens")
    a = p.parse_args(argv)
    embedded = a.base_url == EMBEDDED
    source = SourceSpec(
        kind=a.source,
        path=a.source_path,
        languages=tuple(a.languages.split(",")),
        partitions=tuple(a.partitions.split(",")),
        sample_seed=None if a.sample_seed < 0 else a.sample_seed,
    )
    llm = LLMConfig(
        model=a.model or a.embedded_model,
        base_url=a.base_url,
        concurrency=a.concurrency or (1 if embedded else 16),
        max_tokens=a.max_tokens,
        timeout_s=a.timeout_s,
        cache_dir=a.cache_dir,
        price_in_per_mtok=a.price_in,
        price_out_per_mtok=a.price_out,
    )
    return BuildTDIConfig(
        dataset=a.dataset,
        output_root=a.output_root,
        source=source,
        limit=None if a.limit < 0 else a.limit,
        llm=llm,
        embedded_model=a.embedded_model,
        balance=BalanceConfig(per_class=a.per_class, validation_fraction=a.validation_fraction, seed=a.seed),
        shards=ShardConfig(rows_per_shard=a.rows_per_shard, seed=a.seed),
    )


def main(argv: Sequence[str] | None = None) -> None:
    manifest = build_tdi(config_from_args(argv))
    print(json.dumps({"dataset": manifest["dataset"], "counts": manifest["counts"], "accounting": manifest["accounting"], "llm_usage": manifest["llm_usage"]}, indent=2))


if __name__ == "__main__":
    main()
