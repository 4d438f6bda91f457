"""mine-tdi: Python code -> data-flow dependency pairs (no LLM) -> balanced Parquet TDI shards.

A value returned by a documented function that reaches an argument of another documented function
makes a <consumer, producer> pair (docs/mining.md). Output as build-tdi: artifacts/tdi/<dataset>/.
Optionally (an LLM endpoint configured) agent 1 rewrites a sample of the mined docs and agent 3
judges a sample of the mined pairs (tasks/mining/review.py).

    .venv/bin/python -m flows.mine_tdi --source stdlib,site-packages --dataset tdi-mined
    .venv/bin/python -m flows.mine_tdi --base-url embedded --rewrite-docs 200 --judge-sample 500
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

import pyarrow as pa
import pyarrow.parquet as pq

from tasks.common.flow_cli import FlowCLI  # first: Prefect analytics off before Prefect loads
from models.embedded_llm.catalog import DEFAULT_MODEL
from schemas.tdi import KIND_DATA
from tasks.dataset.accounting import OUTCOME_SCHEMA, AccountingSummary, write_records_db
from tasks.common.cli import Help, checking_inputs, parse_config
from tasks.common.progress import EVERY_S, CountProgress, PrefectProgressArtifact, stage_progress, ticking
from tasks.llm.config import EMBEDDED, EMBEDDED_CONCURRENCY, ENDPOINT_CONCURRENCY, LLMConfig, split_userinfo
from tasks.llm.errors import LLMEndpointError, LLMUnavailableError
from tasks.llm.ledger import ledger_rows, usage_summary
from tasks.llm.preflight import preflight
from tasks.llm.structured import StructuredRequest, StructuredResult
from tasks.mining.review import (
    JUDGE_ACTIONS,
    JUDGE_REJECTION,
    JudgeReport,
    RewriteReport,
    apply_rewrites,
    apply_verdicts,
    doc_pairs,
    judge_request,
    rewrite_keys,
    rewrite_requests,
    sample_doc_pairs,
    seeded_sample,
)
from tasks.mining.dataset import (ORIGIN_LLM, RARE_ORDER, DependencyPair, MinedBalanceConfig, MinedBalanced, balance_mined,
                                  flow_pairs, pair_docs, precondition_pairs)
from tasks.mining.facts import FileRejection, ModuleFacts
from tasks.mining.filters import DEFAULT_MAX_PRODUCERS_PER_PARAM
from tasks.mining.mine import MineResult, resolve_flows
from tasks.mining.parse import parse_chunk, parse_file, parse_record
from tasks.mining.pin import describe_sources, file_records, manifest_summary, pinned_items, read_pin, write_sources
from tasks.mining.sources import FileItem, default_roots, tree_files
from tasks.mining.state import stated
from tasks.agents.prompts import EXTRACT, VALIDATE
from tasks.dataset.hub import check_push, check_repo_id, push_dataset
from tasks.dataset.publish import dataset_lock, fresh_staging
from tasks.dataset.shards import (KIND_COLUMNS_CARD, MINED_LICENSE_NOTE, PARAMETER_COLUMNS_CARD, ShardConfig, ShardInfo, build_manifest,
                                  kind_card_lines, origin_card_lines, write_card, write_shards)

SOURCES = ("stdlib", "site-packages", "tree", "codesearchnet")
EMBEDDED_MODEL = DEFAULT_MODEL  # the packaged model --base-url embedded serves


def _tree_problem(root: str) -> str | None:
    """Why ``root`` is no source tree to mine, or None."""
    path = Path(root)
    if not path.exists():
        return "no such folder" + (" (a dangling or looping symlink)" if path.is_symlink() else "")
    if not path.is_dir():
        return "a file, not a source tree (a folder of *.py files)"
    if not any(name.endswith(".py") for _, _, names in os.walk(path) for name in names):  # stops at the first
        return "no *.py file under it"
    return None


def _env_base_url() -> str | None:
    return os.environ.get("OPENAI_BASE_URL") or None


@dataclass(frozen=True)
class MineTDIConfig:
    """The one config surface of mine-tdi; the CLI is generated from it."""

    dataset: str = field(default="tdi-mined", metadata={"help": "output folder name under --output-root"})
    output_root: str = field(default="artifacts/tdi", metadata={"help": "where datasets are written"})
    source: tuple[str, ...] = field(default=("stdlib", "site-packages"), metadata={"help": f"comma separated, of {', '.join(SOURCES)}"})
    tree_paths: tuple[str, ...] = field(default=(), metadata={"help": "comma separated source tree roots (source 'tree')"})
    codesearchnet_path: str | None = field(default=None, metadata={"help": "CodeSearchNet release root (source 'codesearchnet')"})
    limit_files: int | None = field(default=None, metadata={"help": "seeded sample of this many source files (none: all)"})
    per_class: int | None = field(default=None, metadata={"help": "cap on pairs per class (none: every usable mined pair)"})
    seed: int = field(default=13, metadata={"help": "seed of sampling, dropout, splits, negatives and shard order"})
    validation_fraction: float = field(default=0.1, metadata={"help": "share of pairs in the validation split"})
    output_dropout: float = field(default=0.3, metadata={"help": "share of docs whose declared outputs are removed"})
    hard_negative_share: float = field(default=0.5, metadata={"help": "share of class 1 that are same-package hard negatives"})
    mix_tdi: str | None = field(default=None, metadata={"help": "a build-tdi dataset folder whose LLM 'validated' pairs are added"})
    workers: int = field(default=2, metadata={"help": "parser processes"})
    max_producers_per_param: int | None = field(default=DEFAULT_MAX_PRODUCERS_PER_PARAM, metadata={
        "help": "reject flows into a parameter that more than this many distinct producers reach (generic sinks such "
                "as assert_equal(actual) or dumps(obj)); none: keep them"})
    rows_per_shard: int = field(default=50_000, metadata={"help": "rows per Parquet shard"})
    preconditions: bool = field(default=True, metadata={
        "help": "also mine precondition pairs: call order without data flow (a guard, a setup call on the same object, "
                "a validation before use: tasks/mining/order.py), kind 'precondition' in the dataset"})
    min_order_support: int = field(default=2, metadata={
        "help": "a precondition pair needs at least this many functions showing the order (fewer: rejected as "
                "rare_order), unless the code states it (a state guard, an error message, a fitted check, a docstring or its example: "
                "tasks/mining/state.py); 1 keeps every one, 4x as many (read by hand: 25 of 50 right at 1, 27 of 50 at 2: bench/precondition_sample.md)"})
    test_orders: bool = field(default=False, metadata={
        "help": "read call orders in test code as precondition candidates too (default: not read, the files "
                "counted in the books; a test's steps are the ones it chose: read by hand 21 of 23 were no "
                "requirement, 47 of 67 in library code); test code's data flows count either way"})
    doctests: bool = field(default=True, metadata={
        "help": "read call orders in docstrings' usage examples (>>> lines) as precondition candidates too, patterns "
                "doctest:guard and so on: the order a library's authors show a user (tasks/mining/doctests.py); an example "
                "whose value the session shows is a read, not a step; the examples' data flows are not mined; where the later "
                "call is the function the docstring documents (doctest_usage:...), its docs state the order and the pair "
                "is kept at support 1"})
    keyed_state: bool = field(default=False, metadata={
        "help": "also the stated pattern keyed_state: a method that reads self.X[key] unguarded where only other public "
                "methods store entries of a table that starts empty (add_worker before remove_worker; "
                "tasks/mining/state.py); read by hand 23 of 24 right, off by default (docs/mining.md)"})
    inherited_docstrings: bool = field(default=True, metadata={
        "help": "an undocumented method that overrides a documented method of its bases takes that docstring, as "
                "inspect.getdoc and Sphinx read it (a subclass's read() is its base's read()); without it such a "
                "method is undocumented, and its pairs rejected as undocumented_consumer or undocumented_producer"})
    pin: Annotated[str | None, Help(
        "a mined dataset's sources.json (or its folder): mine exactly its files, in its order, each found again under "
        "its root (stdlib and site-packages under this interpreter's); refused when one is missing or its sha256 "
        "differs. The pin fixes the file list: --source (but codesearchnet, which cannot be pinned), --tree-paths "
        "and --limit-files are not used")] = None
    # -- optional LLM review (tasks/mining/review.py); nothing is sent to an LLM while both counts are 0 --
    base_url: str | None = field(default=None, metadata={
        "help": "OpenAI-compatible endpoint for --rewrite-docs / --judge-sample, or 'embedded' (the packaged local "
                "model, as build-tdi); none: OPENAI_BASE_URL when set (read when the config is made, so a deployment "
                "honours it as the command line does)"})
    model: str | None = field(default=None, metadata={"help": f"model name at --base-url (none: {EMBEDDED_MODEL}, the embedded model)"})
    concurrency: int | None = field(default=None, metadata={
        "help": f"LLM requests in flight (none: {EMBEDDED_CONCURRENCY} on the embedded server, {ENDPOINT_CONCURRENCY} on an endpoint)"})
    cache_dir: str = field(default="artifacts/llm-cache", metadata={"help": "LLM answer cache (a rerun repeats no answered call)"})
    rewrite_docs: int = field(default=0, metadata={
        "help": "seeded sample of this many mined docs (of pair sides) that agent 1 rewrites from signature + docstring; "
                "a schema-valid answer replaces the mined doc, else it is kept (counted by reason)"})
    judge_sample: int = field(default=0, metadata={
        "help": "seeded sample of this many mined doc pairs that agent 3 judges (records of the same two functions "
                "share the verdict)"})
    judge_action: str = field(default="drop", metadata={
        "help": "drop: reject pairs judged 'no dependency' (judge_no_dependency); report: only measure",
        "choices": JUDGE_ACTIONS})
    # -- the Hugging Face hub (docs/mining.md, tasks/dataset/hub.py) --
    push_to_hub: Annotated[str | None, Help(
        "after a successful publish, upload the published dataset (shards, card, manifest, quality.json, "
        "sources.json, mix.png; not records.duckdb) to this hub dataset repo (namespace/name) as one commit; the "
        "token from HF_TOKEN only")] = None
    private: Annotated[bool, Help("with --push-to-hub: create the repo private (an existing one keeps its visibility)")] = False

    def __post_init__(self) -> None:
        self._check_ranges()
        check_repo_id(self.push_to_hub)
        if self.pin is not None:
            if self.limit_files is not None:
                raise ValueError(f"--pin {self.pin} fixes the file list; --limit-files {self.limit_files} would sample it again")
            if "codesearchnet" in self.source:
                raise ValueError("--pin fixes source files; CodeSearchNet records are no files and cannot be pinned: "
                                 "leave 'codesearchnet' out of --source")
            read_pin(self.pin)  # PinError (a ValueError) on a file that is no sources.json
        if self.base_url is None:
            object.__setattr__(self, "base_url", _env_base_url())
        if self.rewrite_docs < 0 or self.judge_sample < 0:
            raise ValueError(f"--rewrite-docs and --judge-sample are counts >= 0, not {self.rewrite_docs} / {self.judge_sample}")
        if self.judge_action not in JUDGE_ACTIONS:
            raise ValueError(f"--judge-action must be one of {', '.join(JUDGE_ACTIONS)}, not {self.judge_action!r}")
        if self.uses_llm and not self.base_url:
            asked = " and ".join(f"{flag} {n}" for flag, n in (("--rewrite-docs", self.rewrite_docs), ("--judge-sample", self.judge_sample)) if n)
            raise ValueError(
                f"{asked} asks for an LLM, but no LLM endpoint is configured: pass --base-url URL (an OpenAI-compatible "
                f"endpoint) or --base-url {EMBEDDED} (the packaged local model), or set OPENAI_BASE_URL; "
                "or leave both counts at 0 for a run without an LLM"
            )
        self._check_sources()  # last: the file system, after every check of the values themselves

    def _check_ranges(self) -> None:
        """Every number in its range, before any work (a bad one used to publish a bad dataset or crash late)."""
        for flag, value, least in (("--limit-files", self.limit_files, 1), ("--per-class", self.per_class, 1),
                                   ("--workers", self.workers, 1), ("--rows-per-shard", self.rows_per_shard, 1),
                                   ("--max-producers-per-param", self.max_producers_per_param, 1),
                                   ("--min-order-support", self.min_order_support, 1),
                                   ("--concurrency", self.concurrency, 1)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise ValueError(f"{flag} {value}: a whole number >= {least}" + (" (or none)" if flag not in (
                    "--workers", "--rows-per-shard") else ""))
        for flag, value in (("--output-dropout", self.output_dropout), ("--hard-negative-share", self.hard_negative_share)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{flag} {value}: a share, must lie in [0, 1]")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(f"--validation-fraction {self.validation_fraction}: must lie in [0, 1) (0: no validation "
                             "split; 1 or more would leave no training pairs)")
        if not self.dataset or Path(self.dataset).name != self.dataset or self.dataset in (".", ".."):
            raise ValueError(f"--dataset {self.dataset!r}: one folder name (no '/'), written under --output-root")

    def _check_sources(self) -> None:
        """Every named source and path is there: a typo is a usage error naming it, before a lock or folder exists."""
        unknown = [s for s in self.source if s not in SOURCES]
        if unknown or not self.source:
            raise ValueError(f"--source {','.join(self.source) or '(empty)'}: "
                             f"{'unknown ' + ', '.join(map(repr, unknown)) if unknown else 'name at least one'}; "
                             f"choose from {', '.join(SOURCES)}")
        pinned = self.pin is not None
        if "tree" in self.source and not pinned:
            if not self.tree_paths:
                raise ValueError("--source tree needs --tree-paths (comma separated source tree roots)")
            for root in self.tree_paths:
                problem = _tree_problem(root)
                if problem:
                    raise ValueError(f"--tree-paths {root}: {problem}")
        if "codesearchnet" in self.source:
            if not self.codesearchnet_path:
                raise ValueError("--source codesearchnet needs --codesearchnet-path (a CodeSearchNet release root)")
            from tasks.sources.read import check_source
            from tasks.sources.spec import SourceSpec

            try:
                check_source(SourceSpec(kind="codesearchnet", path=self.codesearchnet_path))
            except ValueError as exc:  # SourceConfigError, EmptySourceError: one line naming the path
                raise ValueError(f"--codesearchnet-path {self.codesearchnet_path}: {exc}") from None
        if self.mix_tdi is not None and not any(Path(self.mix_tdi, "shards").glob("*.parquet")):
            raise ValueError(f"--mix-tdi {self.mix_tdi}: no shards/*.parquet there (a build-tdi dataset folder)")

    def check_inputs(self) -> None:
        """What a run will write can be written (the CLI calls this before Prefect starts, the flow first thing)."""
        from tasks.common.paths import check_writable, writable_folder_problem

        check_writable(writable_folder_problem(self.out_dir, "--output-root/--dataset"))
        check_push(self.push_to_hub)  # a token in HF_TOKEN, the hub not switched off

    @property
    def uses_llm(self) -> bool:
        return self.rewrite_docs > 0 or self.judge_sample > 0

    @property
    def out_dir(self) -> Path:
        return Path(self.output_root) / self.dataset


# -- tasks --------------------------------------------------------------------------------------
def _parse_args(argv: list[str] | None = None) -> MineTDIConfig:
    """The command line, generated from MineTDIConfig (tasks/common/cli.py): one flag per field, its help from the field."""
    return parse_config(MineTDIConfig, argv, "python -m flows.mine_tdi", __doc__)


# python -m: --help and usage errors answer here, before the imports below (Prefect, models) are paid for
PROG = "python -m flows.mine_tdi"
CLI = FlowCLI.start(__name__, checking_inputs(_parse_args, PROG), PROG)  # check_inputs: a usage error too

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
# quote(x): Prefect passes x to the task without walking it for futures (82k shard rows took 35 s a walk)
from prefect.utilities.annotations import quote  # noqa: E402
from tasks.dataset.gate import publish_with_card, quality_gate  # noqa: E402

push_to_hub = task(name="push-to-hub", cache_policy=NO_CACHE)(push_dataset)  # no retries: a failure says how to retry


@task(name="list-source-files", cache_policy=NO_CACHE)
def list_files(cfg: MineTDIConfig) -> list[FileItem]:
    items: list[FileItem] = []
    for kind in cfg.source:
        if kind in ("stdlib", "site-packages"):
            for root in default_roots(kind):
                items += tree_files(root, kind)
        elif kind == "tree":
            if not cfg.tree_paths:
                raise ValueError("source 'tree' needs --tree-paths")
            for root in cfg.tree_paths:
                items += tree_files(Path(root), "tree")
        elif kind != "codesearchnet":
            raise ValueError(f"unknown source {kind!r}; expected some of {SOURCES}")
    seen: set[str] = set()
    items = [i for i in items if not (i.path in seen or seen.add(i.path))]  # purelib == platlib
    if cfg.limit_files is not None and len(items) > cfg.limit_files:
        items = sorted(random.Random(cfg.seed).sample(items, cfg.limit_files), key=lambda i: i.path)
    get_run_logger().info("%d source files from %s", len(items), ",".join(cfg.source))
    return items


def source_files(cfg: MineTDIConfig) -> tuple[list[FileItem], dict[str, Any]]:
    """The files to mine and their ``sources.json`` (tasks/mining/pin.py): listed and hashed, or with
    ``--pin`` exactly the pinned files, each checked against its pinned sha256."""
    if cfg.pin is None:
        items = list_files(cfg)
        records = file_records(items)
    else:
        items, records = pinned_items(read_pin(cfg.pin), f"--pin {cfg.pin}")
        get_run_logger().info("%d source files from the pin %s, every sha256 as pinned", len(items), cfg.pin)
    described = describe_sources(records, cfg.pin)
    get_run_logger().info("sources: %d files in %d packages, sha256 %s", described["n_files"], len(described["packages"]),
                          described["sha256"])
    return items, described


def _codesearchnet_modules(path: str) -> tuple[list[ModuleFacts | FileRejection], int]:
    """Every function record of a CodeSearchNet release as a one-function module."""
    from tasks.sources.filters import SourceFilter
    from tasks.sources.read import read_function_records
    from tasks.sources.spec import SourceSpec

    read = read_function_records(
        SourceSpec(kind="codesearchnet", path=path),
        source_filter=SourceFilter(require_docstring=False, min_lines=0, min_chars=0, max_chars=10**7, dedup=False),
    )
    out: list[ModuleFacts | FileRejection] = [FileRejection(f"record:{r.record_id}", r.reason, r.detail) for r in read.rejected]
    out += [parse_record(r.repo, r.path, r.func_name, r.code) for r in read.accepted if r.language == "python"]
    return out, len(out)


PROGRESS_EVERY_S = EVERY_S  # seconds between two progress lines of a mining stage (docs/mining.md, "Progress")


def _stage(what: str, total: int, unit: str):
    """The progress of a later mine-tdi step (docs, balance, shards): a line every ``PROGRESS_EVERY_S`` s
    and a Prefect bar while it runs, nothing for a step that ends sooner."""
    return stage_progress(f"mine-tdi {what}", total, unit, say=get_run_logger().info, every_s=PROGRESS_EVERY_S)


def _found(parsed: list[ModuleFacts | FileRejection]) -> dict[str, int]:
    """The side counts of the parse progress: candidates found (data flows and call orders) and files rejected."""
    modules = [m for m in parsed if not isinstance(m, FileRejection)]
    return {"candidate_pairs_found": sum(len(m.flows) + len(m.orders) for m in modules),
            "files_rejected": len(parsed) - len(modules)}


def parse_files(items: list[FileItem], cfg: MineTDIConfig) -> list[ModuleFacts | FileRejection]:
    """Every file parsed (``--workers`` processes, 64 files a task), with a progress line at most every
    ``PROGRESS_EVERY_S`` seconds and a Prefect progress artifact: files parsed of all, candidates found,
    files rejected, rate, time left."""
    from concurrent.futures import ProcessPoolExecutor

    chunks = [items[i: i + 64] for i in range(0, len(items), 64)]
    parsed: list[ModuleFacts | FileRejection] = []
    progress = CountProgress(len(items), "mine-tdi parse", "files", counts=("candidate pairs found", "files rejected"),
                             say=get_run_logger().info, sinks=(PrefectProgressArtifact(""),), every_s=PROGRESS_EVERY_S)
    with ticking(progress):  # a timer: a 64-file chunk of big files can take longer than a line's period
        if cfg.workers <= 1 or len(chunks) <= 1:
            for item in items:
                parsed.append(parse_file(item, cfg.preconditions, cfg.test_orders, cfg.doctests, cfg.keyed_state))
                progress.advance(1, **_found(parsed[-1:]))
                progress.maybe_report()
        else:
            with ProcessPoolExecutor(max_workers=cfg.workers) as pool:
                for out in pool.map(functools.partial(parse_chunk, orders=cfg.preconditions, test_orders=cfg.test_orders,
                                                    doctests=cfg.doctests, keyed_state=cfg.keyed_state), chunks):
                    parsed += out
                    progress.advance(len(out), **_found(out))
                    progress.maybe_report()
    return parsed


@task(name="mine-flows", cache_policy=NO_CACHE)
def mine(items: list[FileItem], cfg: MineTDIConfig) -> MineResult:
    t0 = time.perf_counter()
    parsed = parse_files(items, cfg)
    n_read = len(items)
    if "codesearchnet" in cfg.source:
        if not cfg.codesearchnet_path:
            raise ValueError("source 'codesearchnet' needs --codesearchnet-path")
        records, n_records = _codesearchnet_modules(cfg.codesearchnet_path)
        parsed += records
        n_read += n_records
    candidates = sum(len(m.flows) + len(m.orders) for m in parsed if not isinstance(m, FileRejection))
    resolving = CountProgress(candidates, "mine-tdi resolve", "candidates", say=get_run_logger().info,
                              sinks=(PrefectProgressArtifact(""),), every_s=PROGRESS_EVERY_S)
    with ticking(resolving):
        result = resolve_flows(parsed, n_read, cfg.max_producers_per_param, progress=resolving, test_orders=cfg.test_orders,
                               inherit_docs=cfg.inherited_docstrings)
    get_run_logger().info(
        "mined %d files (%d parsed) in %.1fs: %d candidates, %d accepted pairs; rejected %s; files rejected %s",
        result.files_read, result.files_parsed, time.perf_counter() - t0, result.candidates, len(result.flows),
        result.reason_counts(), result.file_reason_counts(),
    )
    if cfg.preconditions:
        get_run_logger().info("precondition candidates %d: %d accepted pairs (%d with support >= %d, %d stated in code); "
                              "rejected %s; call orders of %d test files not read (--test-orders reads them)",
                              result.order_candidates, len(result.orders),
                              sum(o.support >= cfg.min_order_support for o in result.orders), cfg.min_order_support,
                              sum(stated(o.patterns) for o in result.orders),
                              result.order_reason_counts(), result.test_files_orders_not_read)
    return result


@task(name="load-llm-pairs", cache_policy=NO_CACHE)
def load_llm_pairs(folder: str) -> tuple[list[DependencyPair], dict[str, dict[str, Any]]]:
    """A build-tdi dataset's LLM-validated pairs (class 0, origin 'validated') as dependency pairs."""
    table = pq.read_table(Path(folder) / "shards")
    pairs: list[DependencyPair] = []
    docs: dict[str, dict[str, Any]] = {}
    for row in table.filter(pa.compute.equal(table["origin"], ORIGIN_LLM)).to_pylist():
        if row["label"] != 0:
            continue
        dep, pre = f"tdi:{row['tool_a_id']}", f"tdi:{row['tool_b_id']}"
        docs[dep], docs[pre] = json.loads(row["doc_a"]), json.loads(row["doc_b"])
        pairs.append(DependencyPair(f"tdi:{row['pair_id']}", dep, pre, ORIGIN_LLM, "tdi",
                                    row.get("consumer_param"), row.get("producer_output"),  # v1 shards: None
                                    row.get("kind") or KIND_DATA, row.get("support")))  # v1/v2 shards: data pairs only
    get_run_logger().info("%d LLM-validated pairs from %s", len(pairs), folder)
    return pairs, docs


@task(name="build-docs", cache_policy=NO_CACHE)
def docs_for(result: MineResult, workers: int) -> dict[str, dict[str, Any]]:
    """The API doc of every function a data-flow pair or a precondition pair touches."""
    with _stage("docs", 0, "functions") as progress:  # pair_docs sets the total
        docs = pair_docs(result, workers, progress)
    get_run_logger().info("built %d API docs from signatures and docstrings", len(docs))
    return docs


@task(name="balance-classes", cache_policy=NO_CACHE)
def balance(pairs: list[DependencyPair], docs: dict[str, dict[str, Any]], cfg: MinedBalanceConfig,
            excluded: list[DependencyPair] | None = None) -> MinedBalanced:
    with _stage("balance", len(pairs) + len(excluded or ()), "pairs") as progress:
        balanced = balance_mined(pairs, docs, cfg, excluded or (), progress)
    get_run_logger().info("balanced: %d pairs per class, per split %s, negatives %s, outputs dropped from %d docs",
                          balanced.per_class, balanced.per_split, balanced.negatives, balanced.dropped_outputs)
    return balanced


@task(name="write-shards", cache_policy=NO_CACHE)
def stage_shards(rows: list[dict], staging: Path, cfg: ShardConfig) -> list[ShardInfo]:
    with _stage("shards", len(rows), "rows") as progress:
        return write_shards(rows, staging, cfg, progress)


def outcome_table(result: MineResult, balanced: MinedBalanced, llm_pairs: list[DependencyPair],
                  judged_out: dict[str, str] | None = None, rare_orders: list[tuple[str, str, str]] = ()) -> pa.Table:
    """One final outcome per file, record, candidate (data flow and call order) and LLM pair read (columns,
    not dicts: millions). ``judged_out``: record id -> detail of the mined pairs agent 3 rejected
    (``--judge-action drop``); ``rare_orders``: accepted precondition pairs below --min-order-support."""
    cols: dict[str, list] = {f.name: [] for f in OUTCOME_SCHEMA}

    def add(record_id: str, status: str, stage: str, reason: str, detail: str = "") -> None:
        cols["record_id"].append(record_id)
        cols["status"].append(status)
        cols["stage"].append(stage)
        cols["reason"].append(reason)
        cols["detail"].append(detail)
        cols["raw_text"].append(None)

    for rid in result.parsed_ids:
        add(rid, "accepted", "parse", "parsed")
    for r in result.file_rejections:
        add(r.record_id, "rejected", "parse", r.reason, r.detail)
    for r in (*result.rejections, *result.order_rejections):
        add(r.record_id, "rejected", r.stage, r.reason, r.detail)
    for rid, reason, detail in rare_orders:
        add(rid, "rejected", "resolve", reason, detail)
    unused = {rid: (reason, detail) for rid, reason, detail in balanced.rejections}
    judged_out = judged_out or {}
    rare = {rid for rid, _, _ in rare_orders}
    for rid in ([f.record_id for f in result.flows] + [o.record_id for o in result.orders if o.record_id not in rare]
                + [p.record_id for p in llm_pairs]):
        if rid in judged_out:
            add(rid, "rejected", "judge", JUDGE_REJECTION, judged_out[rid])
        elif rid in unused:
            add(rid, "rejected", "balance", *unused[rid])
        else:
            add(rid, "accepted", "dataset", "in_dataset")
    # two files with one module name can repeat a location: keep every outcome, ids unique
    seen: Counter[str] = Counter()
    ids = cols["record_id"]
    for i, rid in enumerate(ids):
        seen[rid] += 1
        if seen[rid] > 1:
            ids[i] = f"{rid}#{seen[rid]}"
    return pa.table(cols, schema=OUTCOME_SCHEMA)


REVIEW_TABLES = {  # records.duckdb tables of an LLM review, written only when one ran
    "doc_rewrites": pa.schema([("doc_key", pa.string()), ("status", pa.string()), ("reason", pa.string()), ("detail", pa.string())]),
    "judge_verdicts": pa.schema([("record_id", pa.string()), ("judged_as", pa.string()), ("dependent", pa.string()),
                                 ("prerequisite", pa.string()), ("verdict", pa.string()), ("reason", pa.string()), ("action", pa.string())]),
}


@task(name="account-records", cache_policy=NO_CACHE)
def account(out_dir: Path, outcomes: pa.Table, n_read: int, ledger: list[dict] | None = None,
            reviews: dict[str, list[dict]] | None = None) -> AccountingSummary:
    """The books (``record_outcomes``, ``llm_calls``: tasks/dataset/accounting.py); with an LLM review also
    ``doc_rewrites`` (one row per sampled doc) and ``judge_verdicts`` (one row per judged mined record)."""
    path = out_dir / "records.duckdb"
    summary = write_records_db(path, outcomes, ledger or [], n_read)
    if reviews:
        import duckdb

        con = duckdb.connect(str(path))
        try:
            for name, rows in reviews.items():
                con.register("review_rows", pa.Table.from_pylist(rows, schema=REVIEW_TABLES[name]))
                con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM review_rows")
                con.unregister("review_rows")
        finally:
            con.close()
    get_run_logger().info("accounting: read %d = accepted %d + rejected %d %s", summary.read, summary.accepted, summary.rejected, summary.by_reason)
    return summary


# -- optional LLM review ------------------------------------------------------------------------
def _retry_unless_fatal(task: Any, task_run: Any, state: Any) -> bool:
    """Retry a review stage after a transient error; never after a wrong endpoint, key or model, or an endpoint
    that is down or cannot be reached (retrying those only waits)."""
    try:
        state.result()
    except (LLMEndpointError, LLMUnavailableError):
        return False
    except BaseException:
        return True
    return True


@task(name="run-agent", retries=2, retry_delay_seconds=10, retry_condition_fn=_retry_unless_fatal, cache_policy=NO_CACHE)
def run_agent(stage: str, requests: list[StructuredRequest], llm_config: LLMConfig) -> tuple[list[StructuredResult], list[dict]]:
    """One agent over a review sample; a retry is cheap because answered requests come from the cache."""
    if not requests:
        return [], []
    from tasks.llm.client import StructuredLLM  # the client only when a review runs: mining needs no LLM

    logger = get_run_logger()
    llm = StructuredLLM(llm_config)
    results = asyncio.run(llm.run_many(requests))
    logger.info("%s: %d answered, %d parsed", stage, len(results), sum(r.ok for r in results))
    return results, ledger_rows(llm.ledger)


@contextlib.contextmanager
def llm_endpoint(cfg: MineTDIConfig) -> Iterator[tuple[LLMConfig, Callable[[], None]]]:
    """The LLM config of the review, starting the embedded server for ``--base-url embedded`` (as
    build-tdi's ``llm_endpoint``), plus a check that raises if that server died."""
    llm = review_llm(cfg)
    if cfg.base_url != EMBEDDED:
        yield llm, lambda: None
        return
    from models.embedded_llm.server import EmbeddedLLMServer

    with EmbeddedLLMServer(model=llm.model) as server:
        get_run_logger().info("embedded LLM %s ready at %s", llm.model, server.base_url)
        preflight(replace(llm, base_url=server.base_url))
        yield replace(llm, base_url=server.base_url), server.raise_if_exited


def endpoint_preflight(cfg: MineTDIConfig) -> None:
    """With an LLM review: an endpoint that cannot be reached, or a rejected key, is one clear error before any
    work (the embedded server is checked once it runs, in :func:`llm_endpoint`)."""
    if cfg.uses_llm and cfg.base_url != EMBEDDED:
        preflight(review_llm(cfg))


def review_llm(cfg: MineTDIConfig) -> LLMConfig:
    """The LLM config of the review (the embedded server's URL is set once it runs)."""
    llm = LLMConfig(model=cfg.model or EMBEDDED_MODEL, base_url=cfg.base_url, cache_dir=cfg.cache_dir, concurrency=cfg.concurrency)
    return replace(llm, concurrency=llm.in_flight)  # none: by endpoint, as build-tdi


def rewrite_mined_docs(cfg: MineTDIConfig, result: MineResult, pairs: list[DependencyPair], docs: dict[str, dict[str, Any]],
                       run: Callable[[str, list], list]) -> tuple[dict[str, dict[str, Any]], RewriteReport]:
    """Agent 1 over a seeded sample of the mined docs; valid answers replace them."""
    facts = {k: t.facts for k, t in result.targets.items()}
    keys = rewrite_keys(pairs, docs, facts)
    sample = seeded_sample(keys, cfg.rewrite_docs, cfg.seed, "rewrite")
    report = RewriteReport(requested=cfg.rewrite_docs, available=len(keys), sampled=len(sample))
    docs = apply_rewrites(docs, run("rewrite", rewrite_requests(sample, facts)), report)
    get_run_logger().info("agent 1 rewrote %d of %d sampled docs; kept mined docs by reason %s",
                          report.rewritten, report.sampled, report.kept_by_reason)
    return docs, report


def judge_mined_pairs(cfg: MineTDIConfig, pairs: list[DependencyPair], docs: dict[str, dict[str, Any]],
                      run: Callable[[str, list], list]) -> tuple[dict[str, str], JudgeReport]:
    """Agent 3 over a seeded sample of the mined doc pairs; returns the records to reject (drop mode)."""
    groups = doc_pairs(pairs, docs)
    sample = sample_doc_pairs(groups, cfg.judge_sample, cfg.seed)
    report = JudgeReport(action=cfg.judge_action, requested=cfg.judge_sample, available=len(groups), sampled=len(sample),
                         records_sampled=sum(len(g.records) for g in sample))
    dropped = apply_verdicts(sample, run("judge", [judge_request(g, docs) for g in sample]), report, docs)
    get_run_logger().info("agent 3 judged %d of %d sampled doc pairs: %d dependent (rate %s), failed %s; %d records dropped",
                          report.judged, report.sampled, report.dependent, report.as_dict()["agreement_rate"],
                          report.failed_by_reason, report.records_dropped)
    return dropped, report


def _llm_card_lines(llm: dict[str, Any] | None) -> list[str]:
    if not llm:
        return []
    rw, jd, use = llm["rewrite"], llm["judge"], llm["usage"]
    lines = ["", "## LLM review", f"- model `{llm['model']}` at `{llm['base_url']}`; prompts `{json.dumps(llm['prompt_versions'])}`"]
    if rw["requested"]:
        lines.append(f"- docs: agent 1 rewrote {rw['rewritten']} of {rw['sampled']} sampled mined docs (asked {rw['requested']}, "
                     f"{rw['available']} available); kept the mined doc for {rw['kept']}, by reason `{json.dumps(rw['kept_by_reason'])}`")
    if jd["requested"]:
        rate = "n/a" if jd["agreement_rate"] is None else f"{jd['agreement_rate']:.3f}"
        lines.append(f"- pairs: agent 3 judged {jd['judged']} of {jd['sampled']} sampled doc pairs ({jd['records_sampled']} mined "
                     f"records; asked {jd['requested']}, {jd['available']} available): agreement rate {rate} "
                     f"({jd['dependent']} of {jd['judged']} judged dependent); failed by reason `{json.dumps(jd['failed_by_reason'])}`")
        lines.append(f"- judge action `{jd['action']}`: {jd['records_dropped']} records rejected as `{JUDGE_REJECTION}`"
                     if jd["action"] == "drop" else "- judge action `report`: verdicts measured only, no pair removed")
    lines.append(f"- LLM usage: {use['requests_sent']} requests sent, {use['cache_hits']} cache hits, tokens in {use['tokens_in']} / "
                 f"out {use['tokens_out']}, estimated cost USD {use['cost_usd']} (`records.duckdb`: `llm_calls`, "
                 "`doc_rewrites`, `judge_verdicts`)")
    return lines


def write_mined_card(out_dir: Path, manifest: dict[str, Any], folder: Path | None = None) -> Path:
    counts = manifest["counts"]
    mining, acc = manifest["mining"], manifest["accounting"]
    llm = manifest.get("llm")
    how = ("mined without an LLM" if not llm else
           "mined from code (an LLM only rewrote a sample of docs and/or judged a sample of pairs, see LLM review)")
    lines = [
        f"# {manifest['dataset']}: mined TDI tool-dependency pairs",
        "",
        f"Pairs of tool API documents labelled for the Tool Graph Retriever dependency discriminator, "
        f"{how} by the `mine-tdi` flow of tgr-pipeline: inside a function body, the value "
        "returned by a documented function that reaches an argument of another documented function makes "
        "the pair <consumer, producer> (class 0, kind `data`). Call order without data flow (a guard whose result "
        "decides whether the later call runs, a setup call on the same object, a validation before use) makes a "
        "precondition pair (class 0, kind `precondition`, `support` = functions showing the order); so does a "
        "function that raises unless another has set some state, whose error message names the call to make "
        "first, or that checks it was fitted (stated in code: kept at support 1). Docs are built from signatures "
        "and docstrings.",
        "",
        "## Labels and origins",
        "| id | name | origins |",
        "|---|---|---|",
        "| 0 | a_depends_on_b | `mined` (t_a consumes t_b's return value); `validated` when mixed from build-tdi |",
        "| 1 | no_dependency | `hard_negative` (same top-level package, no flow either way), `shuffled` (across packages) |",
        "| 2 | b_depends_on_a | `mined_swapped` / `swapped`: class 0 swapped |",
        "",
        *PARAMETER_COLUMNS_CARD,
        "- Here `consumer_param` is the consumer's parameter the producer's return value reaches in the mined code; "
        "`producer_output` is the producer doc's one output where it declares exactly one (null after output dropout "
        "unless its name says the same output); pairs mixed from build-tdi carry what their source has.",
        *([f"- dependent pairs {p['dependent_pairs']}: with consumer_param {p['consumer_param']}, with producer_output "
           f"{p['producer_output']}"] if (p := mining.get("parameters")) else []),
        "",
        *KIND_COLUMNS_CARD,
        "",
        "## Counts",
        "| split | a_depends_on_b | no_dependency | b_depends_on_a |",
        "|---|---|---|---|",
        *(f"| {s} | {c['a_depends_on_b']} | {c['no_dependency']} | {c['b_depends_on_a']} |" for s, c in counts.items()),
        *kind_card_lines(manifest),
        *origin_card_lines(manifest),
        "",
        "## Provenance",
        f"- sources: {', '.join(manifest['config']['source'])}; files read {mining['files_read']}, parsed {mining['files_parsed']}",
        f"- candidates {mining['candidates']}, accepted distinct pairs {mining['accepted_pairs']}; rejected by reason "
        f"`{json.dumps(mining['rejected_by_reason'])}`",
        *([f"- undocumented overrides read with their base method's docstring (as `inspect.getdoc`): {mining['inherited_docstrings']}"]
          if mining.get("inherited_docstrings") else []),
        *([f"- precondition candidates {mining['precondition_candidates']}, accepted distinct pairs "
           f"{mining['accepted_precondition_pairs']}, kept with support >= {manifest['config']['min_order_support']} "
           f"or stated in code: {mining['precondition_pairs_kept']}; rejected by reason `{json.dumps(mining['precondition_rejected_by_reason'])}`"]
          if mining.get("precondition_candidates") else []),
        *([f"- test files read for their data flows only, call orders not read: {mining['test_files_orders_not_read']}"]
          if mining.get("test_files_orders_not_read") else []),
        f"- LLM pairs mixed in: {mining['llm_pairs']}; negatives by origin `{json.dumps(mining['negatives'])}`",
        f"- output dropout: declared outputs removed from {mining['docs_outputs_dropped']} of {mining['docs']} docs "
        f"(fraction {manifest['config']['output_dropout']})",
        f"- records read {acc['read']}, accepted {acc['accepted']}, rejected {acc['rejected']} (`records.duckdb`, table `record_outcomes`)",
        f"- seed {manifest['config']['seed']}; no tool doc appears in two splits",
        *_llm_card_lines(llm),
    ]
    return write_card(out_dir, counts, lines, folder, manifest=manifest, license_note=MINED_LICENSE_NOTE,
                      limits="A flow is syntactic: the producer's value reaches the consumer's argument, which is a "
                             "real data dependency in that code, but the docs come from docstrings of uneven "
                             "quality, and call targets reached only through objects of unknown type are not seen "
                             "(rejected as `unresolved_target`). Precondition pairs are noisier: call order is often "
                             "mere sequence (about half of a sample read right at support 1; filter on `support`).")


# -- the flow -----------------------------------------------------------------------------------
@flow(name="mine-tdi", log_prints=True)
def mine_tdi(cfg: MineTDIConfig = MineTDIConfig()) -> dict[str, Any]:
    """Mine a TDI dataset from code; returns the manifest. One run per dataset folder at a time."""
    cfg.check_inputs()  # before the lock: a refused run leaves no folder behind
    endpoint_preflight(cfg)
    with dataset_lock(cfg.out_dir):
        manifest = _mine_tdi(cfg)
        if cfg.push_to_hub:  # under the lock: no other run replaces the version being uploaded
            get_run_logger().info("pushed to the hub: %s", push_to_hub(cfg.out_dir, cfg.push_to_hub, cfg.private))
        return manifest


def _mine_tdi(cfg: MineTDIConfig) -> dict[str, Any]:
    logger = get_run_logger()
    out_dir = cfg.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    items, sources = source_files(cfg)
    result = mine(quote(items), cfg)
    mine_seconds = time.perf_counter() - t0
    docs = docs_for(quote(result), cfg.workers)
    pairs = flow_pairs(result, docs)
    orders, rare_orders = precondition_pairs(result, cfg.min_order_support)
    llm_pairs: list[DependencyPair] = []
    if cfg.mix_tdi:
        llm_pairs, llm_docs = load_llm_pairs(cfg.mix_tdi)
        docs = {**docs, **llm_docs}
    ledger: list[dict] = []
    judged_out: dict[str, str] = {}
    dropped: list[DependencyPair] = []
    llm_review: dict[str, Any] | None = None
    reviews: dict[str, list[dict]] = {}
    if cfg.uses_llm:
        with llm_endpoint(cfg) as (llm_cfg, ensure_alive):

            def run(stage: str, requests: list) -> list:
                try:
                    results, calls = run_agent(stage, quote(requests), llm_cfg)
                except LLMUnavailableError:
                    ensure_alive()  # an embedded server that died says so (exit status, log) over 'cannot be reached'
                    raise
                ensure_alive()
                ledger.extend(calls)
                return results

            rewrite_report, judge_report = RewriteReport(), JudgeReport(action=cfg.judge_action)
            if cfg.rewrite_docs:  # before judging: the judge sees the docs the dataset gets
                docs, rewrite_report = rewrite_mined_docs(cfg, result, pairs, docs, run)
            if cfg.judge_sample:  # agent 3's prompt judges data flow: precondition pairs are not sent
                judged_out, judge_report = judge_mined_pairs(cfg, pairs, docs, run)
        dropped = [p for p in pairs if p.record_id in judged_out]
        pairs = [p for p in pairs if p.record_id not in judged_out]
        reviews = {"doc_rewrites": rewrite_report.rows, "judge_verdicts": judge_report.rows}
        llm_review = {
            "base_url": split_userinfo(cfg.base_url or "")[0], "model": llm_cfg.model,
            "prompt_versions": {"extract": EXTRACT.version, "validate": VALIDATE.version},
            "rewrite": rewrite_report.as_dict(), "judge": judge_report.as_dict(), "usage": usage_summary(ledger),
        }
    # every doc a row carries is checked against the API doc schema once, by the quality gate before publish
    balance_cfg = MinedBalanceConfig(cfg.per_class, cfg.validation_fraction, cfg.seed, cfg.output_dropout, cfg.hard_negative_share)
    balanced = balance(quote(pairs + orders + llm_pairs), quote(docs), balance_cfg, quote(dropped))
    n_read = result.files_read + result.candidates + result.order_candidates + len(llm_pairs)
    outcomes = outcome_table(result, balanced, llm_pairs, judged_out, rare_orders)
    summary = account(out_dir, quote(outcomes), n_read, quote(ledger), quote(reviews))
    if not balanced.rows:
        raise RuntimeError(f"no usable pairs: nothing to write (rejections by reason: {summary.by_reason}); see {out_dir / 'records.duckdb'}")

    staging = fresh_staging(out_dir)
    write_sources(staging, sources)  # sources.json: published with the shards (tasks/dataset/publish.py)
    infos = stage_shards(quote(balanced.rows), staging, ShardConfig(rows_per_shard=cfg.rows_per_shard, seed=cfg.seed))
    report = quality_gate(out_dir, staging)
    mining = {
        "files_read": result.files_read,
        "files_parsed": result.files_parsed,
        "files_rejected_by_reason": result.file_reason_counts(),
        "candidates": result.candidates,
        "accepted_pairs": len(result.flows),
        "rejected_by_reason": result.reason_counts(),
        "inherited_docstrings": result.inherited_docs,  # undocumented overrides read with their base method's docstring
        # call order without data flow (tasks/mining/order.py); accepted: one per distinct pair, support counted
        "precondition_candidates": result.order_candidates,
        "accepted_precondition_pairs": len(result.orders),
        "precondition_pairs_kept": len(orders),  # support >= --min-order-support, or stated in code (state.stated)
        "precondition_rejected_by_reason": {**result.order_reason_counts(), **({RARE_ORDER: len(rare_orders)} if rare_orders else {})},
        "test_files_orders_not_read": result.test_files_orders_not_read,  # test code: its data flows only (--test-orders)
        "llm_pairs": len(llm_pairs),
        "docs": len(docs),
        "docs_outputs_dropped": balanced.dropped_outputs,
        "negatives": balanced.negatives,
        "parameters": balanced.parameters,  # dependent pairs in the rows, with consumer_param / producer_output set
        "mine_seconds": round(mine_seconds, 1),  # list, parse and resolve
        "seconds": round(time.perf_counter() - t0, 1),  # everything up to the published shards
    }
    manifest = build_manifest(
        out_dir.name,
        infos,
        {
            "config": recorded_config(cfg),
            "origin": "mined (no LLM)" if llm_review is None else "mined (LLM review of a sample)",
            "per_class": balanced.per_class,
            "per_class_target": cfg.per_class,
            "output_dropout": cfg.output_dropout,
            "mining": mining,
            "sources": manifest_summary(sources),  # every package with its version and sha256; files in sources.json
            "accounting": summary.as_dict(),
            "quality": {"success": report.success, "checks": len(report.checks)},
            **({"llm": llm_review} if llm_review is not None else {}),
        },
    )
    manifest = publish_with_card(out_dir, staging, manifest, write_mined_card, "tdi-mined-dataset")
    logger.info("wrote %d rows in %d shards to %s", manifest["total_rows"], len(infos), out_dir)
    return manifest


def recorded_config(cfg: MineTDIConfig) -> dict[str, Any]:
    """The config as the manifest records it: JSON types, no credentials in the base URL."""
    config = json.loads(json.dumps(asdict(cfg), default=str))
    config["base_url"] = split_userinfo(cfg.base_url)[0] if cfg.base_url else cfg.base_url
    return config


# -- command line -------------------------------------------------------------------------------
def show(manifest: dict[str, Any]) -> None:
    """What the command line prints of a published dataset's manifest."""
    print(json.dumps({"dataset": manifest["dataset"], "counts": manifest["counts"], "mining": manifest["mining"]}, indent=2))


def main(argv: list[str] | None = None) -> None:
    show(mine_tdi(_parse_args(argv)))


if __name__ == "__main__":
    CLI.run(lambda cfg: show(mine_tdi(cfg)), first=endpoint_preflight)  # the preflight before Prefect starts too
