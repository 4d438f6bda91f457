"""The fused graph (discriminator and schema edges, one per tool pair) and the warehouse rows
build-graph writes for one tool set."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np

from schemas.docs import canonical_doc_json
from schemas.tdi import LABEL_A_DEPENDS_ON_B
from schemas.toolset import DependencyEdge, ParameterEdge, ToolSet
from tasks.graph.call_order_edges import CallOrderEdge
from tasks.graph.pruning import PruningResult
from tasks.graph.schema_rule import SchemaEdge, schema_parameter_edges
from tasks.graph.scoring import EdgeDecision, PredictedEdge
from tasks.graph.stated import STATED_PROB, StatedDependency, stated_edges, stated_parameter_edges
from warehouse.build import DatasetTables, arrow_columns


# ---------------------------------------------------------------------------------------------
# The fused graph


@dataclass(frozen=True)
class FusedEdge:
    edge: DependencyEdge
    prob: float
    predicted_class: int
    matched_params: tuple[str, ...] | None  # set when the schema rule contributed
    fused_from: tuple[str, ...]  # ("discriminator",), ("schema",) or both


def fuse_edges(predicted: Sequence[PredictedEdge], schema: Sequence[SchemaEdge]) -> list[FusedEdge]:
    """Union of discriminator and schema edges, one edge per unordered tool pair.

    Why a union: the schema rule is precise but blind to "prior verification" and to tools without
    parameters, the discriminator sees those but misses many exact parameter matches; TGR's graph
    step only adds neighbours, so recall matters more than precision here. A pair found by both
    keeps the schema rule's direction (a parameter match is direct evidence of data flow) and
    prob 1; a pair found by one source keeps that source's edge (schema prob 1, discriminator
    p0 + p2). ``fused_from`` says which sources found it. Kind: the kept edge's (a schema edge is "data").
    """
    by_pair: dict[frozenset[str], FusedEdge] = {}
    for s in schema:
        key = frozenset((s.edge.dependent, s.edge.prerequisite))
        by_pair[key] = FusedEdge(replace(s.edge, source="fused"), 1.0,
                                 s.predicted_class, s.matched_params, ("schema",))
    for d in predicted:
        key = frozenset((d.edge.dependent, d.edge.prerequisite))
        if key in by_pair:
            f = by_pair[key]
            by_pair[key] = FusedEdge(f.edge, 1.0, f.predicted_class, f.matched_params, ("discriminator", "schema"))
        else:
            by_pair[key] = FusedEdge(replace(d.edge, source="fused"), d.prob, d.predicted_class, None, ("discriminator",))
    return sorted(by_pair.values(), key=lambda f: (f.edge.dependent, f.edge.prerequisite))


# ---------------------------------------------------------------------------------------------
# Warehouse rows


def dataset_tables(
    toolset: ToolSet,
    embed_style: str,
    embed_texts: Sequence[str],
    encoder: str,
    discriminator: str | None,
    tool_embeddings: Mapping[str, np.ndarray],
    query_embeddings: np.ndarray,
    pruning: PruningResult | None,
    pairs: Sequence[tuple[int, int]],
    probs: np.ndarray,
    predicted_edges: Sequence[PredictedEdge],
    built_at: datetime,
    schema: Sequence[SchemaEdge] = (),
    fused: Sequence[FusedEdge] = (),
    decision: EdgeDecision | None = None,
    scored_parameters: Sequence[tuple[ParameterEdge, float]] = (),
    call_order: Sequence[CallOrderEdge] = (),
    stated: Sequence[StatedDependency] = (),
    named_directions: Sequence[bool] = (),
) -> DatasetTables:
    """All warehouse rows of one tool set (the columns: warehouse/tables.py). ``parameter_edges``: the
    tool set's gold ones (source 'manual'), the schema edges' (``schema_parameter_edges``) and the
    parameter-level scorer's kept ones with their probability (``scored_parameters``, source
    'discriminator': ``tasks.graph.param_scoring.parameter_edges``). ``call_order``: precondition edges from the
    training runs' call order (source 'call_order', prob = the share of joint runs with the prerequisite first).
    ``stated``: the dependencies the tools' docs state (source 'stated', with the sentence as ``evidence``; an
    input's statement a parameter edge too). ``named_directions``: per scored pair, whether its direction is the one
    the two names' lifecycle says (``tasks.graph.lifecycle.orient``; scored_pairs' ``direction_from_names``, and that
    discriminator edge's ``evidence``)."""
    import json

    from tasks.graph.lifecycle import reason

    ds, tools = toolset.name, toolset.tools

    def edge_row(e: DependencyEdge, prob: float, cls: int, source: str, **extra: Any) -> dict:
        return {"dataset": ds, "tool_group": e.group, "dependent": e.dependent, "prerequisite": e.prerequisite,
                "prob": prob, "predicted_class": cls, "source": source, "kind": e.kind, "p_direction": None,
                "matched_params": None, "fused_from": None, "evidence": None} | extra

    def param_row(e: ParameterEdge, source: str, probability: float | None = 1.0) -> dict:
        return {"dataset": ds, "dependent": e.dependent, "prerequisite": e.prerequisite,
                "consumer_param": e.consumer_param, "producer_output": e.producer_output,
                "probability": probability, "source": source}

    named = {frozenset((tools[i].tool_id, tools[j].tool_id)) for (i, j), m in zip(pairs, named_directions) if m}
    labels = None
    if len(probs):
        from models.discriminator import decide

        labels = decide(probs, decision.threshold if decision else None)
    rows: dict[str, list[dict]] = {
        "datasets": [{"dataset": ds, "embed_style": embed_style, "encoder": encoder,
                      "discriminator": discriminator, "built_at": built_at}],
        "parameter_edges": [param_row(e, "manual") for e in toolset.parameter_edges]
        + [param_row(e, "schema") for e in schema_parameter_edges(tools, schema)]
        + [param_row(e, "discriminator", float(min(max(p, 0.0), 1.0))) for e, p in scored_parameters]
        + [param_row(e, "stated", STATED_PROB) for e in stated_parameter_edges(tools, stated)],
        "tools": [{"dataset": ds, "tool_id": t.tool_id, "name": t.doc["name"], "tool_group": t.group,
                   "doc_json": canonical_doc_json(t.doc), "embed_text": text, "returns_nothing": t.returns_nothing}
                  for t, text in zip(tools, embed_texts)],
        "queries": [{"dataset": ds, "query_id": q.query_id, "query_text": q.text,
                     "query_group": q.query_id.split("/")[0] if "/" in q.query_id else None}
                    for q in toolset.queries],
        "query_gold_tools": [{"dataset": ds, "query_id": q.query_id, "tool_id": t}
                             for q in toolset.queries for t in dict.fromkeys(q.gold_tools)],
        "edges": [edge_row(e, 1.0, LABEL_A_DEPENDS_ON_B, "manual") for e in toolset.edges]
        + [edge_row(p.edge, p.prob, p.predicted_class, "discriminator", p_direction=p.p_direction,
                    evidence=reason(p.edge.prerequisite, p.edge.dependent)
                    if frozenset((p.edge.dependent, p.edge.prerequisite)) in named else None)
           for p in predicted_edges]
        + [edge_row(s.edge, 1.0, s.predicted_class, "schema", matched_params=list(s.matched_params)) for s in schema]
        + [edge_row(f.edge, f.prob, f.predicted_class, "fused",
                    matched_params=list(f.matched_params) if f.matched_params is not None else None,
                    fused_from=list(f.fused_from)) for f in fused]
        + [edge_row(c.edge, c.prob, LABEL_A_DEPENDS_ON_B, "call_order") for c in call_order]
        + [edge_row(e, STATED_PROB, LABEL_A_DEPENDS_ON_B, "stated", evidence=sentence)
           for e, sentence in stated_edges(tools, stated)],
        "scored_pairs": [{"dataset": ds, "tool_group": tools[i].group, "tool_a": tools[i].tool_id,
                          "tool_b": tools[j].tool_id, "p_a_depends_on_b": float(p[0]),
                          "p_no_dependency": float(p[1]), "p_b_depends_on_a": float(p[2]),
                          "predicted_class": int(labels[n]), "direction_from_names": bool(named_directions[n])
                          if len(named_directions) else False} for n, ((i, j), p) in enumerate(zip(pairs, probs))],
        "candidate_pruning": [pruning.as_row(ds)] if pruning is not None else [],
        "edge_calibration": [] if decision is None else [{
            "dataset": ds, "discriminator": discriminator, "decision_rule": decision.rule,
            "threshold": decision.threshold, "criterion": decision.criterion,
            "threshold_source": decision.threshold_source, "both_orders": decision.both_orders,
            "min_prob": decision.min_prob,
            "calibration_json": json.dumps(decision.calibration, sort_keys=True) if decision.calibration else None,
            "pairs_scored": len(pairs), "edges_kept": len(predicted_edges)}],
    }
    # the embeddings column-wise, straight from the arrays (no Python float per value): warehouse/build.py
    ids, kinds = [t.tool_id for t in tools], list(tool_embeddings)
    arrow = {
        "tool_embeddings": arrow_columns("tool_embeddings", {
            "dataset": [ds] * (len(ids) * len(kinds)), "tool_id": ids * len(kinds),
            "kind": [kind for kind in kinds for _ in ids],
            "embedding": np.concatenate([np.asarray(tool_embeddings[k], dtype=np.float32) for k in kinds])
            if kinds else np.zeros((0, 0), dtype=np.float32)}),
        "query_embeddings": arrow_columns("query_embeddings", {
            "dataset": [ds] * len(toolset.queries), "query_id": [q.query_id for q in toolset.queries],
            "embedding": np.asarray(query_embeddings, dtype=np.float32).reshape(len(toolset.queries), -1)
            if len(toolset.queries) else np.zeros((0, 0), dtype=np.float32)}),
    }
    return DatasetTables(ds, rows, arrow)
