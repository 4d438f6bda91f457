r"""Prefect flow ``build-graph``: tool sets -> embeddings, dependency edges, TGR embeddings -> DuckDB.

    python -m flows.build_graph --toolset apibank --toolset toolbench_stable \
        --discriminator artifacts/discriminator/<run>/best --warehouse artifacts/warehouse/tgr.duckdb
    python -m flows.build_graph --toolset apibank --no-discriminator   # manual + schema edges only

A ``--toolset`` is a benchmark name (apibank, toolbench_stable, ultratool, tmdb: read from
``--data-root``), a folder in the documented tool set format (tools.jsonl with tool_id/group/doc,
edges.jsonl, ...), a folder in the shared benchmark layout (tools.jsonl with name/description,
``*edges*.jsonl`` with producer/consumer rows, queries.jsonl), or a file of an agent's tool definitions
(``my_agent.json``: OpenAI, Anthropic, Gemini or MCP tools, ``tasks/toolsets/tool_specs.py``; the set is named
after the file).

Edge sources per tool set: ``manual`` (gold), ``schema`` (the parameter-match rule on every
same-group pair), and with ``--discriminator`` ``discriminator`` (calibrated threshold from the
checkpoint's calibration.json, ``--threshold`` to override, argmax when neither) and ``fused``
(their union). Each source gets its TGR embeddings (``tgr_<source>``).

ToolNet (``transition``): where the benchmark's queries carry gold call orders (API-Bank,
UltraTool, TMDB) and/or ``--trajectories [DATASET=]FILE`` gives runs, the runs are split
(seeded), Eq. 5 is built from the training runs, alpha and beta of the dynamic update (Eqs. 6-8)
are chosen on the validation runs, and the test runs update the weights in a seeded order, every
change a versioned row (tasks/toolsets/trajectories.py, tasks/toolnet/transitions.py, docs/warehouse.md).
``tgr_transition`` is Eq. 3 with A = the transition weights. Every edge source gets a lineage row.

Precondition edges (source ``call_order``, kind ``precondition``; docs/preconditions.md, "In the graph"):
from the same training runs only, every ordered tool pair consistently called in one order with enough
support, no generic first step and no value passed (name rule, this build's data edges) is an edge
(``--order-min-support`` ...; ``--no-call-order-edges`` turns it off). Each data graph the build made gets a
second TGR embedding over it and these edges, ``tgr_<source>_call_order``; eval-retrieval scores those on the
test queries only.
"""
from __future__ import annotations

import functools
import json
import typing
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import SecretStr

from tasks.common.flow_cli import FlowCLI  # first: Prefect analytics off before Prefect loads
from models.encoder_path import ENCODER_ENGINES, OFFLINE_DEFAULT
from schemas.toolset import ToolSet
from tasks.toolnet.evaluator import EMBEDDED, EVALUATORS, endpoint_problem, evaluator_llm_config, toolnet_evaluator
from tasks.common.cli import Flag, Help, checking_inputs, parse_config
from tasks.common.embedding_cache import DEFAULT_CACHE_DIR
from tasks.common.plots import show_plot
from tasks.graph.call_order_edges import CallOrderEdges, call_order_edges, with_call_order
from tasks.common.memory import release_free_memory
from tasks.graph.checks import DEFAULT_CHECK_PARTNERS, PreconditionScope, check_pairs
from tasks.graph.candidates import DEFAULT_RETRIEVAL_K, RETRIEVAL_RANKS, retrieval_candidates, retrieval_recall
from tasks.graph import lifecycle
from tasks.graph.edges import dataset_tables, fuse_edges
from tasks.graph.metrics import describe as describe_edge_metrics, edge_metrics
from tasks.graph.plots import (CANDIDATE_RECALL_PLOT, curve_settings, curve_strategies, operating_point,
                               plot_candidate_recall, table_rows)
from tasks.graph.pruning import (DEFAULT_PRUNING, PRUNING_STRATEGIES, PruningResult, log_groups, log_pruning,
                                  prune_candidates, pruning_rules)
from tasks.graph.schema_rule import schema_edges
from tasks.graph.stated import MAX_NAMED, stated_dependencies, stated_edges, with_stated
from tasks.graph.stated import describe as describe_stated
from tasks.graph.two_level import cross_encoder_pairs
from tasks.graph.scoring import (DEFAULT_MAX_PREREQUISITES, SCORING_PRECISIONS, SCORING_RUNNERS, EdgeDecision,
                                 cap_prerequisites, edge_decision, edges_from_probabilities, resolved_precision,
                                 score_pairs)
from tasks.llm.config import split_userinfo
from tasks.llm.preflight import preflight
from tasks.retrieval.gcn import Direction, gcn_propagate, gcn_propagate_weighted
from tasks.retrieval.ranking import cosine_scores
from tasks.retrieval.tool_text import EMBED_STYLES, embed_style_for, embed_text
from schemas.name_rule import DEFAULT_MAX_PRODUCERS
from tasks.toolsets.call_order import (DEFAULT_GENERIC_MIN_TOOLS, DEFAULT_GENERIC_SHARE, DEFAULT_MIN_CONSISTENCY,
                                       DEFAULT_MIN_SUPPORT)
from tasks.toolsets.readers import BENCHMARKS, DEFAULT_DATA_ROOT, load_toolset_spec
from tasks.toolsets.trajectories import (DEFAULT_FRACTIONS, RESERVED, Trajectories, gold_trajectories, merge,
                                read_trajectories)
from tasks.toolnet.transitions import DEFAULT_ALPHAS, DEFAULT_BETAS, RULE_SCORE, ToolNetBuild, build_toolnet
from warehouse.build import DatasetTables, build_warehouse
from warehouse.lineage import checkpoint_lineage, lineage_row

DEFAULT_WAREHOUSE = Path("artifacts/warehouse/tgr.duckdb")
RULE_SCORES = (1, 2, 3)  # the rule evaluator's +/-N


@dataclass
class GraphConfig:
    """The one config surface of build-graph: the flow's parameter (Prefect UI, prefect.yaml) and, generated
    from it, the command line (tasks/common/cli.py). Every default and every check is here."""

    toolsets: Annotated[tuple[str, ...], Help(
        "benchmark names (read from data_root), tool set folders or files of an agent's tool definitions (OpenAI, "
        "Anthropic, Gemini or MCP .json/.jsonl); repeat or comma-separate (apibank,toolbench_stable)")] = \
        field(default=("apibank",), metadata={"cli": Flag("toolset", repeat=True, required=True)})
    warehouse: Annotated[str, Help("the DuckDB file written (rebuilt for these tool sets)")] = str(DEFAULT_WAREHOUSE)
    discriminator: Annotated[str | None, Help(
        "checkpoint folder, e.g. artifacts/discriminator/<run>/best; none: manual (gold) and schema edges only")] = field(
        default=None, metadata={"cli": Flag(required=True, none_flag="manual (gold) and schema edges only")})
    data_root: Annotated[str, Help("where benchmark names are looked up")] = str(DEFAULT_DATA_ROOT)
    encoder: Annotated[str, Help(
        "sentence encoder: offline-minilm, paraphrase-minilm-l3 (the paper's, ONNX), a hub id or folder; a ':int8' "
        "suffix runs its int8 ONNX graph, built once (2-3x the texts per second on a CPU: 10^5-tool catalogs)")] = \
        OFFLINE_DEFAULT
    encoder_engine: Annotated[str, Help(
        "what runs a transformers encoder (tool texts, queries, the retrieval rule): auto (onnx on a CPU, torch on a "
        "GPU); torch; onnx (its fp32 export in ONNX Runtime, CPU only: vectors within about 2e-7, about twice the "
        "texts per second on 2 cores; bench/RESULTS.md, 'The sentence encoders in ONNX Runtime')")] = field(
        default="auto", metadata={"choices": ENCODER_ENGINES})
    embed_style: Annotated[str | None, Help(
        "tool text that is embedded; none: per dataset (API-Bank description, others structured)")] = field(
        default=None, metadata={"choices": EMBED_STYLES})
    pruning: Annotated[str, Help(
        f"candidate pairs to score: {', '.join(PRUNING_STRATEGIES)} (any '+'-union of params, text, neighbours, "
        "retrieval)")] = \
        DEFAULT_PRUNING
    neighbours: Annotated[int, Help("pruning 'neighbours': a pair is kept when one tool is among the other's N "
                                    "most similar tools of its group (by embedding)")] = 5
    retrieval_k: Annotated[int, Help("pruning 'retrieval': each input parameter of a tool (or the tool, when it "
                                     "declares none) keeps its K most similar producers of its group (by --encoder)")] = \
        DEFAULT_RETRIEVAL_K
    retrieval_encoder: Annotated[str | None, Help(
        "encoder of the 'retrieval' rule: a dependency retriever trained by train-retriever "
        "(artifacts/retriever/<run>/best); none: --encoder, untrained")] = None
    retrieval_share: Annotated[float | None, Help(
        "pruning 'retrieval': of the top-K pairs, keep only the best-scored ones up to this share of the set's "
        "ordered same-group pairs, whatever their group, in (0, 1] (a scoring budget; meaningful with a trained "
        "--retrieval-encoder); none: all top-K")] = None
    retrieval_rank: Annotated[str, Help(
        "what orders the pairs under --retrieval-share: cosine (the retriever's best cosine over the consumer's "
        "inputs), head (the trained --retrieval-encoder's parameter head: its best p over the inputs) or auto (the "
        "head where the encoder's folder has one, else cosine)")] = field(
        default="auto", metadata={"choices": RETRIEVAL_RANKS})
    min_prob: Annotated[float, Help(
        "keep a predicted edge only when its prob (p(a->b) + p(b->a)) reaches this, in [0, 1]")] = 0.0
    max_prerequisites: Annotated[int | None, Help(
        "keep each tool's K most probable prerequisites among the discriminator's edges (both levels), drop the "
        "rest (every score stays in scored_pairs); none: every edge over the cut")] = DEFAULT_MAX_PREREQUISITES
    both_orders: Annotated[bool, Help(
        "test-time symmetry: also score <b,a> and average it, label-swapped, with <a,b> (2x cost)")] = field(
        default=True, metadata={"cli": Flag("single-order", "score <a,b> only, not also <b,a> (half the cost)",
                                            invert=True)})
    batch_size: Annotated[int, Help("pairs per scoring step and texts per encoder step")] = 64
    embedding_cache: Annotated[str | None, Help(
        "folder of the content-addressed embedding cache (sha256 of encoder, max length and text -> vector): a "
        "rerun encodes no text again")] = field(
        default=DEFAULT_CACHE_DIR, metadata={"cli": Flag(none_flag="encode every text, no cache")})
    max_length: Annotated[int | None, Help(
        "word pieces per scored pair; none: the checkpoint's training max_length (calibration.json), else 256")] = None
    scoring_precision: Annotated[str, Help(
        "discriminator arithmetic: auto (onnx on a CPU, fp32 on a GPU); fp32 (torch, the reference); onnx (the "
        "same fp32 in ONNX Runtime, CPU only: 1.4-1.65x on 2 cores, probabilities within about 1e-6); bf16 or int8 "
        "are faster on CPU, probabilities within about 1e-2, so a pair near the threshold may flip (bench/RESULTS.md, "
        "'Pair scoring speed')")] = field(default="auto", metadata={"choices": SCORING_PRECISIONS})
    scoring_runner: Annotated[str, Help(
        "where the discriminator scores candidate pairs: local (this process, torch's threads); dask or ray: in "
        "shards, as Prefect tasks on a Dask or Ray cluster (a local one of --scoring-workers processes, or the one at "
        "--dask-address / --ray-address; ray needs pip install -e .[ray]); the same probabilities either way")] = field(
        default="local", metadata={"choices": SCORING_RUNNERS})
    scoring_workers: Annotated[int, Help(
        "worker processes (dask) or CPUs (ray) of a local scoring cluster, one torch thread each")] = 2
    dask_address: Annotated[str | None, Help(
        "scheduler address of a running Dask cluster (tcp://host:8786) for --scoring-runner dask; none: a local one")] = None
    ray_address: Annotated[str | None, Help(
        "address of a running Ray cluster (ray://host:10001, or auto) for --scoring-runner ray; none: a local one")] = None
    gcn_direction: Annotated[Direction, Help("edge direction of the TGR propagation (Eq. 3)")] = "both"
    device: Annotated[str | None, Help("torch device of encoder and discriminator; none: cuda when available, else cpu")] = None
    threshold: Annotated[float | None, Help(
        "keep a discriminator edge when p(a->b)+p(b->a) >= this, in [0, 1]; overrides the checkpoint's calibration.json "
        "threshold (none: that one, else argmax)")] = None
    schema_edges: Annotated[bool, Help("the parameter-match rule as edge source 'schema' (and 'fused' with a discriminator)")] = True
    stated_edges: Annotated[bool, Help(
        "the dependencies the tools' own docs state (an input's description names another tool of the same provider "
        "as its source: 'the id returned by .../products/search'; tasks/graph/stated.py) as edge source 'stated', "
        "and in the discriminator's decision above any model's edge between the two tools")] = True
    lifecycle_direction: Annotated[bool, Help(
        "between two tools that both declare no inputs, the cross-encoder's edge takes the direction their names' "
        "lifecycle says where it says one (a search before what acts on its object, then create, change, remove: "
        "flight_search before book_flight; tasks/graph/lifecycle.py): there the model tells that two tools depend "
        "far better than which way. Whether they depend stays the model's")] = True
    param_discriminator: Annotated[str | None, Help(
        "parameter-level scorer: a cross-encoder checkpoint (train-discriminator --param-level: <run>/param/best) or a "
        "dependency retriever with its parameter head (train-retriever: <run>/best, fast): each candidate pair's "
        "consumer inputs are scored against the producer, kept ones go to parameter_edges (source 'discriminator'), and "
        "the 'discriminator' tool edge is the max over the consumer's inputs (a consumer without inputs keeps "
        "--discriminator's pair score, if given)")] = None
    two_level: Annotated[bool, Help(
        "with a --discriminator checkpoint that carries a parameter scorer (best/parameter_scorer: train-discriminator's "
        "default) and no --param-discriminator: score with both levels, that scorer on each consumer's inputs and the "
        "cross-encoder where a consumer declares none, and (without --retrieval-encoder) its retriever choosing the "
        "'retrieval' candidates; --no-two-level: the cross-encoder alone")] = True
    # "checks" by default: TGR's "prior verification", about half right by reading for about 0.02 of F1 against
    # data-only gold; "all" costs NesTools 0.2 of F1 and triples ToolBench's scoring (bench/RESULTS.md,
    # "Preconditions whose prerequisite checks", "Preconditions from the discriminator")
    cross_encoder_preconditions: Annotated[PreconditionScope, Help(
        "with two levels (or --param-discriminator), between two tools that declare inputs where the parameter "
        "level found no edge and no name rule sees a value pass: 'checks': the cross-encoder's edge stands as a "
        "precondition (kind 'precondition': the prerequisite is called first, no value passed; "
        "docs/preconditions.md) where the prerequisite checks (its name or description starts with check, verify, "
        "validate, authenticate...: tasks/graph/checks.py) and the dependent acts, and each check is scored with "
        "the --check-partners such tools of its group most like it, beside the candidates; 'all': wherever the cross-encoder calls the pair dependent, every "
        "candidate pair scored; 'off': such a pair is decided input by input alone, so it is never a "
        "precondition")] = "checks"
    check_partners: Annotated[int, Help(
        "with 'checks': each tool that checks is scored with only the N tools of its group it may gate that are "
        "most like it (by --encoder), so a large group costs checks x N pairs, not checks x tools; 0: every one")] = \
        DEFAULT_CHECK_PARTNERS
    param_threshold: Annotated[float | None, Help(
        "cut on p(input takes the producer's output), in [0, 1]; none: the checkpoint's calibration.json (or its "
        "param_head.json)")] = None
    progress: Annotated[bool, Help("progress bar while scoring pairs")] = True
    # ToolBench's id, url, symbol (schemas.name_rule)
    max_producers: Annotated[int | None, Help(
        "an output name that more than N tools of a group produce is no parameter-match evidence (schema edges, "
        "discriminator hints); none (on the command line also 0): every name is")] = field(
        default=DEFAULT_MAX_PRODUCERS, metadata={"cli": Flag(none_if_negative=True, none_if_zero=True)})
    # ToolNet transition graph (docs/warehouse.md, "ToolNet")
    transitions: Annotated[bool, Help(
        "use the gold call orders of a benchmark's queries.jsonl as trajectories where it has them")] = True
    trajectories: Annotated[tuple[str, ...], Help(
        "user runs for ToolNet's transition graph, JSON Lines (docs/warehouse.md), as [DATASET=]FILE (DATASET a "
        "--toolset value or its name; a bare FILE when one tool set is built)")] = field(
        default=(), metadata={"cli": Flag(repeat=True, split=False, metavar="[DATASET=]FILE")})
    split_seed: Annotated[int, Help("seed of the trajectories' train/validation/test split and stream order")] = 0
    split_fractions: Annotated[tuple[float, float, float], Help(
        "train,validation,test fractions of the trajectories (non-negative, summing to 1)")] = field(
        default=DEFAULT_FRACTIONS, metadata={"cli": Flag("split")})
    alpha: Annotated[float | None, Help("Eq. 8 update speed, >= 0; with beta given too: no validation sweep")] = None
    beta: Annotated[float | None, Help("Eq. 6 weight on the static graph, in [0, 1]")] = None
    alphas: Annotated[tuple[float, ...], Help(
        "the validation sweep of alpha (the paper reports no values)")] = DEFAULT_ALPHAS
    betas: Annotated[tuple[float, ...], Help("the validation sweep of beta, each in [0, 1], one below 1")] = DEFAULT_BETAS
    rule_score: Annotated[int, Help(
        "the rule evaluator's score: +N for a gold tool the run called, -N for another")] = field(
        default=RULE_SCORE, metadata={"choices": RULE_SCORES})
    # Precondition edges from the training runs' call order (tasks/graph/call_order_edges.py, docs/preconditions.md)
    call_order_edges: Annotated[bool, Help(
        "precondition edges (source 'call_order') from the call order of the training runs, and a TGR embedding "
        "over each data graph plus them (tgr_<source>_call_order)")] = True
    order_min_support: Annotated[int, Help(
        "call-order edges: training runs with both tools at least this many (>= 1)")] = DEFAULT_MIN_SUPPORT
    order_min_consistency: Annotated[float, Help(
        "call-order edges: share of those runs with the prerequisite first, in (0.5, 1]")] = DEFAULT_MIN_CONSISTENCY
    order_generic_share: Annotated[float, Help(
        "call-order edges: a tool consistently first before more than this share of the other tools is a generic "
        "first step (a router), no prerequisite, in (0, 1]")] = DEFAULT_GENERIC_SHARE
    order_generic_min_tools: Annotated[int, Help(
        "call-order edges: ... and before at least this many tools (>= 1)")] = DEFAULT_GENERIC_MIN_TOOLS
    # tasks/toolnet/evaluator.py: the rule scores a run whose answer stays invalid, and that is recorded
    evaluator: Annotated[str, Help(
        "who scores the runs of the dynamic update: the rule, or an LLM (ToolNet's Evaluate through tasks/llm/client.py; "
        "a run whose answer stays invalid gets the rule, recorded as 'rule fallback')")] = field(
        default="rule", metadata={"choices": EVALUATORS})
    evaluator_model: Annotated[str | None, Help(
        "model name at evaluator_base_url; none: the packaged embedded model")] = None
    evaluator_base_url: Annotated[str | None, Help(
        f"OpenAI-compatible endpoint of the llm evaluator, or '{EMBEDDED}' (the packaged local model); "
        "none: OPENAI_BASE_URL (key: OPENAI_API_KEY)")] = None
    evaluator_concurrency: Annotated[int | None, Help(
        "evaluator requests in flight; none: 1 embedded, 16 otherwise")] = None
    evaluator_cache_dir: Annotated[str, Help(
        "LLM answer cache of the evaluator (a rebuild repeats no answered request)")] = "artifacts/llm-cache"
    # set from evaluator_base_url's userinfo; never recorded
    evaluator_base_url_credentials: SecretStr | None = field(default=None, metadata={"cli": Flag(cli=False)})

    def __post_init__(self) -> None:
        if not self.toolsets:
            raise ValueError("--toolset: name at least one benchmark or tool set folder")
        if self.two_level and self.param_discriminator is None and self.discriminator:
            from tasks.graph.two_level import parameter_scorer_of

            scorer = parameter_scorer_of(self.discriminator)  # the checkpoint's own parameter level
            if scorer is not None:
                self.param_discriminator = str(scorer)
                self.retrieval_encoder = self.retrieval_encoder or str(scorer)  # it is a trained retriever too
        if self.param_discriminator and not Path(self.param_discriminator, "config.json").exists():
            raise ValueError(f"--param-discriminator {self.param_discriminator}: no config.json there "
                             "(train one: train-discriminator --param-level)")
        if self.param_threshold is not None and not self.param_discriminator:
            raise ValueError("--param-threshold: only with --param-discriminator")
        if self.param_threshold is not None and not 0.0 <= self.param_threshold <= 1.0:
            raise ValueError(f"--param-threshold {self.param_threshold}: must lie in [0, 1]")
        if self.discriminator and not Path(self.discriminator, "config.json").exists():
            raise ValueError(f"--discriminator {self.discriminator}: no config.json there (train one: make train-discriminator)")
        if self.embed_style is not None and self.embed_style not in EMBED_STYLES:
            raise ValueError(f"--embed-style {self.embed_style!r}: one of {', '.join(EMBED_STYLES)}, or none")
        pruning_rules(self.pruning)  # a ValueError naming the strategies
        if self.retrieval_share is not None and not 0.0 < self.retrieval_share <= 1.0:
            raise ValueError(f"--retrieval-share {self.retrieval_share}: must lie in (0, 1]")
        if self.retrieval_rank not in RETRIEVAL_RANKS:
            raise ValueError(f"--retrieval-rank {self.retrieval_rank!r}: one of {', '.join(RETRIEVAL_RANKS)}")
        if self.retrieval_rank == "head" and (self.retrieval_share is None or not self.retrieval_encoder):
            raise ValueError("--retrieval-rank head: only with --retrieval-share and a trained --retrieval-encoder")
        if self.scoring_runner not in SCORING_RUNNERS:
            raise ValueError(f"--scoring-runner {self.scoring_runner!r}: one of {', '.join(SCORING_RUNNERS)}")
        for name in ("dask_address", "ray_address"):
            if not getattr(self, name):  # an empty address means a local cluster, as none does
                setattr(self, name, None)
        if self.encoder_engine not in ENCODER_ENGINES:
            raise ValueError(f"--encoder-engine {self.encoder_engine!r}: one of {', '.join(ENCODER_ENGINES)}")
        if self.scoring_precision not in SCORING_PRECISIONS:
            raise ValueError(f"--scoring-precision {self.scoring_precision!r}: one of {', '.join(SCORING_PRECISIONS)}")
        if self.gcn_direction not in typing.get_args(Direction):
            raise ValueError(f"--gcn-direction {self.gcn_direction!r}: one of {', '.join(typing.get_args(Direction))}")
        for flag, value in (("--neighbours", self.neighbours), ("--retrieval-k", self.retrieval_k),
                            ("--batch-size", self.batch_size), ("--scoring-workers", self.scoring_workers),
                            ("--max-length", self.max_length), ("--max-producers", self.max_producers),
                            ("--evaluator-concurrency", self.evaluator_concurrency),
                            ("--order-min-support", self.order_min_support),
                            ("--order-generic-min-tools", self.order_generic_min_tools)):
            if value is not None and value < 1:
                raise ValueError(f"{flag} {value}: must be at least 1")
        if self.max_prerequisites is not None and self.max_prerequisites < 1:
            raise ValueError(f"--max-prerequisites {self.max_prerequisites}: must be at least 1 (none: no cap)")
        if self.check_partners < 0:
            raise ValueError(f"--check-partners {self.check_partners}: must be at least 0 (0: every tool a check may gate)")
        if not 0.5 < self.order_min_consistency <= 1.0:
            raise ValueError(f"--order-min-consistency {self.order_min_consistency}: must lie in (0.5, 1] "
                             "(a share of the joint runs with the prerequisite first)")
        if not 0.0 < self.order_generic_share <= 1.0:
            raise ValueError(f"--order-generic-share {self.order_generic_share}: must lie in (0, 1]")
        for flag, value in (("--min-prob", self.min_prob), ("--threshold", self.threshold), ("--beta", self.beta)):
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{flag} {value}: must lie in [0, 1]")
        fractions = self.split_fractions
        if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1) > 1e-9:
            raise ValueError(f"--split {','.join(map(str, fractions))}: three non-negative fractions "
                             "(train,validation,test) summing to 1")
        if self.alpha is not None and self.alpha < 0:
            raise ValueError(f"--alpha {self.alpha}: must not be negative")
        if not self.alphas or min(self.alphas) < 0:
            raise ValueError(f"--alphas {','.join(map(str, self.alphas)) or '(empty)'}: one or more values, none negative")
        if not self.betas or not (0.0 <= min(self.betas) < 1.0 and max(self.betas) <= 1.0):
            raise ValueError(f"--betas {','.join(map(str, self.betas)) or '(empty)'}: values in [0, 1], at least one below 1 "
                             "(the dynamic update needs one)")
        if self.rule_score not in RULE_SCORES:
            raise ValueError(f"--rule-score {self.rule_score}: one of {', '.join(map(str, RULE_SCORES))}")
        if self.evaluator not in EVALUATORS:
            raise ValueError(f"evaluator must be one of {', '.join(EVALUATORS)}, not {self.evaluator!r}")
        if self.evaluator == "llm" and endpoint_problem(self.evaluator_base_url):
            raise ValueError(endpoint_problem(self.evaluator_base_url))
        if self.evaluator_base_url:  # credentials in the URL go to a SecretStr (as LLMConfig does)
            url, userinfo = split_userinfo(self.evaluator_base_url)
            if userinfo:
                self.evaluator_base_url, self.evaluator_base_url_credentials = url, SecretStr(userinfo)


    def check_inputs(self) -> None:
        """Every tool set and trajectory file this run reads is there, and the warehouse can be written: a
        ``ValueError`` naming each problem (a missing benchmark says how to get it). The command line calls this
        before Prefect starts, the flow first thing, so a Python call and a deployment are refused alike."""
        from tasks.common.paths import check_writable, writable_file_problem, writable_folder_problem
        from tasks.toolsets.availability import check_dataset_names, check_toolsets

        check_toolsets(self.toolsets, self.data_root, "--toolset", root_flag="--data-root")
        check_dataset_names(self.toolsets, self.data_root, "--toolset")
        if self.retrieval_encoder and Path(self.retrieval_encoder).exists() and \
                not Path(self.retrieval_encoder, "config.json").exists():
            raise ValueError(f"--retrieval-encoder {self.retrieval_encoder}: no config.json there "
                             "(train one: make train-retriever)")
        from tasks.training.param_head import HEAD_FILE

        if self.retrieval_rank == "head" and not Path(self.retrieval_encoder, HEAD_FILE).is_file():
            raise ValueError(f"--retrieval-rank head: {self.retrieval_encoder} has no {HEAD_FILE} "
                             "(train-retriever fits it beside the retriever)")
        for value in self.trajectories:
            prefix, sep, rest = value.partition("=")
            if not Path(value).is_file() and not (sep and prefix and Path(rest).is_file()):
                raise ValueError(f"--trajectories {value}: no such file")
        check_writable(writable_file_problem(self.warehouse, "--warehouse"),
                       writable_folder_problem(self.embedding_cache, "--embedding-cache") if self.embedding_cache else None)


def toolset_folder(spec: str, data_root: str) -> Path | None:
    """The folder a --toolset spec reads (a benchmark under data_root, or the folder itself)."""
    if spec in BENCHMARKS and (Path(data_root) / spec).is_dir():
        return Path(data_root) / spec
    return Path(spec) if Path(spec).is_dir() else None


def trajectory_files(values: Sequence[str], specs: Sequence[str], names: dict[str, str]) -> dict[str, list[str]]:
    """--trajectories values by dataset name: "DATASET=FILE" (DATASET a --toolset value or its
    name), or a bare FILE when one tool set is built."""
    out: dict[str, list[str]] = {}
    for value in values:
        prefix, sep, rest = value.partition("=")
        if sep and (prefix in names or prefix in names.values()):
            out.setdefault(names.get(prefix, prefix), []).append(rest)
        elif len(specs) == 1:
            out.setdefault(names[specs[0]], []).append(value)
        else:
            raise ValueError(f"--trajectories {value!r}: with several tool sets say which one it is for "
                             f"(DATASET=FILE, DATASET one of {sorted(set(names.values()))})")
    return out


def parse_args(argv: Sequence[str] | None = None) -> GraphConfig:
    """The command line, generated from GraphConfig (tasks/common/cli.py): its defaults, flags given override them."""
    return parse_config(GraphConfig, argv, "python -m flows.build_graph", __doc__)


# python -m: --help and usage errors answer here, before the imports below (Prefect, models) are paid for
PROG = "python -m flows.build_graph"
CLI = FlowCLI.start(__name__, checking_inputs(parse_args, PROG), PROG)  # check_inputs: a usage error too

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
# quote(x): Prefect passes x to the task without walking it for futures (10^5 tools' docs took 30 s a walk)
from prefect.utilities.annotations import quote  # noqa: E402


@task(cache_policy=NO_CACHE)
def load_toolset(spec: str, data_root: str) -> ToolSet:
    log = get_run_logger()
    log.info(f"loading tool set {spec}")
    toolset = load_toolset_spec(spec, Path(data_root))
    log.info(f"{toolset.name}: {len(toolset.tools)} tools, {len(toolset.edges)} edges, {len(toolset.queries)} queries")
    return toolset


def sentence_encoder(encoder: str, batch_size: int, device: str | None, engine: str = "torch") -> Any:
    """One loaded encoder per setting while a tool set is encoded: tools, queries and the retrieval rule share it
    (``drop_sentence_encoders`` unloads them once the set's texts are all encoded)."""
    return _loaded_sentence_encoder(encoder, batch_size, device, engine)


@functools.lru_cache(maxsize=2)
def _loaded_sentence_encoder(encoder: str, batch_size: int, device: str | None, engine: str) -> Any:
    from models.sentence_encoder import EncoderConfig, SentenceEncoder

    return SentenceEncoder(EncoderConfig(encoder, batch_size=batch_size, device=device, engine=engine))


def drop_sentence_encoders() -> None:
    """Unload the encoders and give their memory back (the model, onnxruntime's arena: 0.2-0.5 GB): the graph
    steps after encoding have their peak on top of what stays (issue 21 item 6)."""
    _loaded_sentence_encoder.cache_clear()
    release_free_memory()


@task(cache_policy=NO_CACHE)
def encode_texts(texts: list[str], encoder: str, batch_size: int, device: str | None, cache_dir: str | None = None,
                 what: str = "texts", engine: str = "torch") -> np.ndarray:
    """Embeddings of ``texts``: the cache's where it has them, the rest encoded in chunks (a progress line
    each) and added to it; the encoder is loaded only when a text is missing."""
    from tasks.common.embedding_cache import EmbeddingCache, encode_cached

    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    cache = EmbeddingCache.for_encoder(cache_dir, encoder) if cache_dir else None
    return encode_cached(texts, lambda part: sentence_encoder(encoder, batch_size, device, engine).encode(part),
                         cache, what, progress=get_run_logger().info)


def cached_encoder(cfg: GraphConfig, encoder: str, what: str) -> Callable[[list[str]], np.ndarray]:
    """``encoder``'s vectors of texts through the build's embedding cache, with ``encode_texts``' progress lines."""
    return lambda texts: encode_texts.fn(texts, encoder, cfg.batch_size, cfg.device, cfg.embedding_cache, what,
                                         cfg.encoder_engine)


class RetrievalRuleEncoder:
    """The retrieval rule's encoder (``--retrieval-encoder``, else ``--encoder``, through the embedding cache) for
    one tool set. With ``remember`` it keeps its last answer: the pruning step and the candidate-recall curve ask
    for the same texts, and the second ask encodes nothing, cache or no cache (only tool sets with gold edges
    draw the curve, so a catalog without them holds no extra copy)."""

    def __init__(self, cfg: GraphConfig, remember: bool = False) -> None:
        self.cfg, self.remember = cfg, remember
        self.last: tuple[tuple[str, ...], np.ndarray] | None = None

    def __call__(self, texts: list[str]) -> np.ndarray:
        if self.last is not None and self.last[0] == tuple(texts):
            return self.last[1]
        emb = cached_encoder(self.cfg, self.cfg.retrieval_encoder or self.cfg.encoder, "retrieval-rule texts")(texts)
        # the tool set's last encoding: the model goes before the rule's own peak (issue 21 item 6)
        drop_sentence_encoders()
        if self.remember:
            self.last = (tuple(texts), emb)
        return emb


def retrieval_ranking(cfg: GraphConfig) -> str:
    """What ranks the pairs kept under ``--retrieval-share``: ``head``, the parameter head of the trained
    ``--retrieval-encoder`` (train-retriever's param_head.json), with ``--retrieval-rank head`` and with ``auto``
    (the default) where the folder has one; else ``cosine``. The head keeps more gold edges in the same budget
    (bench/RESULTS.md, "The share cap ranked by the parameter head by default")."""
    from tasks.training.param_head import HEAD_FILE

    if cfg.retrieval_rank == "cosine" or cfg.retrieval_share is None or not cfg.retrieval_encoder:
        return "cosine"
    if cfg.retrieval_rank == "auto" and not Path(cfg.retrieval_encoder, HEAD_FILE).is_file():
        return "cosine"
    return "head"


def partial_budget(cfg: GraphConfig) -> str | None:
    """What to warn of when ``--retrieval-share`` bounds only part of the candidates: the other rules of a
    ``--pruning`` union add their pairs whatever the budget; None when the budget bounds them all (or is unset)."""
    rules = pruning_rules(cfg.pruning)
    if cfg.retrieval_share is None or "retrieval" not in rules or len(rules) < 2:
        return None
    return (f"--retrieval-share caps the retrieval rule's pairs only; --pruning {cfg.pruning} adds the other rules' "
            "pairs to them (--pruning retrieval for a budget on the pairs pruning keeps)")


def retrieval_head(cfg: GraphConfig):
    """The parameter head that ranks the pairs under ``--retrieval-share`` (``retrieval_ranking``), or None."""
    from tasks.training.param_head import ParamHead

    return ParamHead.load(Path(cfg.retrieval_encoder)) if retrieval_ranking(cfg) == "head" else None


@task(cache_policy=NO_CACHE)
def prune(toolset: ToolSet, embeddings: np.ndarray, cfg: GraphConfig,
          encode: RetrievalRuleEncoder | None = None) -> PruningResult:
    retrieved = None
    if "retrieval" in pruning_rules(cfg.pruning):  # per-parameter queries against producer docs
        head = retrieval_head(cfg)
        budget = (f"; the best {cfg.retrieval_share:g} of the ordered pairs kept, ranked by "
                  f"{'head' if head is not None else 'cosine'}" if cfg.retrieval_share is not None else "")
        get_run_logger().info(f"{toolset.name}: retrieval rule: texts of {len(toolset.tools)} tools' producers and "
                              f"parameters{budget}")
        retrieved = retrieval_candidates(toolset.tools, encode or RetrievalRuleEncoder(cfg), cfg.retrieval_k,
                                         cfg.retrieval_share, head)
    result = prune_candidates(toolset.tools, embeddings, cfg.pruning, cfg.neighbours, toolset.edges, retrieved,
                              progress=get_run_logger().info)
    del retrieved
    # the set's texts are all encoded (tools, queries, the retrieval rule's), and the rules' per-group lists are
    # freed: 0.27 GB of fragmented heap at 10^5 tools; the next tool set reloads its encoder
    drop_sentence_encoders()
    return result


@task(cache_policy=NO_CACHE)
def candidate_recall(toolset: ToolSet, embeddings: np.ndarray, cfg: GraphConfig,
                     encode: RetrievalRuleEncoder) -> list[dict]:
    """The candidate-recall curves of a tool set with gold edges (tasks/graph/plots.py): gold-edge recall and
    the share of ordered pairs kept per strategy and retrieval k, at the build's share cap."""
    return retrieval_recall(toolset, encode, curve_settings(cfg.retrieval_k, cfg.retrieval_share),
                            curve_strategies(cfg.pruning), embeddings, cfg.neighbours, retrieval_head(cfg))


def draw_candidate_recall(curves: dict[str, list[dict]], points: dict[str, dict], cfg: GraphConfig,
                          built_at: datetime) -> str:
    """``candidate_recall.png`` beside the warehouse, shown as the run's artifact; its path."""
    path = Path(cfg.warehouse).parent / CANDIDATE_RECALL_PLOT
    share = (f", retrieval share cap {cfg.retrieval_share} ranked by {retrieval_ranking(cfg)}"
             if cfg.retrieval_share is not None else "")
    title = (f"build-graph {built_at:%Y-%m-%d %H:%M} UTC, warehouse {Path(cfg.warehouse).name}: retrieval encoder "
             f"{cfg.retrieval_encoder or cfg.encoder}, neighbours {cfg.neighbours}{share}")
    plot_candidate_recall(curves, points, path, title)
    show_plot(path, "Candidate recall against the share of ordered pairs kept", table_rows(curves, points),
              note=title + ". Recall: gold edges kept in their own direction; share: ordered same-group pairs kept "
                           "(what the discriminator scores).", key="build-graph-candidate-recall")
    return str(path)


def scoring_max_length(checkpoint: str, cfg: GraphConfig) -> int:
    """The input length pairs are scored at: --max-length, else the one the model was trained and calibrated at."""
    from models.discriminator import load_calibration, trained_max_length

    return cfg.max_length or trained_max_length(load_calibration(checkpoint)) or 256


@task(cache_policy=NO_CACHE)
def score(checkpoint: str, toolset: ToolSet, pairs: list[tuple[int, int]], cfg: GraphConfig
          ) -> tuple[np.ndarray, np.ndarray | None]:
    """(class probabilities, the kind head's p(precondition) or None) of the candidate pairs, in this process."""
    return score_pairs(checkpoint, toolset.tools, pairs, cfg.batch_size, scoring_max_length(checkpoint, cfg),
                       cfg.both_orders, cfg.device, progress=cfg.progress, max_producers=cfg.max_producers,
                       precision=cfg.scoring_precision, with_kind=True)


@task(cache_policy=NO_CACHE)
def score_shard(checkpoint: str, tools: list, pairs: list[tuple[int, int]], cfg: GraphConfig, max_length: int,
                threads: int | None) -> tuple[np.ndarray, np.ndarray | None]:
    """``score`` on a cluster worker, for one shard of the pairs; ``threads``: torch's (none: its default).
    Every shard sees every tool, so each group's name statistics (the hints' ignore lists) are the whole group's."""
    if threads:
        import torch

        torch.set_num_threads(threads)
    return score_pairs(checkpoint, tools, pairs, cfg.batch_size, max_length, cfg.both_orders, cfg.device,
                       progress=False, max_producers=cfg.max_producers, precision=cfg.scoring_precision, with_kind=True)


def score_on_cluster(checkpoint: str, toolset: ToolSet, pairs: list[tuple[int, int]], cfg: GraphConfig
                     ) -> tuple[np.ndarray, np.ndarray | None]:
    """``score`` spread over the Dask or Ray cluster of --scoring-runner: the pairs in contiguous shards, four per
    slot (a slow shard does not hold the others back), each a Prefect task that loads the checkpoint and scores
    its pairs; the results joined in pair order. A local cluster's workers run one torch thread each."""
    from tasks.common.clusters import ClusterSpec, cluster_runner

    log = get_run_logger()
    spec = ClusterSpec(cfg.scoring_runner, cfg.dask_address, cfg.ray_address, cfg.scoring_workers)
    local = not (cfg.dask_address or cfg.ray_address)
    max_length = scoring_max_length(checkpoint, cfg)
    runner, slots_of = cluster_runner(spec)
    with runner:
        slots = max(1, slots_of(runner))
        bounds = np.linspace(0, len(pairs), min(len(pairs), 4 * slots) + 1).astype(int)
        shards = [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        log.info(f"{toolset.name}: scoring {len(pairs)} pairs in {len(shards)} shards on the {cfg.scoring_runner} "
                 f"cluster {spec.where} ({slots} slots)")
        futures = [runner.submit(score_shard, {"checkpoint": checkpoint, "tools": list(toolset.tools),
                                               "pairs": pairs[a:b], "cfg": cfg, "max_length": max_length,
                                               "threads": 1 if local else None}) for a, b in shards]
        probs, kinds = [], []
        for n, ((a, b), future) in enumerate(zip(shards, futures), start=1):
            shard_probs, shard_kind = future.result()
            probs.append(np.asarray(shard_probs, dtype=np.float64).reshape(-1, 3))
            kinds.append(None if shard_kind is None else np.asarray(shard_kind, dtype=np.float64))
            log.info(f"{toolset.name}: shard {n}/{len(shards)} scored ({b} of {len(pairs)} pairs)")
    kind = None if not kinds or kinds[0] is None else np.concatenate(kinds)
    return (np.concatenate(probs) if probs else np.zeros((0, 3))), kind


@task(cache_policy=NO_CACHE)
def read_runs(toolset: ToolSet, folder: Path | None, files: list[str], gold: bool) -> Trajectories:
    """The benchmark's gold call orders (when ``gold`` and its queries.jsonl has them) and the runs
    of each user file; unusable runs are rejected by file and line, and logged."""
    log = get_run_logger()
    known = {t.tool_id for t in toolset.tools}
    parts = []
    if gold and folder is not None and (folder / "queries.jsonl").is_file():
        parts.append(gold_trajectories(folder / "queries.jsonl", known))
    parts += [read_trajectories(Path(f), known) for f in files]
    runs = merge(parts)
    if runs.runs and known & set(RESERVED):
        raise ValueError(f"{toolset.name}: tool ids {sorted(known & set(RESERVED))} are ToolNet's node names; "
                         "rename them or build with --no-transitions")
    if runs.rejections:
        log.warning(f"{toolset.name}: {len(runs.rejections)} runs rejected, first: "
                    + "; ".join(str(r) for r in runs.rejections[:3]))
    return runs


@task(cache_policy=NO_CACHE)
def toolnet(toolset: ToolSet, runs: Trajectories, base: np.ndarray, queries: np.ndarray,
            cfg: GraphConfig) -> ToolNetBuild:
    sims = cosine_scores(queries, base) if len(toolset.queries) else np.zeros((0, len(toolset.tools)))
    # graph nodes in tool_id order, as eval-retrieval reads them back (ties go to the smaller id)
    order = sorted(range(len(toolset.tools)), key=lambda i: toolset.tools[i].tool_id)
    similarity = {q.query_id: sims[n][order] for n, q in enumerate(toolset.queries)}
    with toolnet_evaluator(cfg.evaluator, {t.tool_id: t.doc for t in toolset.tools},
                           {q.query_id: q.text for q in toolset.queries}, cfg.rule_score, model=cfg.evaluator_model,
                           base_url=cfg.evaluator_base_url, base_url_credentials=cfg.evaluator_base_url_credentials,
                           concurrency=cfg.evaluator_concurrency, cache_dir=cfg.evaluator_cache_dir,
                           log=get_run_logger()) as evaluator:
        return build_toolnet([toolset.tools[i].tool_id for i in order], runs.runs, similarity, cfg.split_seed,
                             cfg.split_fractions, cfg.alpha, cfg.beta, cfg.alphas, cfg.betas, cfg.rule_score,
                             evaluator=evaluator)


def toolnet_rows(toolset: ToolSet, runs: Trajectories, build: ToolNetBuild, cfg: GraphConfig) -> dict[str, list[dict]]:
    """Warehouse rows of one dataset's transition graph (columns: warehouse/tables.py)."""
    ds, graph = toolset.name, build.graph
    nodes, group_of = graph.nodes, {t.tool_id: t.group for t in toolset.tools}
    iteration_of = {r.key: n for n, r in enumerate(build.stream, 1)}

    def group(a: str, b: str) -> str:
        return group_of[a] if a in group_of and group_of[a] == group_of.get(b) else "*"

    edges = np.argwhere(graph.mask)
    return {
        "edges": [{"dataset": ds, "tool_group": group(nodes[i], nodes[j]), "dependent": nodes[j],
                   "prerequisite": nodes[i], "prob": float(graph.weights[i, j]), "predicted_class": 0,
                   "source": "transition", "weight": float(graph.weights[i, j]),
                   "n_transitions": int(graph.counts[i, j])} for i, j in edges],
        "trajectories": [{"dataset": ds, "origin": r.origin, "run_id": r.run_id, "line": r.line, "source": r.source,
                          "query_id": r.query_id, "success": r.success, "split": build.splits[r.key],
                          "tools": list(r.tools),
                          "given_scores": json.dumps(dict(r.scores)) if r.scores else None,
                          "stream_iteration": iteration_of.get(r.key)} for r in runs.runs],
        "trajectory_rejections": [{"dataset": ds, "origin": r.origin, "line": r.line, "run_id": r.run_id,
                                   "reason": r.reason} for r in runs.rejections],
        "transition_builds": [{"dataset": ds, "seed": cfg.split_seed, "split_fractions": list(cfg.split_fractions),
                               "runs_train": build.runs_in("train"), "runs_validation": build.runs_in("validation"),
                               "runs_test": build.runs_in("test"), "failed_train_runs": build.failed_train_runs,
                               "alpha": build.alpha, "beta": build.beta, "evaluator": build.evaluator, "rule_score": cfg.rule_score,
                               "chosen_on": build.chosen_on, "sweep_json": json.dumps(build.sweep),
                               "stream_iterations": len(build.stream)}],
        "transition_weight_versions":
            [{"dataset": ds, "iteration": 0, "prerequisite": nodes[i], "dependent": nodes[j],
              "weight": float(graph.weights[i, j])} for i, j in edges]
            + [{"dataset": ds, "iteration": n, "prerequisite": nodes[i], "dependent": nodes[j], "weight": w}
               for n, i, j, w in build.result.versions],
        "transition_scores": [{"dataset": ds, "iteration": n, "run_id": run, "tool_id": tool, "score": d,
                               "accumulated": acc} for n, run, tool, d, acc in build.result.scores],
    }


def lineage_rows(toolset: ToolSet, folder: Path | None, sources: set[str], cfg: GraphConfig,
                 decision: EdgeDecision | None, checkpoint: dict | None, runs: Trajectories | None,
                 build: ToolNetBuild | None, built_at: datetime, order: CallOrderEdges | None = None,
                 judged_by: Sequence[str] = ()) -> list[dict]:
    """One ``edge_lineage`` row per edge source the dataset has."""
    from prefect.runtime import flow_run

    run_id = flow_run.id
    threshold = decision.threshold if decision else None
    disc = {"pruning": cfg.pruning, "neighbours": cfg.neighbours, "retrieval_k": cfg.retrieval_k,
            "retrieval_encoder": cfg.retrieval_encoder, "retrieval_share": cfg.retrieval_share,
            "retrieval_rank": retrieval_ranking(cfg), "both_orders": cfg.both_orders,
            "scoring_precision": resolved_precision(cfg.scoring_precision, cfg.device),
            "min_prob": cfg.min_prob, "max_prerequisites": cfg.max_prerequisites,
            "rule": decision.rule if decision else None, "stated_edges": cfg.stated_edges,
            "lifecycle_direction": cfg.lifecycle_direction,
            "threshold_source": decision.threshold_source if decision else None,
            "kind_threshold": (decision.calibration or {}).get("kind_threshold") if decision else None}
    if cfg.param_discriminator:  # the tool edges came from the parameter-level scorer
        from tasks.graph.param_scoring import param_threshold

        disc |= {"param_discriminator": str(cfg.param_discriminator),
                 "param_threshold": param_threshold(cfg.param_discriminator, cfg.param_threshold)}
    edge_files = sorted(str(p) for p in folder.glob("*edges*.jsonl")) if folder else []
    made = {
        "manual": lambda: lineage_row(toolset.name, "manual", "gold edge file of the tool set", built_at, run_id,
                                      edge_files),
        "schema": lambda: lineage_row(toolset.name, "schema", "parameter-match rule (schemas.name_rule)", built_at,
                                      run_id, params={"max_producers": cfg.max_producers}),
        "stated": lambda: lineage_row(toolset.name, "stated", "dependencies the tools' docs state "
                                      "(tasks/graph/stated.py)", built_at, run_id, params={"max_named": MAX_NAMED}),
        "discriminator": lambda: lineage_row(toolset.name, "discriminator", "dependency discriminator", built_at,
                                             run_id, params=disc, checkpoint=checkpoint, threshold=threshold),
        "fused": lambda: lineage_row(toolset.name, "fused", "union of discriminator and schema edges", built_at,
                                     run_id, params=disc | {"max_producers": cfg.max_producers},
                                     checkpoint=checkpoint, threshold=threshold),
        "transition": lambda: lineage_row(
            toolset.name, "transition", "ToolNet Eq. 5 on the training runs (tasks/toolnet/transitions.py)", built_at, run_id,
            runs.files, params={"split_seed": cfg.split_seed, "split_fractions": list(cfg.split_fractions),
                                "alpha": build.alpha, "beta": build.beta, "chosen_on": build.chosen_on,
                                "runs_train": build.runs_in("train"), "rule_score": cfg.rule_score,
                                "evaluator": build.evaluator_record}),
        "call_order": lambda: lineage_row(
            toolset.name, "call_order", "precondition candidates from the training runs' call order "
            "(tasks/graph/call_order_edges.py)", built_at, run_id, runs.files,
            params={"split_seed": cfg.split_seed, "split_fractions": list(cfg.split_fractions),
                    "min_support": cfg.order_min_support, "min_consistency": cfg.order_min_consistency,
                    "generic_share": cfg.order_generic_share, "generic_min_tools": cfg.order_generic_min_tools,
                    "value_passing_judged_by": ["name rule", *judged_by]} | order.counts()),
    }
    return [made[s]() for s in sorted(sources)]


@task(cache_policy=NO_CACHE)
def write_warehouse(target: str, tables: list[DatasetTables], dim: int) -> dict:
    return build_warehouse(target, tables, dim, progress=get_run_logger().info)


@flow(name="build-graph", log_prints=True)
def build_graph(cfg: GraphConfig | None = None) -> dict:
    """Build (or rebuild) the warehouse for ``cfg.toolsets``; returns per-dataset summaries."""
    cfg = cfg or GraphConfig()
    cfg.check_inputs()  # before any work: a missing tool set or an unwritable warehouse is found now
    if cfg.evaluator == "llm" and cfg.evaluator_base_url != EMBEDDED:  # an endpoint that cannot be reached: now
        preflight(evaluator_llm_config(cfg.evaluator_model, cfg.evaluator_base_url, cfg.evaluator_concurrency,
                                       cfg.evaluator_cache_dir, cfg.evaluator_base_url_credentials))
    log = get_run_logger()
    if (partial := partial_budget(cfg)) is not None:  # a property of the config: said once, not per tool set
        log.warning(partial)
    decision: EdgeDecision | None = None
    if cfg.discriminator:
        decision = edge_decision(cfg.discriminator, cfg.threshold, cfg.both_orders, cfg.min_prob, log)
        log.info(decision.describe())
    built_at = datetime.now(timezone.utc).replace(tzinfo=None)
    checkpoint = checkpoint_lineage(cfg.discriminator) if cfg.discriminator else None
    tables, summary, dim = [], {}, None
    curves, points = {}, {}  # candidate recall per tool set with gold edges (candidate_recall.png)
    loaded = {spec: load_toolset(spec, cfg.data_root) for spec in cfg.toolsets}
    user_runs = trajectory_files(cfg.trajectories, cfg.toolsets, {s: t.name for s, t in loaded.items()})
    for spec, toolset in loaded.items():
        folder = toolset_folder(spec, cfg.data_root)
        style = cfg.embed_style or embed_style_for(toolset.name)
        texts = [embed_text(t.doc, style) for t in toolset.tools]
        base = encode_texts(quote(texts), cfg.encoder, cfg.batch_size, cfg.device, cfg.embedding_cache, "tool texts",
                            cfg.encoder_engine)
        queries = encode_texts(quote([q.text for q in toolset.queries]), cfg.encoder, cfg.batch_size, cfg.device,
                               cfg.embedding_cache, "queries", cfg.encoder_engine)
        queries = queries if len(toolset.queries) else np.zeros((0, base.shape[1]), dtype=np.float32)
        dim = base.shape[1]
        index = {t.tool_id: i for i, t in enumerate(toolset.tools)}
        embeddings = {"base": base}
        if toolset.edges:
            gold = [(index[e.dependent], index[e.prerequisite]) for e in toolset.edges]
            embeddings["tgr_manual"] = gcn_propagate(base, gold, cfg.gcn_direction)

        log_groups(toolset.name, toolset.tools, log)
        # Pruning stats are cheap, so they are recorded even when nothing is scored.
        retrieval_encode = RetrievalRuleEncoder(cfg, remember=bool(toolset.edges))
        pruning = prune(quote(toolset), base, cfg, quote(retrieval_encode))
        log_pruning(toolset.name, pruning, log)
        if toolset.edges:  # the curve around this build's pruning, from the texts pruning encoded
            curves[toolset.name] = candidate_recall(quote(toolset), base, cfg, quote(retrieval_encode))
            points[toolset.name] = operating_point(pruning, cfg.retrieval_k)
        del retrieval_encode

        def graph(edges) -> np.ndarray:
            return gcn_propagate(base, [(index[e.dependent], index[e.prerequisite]) for e in edges], cfg.gcn_direction)

        schema = schema_edges(toolset.tools, max_producers=cfg.max_producers) if cfg.schema_edges else []
        log.info(f"{toolset.name}: {len(schema)} schema edges" if cfg.schema_edges else f"{toolset.name}: no schema edges")
        if schema:
            embeddings["tgr_schema"] = graph(s.edge for s in schema)
        pairs, probs, predicted, fused, named = [], np.zeros((0, 3)), [], [], np.zeros(0, dtype=bool)
        candidates, gated = pruning.candidates, None
        if cfg.discriminator and cfg.param_discriminator and cfg.cross_encoder_preconditions == "checks":
            # pruning keeps few preconditions: each check is scored with the tools it may gate most like it, those
            # only (in one large group pruning keeps checks times tools such pairs)
            gated = set(check_pairs(toolset.tools, base, cfg.check_partners or None))
            added = sorted(gated - set(candidates))
            candidates = sorted([*candidates, *added])
            log.info(f"{toolset.name}: {len(added)} pairs where a tool that checks may gate the other added to the "
                     f"{len(pruning.candidates)} candidates, for preconditions"
                     + (f" (each check's {cfg.check_partners} nearest)" if cfg.check_partners else ""))
        if cfg.discriminator:
            pairs = candidates
            if cfg.param_discriminator:  # two levels: the cross-encoder decides only where a tool declares no inputs
                pairs = cross_encoder_pairs(toolset.tools, pairs, cfg.cross_encoder_preconditions, gated)
                log.info(f"{toolset.name}: the cross-encoder scores {len(pairs)} of {len(candidates)} candidate "
                         + ("pairs; where the consumer declares inputs it adds only preconditions"
                            if cfg.cross_encoder_preconditions != "off" else
                            "pairs, those with a tool that declares no inputs; the parameter level decides the rest"))
            if cfg.scoring_runner == "local" or not pairs:
                probs, p_precondition = score(cfg.discriminator, quote(toolset), quote(pairs), cfg)
            else:
                probs, p_precondition = score_on_cluster(cfg.discriminator, toolset, pairs, cfg)
            if cfg.lifecycle_direction and pairs:  # the names give the direction where both tools declare nothing
                before = np.asarray(probs, dtype=np.float64).reshape(-1, 3)
                probs, named = lifecycle.orient(before, lifecycle.pair_orders(toolset.tools, pairs))
                log.info(lifecycle.describe(toolset.name, before, probs, named, decision.threshold))
            predicted = edges_from_probabilities(toolset.tools, pairs, probs, cfg.min_prob, decision.threshold,
                                                 p_precondition, decision.kind_threshold)
        scored_parameters = []
        if cfg.param_discriminator:  # tool edges from the best consumer input (tasks/graph/param_scoring.py)
            from tasks.graph import param_scoring

            cut = param_scoring.param_threshold(cfg.param_discriminator, cfg.param_threshold)
            # through the embedding cache: pruning has encoded most of these texts with the same retriever
            encode = cached_encoder(cfg, cfg.param_discriminator, "parameter-level texts")
            scores = param_scoring.score_parameters(cfg.param_discriminator, toolset.tools, candidates,
                                                    cfg.batch_size, None, cfg.device, encode)
            drop_sentence_encoders()
            param_edges = param_scoring.param_tool_edges(toolset.tools, candidates, scores, cut, predicted,
                                                         cfg.cross_encoder_preconditions)
            log.info(param_scoring.describe(scores, param_edges, cut))
            scored_parameters = param_scoring.parameter_edges(toolset.tools, scores, cut)
            predicted = [e.predicted for e in param_edges]
        stated = stated_dependencies(toolset.tools) if cfg.stated_edges else []
        if cfg.discriminator or cfg.param_discriminator:  # one cap and one graph, over both levels' edges
            predicted = cap_prerequisites(predicted, cfg.max_prerequisites)
            if stated:  # the docs' word over the models', and past the cap (it bounds what the models add)
                log.info(describe_stated(toolset.name, toolset.tools, stated, predicted))
                predicted = with_stated(toolset.tools, predicted, stated)
            embeddings["tgr_discriminator"] = graph(p.edge for p in predicted)
            if cfg.schema_edges:
                fused = fuse_edges(predicted, schema)
                embeddings["tgr_fused"] = graph(f.edge for f in fused)
        if any(p.edge.kind == "precondition" for p in predicted):  # the kind head's: its data graph beside it
            embeddings["tgr_discriminator_data"] = graph(p.edge for p in predicted if p.edge.kind != "precondition")
        runs = read_runs(quote(toolset), folder, user_runs.get(toolset.name, []), cfg.transitions)
        built = toolnet(quote(toolset), quote(runs), base, queries, cfg) if runs.runs else None
        if built is not None:
            w, n = built.graph.weights, built.graph.n_tools
            at = [index[t] for t in built.graph.tool_ids]  # graph node -> row of base
            embeddings["tgr_transition"] = gcn_propagate_weighted(
                base, [(at[j], at[i], w[i, j]) for i, j in zip(*np.nonzero(w[:n, :n])) if i != j], cfg.gcn_direction)
        # precondition edges from the training runs only (the test runs' queries score the graph)
        order: CallOrderEdges | None = None
        data_sources = {"schema": [s.edge for s in schema] if cfg.schema_edges else None,
                        "discriminator": [p.edge for p in predicted] if cfg.discriminator or cfg.param_discriminator
                        else None}
        data_sources["fused"] = [f.edge for f in fused] if data_sources["discriminator"] is not None \
            and cfg.schema_edges else None
        data_sources = {s: edges for s, edges in data_sources.items() if edges is not None}  # the graphs made
        if built is not None and cfg.call_order_edges:
            order = call_order_edges(toolset, runs.runs, built.splits,
                                     [e for s in ("schema", "discriminator") for e in data_sources.get(s, [])],
                                     cfg.order_min_support, cfg.order_min_consistency, cfg.order_generic_share,
                                     cfg.order_generic_min_tools)
            log.info(order.describe(toolset.name))
            for source, edges in data_sources.items():  # each data graph, and it with the precondition edges
                embeddings[f"tgr_{source}_call_order"] = graph(with_call_order(edges, order.edges))
        log.info(f"{toolset.name}: edges manual {len(toolset.edges)}, schema {len(schema)}, "
                 f"discriminator {len(predicted)} of {len(candidates) if cfg.param_discriminator else len(pairs)} "
                 f"scored pairs, fused {len(fused)}, "
                 + (f"call_order {len(order.edges)}, " if order else "")
                 + (f"transition {int(built.graph.mask.sum())} from {built.runs_in('train')} training runs "
                    f"(alpha {built.alpha}, beta {built.beta}: {built.chosen_on})" if built else "no trajectories"))

        # predicted edges against the gold ones, with recall per gold dependency kind (tasks/graph/metrics.py)
        scored = bool(cfg.discriminator or cfg.param_discriminator)
        predicted_sources = {"schema": ([s.edge for s in schema], cfg.schema_edges),  # (edges, made in this run)
                             "stated": ([e for e, _ in stated_edges(toolset.tools, stated)], bool(stated)),
                             "discriminator": ([p.edge for p in predicted], scored),
                             "fused": ([f.edge for f in fused], scored and cfg.schema_edges),
                             "call_order": ([e.edge for e in order.edges] if order else [], order is not None)}
        metrics = {source: edge_metrics(toolset.edges, edges) for source, (edges, made) in predicted_sources.items()
                   if made and toolset.edges}
        for source, m in metrics.items():
            log.info(describe_edge_metrics(toolset.name, source, m))

        log.info(f"{toolset.name}: warehouse rows ({len(embeddings)} embedding kinds x {len(toolset.tools)} tools)")
        table = dataset_tables(toolset, style, texts, cfg.encoder, cfg.discriminator, embeddings, queries,
                               pruning, pairs, probs, predicted, built_at, schema, fused, decision,
                               scored_parameters, order.edges if order else (), stated, named)
        if built is not None:
            extra = toolnet_rows(toolset, runs, built, cfg)
            table.rows["edges"] += extra.pop("edges")
            table.rows |= extra
        sources = {e["source"] for e in table.rows["edges"] + table.rows["parameter_edges"]}
        table.rows["edge_lineage"] = lineage_rows(toolset, folder, sources, cfg, decision, checkpoint, runs, built,
                                                  built_at, order, [s for s in ("schema", "discriminator")
                                                                    if s in data_sources])
        tables.append(table)
        del embeddings, table  # the warehouse rows hold what is kept (column-wise)
        release_free_memory()
        summary[toolset.name] = {
            "tools": len(toolset.tools), "queries": len(toolset.queries), "manual_edges": len(toolset.edges),
            "schema_edges": len(schema), "stated_edges": len(stated), "scored_pairs": len(pairs),
            "discriminator_edges": len(predicted), "pairs_directed_by_names": int(np.sum(named)),
            "check_pairs_added": len(candidates) - len(pruning.candidates),
            "precondition_edges": sum(p.edge.kind == "precondition" for p in predicted),
            "fused_edges": len(fused), "pruning": pruning.as_row(toolset.name), "edge_metrics": metrics,
            "candidate_recall": curves.get(toolset.name),
            "call_order": None if order is None else {"edges": len(order.edges), **order.counts(),
                                                      "embeddings": sorted(f"tgr_{s}_call_order" for s in data_sources)},
            "transitions": None if built is None else {
                "edges": int(built.graph.mask.sum()), "runs": {sp: built.runs_in(sp) for sp in
                                                               ("train", "validation", "test")},
                "rejected_runs": len(runs.rejections), "alpha": built.alpha, "beta": built.beta,
                "chosen_on": built.chosen_on, "test_hit@1_dynamic": built.result.hit_rate(1),
                "weight_versions": len(built.result.versions), "evaluator": built.evaluator_record},
            "edge_decision": None if decision is None else {
                "rule": decision.rule, "threshold": decision.threshold, "criterion": decision.criterion,
                "threshold_source": decision.threshold_source, "both_orders": decision.both_orders},
        }
    result = write_warehouse(cfg.warehouse, quote(tables), dim)
    log.info(f"warehouse {result['warehouse']}: {result['rows']}")
    plots = {"candidate_recall": draw_candidate_recall(curves, points, cfg, built_at)} if curves else {}
    for name, path in plots.items():
        log.info(f"plot {name}: {path}")
    return {"warehouse": result, "datasets": summary, "plots": plots, "config": asdict(cfg)}


if __name__ == "__main__":
    CLI.run(lambda cfg: print(json.dumps({k: v for k, v in build_graph(cfg).items() if k != "config"}, indent=2, default=str)))
