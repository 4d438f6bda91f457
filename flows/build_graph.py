"""Prefect flow ``build-graph``: tool sets -> embeddings, dependency edges, TGR embeddings -> DuckDB.

    python -m flows.build_graph --toolset apibank --toolset toolbench_stable \
        --discriminator artifacts/discriminator/<run>/best --warehouse artifacts/warehouse/tgr.duckdb
    python -m flows.build_graph --toolset apibank --no-discriminator   # manual + schema edges only

A ``--toolset`` is a benchmark name (apibank, toolbench_stable, ultratool, tmdb: read from
``--data-root``), a folder in the documented tool set format (tools.jsonl with tool_id/group/doc,
edges.jsonl, ...) or a folder in the shared benchmark layout (tools.jsonl with name/description,
``*edges*.jsonl`` with producer/consumer rows, queries.jsonl).

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
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from pydantic import SecretStr

from models.encoder_path import OFFLINE_DEFAULT
from schemas.toolset import ToolSet
from tasks.toolnet.evaluator import EMBEDDED, EVALUATORS, endpoint_problem, toolnet_evaluator
from tasks.graph.edges import (
    DEFAULT_PRUNING,
    PRUNING_STRATEGIES,
    EdgeDecision,
    PruningResult,
    dataset_tables,
    edge_decision,
    edges_from_probabilities,
    fuse_edges,
    log_pruning,
    prune_candidates,
    pruning_rules,
    schema_edges,
    score_pairs,
)
from tasks.llm.client import split_userinfo
from tasks.retrieval.core import (EMBED_STYLES, cosine_scores, embed_style_for, embed_text, gcn_propagate,
                             gcn_propagate_weighted)
from schemas.name_rule import DEFAULT_MAX_PRODUCERS
from tasks.toolsets.readers import BENCHMARKS, load_toolset_spec
from tasks.toolsets.trajectories import (DEFAULT_FRACTIONS, RESERVED, Trajectories, gold_trajectories, merge,
                                read_trajectories)
from tasks.toolnet.transitions import DEFAULT_ALPHAS, DEFAULT_BETAS, RULE_SCORE, ToolNetBuild, build_toolnet
from warehouse.build import DatasetTables, build_warehouse
from warehouse.lineage import checkpoint_lineage, lineage_row

DEFAULT_DATA_ROOT = Path("../shared/data/benchmarks")
DEFAULT_WAREHOUSE = Path("artifacts/warehouse/tgr.duckdb")


@dataclass
class GraphConfig:
    toolsets: list[str] = field(default_factory=lambda: ["apibank"])
    warehouse: str = str(DEFAULT_WAREHOUSE)
    discriminator: str | None = None  # checkpoint folder; None: manual edges only
    data_root: str = str(DEFAULT_DATA_ROOT)
    encoder: str = OFFLINE_DEFAULT
    embed_style: str | None = None  # None: per dataset (API-Bank description, others structured)
    pruning: str = DEFAULT_PRUNING
    neighbours: int = 5
    min_prob: float = 0.0  # keep a predicted edge only when its prob (p(a->b) + p(b->a)) reaches this
    both_orders: bool = True  # test-time symmetry: average <a,b> with the label-swapped <b,a>
    batch_size: int = 64
    max_length: int | None = None  # None: the checkpoint's training max_length (calibration.json), else 256
    gcn_direction: str = "both"
    device: str | None = None
    threshold: float | None = None  # overrides the checkpoint's calibration.json threshold
    schema_edges: bool = True  # the parameter-match rule as edge source 'schema'
    progress: bool = True  # tqdm bar while scoring pairs
    # an output name that more than this many tools of a group produce is no parameter-match
    # evidence (schema edges, discriminator hints); None: every name is (schemas.name_rule)
    max_producers: int | None = DEFAULT_MAX_PRODUCERS
    # ToolNet transition graph (docs/warehouse.md, "ToolNet")
    transitions: bool = True  # use the gold call orders of a benchmark's queries.jsonl where it has them
    trajectories: list[str] = field(default_factory=list)  # "[DATASET=]FILE": user runs, JSON Lines
    split_seed: int = 0  # of the train/validation/test split and the stream order
    split_fractions: tuple[float, float, float] = DEFAULT_FRACTIONS
    alpha: float | None = None  # Eq. 8; with beta given too, no validation sweep
    beta: float | None = None  # Eq. 6
    alphas: tuple[float, ...] = DEFAULT_ALPHAS  # the validation sweep (the paper reports no values)
    betas: tuple[float, ...] = DEFAULT_BETAS
    rule_score: int = RULE_SCORE  # the rule evaluator's +/- score, in [1, 3]
    # the evaluator of the dynamic update: "rule", or "llm" (ToolNet's Evaluate through tasks/llm/client.py,
    # tasks/toolnet/evaluator.py: the rule scores a run whose answer stays invalid, and that is recorded)
    evaluator: str = "rule"
    evaluator_model: str | None = None  # None: the packaged embedded model
    evaluator_base_url: str | None = None  # OpenAI-compatible endpoint or "embedded"; None: OPENAI_BASE_URL
    evaluator_concurrency: int | None = None  # requests in flight; None: 1 embedded, 16 otherwise
    evaluator_cache_dir: str = "artifacts/llm-cache"
    evaluator_base_url_credentials: SecretStr | None = None  # set from evaluator_base_url's userinfo; never recorded

    def __post_init__(self) -> None:
        if self.evaluator not in EVALUATORS:
            raise ValueError(f"evaluator must be one of {', '.join(EVALUATORS)}, not {self.evaluator!r}")
        if self.evaluator == "llm" and endpoint_problem(self.evaluator_base_url):
            raise ValueError(endpoint_problem(self.evaluator_base_url))
        if self.evaluator_base_url:  # credentials in the URL go to a SecretStr (as LLMConfig does)
            url, userinfo = split_userinfo(self.evaluator_base_url)
            if userinfo:
                self.evaluator_base_url, self.evaluator_base_url_credentials = url, SecretStr(userinfo)


def toolset_folder(spec: str, data_root: str) -> Path | None:
    """The folder a --toolset spec reads (a benchmark under data_root, or the folder itself)."""
    if spec in BENCHMARKS and (Path(data_root) / spec).is_dir():
        return Path(data_root) / spec
    return Path(spec) if Path(spec).is_dir() else None


def trajectory_files(values: list[str], specs: list[str], names: dict[str, str]) -> dict[str, list[str]]:
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


@task(cache_policy=NO_CACHE)
def load_toolset(spec: str, data_root: str) -> ToolSet:
    return load_toolset_spec(spec, Path(data_root))


@task(cache_policy=NO_CACHE)
def encode_texts(texts: list[str], encoder: str, batch_size: int, device: str | None) -> np.ndarray:
    from models.sentence_encoder import EncoderConfig, SentenceEncoder

    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    return SentenceEncoder(EncoderConfig(encoder, batch_size=batch_size, device=device)).encode(texts)


@task(cache_policy=NO_CACHE)
def prune(toolset: ToolSet, embeddings: np.ndarray, strategy: str, neighbours: int) -> PruningResult:
    return prune_candidates(toolset.tools, embeddings, strategy, neighbours, toolset.edges)


@task(cache_policy=NO_CACHE)
def score(checkpoint: str, toolset: ToolSet, pairs: list[tuple[int, int]], cfg: GraphConfig) -> np.ndarray:
    from models.discriminator import load_calibration

    # score with the input length the model was trained and calibrated at
    max_length = cfg.max_length or (load_calibration(checkpoint) or {}).get("max_length", 256)
    return score_pairs(checkpoint, toolset.tools, pairs, cfg.batch_size, max_length, cfg.both_orders, cfg.device,
                       progress=cfg.progress, max_producers=cfg.max_producers)


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
                 build: ToolNetBuild | None, built_at: datetime) -> list[dict]:
    """One ``edge_lineage`` row per edge source the dataset has."""
    from prefect.runtime import flow_run

    run_id = flow_run.id
    threshold = decision.threshold if decision else None
    disc = {"pruning": cfg.pruning, "neighbours": cfg.neighbours, "both_orders": cfg.both_orders,
            "min_prob": cfg.min_prob, "rule": decision.rule if decision else None,
            "threshold_source": decision.threshold_source if decision else None}
    edge_files = sorted(str(p) for p in folder.glob("*edges*.jsonl")) if folder else []
    made = {
        "manual": lambda: lineage_row(toolset.name, "manual", "gold edge file of the tool set", built_at, run_id,
                                      edge_files),
        "schema": lambda: lineage_row(toolset.name, "schema", "parameter-match rule (schemas.name_rule)", built_at,
                                      run_id, params={"max_producers": cfg.max_producers}),
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
    }
    return [made[s]() for s in sorted(sources)]


@task(cache_policy=NO_CACHE)
def write_warehouse(target: str, tables: list[DatasetTables], dim: int) -> dict:
    return build_warehouse(target, tables, dim)


@flow(name="build-graph", log_prints=True)
def build_graph(cfg: GraphConfig | None = None) -> dict:
    """Build (or rebuild) the warehouse for ``cfg.toolsets``; returns per-dataset summaries."""
    cfg = cfg or GraphConfig()
    pruning_rules(cfg.pruning)  # fail before any work on a bad strategy
    log = get_run_logger()
    decision: EdgeDecision | None = None
    if cfg.discriminator:
        decision = edge_decision(cfg.discriminator, cfg.threshold, cfg.both_orders, cfg.min_prob, log)
        log.info(decision.describe())
    built_at = datetime.now(timezone.utc).replace(tzinfo=None)
    checkpoint = checkpoint_lineage(cfg.discriminator) if cfg.discriminator else None
    tables, summary, dim = [], {}, None
    loaded = {spec: load_toolset(spec, cfg.data_root) for spec in cfg.toolsets}
    user_runs = trajectory_files(cfg.trajectories, cfg.toolsets, {s: t.name for s, t in loaded.items()})
    for spec, toolset in loaded.items():
        folder = toolset_folder(spec, cfg.data_root)
        style = cfg.embed_style or embed_style_for(toolset.name)
        texts = [embed_text(t.doc, style) for t in toolset.tools]
        base = encode_texts(texts, cfg.encoder, cfg.batch_size, cfg.device)
        queries = encode_texts([q.text for q in toolset.queries], cfg.encoder, cfg.batch_size, cfg.device)
        queries = queries if len(toolset.queries) else np.zeros((0, base.shape[1]), dtype=np.float32)
        dim = base.shape[1]
        index = {t.tool_id: i for i, t in enumerate(toolset.tools)}
        embeddings = {"base": base}
        if toolset.edges:
            gold = [(index[e.dependent], index[e.prerequisite]) for e in toolset.edges]
            embeddings["tgr_manual"] = gcn_propagate(base, gold, cfg.gcn_direction)

        # Pruning stats are cheap, so they are recorded even when nothing is scored.
        pruning = prune(toolset, base, cfg.pruning, cfg.neighbours)
        log_pruning(toolset.name, pruning, log)

        def graph(edges) -> np.ndarray:
            return gcn_propagate(base, [(index[e.dependent], index[e.prerequisite]) for e in edges], cfg.gcn_direction)

        schema = schema_edges(toolset.tools, max_producers=cfg.max_producers) if cfg.schema_edges else []
        if schema:
            embeddings["tgr_schema"] = graph(s.edge for s in schema)
        pairs, probs, predicted, fused = [], np.zeros((0, 3)), [], []
        if cfg.discriminator:
            pairs = pruning.candidates
            probs = score(cfg.discriminator, toolset, pairs, cfg)
            predicted = edges_from_probabilities(toolset.tools, pairs, probs, cfg.min_prob, decision.threshold)
            embeddings["tgr_discriminator"] = graph(p.edge for p in predicted)
            if cfg.schema_edges:
                fused = fuse_edges(predicted, schema)
                embeddings["tgr_fused"] = graph(f.edge for f in fused)
        runs = read_runs(toolset, folder, user_runs.get(toolset.name, []), cfg.transitions)
        built = toolnet(toolset, runs, base, queries, cfg) if runs.runs else None
        if built is not None:
            w, n = built.graph.weights, built.graph.n_tools
            at = [index[t] for t in built.graph.tool_ids]  # graph node -> row of base
            embeddings["tgr_transition"] = gcn_propagate_weighted(
                base, [(at[j], at[i], w[i, j]) for i, j in zip(*np.nonzero(w[:n, :n])) if i != j], cfg.gcn_direction)
        log.info(f"{toolset.name}: edges manual {len(toolset.edges)}, schema {len(schema)}, "
                 f"discriminator {len(predicted)} of {len(pairs)} scored pairs, fused {len(fused)}, "
                 + (f"transition {int(built.graph.mask.sum())} from {built.runs_in('train')} training runs "
                    f"(alpha {built.alpha}, beta {built.beta}: {built.chosen_on})" if built else "no trajectories"))

        table = dataset_tables(toolset, style, texts, cfg.encoder, cfg.discriminator, embeddings, queries,
                               pruning, pairs, probs, predicted, built_at, schema, fused, decision)
        if built is not None:
            extra = toolnet_rows(toolset, runs, built, cfg)
            table.rows["edges"] += extra.pop("edges")
            table.rows |= extra
        table.rows["edge_lineage"] = lineage_rows(toolset, folder, {e["source"] for e in table.rows["edges"]}, cfg,
                                                  decision, checkpoint, runs, built, built_at)
        tables.append(table)
        summary[toolset.name] = {
            "tools": len(toolset.tools), "queries": len(toolset.queries), "manual_edges": len(toolset.edges),
            "schema_edges": len(schema), "scored_pairs": len(pairs), "discriminator_edges": len(predicted),
            "fused_edges": len(fused), "pruning": pruning.as_row(toolset.name),
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
    result = write_warehouse(cfg.warehouse, tables, dim)
    log.info(f"warehouse {result['warehouse']}: {result['rows']}")
    return {"warehouse": result, "datasets": summary, "config": asdict(cfg)}


def parse_args(argv: list[str] | None = None) -> GraphConfig:
    p = argparse.ArgumentParser(prog="python -m flows.build_graph", description=__doc__.split("\n")[0])
    p.add_argument("--toolset", action="append", required=True,
                   help="benchmark name or tool set folder; repeat or comma-separate (apibank,toolbench_stable)")
    p.add_argument("--warehouse", default=str(DEFAULT_WAREHOUSE))
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--discriminator", help="checkpoint folder, e.g. artifacts/discriminator/<run>/best")
    group.add_argument("--no-discriminator", action="store_true", help="manual (gold) and schema edges only")
    p.add_argument("--data-root", default=str(DEFAULT_DATA_ROOT))
    p.add_argument("--encoder", default=OFFLINE_DEFAULT, help="sentence encoder (offline-minilm or hub id/folder)")
    p.add_argument("--embed-style", choices=EMBED_STYLES, default=None)
    p.add_argument("--pruning", default=DEFAULT_PRUNING,
                   help=f"candidate pairs to score: {', '.join(PRUNING_STRATEGIES)} (any '+'-union of params, "
                        f"text, neighbours); default {DEFAULT_PRUNING}")
    p.add_argument("--neighbours", type=int, default=5)
    p.add_argument("--threshold", type=float, default=None,
                   help="keep a discriminator edge when p(a->b)+p(b->a) >= this (overrides calibration.json)")
    p.add_argument("--min-prob", type=float, default=0.0, help="further cut on an edge's p(a->b)+p(b->a)")
    p.add_argument("--single-order", action="store_true",
                   help="score <a,b> only (default: also <b,a>, averaged label-swapped; 2x cost)")
    p.add_argument("--no-schema-edges", action="store_true", help="no 'schema' / 'fused' edge sources")
    p.add_argument("--no-progress", action="store_true", help="no progress bar while scoring")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=None, help="default: the checkpoint's training max_length")
    p.add_argument("--gcn-direction", choices=("both", "dependent_to_prerequisite", "prerequisite_to_dependent"),
                   default="both")
    p.add_argument("--device", default=None)
    p.add_argument("--max-producers", type=int, default=DEFAULT_MAX_PRODUCERS,
                   help="an output name that more than N tools of a group produce is no parameter-match evidence "
                        f"(ToolBench's id, url, symbol); 0 turns the filter off; default {DEFAULT_MAX_PRODUCERS}")
    p.add_argument("--trajectories", action="append", default=[], metavar="[DATASET=]FILE",
                   help="runs for ToolNet's transition graph, JSON Lines (docs/warehouse.md); repeat for more files")
    p.add_argument("--no-transitions", action="store_true",
                   help="do not use the benchmarks' gold call orders as trajectories")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the trajectories' split and stream order")
    p.add_argument("--split", default=",".join(str(f) for f in DEFAULT_FRACTIONS),
                   help="train,validation,test fractions of the trajectories (default %(default)s)")
    p.add_argument("--alpha", type=float, default=None, help="Eq. 8 update speed; with --beta: no validation sweep")
    p.add_argument("--beta", type=float, default=None, help="Eq. 6 weight on the static graph, in [0, 1]")
    p.add_argument("--rule-score", type=int, default=RULE_SCORE, choices=(1, 2, 3),
                   help="the rule evaluator's score: +N for a gold tool the run called, -N for another")
    p.add_argument("--evaluator", choices=EVALUATORS, default="rule",
                   help="who scores the runs of the dynamic update: the rule, or an LLM (ToolNet's Evaluate; a run "
                        "whose answer stays invalid gets the rule, recorded as 'rule fallback')")
    p.add_argument("--evaluator-base-url", default=None,
                   help=f"OpenAI-compatible endpoint of --evaluator llm, or '{EMBEDDED}' (the packaged local model); "
                        "default OPENAI_BASE_URL (key: OPENAI_API_KEY)")
    p.add_argument("--evaluator-model", default=None, help="model name at --evaluator-base-url (default: the embedded model)")
    p.add_argument("--evaluator-concurrency", type=int, default=None,
                   help="evaluator requests in flight (default 1 embedded, 16 otherwise)")
    p.add_argument("--evaluator-cache-dir", default="artifacts/llm-cache",
                   help="LLM answer cache of the evaluator (a rebuild repeats no answered request)")
    a = p.parse_args(argv)
    try:
        fractions = tuple(float(x) for x in a.split.split(","))
    except ValueError:
        p.error(f"--split {a.split!r}: three numbers, e.g. 0.6,0.2,0.2")
    if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1) > 1e-9:
        p.error(f"--split {a.split!r}: three non-negative fractions summing to 1")
    if a.beta is not None and not 0.0 <= a.beta <= 1.0:
        p.error(f"--beta {a.beta}: must lie in [0, 1]")
    if a.alpha is not None and a.alpha < 0:
        p.error(f"--alpha {a.alpha}: must not be negative")
    if a.evaluator == "llm" and endpoint_problem(a.evaluator_base_url):
        p.error(endpoint_problem(a.evaluator_base_url))
    if a.evaluator_concurrency is not None and a.evaluator_concurrency < 1:
        p.error(f"--evaluator-concurrency {a.evaluator_concurrency}: must be at least 1")
    if a.discriminator and not Path(a.discriminator, "config.json").exists():
        p.error(f"--discriminator {a.discriminator}: no config.json there (train one: make train-discriminator)")
    try:
        pruning_rules(a.pruning)
    except ValueError as exc:
        p.error(str(exc))
    if a.threshold is not None and not 0.0 <= a.threshold <= 1.0:
        p.error(f"--threshold {a.threshold}: must lie in [0, 1]")
    toolsets = [t.strip() for value in a.toolset for t in value.split(",") if t.strip()]
    return GraphConfig(toolsets, a.warehouse, a.discriminator, a.data_root, a.encoder, a.embed_style, a.pruning,
                       a.neighbours, a.min_prob, not a.single_order, a.batch_size, a.max_length, a.gcn_direction,
                       a.device, a.threshold, not a.no_schema_edges, not a.no_progress,
                       a.max_producers if a.max_producers > 0 else None, not a.no_transitions, a.trajectories,
                       a.split_seed, fractions, a.alpha, a.beta, rule_score=a.rule_score, evaluator=a.evaluator,
                       evaluator_model=a.evaluator_model, evaluator_base_url=a.evaluator_base_url,
                       evaluator_concurrency=a.evaluator_concurrency, evaluator_cache_dir=a.evaluator_cache_dir)


if __name__ == "__main__":
    from tasks.common.prefect_guard import guard_temporary_server

    guard_temporary_server()  # a temporary Prefect server dies with this process, kill -9 included
    out = build_graph(parse_args())
    print(json.dumps({k: v for k, v in out.items() if k != "config"}, indent=2, default=str))
