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

from models.encoder_path import OFFLINE_DEFAULT
from schemas.toolset import ToolSet
from tasks.graph_edges import (
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
from tasks.retrieval import EMBED_STYLES, embed_style_for, embed_text, gcn_propagate
from tasks.schema_rule import DEFAULT_MAX_PRODUCERS
from tasks.toolsets import load_toolset_spec
from warehouse.build import DatasetTables, build_warehouse

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
    # evidence (schema edges, discriminator hints); None: every name is (tasks.schema_rule)
    max_producers: int | None = DEFAULT_MAX_PRODUCERS


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
    tables, summary, dim = [], {}, None
    for spec in cfg.toolsets:
        toolset = load_toolset(spec, cfg.data_root)
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
        log.info(f"{toolset.name}: edges manual {len(toolset.edges)}, schema {len(schema)}, "
                 f"discriminator {len(predicted)} of {len(pairs)} scored pairs, fused {len(fused)}")

        tables.append(dataset_tables(toolset, style, texts, cfg.encoder, cfg.discriminator, embeddings, queries,
                                     pruning, pairs, probs, predicted, built_at, schema, fused, decision))
        summary[toolset.name] = {
            "tools": len(toolset.tools), "queries": len(toolset.queries), "manual_edges": len(toolset.edges),
            "schema_edges": len(schema), "scored_pairs": len(pairs), "discriminator_edges": len(predicted),
            "fused_edges": len(fused), "pruning": pruning.as_row(toolset.name),
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
    a = p.parse_args(argv)
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
                       a.max_producers if a.max_producers > 0 else None)


if __name__ == "__main__":
    out = build_graph(parse_args())
    print(json.dumps({k: v for k, v in out.items() if k != "config"}, indent=2, default=str))
