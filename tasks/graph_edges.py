"""Dependency edges of a tool set: same-group candidate pairs, pruning, discriminator scoring.

Scoring every pair is O(N^2), the paper's stated limitation (ToolBench stable: 161,228 unordered
pairs inside categories). Pruning keeps a pair only when it can plausibly carry a dependency:
  * ``params``: an output parameter of one tool has the same normalised name as an input
    parameter of the other (dependency condition 1 of the paper: an input comes from an output);
  * ``neighbours``: one tool is among the other's ``m`` nearest tools by embedding (cosine) in
    its group; catches "prior verification" dependencies that share no parameter names;
  * ``params+neighbours`` (default): the union; ``none``: every same-group pair.

Each unordered candidate pair {a, b} (a before b in tool-set order) is scored once as <a, b>:
the 3-class label already covers both directions (class 0: a depends on b, class 2: b depends
on a). ``both_orders=True`` also scores <b, a> and averages it, label-swapped, with <a, b>
(twice the cost, removes the model's position bias).
"""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import combinations
from pathlib import Path

import numpy as np

from schemas.docs import canonical_doc_json
from schemas.tdi import ID2LABEL, LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY
from schemas.toolset import DependencyEdge, Tool, ToolSet
from warehouse.build import DatasetTables

PRUNING_STRATEGIES = ("none", "params", "neighbours", "params+neighbours")

# Output names that say how a call went, not what it produced: matching on them links everything.
GENERIC_OUTPUT_NAMES = frozenset(
    {"status", "message", "msg", "success", "error", "errors", "code", "result", "results", "data",
     "response", "ok", "detail", "details", "info", "meta", "type", "count", "total"}
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def normalise_param_name(name: str) -> str:
    """``userId``, ``user_id``, ``User-ID`` -> ``userid``."""
    return re.sub(r"[^a-z0-9]", "", _CAMEL.sub("_", name).lower())


def _names(params: Sequence[dict]) -> set[str]:
    return {n for n in (normalise_param_name(p["name"]) for p in params) if n}


def same_group_pairs(tools: Sequence[Tool]) -> list[tuple[int, int]]:
    """All unordered pairs (i < j) of tools in one group, as indices into ``tools``."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(tools):
        by_group[t.group].append(i)
    return [p for idx in by_group.values() for p in combinations(idx, 2)]


def param_compatible(a: Tool, b: Tool) -> bool:
    """An output of one tool can feed an input of the other (same normalised name)."""
    out_a = _names(a.doc["output_params"]) - GENERIC_OUTPUT_NAMES
    out_b = _names(b.doc["output_params"]) - GENERIC_OUTPUT_NAMES
    return bool(out_a & _names(b.doc["input_params"])) or bool(out_b & _names(a.doc["input_params"]))


def embedding_neighbour_pairs(
    tools: Sequence[Tool], embeddings: np.ndarray, m: int
) -> set[tuple[int, int]]:
    """Unordered pairs where one tool is among the other's m most cosine-similar tools in its group."""
    x = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(tools):
        by_group[t.group].append(i)
    pairs: set[tuple[int, int]] = set()
    for idx in by_group.values():
        if len(idx) < 2:
            continue
        idx_arr = np.array(idx)
        sims = x[idx_arr] @ x[idx_arr].T
        np.fill_diagonal(sims, -np.inf)
        near = np.argsort(-sims, axis=1, kind="stable")[:, : min(m, len(idx) - 1)]
        for row, cols in enumerate(near):
            for col in cols:
                i, j = int(idx_arr[row]), int(idx_arr[col])
                pairs.add((min(i, j), max(i, j)))
    return pairs


@dataclass(frozen=True)
class PruningResult:
    strategy: str
    candidates: list[tuple[int, int]]  # sorted unordered index pairs (i < j)
    pairs_in_groups: int
    known_edges: int
    known_edges_in_groups: int
    known_edges_kept: int

    @property
    def pairs_removed(self) -> int:
        return self.pairs_in_groups - len(self.candidates)

    def as_row(self, dataset: str) -> dict:
        return {"dataset": dataset, "strategy": self.strategy, "pairs_in_groups": self.pairs_in_groups,
                "pairs_kept": len(self.candidates), "known_edges": self.known_edges,
                "known_edges_in_groups": self.known_edges_in_groups,
                "known_edges_kept": self.known_edges_kept}


def prune_candidates(
    tools: Sequence[Tool],
    embeddings: np.ndarray | None = None,
    strategy: str = "params+neighbours",
    neighbours: int = 10,
    known_edges: Sequence[DependencyEdge] = (),
) -> PruningResult:
    """Candidate pairs to score, plus how many same-group pairs and known edges survive."""
    if strategy not in PRUNING_STRATEGIES:
        raise ValueError(f"unknown pruning strategy {strategy!r}; known: {', '.join(PRUNING_STRATEGIES)}")
    all_pairs = same_group_pairs(tools)
    keep: set[tuple[int, int]] = set()
    if strategy == "none":
        keep = set(all_pairs)
    if "params" in strategy:
        keep |= {(i, j) for i, j in all_pairs if param_compatible(tools[i], tools[j])}
    if "neighbours" in strategy:
        if embeddings is None:
            raise ValueError(f"pruning strategy {strategy!r} needs tool embeddings")
        keep |= embedding_neighbour_pairs(tools, embeddings, neighbours)
    index = {t.tool_id: i for i, t in enumerate(tools)}
    in_groups = kept = 0
    for e in known_edges:
        i, j = index.get(e.dependent), index.get(e.prerequisite)
        if i is None or j is None or tools[i].group != tools[j].group:
            continue
        in_groups += 1
        kept += (min(i, j), max(i, j)) in keep
    return PruningResult(strategy, sorted(keep), len(all_pairs), len(known_edges), in_groups, kept)


def score_pairs(
    checkpoint: str | Path,
    tools: Sequence[Tool],
    pairs: Sequence[tuple[int, int]],
    batch_size: int = 64,
    max_length: int = 256,
    both_orders: bool = False,
    device: str | None = None,
) -> np.ndarray:
    """Class probabilities (n_pairs, 3) of <tools[i], tools[j]> from a discriminator checkpoint."""
    from models.discriminator import load_discriminator, predict_proba
    from models.sentence_encoder import pick_device

    model, tokenizer = load_discriminator(checkpoint)
    check_label_order(model.config.id2label, checkpoint)
    model.to(pick_device(device))
    if not pairs:
        return np.zeros((0, 3), dtype=np.float64)
    docs = [canonical_doc_json(t.doc) for t in tools]
    docs_a, docs_b = [docs[i] for i, _ in pairs], [docs[j] for _, j in pairs]
    probs = predict_proba(model, tokenizer, docs_a, docs_b, max_length, batch_size).numpy().astype(np.float64)
    if both_orders:
        swapped = predict_proba(model, tokenizer, docs_b, docs_a, max_length, batch_size).numpy()
        probs = (probs + swapped[:, [2, 1, 0]]) / 2.0  # <b,a> class 0 is <a,b> class 2
    return probs


def check_label_order(id2label: dict, checkpoint: str | Path) -> None:
    """Refuse checkpoints whose classes are not the project's (wrong edges otherwise)."""
    got = {int(k): v for k, v in id2label.items()}
    if got != ID2LABEL:
        raise ValueError(f"{checkpoint}: id2label {got} differs from the project's {ID2LABEL}")


def edges_from_probabilities(
    tools: Sequence[Tool],
    pairs: Sequence[tuple[int, int]],
    probs: np.ndarray,
    min_prob: float = 0.0,
) -> list[tuple[DependencyEdge, float, int]]:
    """(edge, probability, predicted class) for every pair whose argmax is a dependency class
    with probability >= min_prob. Class 0 on <a, b>: a depends on b; class 2: b depends on a."""
    out = []
    for (i, j), p in zip(pairs, probs):
        cls = int(np.argmax(p))
        if cls == LABEL_NO_DEPENDENCY or p[cls] < min_prob:
            continue
        dependent, prerequisite = (tools[i], tools[j]) if cls == LABEL_A_DEPENDS_ON_B else (tools[j], tools[i])
        assert cls in (LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A)
        edge = DependencyEdge(tools[i].group, dependent.tool_id, prerequisite.tool_id, "discriminator")
        out.append((edge, float(p[cls]), cls))
    return out


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
    predicted_edges: Sequence[tuple[DependencyEdge, float, int]],
    built_at: datetime,
) -> DatasetTables:
    """All warehouse rows of one tool set (see warehouse/sql/020_core.sql for the columns)."""
    ds, tools = toolset.name, toolset.tools
    rows: dict[str, list[dict]] = {
        "datasets": [{"dataset": ds, "embed_style": embed_style, "encoder": encoder,
                      "discriminator": discriminator, "built_at": built_at}],
        "tools": [{"dataset": ds, "tool_id": t.tool_id, "name": t.doc["name"], "tool_group": t.group,
                   "doc_json": canonical_doc_json(t.doc), "embed_text": text}
                  for t, text in zip(tools, embed_texts)],
        "queries": [{"dataset": ds, "query_id": q.query_id, "query_text": q.text,
                     "query_group": q.query_id.split("/")[0] if "/" in q.query_id else None}
                    for q in toolset.queries],
        "query_gold_tools": [{"dataset": ds, "query_id": q.query_id, "tool_id": t}
                             for q in toolset.queries for t in dict.fromkeys(q.gold_tools)],
        "edges": [{"dataset": ds, "tool_group": e.group, "dependent": e.dependent, "prerequisite": e.prerequisite,
                   "prob": 1.0, "predicted_class": LABEL_A_DEPENDS_ON_B, "source": "manual"}
                  for e in toolset.edges]
        + [{"dataset": ds, "tool_group": e.group, "dependent": e.dependent, "prerequisite": e.prerequisite,
            "prob": p, "predicted_class": cls, "source": "discriminator"} for e, p, cls in predicted_edges],
        "scored_pairs": [{"dataset": ds, "tool_group": tools[i].group, "tool_a": tools[i].tool_id,
                          "tool_b": tools[j].tool_id, "p_a_depends_on_b": float(p[0]),
                          "p_no_dependency": float(p[1]), "p_b_depends_on_a": float(p[2]),
                          "predicted_class": int(np.argmax(p))} for (i, j), p in zip(pairs, probs)],
        "candidate_pruning": [pruning.as_row(ds)] if pruning is not None else [],
        "tool_embeddings": [{"dataset": ds, "tool_id": t.tool_id, "kind": kind, "embedding": emb[n].tolist()}
                            for kind, emb in tool_embeddings.items() for n, t in enumerate(tools)],
        "query_embeddings": [{"dataset": ds, "query_id": q.query_id, "embedding": query_embeddings[n].tolist()}
                             for n, q in enumerate(toolset.queries)],
    }
    return DatasetTables(ds, rows)
