"""Prefect flow ``eval-retrieval``: Table-2 style retrieval metrics from a built warehouse.

    python -m flows.eval_retrieval --warehouse artifacts/warehouse/tgr.duckdb

Methods per dataset: BM25, TF-IDF, the sentence encoder (``embedding``), and embedding + TGR with
each graph the warehouse has for it: the discriminator graph (``embedding+TGR-d``), the
manual/gold graph (``embedding+TGR-m``), the parameter-match (schema) graph (``embedding+TGR-s``)
and the fused discriminator-or-schema graph (``embedding+TGR-f``), and where ``flows.gtool`` has run, the
completed graph (base graph + predicted edges, ``embedding+TGR-c``). Each +TGR graph also gets a fused row
(``embedding+TGR-d(cv)`` ...: score (1 - w) cos(q, x) + w cos(q, x'), w chosen by seeded k-fold
cross-validation over the dataset's queries, tasks/retrieval/fusion.py; the w in ``graph_weight``).
Every query ranks all tools of its dataset (ToolBench: all 2,479,
as the paper does, not the per-query candidate lists). Results go to the warehouse table
``retrieval_metrics`` (view ``retrieval_table``), ``<out>/retrieval.md`` and ``<out>/retrieval.png``.
The dense rankings are computed with numpy and checked against the SQL macro ``query_top_k``.

ToolNet (docs/warehouse.md): where the warehouse has a transition graph, every method is also
scored on the held-out queries (their gold run is in the trajectories' test split; rows with
``query_split = 'test'``), beside the methods built from the training runs and scored there only:
``embedding+TGR-t`` (Eq. 3 with A = the transition weights), ``embedding+successors`` (the
encoder's top results, each followed by its highest-weight successor; how many top results, on the
validation queries) and ``embedding+TGR-s+order`` (``-d+order``, ``-f+order``: the schema, discriminator or
fused graph with the precondition edges of the training runs' call order, beside ``embedding+TGR-s`` ... on
the same test queries). Next-tool hit@1/@3 on the test runs goes to ``next_tool_metrics``: the
transition graph (static, and dynamic as the stream updated it), training popularity, each
dependency graph's successors, the query alone and transition x query.

ToolRerank (``tasks/retrieval/rerank/``, docs/retrieval.md) then reranks each first stage's top 50 on a
seeded test split of each dataset, with the parameters chosen on its validation split: one table
per dataset, first stage x {none, truncation, hierarchy, both}, in ``<out>/rerank.md`` (parameters
and every row in ``<out>/rerank.json``); ``--no-rerank`` skips it.
"""
from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

import numpy as np

from tasks.common.flow_cli import FlowCLI  # first: Prefect analytics off before Prefect loads
from tasks.common.cli import Flag, Help, checking_inputs, parse_config
from tasks.common.plots import show_plot
from tasks.common.progress import CountProgress, PrefectProgressArtifact, run_say, ticking
from tasks.retrieval.fusion import (DEFAULT_FOLDS, DEFAULT_WEIGHTS, FusionResult, check_weights, choose_on_validation,
                                     cross_validate)
from tasks.retrieval.gcn import gcn_propagate
from tasks.retrieval.lexical import BM25, TfIdf
from tasks.retrieval.metrics import evaluate_rankings
from tasks.retrieval.plots import RETRIEVAL_PLOT, plot_retrieval, plot_rows
from tasks.retrieval.ranking import cosine_scores, expand_with_successors, top_k_from_scores
from tasks.retrieval.rerank.experiment import DEPTH, RerankResult, TooFewQueries, run_toolrerank
from tasks.retrieval.rerank.hierarchy import tool_parents
from tasks.retrieval.rerank.library import Library
from tasks.retrieval.rerank.tables import markdown_tables
from tasks.toolnet.transitions import TransitionGraph, graph_from_edges, hit_rates, replay, successor_lists
from warehouse.build import connect, insert_rows, rows_of, update_warehouse

# method -> tool_embeddings.kind; a +TGR row is reported for every graph source the dataset has.
EMBEDDING_METHODS = {"embedding": "base", "embedding+TGR-d": "tgr_discriminator", "embedding+TGR-m": "tgr_manual",
                     "embedding+TGR-s": "tgr_schema", "embedding+TGR-f": "tgr_fused",
                     "embedding+TGR-t": "tgr_transition", "embedding+TGR-c": "tgr_completed",
                     # a data graph with the call-order precondition edges of the training runs (build-graph)
                     "embedding+TGR-d+order": "tgr_discriminator_call_order",
                     "embedding+TGR-s+order": "tgr_schema_call_order", "embedding+TGR-f+order": "tgr_fused_call_order",
                     # the discriminator graph without the edges its kind head calls preconditions (build-graph)
                     "embedding+TGR-d(data)": "tgr_discriminator_data"}
GRAPH_SOURCE_OF_METHOD = {"embedding+TGR-d": "discriminator", "embedding+TGR-m": "manual (gold)",
                          "embedding+TGR-s": "schema (parameter match)", "embedding+TGR-f": "fused (discriminator or schema)",
                          "embedding+TGR-d(data)": "discriminator, data edges only (its kind head's preconditions left out)",
                          "embedding+TGR-t": "ToolNet transitions (training runs)",
                          "embedding+successors": "encoder top results + their highest-weight successors",
                          "embedding+TGR-c": "completed: the gold graph (else the discriminator's) + GTool's predicted "
                                             "edges (flows/gtool.py)",
                          **{f"embedding+TGR-{x}+order": f"{name} + call-order precondition edges (training runs)"
                             for x, name in (("d", "discriminator"), ("s", "schema"), ("f", "fused"))}}
# Built from the training runs: scored on the held-out (test) queries only, never on all queries.
HELD_OUT_ONLY = ("embedding+TGR-t", "embedding+successors", "embedding+TGR-d+order", "embedding+TGR-s+order",
                 "embedding+TGR-f+order")
# Fusion (tasks/retrieval/fusion.py): "<method>(cv)" ranks by (1 - w) cos(q, x) + w cos(q, x') with w chosen
# by k-fold cross-validation over the dataset's queries, for every +TGR graph scored on all queries.
FUSED_METHODS = {f"{m}(cv)": m for m, kind in EMBEDDING_METHODS.items()
                 if kind.startswith("tgr_") and m not in HELD_OUT_ONLY}
# The same fusion for the +TGR graphs built from the training runs: "<method>(val)", w chosen on the validation
# queries alone (their test queries must not choose it), scored on the test queries like the graph itself.
VALIDATED_METHODS = {f"{m}(val)": m for m in HELD_OUT_ONLY if EMBEDDING_METHODS.get(m, "").startswith("tgr_")}
# A "+order" graph's (val) fusion starts from its data graph (w = 0: "+TGR, data edges only"), not the embedding.
ORDER_BASE = {m: m.removesuffix("+order") for m in HELD_OUT_ONLY if m.endswith("+order")}
# A graph with precondition edges: its (cv) fusion chooses the data graph's weight first, then the precondition
# edges' over that (w = 0: "+TGR, data edges only", cross-validated), where build-graph wrote the data graph too.
DATA_GRAPH_OF = {"embedding+TGR-d": "embedding+TGR-d(data)"}
EXPANSION_TOPS = (1, 2, 3, 5)  # how many top results get a successor: chosen on the validation queries
NEXT_TOOL_KS = (1, 3)
METRIC_COLUMNS = [("recall", 5), ("recall", 10), ("ndcg", 5), ("ndcg", 10), ("pass_rate", 5), ("pass_rate", 10)]
# Paper Table 2 (paraphrase-MiniLM-L3-v2 rows; the paper's ToolBench row is its I1 split).
PAPER_TABLE_2 = {
    "apibank": {"BM25": [0.391, 0.493, 0.353, 0.394, 0.228, 0.302],
                "TF-IDF": [0.566, 0.746, 0.501, 0.573, 0.383, 0.605],
                "paraphrase-MiniLM-L3-v2": [0.659, 0.763, 0.569, 0.609, 0.479, 0.592],
                "+ TGR": [0.736, 0.834, 0.622, 0.659, 0.576, 0.698]},
    "toolbench_stable": {"BM25": [0.175, 0.218, 0.224, 0.221, 0.030, 0.090],
                         "TF-IDF": [0.406, 0.525, 0.442, 0.473, 0.210, 0.330],
                         "paraphrase-MiniLM-L3-v2": [0.365, 0.468, 0.399, 0.421, 0.140, 0.250],
                         "+ TGR": [0.429, 0.556, 0.451, 0.483, 0.240, 0.450]},
}


# The TGR paper's encoder, ranked on every warehouse whatever encoder built it, so Table 2 reads like
# for like: method -> the warehouse edge source its Eq. 3 smooths over (None: the encoder alone).
PAPER_ENCODER = "paraphrase-minilm-l3"
PAPER_ENCODER_METHODS = {"L3": None, "L3+TGR-d": "discriminator", "L3+TGR-m": "manual"}

# The graph weight w of the fixed methods in retrieval_metrics.graph_weight (the cv rows record the w they chose).
FIXED_GRAPH_WEIGHT = {"embedding": 0.0, "L3": 0.0, **{m: 1.0 for m in EMBEDDING_METHODS if m != "embedding"},
                      **{m: 1.0 for m, src in PAPER_ENCODER_METHODS.items() if src}}

# First stages the reranker runs after (those the warehouse has).
RERANK_FIRST_STAGES = ("BM25", "TF-IDF", "embedding", "embedding+TGR-d", "embedding+TGR-m")


# Every method rank_all and paper_encoder_rankings can give: what a first stage of ToolRerank may name.
FIRST_STAGE_METHODS = ("BM25", "TF-IDF", *EMBEDDING_METHODS, *FUSED_METHODS, *PAPER_ENCODER_METHODS)


@dataclass
class EvalConfig:
    """The one configuration surface of eval-retrieval: the flow's parameter (Prefect UI, prefect.yaml) and,
    generated from it, the command line (tasks/common/cli.py). Its checks refuse a Python call, a deployment
    run and a command line alike."""

    warehouse: Annotated[str, Help("the warehouse built by make graph (read; the metric tables are written back)")] = \
        "artifacts/warehouse/tgr.duckdb"
    datasets: Annotated[tuple[str, ...], Help(
        "limit to these datasets, one a flag (none: every dataset that has queries with gold tools)")] = field(
        default=(), metadata={"cli": Flag("dataset", repeat=True, split=False)})
    ks: Annotated[tuple[int, ...], Help(
        "cut-offs k of Recall, NDCG and Pass Rate; the reports' columns need 5 and 10")] = field(
        default=(5, 10), metadata={"cli": Flag(cli=False)})
    out_dir: Annotated[str, Help("report folder: retrieval.md, retrieval.png, rerank.md, rerank.json")] = "artifacts/eval"
    rerank: Annotated[bool, Help(
        "ToolRerank tables after each first stage (tasks/retrieval/rerank/); --no-rerank: Table 2 only")] = True
    sql_check: Annotated[bool, Help(
        "check the SQL query_top_k against the numpy top-k (ToolBench: minutes, GBs of memory)")] = True
    rerank_seed: Annotated[int, Help("seed of ToolRerank's tool hold-out and query split")] = 0
    rerank_first_stages: Annotated[tuple[str, ...], Help(
        "first stages ToolRerank reranks (those the warehouse has)")] = field(
        default=RERANK_FIRST_STAGES, metadata={"cli": Flag(cli=False)})
    paper_encoder: Annotated[str | None, Help(
        "also rank with this encoder on the warehouse's tool texts and edges (rows L3, L3+TGR-d, L3+TGR-m; default: "
        "the TGR paper's paraphrase-MiniLM-L3-v2, offline ONNX); none, or the warehouse's own encoder: no extra rows")] = \
        PAPER_ENCODER
    graph_weights: Annotated[tuple[float, ...], Help(
        "the grid of the graph weight w of the '(cv)' rows, score (1 - w) cos(q, x) + w cos(q, x'): distinct values in "
        "[0, 1], 0 (the embedding alone) and 1 (+TGR) among them")] = DEFAULT_WEIGHTS
    cv_folds: Annotated[int, Help(
        "folds of the cross-validation that chooses w per dataset and graph (at most the number of queries)")] = \
        DEFAULT_FOLDS
    cv_seed: Annotated[int, Help("seed of the cross-validation's fold split")] = 0

    def __post_init__(self) -> None:
        if not self.warehouse or not self.out_dir:
            raise ValueError("--warehouse and --out-dir must not be empty")
        if "" in self.datasets:
            raise ValueError("--dataset: an empty dataset name")
        if any(not isinstance(k, int) or k < 1 for k in self.ks) or not {5, 10} <= set(self.ks):
            raise ValueError(f"ks {tuple(self.ks)}: each a whole number >= 1, 5 and 10 among them (the reports' columns)")
        unknown = [m for m in self.rerank_first_stages if m not in FIRST_STAGE_METHODS]
        if unknown:
            raise ValueError(f"rerank_first_stages {unknown}: not a retrieval method ({', '.join(FIRST_STAGE_METHODS)})")
        check_weights(self.graph_weights)
        if not isinstance(self.cv_folds, int) or self.cv_folds < 2:
            raise ValueError(f"cv_folds {self.cv_folds}: a whole number >= 2")

    def check_inputs(self) -> None:
        """The warehouse is there, and it and the report folder can be written (the metric tables are written back
        to the warehouse, through a copy beside it): checked by the command line before Prefect starts and by the
        flow first thing, so no metric is computed for a run that cannot keep it."""
        from tasks.common.paths import check_writable, writable_file_problem, writable_folder_problem

        if not Path(self.warehouse).is_file():
            raise ValueError(f"--warehouse {self.warehouse}: no warehouse file there (build one: make graph)")
        check_writable(writable_file_problem(self.warehouse, "--warehouse"),
                       writable_folder_problem(self.out_dir, "--out-dir"))


class MetricsNotStored(RuntimeError):
    """Every metric was computed and the report written, but the warehouse refused the metric tables."""


def parse_args(argv: list[str] | None = None) -> EvalConfig:
    return parse_config(EvalConfig, argv, "python -m flows.eval_retrieval", __doc__)


# python -m: --help and usage errors answer here, before the imports below (Prefect, models) are paid for
PROG = "python -m flows.eval_retrieval"
CLI = FlowCLI.start(__name__, checking_inputs(parse_args, PROG), PROG)  # check_inputs: a usage error too

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
# quote(x): Prefect passes x to the task without walking it for futures (a walk costs about 0.4 ms a row)
from prefect.utilities.annotations import quote  # noqa: E402
from tasks.retrieval.inputs import EvalInputs, load_inputs  # noqa: E402


class EvalProgress:
    """What eval-retrieval says while it runs (tasks/common/progress.py): per method and set, queries scored of
    the set's total with rate and time left, a line every 10 s while the method runs and one at its end when it ran
    that long; for the run, data sets done and the method being scored, a line every 10 s and the Prefect
    progress artifact (the UI's bar). ``EvalProgress.quiet()``: the same counts, said nowhere (a task called
    outside the flow)."""

    def __init__(self, datasets: int, say: Callable[[str], None], artifact: bool = True,
                 every_s: float | None = None) -> None:
        every = {} if every_s is None else {"every_s": every_s}
        self.say, self.every = say, every
        self.run = CountProgress(datasets, "eval-retrieval", "data sets", say=say, **every,
                                 sinks=(PrefectProgressArtifact("eval-retrieval"),) if artifact else ())
        self.finished: list[tuple[str, int, int]] = []  # (what, done, total) of each method, for the summary

    @classmethod
    def quiet(cls) -> EvalProgress:
        return cls(0, lambda _line: None, artifact=False)

    @contextlib.contextmanager
    def method(self, dataset: str, method: str, total: int, unit: str = "queries") -> Iterator[CountProgress]:
        """The progress of scoring ``method`` on ``dataset``'s ``total`` queries (``unit``), reported by a timer
        thread while the block runs."""
        self.run.detail = f"now {method} on {dataset}"
        progress = CountProgress(total, f"eval-retrieval {dataset} {method}", unit, say=self.say, **self.every)
        with ticking(progress, last_line="if_long"):
            yield progress
        self.finished.append((progress.what, progress.done, total))


QUERY_CHUNK = 256  # queries ranked between two progress counts


def ranked_rows(scores: np.ndarray, k: int, progress: CountProgress) -> list[list[int]]:
    """``top_k_from_scores`` of every row, a chunk of rows at a time, each chunk counted as queries scored."""
    out: list[list[int]] = []
    for start in range(0, len(scores), QUERY_CHUNK):
        part = scores[start:start + QUERY_CHUNK]
        out += [r.tolist() for r in top_k_from_scores(part, k)]
        progress.advance(len(part))
    return out


@task(cache_policy=NO_CACHE)
def rank_all(inputs: EvalInputs, k: int, progress: EvalProgress | None = None) -> dict[str, list[list[int]]]:
    """Top-k tool indices (into ``inputs.tool_ids``) per query for every method the warehouse supports."""
    progress = progress or EvalProgress.quiet()
    rankings: dict[str, list[list[int]]] = {}
    n, dataset = len(inputs.query_texts), inputs.dataset
    with progress.method(dataset, "BM25", n) as counted:
        bm25, ranked = BM25(inputs.texts), []
        for q in inputs.query_texts:  # the slow one on a large catalog: counted query by query
            ranked.append(top_k_from_scores(bm25.scores(q), k)[0].tolist())
            counted.advance()
        rankings["BM25"] = ranked
    with progress.method(dataset, "TF-IDF", n) as counted:
        rankings["TF-IDF"] = ranked_rows(TfIdf(inputs.texts).scores_many(inputs.query_texts), k, counted)
    for name, kind in EMBEDDING_METHODS.items():
        if kind in inputs.embeddings:
            with progress.method(dataset, name, n) as counted:
                rankings[name] = ranked_rows(cosine_scores(inputs.query_embeddings, inputs.embeddings[kind]), k,
                                             counted)
    return rankings


@task(cache_policy=NO_CACHE)
def fused_rankings(inputs: EvalInputs, cfg: EvalConfig, depth: int,
                   progress: EvalProgress | None = None) -> dict[str, FusionResult]:
    """Per +TGR graph the dataset has (``FUSED_METHODS``): each query ranked by (1 - w) cos(q, x) + w cos(q, x')
    with w chosen by cross-validation on the other folds' queries (tasks/retrieval/fusion.py); a graph with
    precondition edges whose data graph was written too (``DATA_GRAPH_OF``) by (1 - w) s_data + w cos(q, x'), s_data
    the data graph's own fusion, both weights chosen on the same folds."""
    if "base" not in inputs.embeddings or len(inputs.query_ids) < 2:
        return {}
    golds = inputs.gold_indices()
    base = cosine_scores(inputs.query_embeddings, inputs.embeddings["base"])
    out, progress = {}, progress or EvalProgress.quiet()
    for name, method in FUSED_METHODS.items():
        kind = EMBEDDING_METHODS[method]
        if kind in inputs.embeddings:
            data_kind = EMBEDDING_METHODS.get(DATA_GRAPH_OF.get(method, ""))
            data = (cosine_scores(inputs.query_embeddings, inputs.embeddings[data_kind])
                    if data_kind in inputs.embeddings else None)
            with progress.method(inputs.dataset, name, len(golds)) as counted:  # counted when its folds are done
                out[name] = cross_validate(base, cosine_scores(inputs.query_embeddings, inputs.embeddings[kind]),
                                           golds, cfg.graph_weights, cfg.cv_folds, cfg.cv_seed, depth, data)
                counted.advance(len(golds))
    return out


@task(cache_policy=NO_CACHE)
def validated_rankings(inputs: EvalInputs, split_of_query: dict[str, str], cfg: EvalConfig, depth: int,
                       progress: EvalProgress | None = None) -> dict[str, FusionResult]:
    """Per +TGR graph built from the training runs (``VALIDATED_METHODS``): every query ranked by
    (1 - w) cos(q, b) + w cos(q, x') with w chosen on the validation queries (tasks/retrieval/fusion.py).
    b is the plain embedding x, except for a data graph plus call-order edges (``+order``): there b is the data
    graph's own x' (``ORDER_BASE``; x where the data graph has no edge), so w = 0 is "+TGR, data edges only" and
    the precondition edges must earn their weight over the data graph, not over the embedding."""
    validation = [i for i, q in enumerate(inputs.query_ids) if split_of_query.get(q) == "validation"]
    if "base" not in inputs.embeddings or not validation:
        return {}
    golds = inputs.gold_indices()
    base = cosine_scores(inputs.query_embeddings, inputs.embeddings["base"])
    out, progress = {}, progress or EvalProgress.quiet()
    for name, method in VALIDATED_METHODS.items():
        if (kind := EMBEDDING_METHODS[method]) in inputs.embeddings:
            data_kind = EMBEDDING_METHODS.get(ORDER_BASE.get(method, ""), "base")
            under = (cosine_scores(inputs.query_embeddings, inputs.embeddings[data_kind])
                     if data_kind in inputs.embeddings and data_kind != "base" else base)
            with progress.method(inputs.dataset, name, len(golds)) as counted:
                out[name] = choose_on_validation(under, cosine_scores(inputs.query_embeddings, inputs.embeddings[kind]),
                                                 golds, validation, cfg.graph_weights, depth)
                counted.advance(len(golds))
    return out


def paper_encoder_scores(warehouse: str, inputs: EvalInputs, encoder: str) -> dict[str, np.ndarray]:
    """Cosine scores (queries x tools) with ``encoder`` on the tools' stored ``embed_text`` and the query
    texts: the encoder alone and Eq. 3 (both directions, the build's default) over the warehouse's
    discriminator and gold edges (``PAPER_ENCODER_METHODS``; a source the dataset lacks gives none)."""
    from models.sentence_encoder import EncoderConfig, SentenceEncoder

    model = SentenceEncoder(EncoderConfig(encoder))
    tools, queries = model.encode(inputs.texts), model.encode(inputs.query_texts)
    index = {t: i for i, t in enumerate(inputs.tool_ids)}
    con = connect(warehouse)
    try:
        edges = con.execute("SELECT source, dependent, prerequisite FROM edges WHERE dataset = ? AND source IN "
                            "('discriminator', 'manual')", [inputs.dataset]).fetchall()
    finally:
        con.close()
    out = {}
    for method, source in PAPER_ENCODER_METHODS.items():
        if source is None:
            out[method] = cosine_scores(queries, tools)
            continue
        pairs = [(index[d], index[p]) for s, d, p in edges if s == source and d in index and p in index]
        if pairs:
            out[method] = cosine_scores(queries, gcn_propagate(tools, pairs, "both"))
    return out


@task(cache_policy=NO_CACHE)
def paper_encoder_rankings(warehouse: str, inputs: EvalInputs, encoder: str, k: int,
                           progress: EvalProgress | None = None) -> dict[str, list[list[int]]]:
    """Top-k tool indices per query of ``paper_encoder_scores``."""
    progress = progress or EvalProgress.quiet()
    n = len(inputs.query_texts)
    with progress.method(inputs.dataset, f"{encoder} (encoding tools and queries)", len(inputs.texts) + n,
                         "texts") as counted:
        scores = paper_encoder_scores(warehouse, inputs, encoder)
        counted.advance(len(inputs.texts) + n)
    out = {}
    for m, s in scores.items():
        with progress.method(inputs.dataset, m, n) as counted:
            out[m] = ranked_rows(s, k, counted)
    return out


def as_ids(inputs: EvalInputs, rankings: dict[str, list[list[int]]], k: int) -> dict[str, list[list[str]]]:
    return {name: [[inputs.tool_ids[i] for i in r[:k]] for r in ranked] for name, ranked in rankings.items()}


@task(cache_policy=NO_CACHE)
def toolrerank(inputs: EvalInputs, rankings: dict[str, list[list[int]]], cfg: EvalConfig,
               progress: EvalProgress | None = None) -> RerankResult | None:
    """ToolRerank after each first stage (tasks/retrieval/rerank/) on a seeded split of this dataset."""
    log = get_run_logger()
    if "base" not in inputs.embeddings:
        log.warning(f"{inputs.dataset}: no base embeddings, no reranking")
        return None
    library = Library(inputs.dataset, inputs.tool_ids, inputs.texts,
                      tool_parents(inputs.dataset, inputs.tool_ids, inputs.groups, inputs.descriptions),
                      inputs.groups, inputs.embeddings["base"])
    index = library.index
    golds = [{index[t] for t in g} for g in inputs.golds]
    stages = {n: rankings[n] for n in cfg.rerank_first_stages if n in rankings}
    progress = progress or EvalProgress.quiet()
    # counted when it ends: its own log says each first stage as it is chosen on validation
    with progress.method(inputs.dataset, f"ToolRerank after {len(stages)} first stages", len(golds)) as counted:
        try:
            result = run_toolrerank(library, inputs.query_texts, inputs.query_embeddings, golds, stages,
                                    seed=cfg.rerank_seed, ks=cfg.ks, log=log.info)
        except TooFewQueries as exc:
            log.warning(f"no reranking: {exc}")
            result = None
        counted.advance(len(golds))
    return result


def same_ranking(ranked: list[str], scores: dict[str, float], best: list[float], tol: float = 1e-6) -> bool:
    """Whether ``ranked`` is a correct top-k under ``scores`` up to ties within ``tol``: its scores do
    not increase and match the best k scores one by one (float32 rounding in SQL vs numpy may order
    tools with equal scores, e.g. two tools made identical by the GCN step, either way)."""
    got = [scores[t] for t in ranked]
    return len(got) == len(best) and all(abs(g - b) <= tol for g, b in zip(got, best))


@task(cache_policy=NO_CACHE)
def sql_agreement(warehouse: str, inputs: EvalInputs, rankings: dict[str, list[list[str]]], k: int,
                  progress: EvalProgress | None = None) -> dict[str, float]:
    """Share of queries whose SQL top-k (macro query_top_k) is the numpy top-k (ties within 1e-6 aside)."""
    progress = progress or EvalProgress.quiet()
    con = connect(warehouse)
    try:
        out = {}
        for name, kind in EMBEDDING_METHODS.items():
            if name not in rankings:
                continue
            with progress.method(inputs.dataset, f"{name} (SQL check)", len(inputs.query_ids)) as counted:
                sql = dict(con.execute("SELECT query_id, list(tool_id ORDER BY rank) FROM query_top_k(?, ?, ?) "
                                       "GROUP BY 1", [inputs.dataset, kind, k]).fetchall())
                scores = cosine_scores(inputs.query_embeddings, inputs.embeddings[kind])
                same = []
                for qi, q in enumerate(inputs.query_ids):
                    by_tool = dict(zip(inputs.tool_ids, scores[qi].tolist()))
                    best = [by_tool[t] for t in rankings[name][qi]]
                    same.append(same_ranking(sql.get(q, []), by_tool, best))
                    counted.advance()
            out[name] = float(np.mean(same))
    finally:
        con.close()
    return out


def metric_rows(dataset: str, rankings: dict[str, list[list[str]]], golds: list[set[str]],
                ks: tuple[int, ...], at: datetime, query_split: str = "all",
                fused: dict[str, FusionResult] | None = None) -> list[dict]:
    """One row per method and k; the graph weight w of the embedding methods (``FIXED_GRAPH_WEIGHT``) and of
    the '(cv)' rows (``fused``: the w chosen on all queries, and per fold) goes with it."""
    rows = []
    for method, ranked in rankings.items():
        m = evaluate_rankings(ranked, golds, ks)
        weight = {"graph_weight": FIXED_GRAPH_WEIGHT[method]} if method in FIXED_GRAPH_WEIGHT else {}
        if fused and method in fused:
            weight = {"graph_weight": fused[method].weight, "graph_weight_folds": fused[method].fold_weights}
        rows += [{"dataset": dataset, "method": method, "k": k, "recall": m[f"recall@{k}"], "ndcg": m[f"ndcg@{k}"],
                  "pass_rate": m[f"pass_rate@{k}"], "n_queries": len(golds), "evaluated_at": at,
                  "query_split": query_split} | weight for k in ks]
    return rows


# ---------------------------------------------------------------- ToolNet: held-out queries, next tool
@dataclass
class ToolNetInputs:
    graph: TransitionGraph  # static, node order = EvalInputs.tool_ids
    versions: list[tuple[int, int, int, float]]  # (iteration, i, j, weight), iteration >= 1
    test_runs: list[dict]  # stream order: run_id, query_id, success, tools
    split_of_query: dict[str, str]  # gold runs: query_id -> split
    dependency: dict[str, np.ndarray]  # edge source -> (n_tools, n_tools), [prerequisite, dependent] = prob
    build: dict  # the transition_builds row


@task(cache_policy=NO_CACHE)
def load_toolnet(warehouse: str, inputs: EvalInputs) -> ToolNetInputs | None:
    con = connect(warehouse)
    try:
        build = rows_of(con, "SELECT * EXCLUDE (sweep_json), sweep_json::VARCHAR AS sweep_json FROM transition_builds "
                             "WHERE dataset = ?", [inputs.dataset])
        if not build:
            return None
        ds = [inputs.dataset]
        graph = graph_from_edges(inputs.tool_ids, con.execute(
            "SELECT prerequisite, dependent, weight, n_transitions FROM edges WHERE dataset = ? AND source = 'transition'",
            ds).fetchall())
        index = graph.index()
        versions = [(n, index[p], index[d], w) for n, p, d, w in con.execute(
            "SELECT iteration, prerequisite, dependent, weight FROM transition_weight_versions "
            "WHERE dataset = ? AND iteration > 0 ORDER BY iteration", ds).fetchall()]
        test_runs = rows_of(con, "SELECT run_id, query_id, success, tools FROM trajectories WHERE dataset = ? "
                                 "AND split = 'test' AND stream_iteration IS NOT NULL ORDER BY stream_iteration", ds)
        split_of_query = dict(con.execute("SELECT query_id, split FROM trajectories WHERE dataset = ? "
                                          "AND source = 'gold' AND query_id IS NOT NULL", ds).fetchall())
        dependency = {}
        n = graph.n_tools
        for src, pre, dep, prob in con.execute(
                # whole dependency graphs only: 'predicted' holds just GTool's additions to one of them
                "SELECT source, prerequisite, dependent, prob FROM edges WHERE dataset = ? "
                "AND source NOT IN ('transition', 'predicted') ORDER BY source", ds).fetchall():
            dependency.setdefault(src, np.zeros((n, n)))[index[pre], index[dep]] = prob
    finally:
        con.close()
    return ToolNetInputs(graph, versions, test_runs, split_of_query, dependency, build[0])


def next_tool_rows(inputs: EvalInputs, tn: ToolNetInputs, at: datetime) -> list[dict]:
    """Next-tool hit@1/@3 over the steps (tool_s -> tool_{s+1}) of the successful test runs, one row per
    method and k. Every ranker falls back to training popularity where it gives no score."""
    graph, n = tn.graph, tn.graph.n_tools
    index, pop = graph.index(), graph.popularity
    query_row = {q: i for i, q in enumerate(inputs.query_ids)}
    cos = cosine_scores(inputs.query_embeddings, inputs.embeddings["base"]) if len(inputs.query_ids) else None
    zeros = np.zeros(n)
    items: dict[str, list[tuple[np.ndarray, int]]] = {}
    weights = replay(graph, tn.versions, len(tn.test_runs))  # w^(0), w^(1), ... one per run, before its update
    for run in tn.test_runs:
        dynamic = next(weights)
        if not run["success"]:
            continue
        q = query_row.get(run["query_id"] or "")
        sim = (1.0 + cos[q]) / 2.0 if q is not None else None
        for a, b in zip(run["tools"], run["tools"][1:]):
            i, j = index[a], index[b]
            add = {"popularity": zeros, "transition": graph.weights[i, :n],
                   "transition (dynamic)": dynamic[i, :n].copy()}
            add |= {f"dependency successors ({src})": m[i] for src, m in tn.dependency.items()}
            if sim is not None:
                add |= {"query cosine": sim, "transition x query": graph.weights[i, :n] * sim}
            for method, row in add.items():
                items.setdefault(method, []).append((row, j))
    rows = []
    for method, its in items.items():
        rates, count = hit_rates(its, pop, NEXT_TOOL_KS)
        rows += [{"dataset": inputs.dataset, "method": method, "k": k, "hit_rate": rates[k], "n_steps": count,
                  "query_split": "test", "evaluated_at": at} for k in NEXT_TOOL_KS]
    return rows


def held_out_rows(inputs: EvalInputs, deep: dict[str, list[list[int]]], tn: ToolNetInputs, ks: tuple[int, ...],
                  at: datetime, fused: dict[str, FusionResult] | None = None) -> tuple[list[dict], int | None]:
    """Every method on the test queries, ``embedding+successors`` included (its number of expanded
    top results chosen on the validation queries by Recall@5, then NDCG@5); and that number."""
    split = [tn.split_of_query.get(q) for q in inputs.query_ids]
    test = [i for i, s in enumerate(split) if s == "test"]
    validation = [i for i, s in enumerate(split) if s == "validation"]
    if not test or "base" not in inputs.embeddings:
        return [], None
    successors = successor_lists(tn.graph)

    def expanded(top: int, queries: list[int]) -> list[list[str]]:
        return [[inputs.tool_ids[t] for t in expand_with_successors(deep["embedding"][q], successors, top)[:max(ks)]]
                for q in queries]

    top = 3
    if validation:
        golds = [inputs.golds[i] for i in validation]
        score = {t: evaluate_rankings(expanded(t, validation), golds, (5,)) for t in EXPANSION_TOPS}
        top = max(EXPANSION_TOPS, key=lambda t: (score[t]["recall@5"], score[t]["ndcg@5"], -t))
    rankings = {m: [[inputs.tool_ids[t] for t in r[:max(ks)]] for r in (ranked[i] for i in test)]
                for m, ranked in deep.items()}
    rankings["embedding+successors"] = expanded(top, test)
    return metric_rows(inputs.dataset, rankings, [inputs.golds[i] for i in test], ks, at, "test", fused), top


# The paper's ToolBench rows are its I1 split (single-tool queries): ToolBench's G1_* query groups.
PAPER_SUBSET = {"toolbench_stable": ("I1", "G1_")}


def paper_subset_rows(dataset: str, rankings: dict[str, list[list[str]]], golds: list[set[str]],
                      groups: list[str | None], ks: tuple[int, ...], at: datetime,
                      fused: dict[str, FusionResult] | None = None) -> list[dict]:
    """Metric rows on the queries of the paper's split (ToolBench I1 = G1_*), for the markdown only."""
    if dataset not in PAPER_SUBSET:
        return []
    name, prefix = PAPER_SUBSET[dataset]
    keep = [i for i, g in enumerate(groups) if (g or "").startswith(prefix)]
    if not keep:
        return []
    sub = {m: [r[i] for i in keep] for m, r in rankings.items()}
    return metric_rows(f"{dataset} {name}", sub, [golds[i] for i in keep], ks, at, fused=fused)


def weight_cell(row: dict) -> str:
    """The w column: the graph weight of the row's score, and for a '(cv)' row the w chosen per fold."""
    if row.get("graph_weight") is None:
        return ""
    folds = row.get("graph_weight_folds")
    return f"{row['graph_weight']:g}" + (f" (folds {'/'.join(f'{w:g}' for w in folds)})" if folds else "")


def markdown_table(rows: list[dict], agreement: dict[str, dict[str, float]],
                   encoders: dict[str, str] | None = None, subset_rows: list[dict] | None = None) -> str:
    by = {(r["dataset"], r["method"], r["k"]): r for r in rows + (subset_rows or [])}
    encoders = encoders or {}
    lines = ["# Retrieval evaluation (Table 2 layout)", "",
             "Every query ranks all tools of its dataset. R = Recall, N = NDCG (binary relevance), "
             "P = Pass Rate (whole gold set in the top k). `paper:` rows are the TGR paper's Table 2 "
             "(paraphrase-MiniLM-L3-v2 encoder, ToolBench I1 split, API-Bank with 119 tools) for orientation only: "
             "the shared data sets are not the paper's (ToolBench: all six subsets over 2,479 APIs; API-Bank: 71 APIs).",
             "Graphs: " + "; ".join(f"`{m}` {src}" for m, src in GRAPH_SOURCE_OF_METHOD.items()) + ". "
             "`L3` rows: the paper's paraphrase-MiniLM-L3-v2 (offline ONNX) on the same tool texts, alone and with "
             "Eq. 3 over the warehouse's discriminator (`L3+TGR-d`) and gold (`L3+TGR-m`) graphs. "
             "`(cv)` rows rank by (1 - w) cos(q, x) + w cos(q, x') (x' the graph-propagated embedding) with w chosen "
             "on Recall@5, then NDCG@5, of the other folds of a seeded k-fold split of the queries, so each query is "
             "scored with a w chosen without it; column w: the w chosen on all queries, and per fold "
             "(embedding: 0, +TGR: 1).", ""]
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        n = next(r["n_queries"] for r in rows if r["dataset"] == dataset)
        encoder = f", encoder `{encoders[dataset]}`" if encoders.get(dataset) else ""
        lines += [f"## {dataset} ({n} queries{encoder})", "",
                  "| method | R@5 | R@10 | N@5 | N@10 | P@5 | P@10 | w |", "|---|---|---|---|---|---|---|---|"]
        for method in dict.fromkeys(r["method"] for r in rows if r["dataset"] == dataset):
            vals = [by[(dataset, method, k)][metric] for metric, k in METRIC_COLUMNS]
            lines.append(f"| {method} | " + " | ".join(f"{v:.3f}" for v in vals) + f" | {weight_cell(by[(dataset, method, 5)])} |")
        paper = PAPER_TABLE_2.get(dataset, {})
        sub_name = f"{dataset} {PAPER_SUBSET[dataset][0]}" if dataset in PAPER_SUBSET else None
        sub = [r for r in subset_rows or [] if r["dataset"] == sub_name]
        if sub:
            lines += ["", f"Queries of the paper's split only, {sub_name} ({sub[0]['n_queries']} queries: "
                      f"{PAPER_SUBSET[dataset][1]}* groups), beside the paper's rows:", "",
                      "| method | R@5 | R@10 | N@5 | N@10 | P@5 | P@10 | w |", "|---|---|---|---|---|---|---|---|"]
            for method in dict.fromkeys(r["method"] for r in sub):
                vals = [by[(sub_name, method, k)][metric] for metric, k in METRIC_COLUMNS]
                lines.append(f"| {method} | " + " | ".join(f"{v:.3f}" for v in vals)
                             + f" | {weight_cell(by[(sub_name, method, 5)])} |")
        for method, vals in paper.items():
            lines.append(f"| paper: {method} | " + " | ".join(f"{v:.3f}" for v in vals) + " | |")
        if agreement.get(dataset):
            lines += ["", "SQL `query_top_k` vs numpy top-10, share of queries with the same ranking (ties within 1e-6 aside): "
                      + ", ".join(f"{m} {v:.3f}" for m, v in agreement[dataset].items())]
        lines.append("")
    return "\n".join(lines)


def toolnet_markdown(rows: list[dict], next_tool: list[dict], info: dict[str, dict]) -> str:
    """Held-out retrieval and next-tool hit@k per dataset with a transition graph."""
    lines = ["# ToolNet transition graph (held-out test split)", "",
             "Methods built from the training runs are scored on the test queries only; every other "
             "method is scored on the same queries for comparison. Next-tool hit@k: from tool_s of a "
             "successful test run, is tool_{s+1} among the k best? Rankers fall back to training "
             "popularity where they give no score.", ""]
    for dataset, meta in info.items():
        held = [r for r in rows if r["dataset"] == dataset and r["query_split"] == "test"]
        by = {(r["method"], r["k"]): r for r in held}
        train, val, test = meta["runs"]
        lines += [f"## {dataset}: runs train {train} / validation {val} / test {test}; alpha {meta['alpha']}, "
                  f"beta {meta['beta']} ({meta['chosen_on']})", ""]
        if held:
            lines += [f"Retrieval on the {held[0]['n_queries']} test queries (successor expansion of the top "
                      f"{meta['expansion_top']}, chosen on validation):", "",
                      "| method | R@5 | R@10 | N@5 | N@10 | P@5 | P@10 | w |", "|---|---|---|---|---|---|---|---|"]
            for method in dict.fromkeys(r["method"] for r in held):
                vals = [by[(method, k)][metric] for metric, k in METRIC_COLUMNS]
                lines.append(f"| {method} | " + " | ".join(f"{v:.3f}" for v in vals) + f" | {weight_cell(by[(method, 5)])} |")
        nt = {(r["method"], r["k"]): r for r in next_tool if r["dataset"] == dataset}
        if nt:
            lines += ["", "| next-tool ranker | hit@1 | hit@3 | steps |", "|---|---|---|---|"]
            for method in dict.fromkeys(m for m, _ in nt):
                lines.append(f"| {method} | {nt[(method, 1)]['hit_rate']:.3f} | {nt[(method, 3)]['hit_rate']:.3f} | "
                             f"{nt[(method, 1)]['n_steps']} |")
        lines.append("")
    return "\n".join(lines)


@task(cache_policy=NO_CACHE)
def store_metrics(warehouse: str, rows: list[dict], next_tool: list[dict] = ()) -> None:
    datasets = sorted({r["dataset"] for r in rows})

    def change(con):
        # rows are checked against warehouse/tables.py and inserted by column name (query_split defaults to 'all')
        con.execute("DELETE FROM retrieval_metrics WHERE list_contains(?, dataset)", [datasets])
        insert_rows(con, "retrieval_metrics", rows)
        con.execute("DELETE FROM next_tool_metrics WHERE list_contains(?, dataset)", [datasets])
        insert_rows(con, "next_tool_metrics", list(next_tool))

    update_warehouse(warehouse, change)


@flow(name="eval-retrieval", log_prints=True)
def eval_retrieval(cfg: EvalConfig | None = None) -> dict:
    cfg = cfg or EvalConfig()
    cfg.check_inputs()  # before any work: a missing warehouse or a read-only folder is found now
    log = get_run_logger()
    con = connect(cfg.warehouse)
    try:
        available = [d for (d,) in con.execute(
            "SELECT DISTINCT dataset FROM query_gold_tools ORDER BY 1").fetchall()]
    finally:
        con.close()
    missing = [d for d in cfg.datasets if d not in available]
    if missing:
        raise ValueError(f"no queries with gold tools for {missing} in {cfg.warehouse}; it has {available}")
    at = datetime.now(timezone.utc).replace(tzinfo=None)
    rows, agreement, encoders, reranked, subset_rows = [], {}, {}, [], []
    next_tool, toolnet_info, fusion = [], {}, {}
    progress = EvalProgress(len(cfg.datasets or available), run_say(logging.getLogger(__name__)))
    with ticking(progress.run):
        for dataset in cfg.datasets or available:
            evaluate_dataset(dataset, cfg, at, progress, rows, agreement, encoders, reranked, subset_rows, next_tool,
                             toolnet_info, fusion)
            progress.run.advance()
        progress.run.detail = ""
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = markdown_table([r for r in rows if r["query_split"] == "all"], agreement, encoders, subset_rows)
    if toolnet_info:
        table += "\n" + toolnet_markdown(rows, next_tool, toolnet_info)
    (out / "retrieval.md").write_text(table + "\n", encoding="utf-8")
    plot_retrieval(rows, out / RETRIEVAL_PLOT)
    show_plot(out / RETRIEVAL_PLOT, "Retrieval: Recall@5 and NDCG@5 per method and set", plot_rows(rows),
              note=f"Every query ranks all tools of its data set; the full table (k = 5 and 10, Pass Rate) is in "
                   f"`{(out / 'retrieval.md').absolute()}`. A '(test queries)' set: ToolNet's held-out queries, "
                   "where the methods built from the training runs are scored.", key="eval-retrieval-plot")
    print(table)
    summary = {"rows": rows, "next_tool_rows": next_tool, "toolnet": toolnet_info, "fusion": fusion, "paper_subset_rows": subset_rows, "sql_agreement": agreement, "markdown": str(out / "retrieval.md"),
               "plot": str(out / RETRIEVAL_PLOT)}
    if reranked:
        text = "\n".join(["# ToolRerank after each first stage (tasks/retrieval/rerank/, docs/retrieval.md)", ""] +
                         [markdown_tables(r, cfg.ks) for r in reranked])
        (out / "rerank.md").write_text(text + "\n", encoding="utf-8")
        (out / "rerank.json").write_text(json.dumps([asdict(r) | {"encoder": encoders.get(r.dataset, "")}
                                                     for r in reranked], indent=1, default=list) + "\n",
                                         encoding="utf-8")
        print(text)
        summary |= {"rerank": [asdict(r) for r in reranked], "rerank_markdown": str(out / "rerank.md")}
    # last: the report is on disk first, so a warehouse that fails the write now loses no result
    try:
        store_metrics(cfg.warehouse, rows, next_tool)
    except Exception as exc:  # noqa: BLE001 - said once, with what was kept and what to do
        raise MetricsNotStored(
            f"the metrics are in {out / 'retrieval.md'}, but writing them to the warehouse {cfg.warehouse} failed "
            f"({type(exc).__name__}: {exc}); make its folder writable and rerun to store them") from exc
    return summary


def evaluate_dataset(dataset: str, cfg: EvalConfig, at: datetime, progress: EvalProgress, rows: list[dict],
                     agreement: dict, encoders: dict, reranked: list, subset_rows: list[dict], next_tool: list[dict],
                     toolnet_info: dict, fusion: dict) -> None:
    """Every method on one data set; its rows and reports are added to the lists and dicts given."""
    log = get_run_logger()
    inputs = load_inputs(cfg.warehouse, dataset)
    encoders[dataset] = inputs.encoder
    depth = max(max(cfg.ks), DEPTH) if cfg.rerank else max(cfg.ks)
    deep = rank_all(quote(inputs), depth, progress)
    fused = fused_rankings(quote(inputs), cfg, depth, progress)
    deep |= {name: result.rankings for name, result in fused.items()}
    fusion[dataset] = {name: {"weight": r.weight, "fold_weights": r.fold_weights, "grid": list(r.weights),
                              "grid_recall_5": r.grid_recall} for name, r in fused.items()}
    for name, r in fused.items():
        log.info(f"{dataset} {name}: w per fold {r.fold_weights}, on all queries {r.weight}; in-sample R@5 over "
                 f"the grid {dict(zip(r.weights, (round(x, 4) for x in r.grid_recall)))}")
    if cfg.paper_encoder and cfg.paper_encoder != inputs.encoder:
        deep |= paper_encoder_rankings(cfg.warehouse, quote(inputs), cfg.paper_encoder, max(cfg.ks), progress)
    rankings = as_ids(inputs, deep, max(cfg.ks))
    if cfg.sql_check:
        agreement[dataset] = sql_agreement(cfg.warehouse, quote(inputs), quote(rankings), max(cfg.ks), progress)
    overall = {m: r for m, r in rankings.items() if m not in HELD_OUT_ONLY}
    rows += metric_rows(dataset, overall, inputs.golds, cfg.ks, at, fused=fused)
    subset_rows += paper_subset_rows(dataset, overall, inputs.golds, inputs.query_groups, cfg.ks, at, fused)
    tn = load_toolnet(cfg.warehouse, quote(inputs))
    if tn is not None:
        validated = validated_rankings(quote(inputs), quote(tn.split_of_query), cfg, depth, progress)
        deep |= {name: result.rankings for name, result in validated.items()}
        fusion[dataset] |= {name: {"weight": r.weight, "chosen_on": "validation queries", "grid": list(r.weights),
                                   "grid_recall_5": r.grid_recall} for name, r in validated.items()}
        held, top = held_out_rows(inputs, deep, tn, cfg.ks, at, {**fused, **validated})
        rows += held
        next_tool += next_tool_rows(inputs, tn, at)
        toolnet_info[dataset] = {"alpha": tn.build["alpha"], "beta": tn.build["beta"],
                                 "chosen_on": tn.build["chosen_on"], "expansion_top": top,
                                 "runs": [tn.build[f"runs_{s}"] for s in ("train", "validation", "test")]}
    log.info(f"{dataset}: {len(inputs.query_ids)} queries over {len(inputs.tool_ids)} tools; "
             f"SQL/numpy agreement {agreement.get(dataset, 'not checked')}")
    if cfg.rerank:
        result = toolrerank(quote(inputs), quote(deep), cfg, progress)
        if result is not None:
            reranked.append(result)


# ---------------------------------------------------------------- command line (generated from EvalConfig)
if __name__ == "__main__":
    CLI.run(eval_retrieval)
