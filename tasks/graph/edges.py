"""Dependency edges of a tool set: same-group candidate pairs, pruning, discriminator scoring,
the parameter-match (schema) rule as an edge source, and the fused graph.

Scoring every pair is O(N^2), the paper's stated limitation (ToolBench stable: 161,228 unordered
pairs inside categories). Pruning keeps a pair only when it can plausibly carry a dependency;
a strategy is a ``+``-joined union of rules:
  * ``params``: an output of one tool has the normalised name of an input of the other (dependency
    condition 1 of the paper). Outputs come from ``schemas.name_rule.output_names``: declared
    outputs, or the one derived from the tool's name when none is declared (``GetUserToken`` ->
    ``user_token``), so it also works on tool sets that list inputs only;
  * ``text``: an input parameter of one tool is named in the other's name or description
    (``token`` in "GetUserToken"), or a content word of one tool's (name-derived) output occurs
    among the other's parameter names or in its name/description (``SearchMovie`` -> ``movie`` in
    "GetMovieCredit"; words singular, stop words out), or one tool is a gatekeeper (login, auth,
    verify, token in its name: "prior verification"); works on tool sets without any parameters
    (UltraTool, TMDB);
  * ``neighbours``: one tool is among the other's ``m`` nearest tools by embedding (cosine) in its
    group; catches "prior verification" dependencies that share no words;
  * ``none``: every same-group pair.
The default ``params+text+neighbours`` keeps the most gold edges (docs/warehouse.md has the figures).

Each unordered candidate pair {a, b} (a before b in tool-set order) is scored as <a, b>; the
3-class label covers both directions (class 0: a depends on b, class 2: b depends on a).
``both_orders=True`` (default) also scores <b, a> and averages it, label-swapped, with <a, b>
(test-time symmetry: removes the model's position bias, twice the cost).
"""
from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from schemas.docs import canonical_doc_json
from schemas.tdi import ID2LABEL, LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY
from schemas.name_rule import (
    DEFAULT_MAX_PRODUCERS,
    common_output_names,
    common_partial_inputs,
    content_words,
    identifier_tokens,
    input_names,
    name_derived_output,
    output_names,
)
from schemas.toolset import DependencyEdge, Tool, ToolSet
from warehouse.build import DatasetTables

log = logging.getLogger(__name__)

PRUNING_RULES = ("params", "text", "neighbours")
PRUNING_STRATEGIES = ("none", "params", "text", "neighbours", "params+neighbours", "params+text",
                      "text+neighbours", "params+text+neighbours")
DEFAULT_PRUNING = "params+text+neighbours"
RECALL_WARNING = 0.90  # gold-edge recall of pruning below this is logged as a WARNING


# Tool-name words of "prior verification" tools: every tool of their group may need them first.
GATEKEEPER_WORDS = frozenset({"login", "logon", "signin", "auth", "authenticate", "authentication", "authorize",
                              "authorization", "verify", "verification", "token", "credential", "credentials"})

def same_group_pairs(tools: Sequence[Tool]) -> list[tuple[int, int]]:
    """All unordered pairs (i < j) of tools in one group, as indices into ``tools``."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(tools):
        by_group[t.group].append(i)
    return [p for idx in by_group.values() for p in combinations(idx, 2)]


def param_compatible(a: Tool, b: Tool) -> bool:
    """An output of one tool can feed an input of the other (same normalised name); outputs are
    name-derived when a tool declares none (``schemas.name_rule.output_names(derive=True)``)."""
    return bool(output_names(a.doc, derive=True) & input_names(b.doc)) or bool(
        output_names(b.doc, derive=True) & input_names(a.doc))


@dataclass(frozen=True)
class _TextProfile:
    """What the ``text`` rule compares, computed once per tool."""

    inputs: tuple[frozenset[str], ...]  # content words of each input parameter name
    outputs: frozenset[str]  # content words of the declared or name-derived outputs
    param_words: frozenset[str]  # content words of all parameter names
    words: frozenset[str]  # content words of the name and description
    gatekeeper: bool  # a login / authentication / verification tool (prior verification)


def _text_profile(doc: dict[str, Any]) -> _TextProfile:
    inputs = tuple(w for w in (frozenset(content_words(p["name"])) for p in doc.get("input_params") or []) if w)
    declared = [p["name"] for p in doc.get("output_params") or []]
    if not declared:
        derived = name_derived_output(doc.get("name", ""))
        declared = [derived] if derived else []
    outputs = frozenset(w for n in declared for w in content_words(n))
    params = frozenset(w for p in (doc.get("input_params") or []) + (doc.get("output_params") or [])
                       for w in content_words(p["name"]))
    words = frozenset(content_words(doc.get("name", "")) | content_words(doc.get("description", "")))
    gatekeeper = bool(set(identifier_tokens(doc.get("name", ""))) & GATEKEEPER_WORDS)
    return _TextProfile(inputs, outputs, params, words, gatekeeper)


def _text_links(x: _TextProfile, y: _TextProfile) -> bool:
    """One direction of the ``text`` rule: x's input is named by y, y's output words occur in x,
    or y is a gatekeeper (login, auth, verify: the paper's "prior verification" dependency)."""
    if y.gatekeeper:
        return True
    if any(inp <= y.words for inp in x.inputs):
        return True
    return bool(y.outputs & (x.param_words | x.words))


def text_compatible(a: Tool, b: Tool) -> bool:
    """The ``text`` rule on one pair (either direction)."""
    pa_, pb = _text_profile(a.doc), _text_profile(b.doc)
    return _text_links(pa_, pb) or _text_links(pb, pa_)


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

    @property
    def kept_share(self) -> float:
        return len(self.candidates) / self.pairs_in_groups if self.pairs_in_groups else 1.0

    @property
    def known_edge_recall(self) -> float | None:
        """Known (gold) edges kept / known edges inside a group; None when the set has none."""
        return self.known_edges_kept / self.known_edges_in_groups if self.known_edges_in_groups else None

    def as_row(self, dataset: str) -> dict:
        return {"dataset": dataset, "strategy": self.strategy, "pairs_in_groups": self.pairs_in_groups,
                "pairs_kept": len(self.candidates), "known_edges": self.known_edges,
                "known_edges_in_groups": self.known_edges_in_groups,
                "known_edges_kept": self.known_edges_kept, "known_edge_recall": self.known_edge_recall}

    def describe(self) -> str:
        recall = "n/a (no known edges)" if self.known_edge_recall is None else f"{self.known_edge_recall:.3f}"
        return (f"{len(self.candidates)} of {self.pairs_in_groups} same-group pairs kept ({self.kept_share:.3f}, "
                f"{self.strategy}); known edges kept {self.known_edges_kept}/{self.known_edges_in_groups}, "
                f"gold-edge recall {recall}")


def pruning_rules(strategy: str) -> tuple[str, ...]:
    """The rules of a strategy (``params+text`` -> ("params", "text")); ``none`` -> ()."""
    if strategy == "none":
        return ()
    rules = tuple(strategy.split("+"))
    if not rules or any(r not in PRUNING_RULES for r in rules) or len(set(rules)) != len(rules):
        raise ValueError(f"unknown pruning strategy {strategy!r}; known: {', '.join(PRUNING_STRATEGIES)} "
                         f"(or any '+'-union of {', '.join(PRUNING_RULES)})")
    return rules


def prune_candidates(
    tools: Sequence[Tool],
    embeddings: np.ndarray | None = None,
    strategy: str = DEFAULT_PRUNING,
    neighbours: int = 5,
    known_edges: Sequence[DependencyEdge] = (),
) -> PruningResult:
    """Candidate pairs to score, plus how many same-group pairs and known edges survive."""
    rules = pruning_rules(strategy)
    all_pairs = same_group_pairs(tools)
    keep: set[tuple[int, int]] = set(all_pairs) if not rules else set()
    if "params" in rules:
        outs = [output_names(t.doc, derive=True) for t in tools]
        ins = [input_names(t.doc) for t in tools]
        keep |= {(i, j) for i, j in all_pairs if outs[i] & ins[j] or outs[j] & ins[i]}
    if "text" in rules:
        prof = [_text_profile(t.doc) for t in tools]
        keep |= {(i, j) for i, j in all_pairs if (i, j) not in keep
                 and (_text_links(prof[i], prof[j]) or _text_links(prof[j], prof[i]))}
    if "neighbours" in rules:
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


def log_pruning(dataset: str, pruning: PruningResult, logger: Any = log) -> None:
    """One INFO line; a loud WARNING with the numbers when gold-edge recall is below RECALL_WARNING."""
    logger.info(f"{dataset}: {pruning.describe()}")
    recall = pruning.known_edge_recall
    if recall is not None and recall < RECALL_WARNING:
        logger.warning(
            f"PRUNING LOSES GOLD EDGES on {dataset}: recall {recall:.3f} < {RECALL_WARNING} "
            f"({pruning.known_edges_kept} of {pruning.known_edges_in_groups} known same-group edges survive "
            f"'{pruning.strategy}'); {pruning.known_edges_in_groups - pruning.known_edges_kept} can never become "
            "discriminator edges. Try --pruning none or a wider union (params+text+neighbours, more --neighbours)."
        )


# ---------------------------------------------------------------------------------------------
# Schema (parameter-match) edges


@dataclass(frozen=True)
class SchemaEdge:
    edge: DependencyEdge
    predicted_class: int  # the rule's class on <tools[i], tools[j]> (i < j)
    matched_params: tuple[str, ...]  # normalised names through which the prerequisite feeds the dependent


def _per_group(tools: Sequence[Tool], compute: Callable[[list[dict]], frozenset[str]]) -> dict[str, frozenset[str]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for t in tools:
        groups[t.group].append(t.doc)
    return {g: compute(docs) for g, docs in groups.items()}


def group_common_names(tools: Sequence[Tool], max_producers: int | None = DEFAULT_MAX_PRODUCERS) -> dict[str, frozenset[str]]:
    """Per tool group, the output names too common to be evidence (``common_output_names``)."""
    return _per_group(tools, lambda docs: common_output_names(docs, max_producers))


def group_common_partial_inputs(tools: Sequence[Tool], max_producers: int | None = DEFAULT_MAX_PRODUCERS) -> dict[str, frozenset[str]]:
    """Per tool group, the input names too many tools partly match to be evidence (``common_partial_inputs``)."""
    return _per_group(tools, lambda docs: common_partial_inputs(docs, max_producers))


def schema_edges(tools: Sequence[Tool], pairs: Sequence[tuple[int, int]] | None = None,
                 max_producers: int | None = DEFAULT_MAX_PRODUCERS) -> list[SchemaEdge]:
    """``schemas.name_rule.schema_rule_label`` on every same-group pair (or ``pairs``), as edges.

    Per pair: b's outputs feeding a's inputs makes a depend on b (class 0), the reverse class 2; when
    both directions match, the one with more matching names wins, a tie is no edge (same rule as
    ``schema_rule_label``, computed from per-tool name sets so ToolBench's 161k pairs take a second).
    Names that more than ``max_producers`` tools of the group output are no evidence (None: all are).
    """
    common = group_common_names(tools, max_producers)
    outs = [output_names(t.doc, derive=True, ignore=common[t.group]) for t in tools]
    ins = [input_names(t.doc) for t in tools]
    found = []
    for i, j in same_group_pairs(tools) if pairs is None else pairs:
        a_needs_b, b_needs_a = outs[j] & ins[i], outs[i] & ins[j]
        if len(a_needs_b) == len(b_needs_a):
            continue
        if len(a_needs_b) > len(b_needs_a):
            dep, pre, cls, names = i, j, LABEL_A_DEPENDS_ON_B, a_needs_b
        else:
            dep, pre, cls, names = j, i, LABEL_B_DEPENDS_ON_A, b_needs_a
        edge = DependencyEdge(tools[i].group, tools[dep].tool_id, tools[pre].tool_id, "schema")
        found.append(SchemaEdge(edge, cls, tuple(sorted(names))))
    return found


# ---------------------------------------------------------------------------------------------
# Discriminator scoring and calibrated edges


def score_pairs(
    checkpoint: str | Path,
    tools: Sequence[Tool],
    pairs: Sequence[tuple[int, int]],
    batch_size: int = 64,
    max_length: int = 256,
    both_orders: bool = True,
    device: str | None = None,
    progress: bool = True,
    max_producers: int | None = DEFAULT_MAX_PRODUCERS,
) -> np.ndarray:
    """Class probabilities (n_pairs, 3) of <tools[i], tools[j]> from a discriminator checkpoint.

    ``both_orders`` (default): the mean of p(<a,b>) and the label-swapped p(<b,a>), so the result
    does not depend on which tool comes first. ``progress``: a tqdm bar over the pairs (stderr).
    ``max_producers``: output names more common than this in a group give the model no
    parameter-match hint (``models.discriminator.pair_texts``), as for the schema edges, and input
    names that more tools of the group partly match give no partial hint (``common_partial_inputs``).
    """
    from tqdm.auto import tqdm

    from models.discriminator import load_discriminator, predict_proba
    from models.sentence_encoder import pick_device

    model, tokenizer = load_discriminator(checkpoint)
    check_label_order(model.config.id2label, checkpoint)
    model.to(pick_device(device))
    if not pairs:
        return np.zeros((0, 3), dtype=np.float64)
    docs = [canonical_doc_json(t.doc) for t in tools]
    docs_a, docs_b = [docs[i] for i, _ in pairs], [docs[j] for _, j in pairs]
    common = group_common_names(tools, max_producers)
    ignore = [common[tools[i].group] for i, _ in pairs]
    common_inputs = group_common_partial_inputs(tools, max_producers)
    ignore_inputs = [common_inputs[tools[i].group] for i, _ in pairs]
    chunk = max(batch_size * 16, 1)  # predict_proba sorts by length inside a chunk
    out = np.empty((len(pairs), 3), dtype=np.float64)
    with tqdm(total=len(pairs) * (2 if both_orders else 1), desc="scoring pairs", unit="pair",
              disable=not progress, leave=False) as bar:
        for start in range(0, len(pairs), chunk):
            sl = slice(start, start + chunk)
            probs = predict_proba(model, tokenizer, docs_a[sl], docs_b[sl], max_length, batch_size,
                                  ignore=ignore[sl], ignore_inputs=ignore_inputs[sl]).numpy()
            bar.update(len(probs))
            if both_orders:
                swapped = predict_proba(model, tokenizer, docs_b[sl], docs_a[sl], max_length, batch_size,
                                        ignore=ignore[sl], ignore_inputs=ignore_inputs[sl]).numpy()
                probs = (probs.astype(np.float64) + swapped[:, [2, 1, 0]]) / 2.0  # <b,a> class 0 is <a,b> class 2
                bar.update(len(probs))
            out[sl] = probs
    return out


def check_label_order(id2label: dict, checkpoint: str | Path) -> None:
    """Refuse checkpoints whose classes are not the project's (wrong edges otherwise)."""
    got = {int(k): v for k, v in id2label.items()}
    if got != ID2LABEL:
        raise ValueError(f"{checkpoint}: id2label {got} differs from the project's {ID2LABEL}")


@dataclass(frozen=True)
class EdgeDecision:
    """How discriminator probabilities became edges (recorded in the warehouse's ``edge_calibration``)."""

    threshold: float | None  # on p(a->b) + p(b->a); None: argmax
    criterion: str | None  # how the threshold was chosen (calibration.json "criterion", or "--threshold")
    threshold_source: str  # "calibration.json" | "--threshold" | "argmax (no calibration.json)"
    both_orders: bool
    min_prob: float = 0.0
    calibration: dict | None = None  # the whole calibration.json, when one was used

    @property
    def rule(self) -> str:
        return "argmax" if self.threshold is None else "threshold"

    def describe(self) -> str:
        how = "argmax" if self.threshold is None else f"p(a->b)+p(b->a) >= {self.threshold:g} ({self.criterion})"
        return (f"discriminator edges by {how} [{self.threshold_source}], "
                f"{'symmetric (both orders)' if self.both_orders else 'one order'} scoring, min_prob {self.min_prob:g}")


def edge_decision(checkpoint: str | Path, threshold: float | None = None, both_orders: bool = True,
                  min_prob: float = 0.0, logger: Any = log) -> EdgeDecision:
    """The edge rule for ``checkpoint``: ``threshold`` when given (the --threshold flag), else the
    threshold of its calibration.json, else argmax with a WARNING."""
    from models.discriminator import load_calibration

    calibration = load_calibration(checkpoint)
    if threshold is not None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold {threshold} is not a probability in [0, 1]")
        return EdgeDecision(float(threshold), "--threshold", "--threshold", both_orders, min_prob, calibration)
    if calibration is None:
        logger.warning(f"{checkpoint}: no calibration.json beside the checkpoint; discriminator edges fall back to "
                       "argmax (train with a calibration step or pass --threshold)")
        return EdgeDecision(None, None, "argmax (no calibration.json)", both_orders, min_prob, None)
    if "threshold" not in calibration:
        raise ValueError(f"{Path(checkpoint) / 'calibration.json'}: no 'threshold' key (got {sorted(calibration)})")
    stored = calibration.get("both_orders", calibration.get("symmetric"))
    if stored is not None and bool(stored) != both_orders:
        logger.warning(f"{checkpoint}: calibration.json was chosen with both_orders={bool(stored)}, scoring uses "
                       f"both_orders={both_orders}; the threshold may not transfer")
    return EdgeDecision(float(calibration["threshold"]), str(calibration.get("criterion") or "unspecified"),
                        "calibration.json", both_orders, min_prob, calibration)


@dataclass(frozen=True)
class PredictedEdge:
    edge: DependencyEdge
    prob: float  # p(a->b) + p(b->a): the probability of *some* dependency, given to the chosen direction
    predicted_class: int  # 0 or 2 on the scored pair <tools[i], tools[j]>
    p_direction: float  # p of the chosen direction's class alone

    def __iter__(self):  # (edge, prob, class) unpacking, as before
        return iter((self.edge, self.prob, self.predicted_class))


def edges_from_probabilities(
    tools: Sequence[Tool],
    pairs: Sequence[tuple[int, int]],
    probs: np.ndarray,
    min_prob: float = 0.0,
    threshold: float | None = None,
) -> list[PredictedEdge]:
    """Discriminator edges by ``models.discriminator.decide(probs, threshold)``.

    threshold None: the argmax class must be 0 or 2; else p0 + p2 >= threshold, direction the larger
    of p0 and p2. Class 0 on <a, b>: a depends on b; class 2: b depends on a. The edge's ``prob`` is
    p0 + p2 (so every kept edge has prob >= threshold); ``min_prob`` is a further cut on it.
    """
    from models.discriminator import decide

    probs = np.asarray(probs, dtype=np.float64).reshape(-1, 3)
    labels = decide(probs, threshold) if len(probs) else np.zeros(0, dtype=int)
    out = []
    for (i, j), p, cls in zip(pairs, probs, labels):
        cls = int(cls)
        p_dep = float(p[LABEL_A_DEPENDS_ON_B] + p[LABEL_B_DEPENDS_ON_A])
        if cls == LABEL_NO_DEPENDENCY or p_dep < min_prob:
            continue
        assert cls in (LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A)
        dependent, prerequisite = (tools[i], tools[j]) if cls == LABEL_A_DEPENDS_ON_B else (tools[j], tools[i])
        edge = DependencyEdge(tools[i].group, dependent.tool_id, prerequisite.tool_id, "discriminator")
        out.append(PredictedEdge(edge, min(p_dep, 1.0), cls, float(p[cls])))
    return out


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
    p0 + p2). ``fused_from`` says which sources found it.
    """
    by_pair: dict[frozenset[str], FusedEdge] = {}
    for s in schema:
        key = frozenset((s.edge.dependent, s.edge.prerequisite))
        by_pair[key] = FusedEdge(DependencyEdge(s.edge.group, s.edge.dependent, s.edge.prerequisite, "fused"), 1.0,
                                 s.predicted_class, s.matched_params, ("schema",))
    for d in predicted:
        key = frozenset((d.edge.dependent, d.edge.prerequisite))
        if key in by_pair:
            f = by_pair[key]
            by_pair[key] = FusedEdge(f.edge, 1.0, f.predicted_class, f.matched_params, ("discriminator", "schema"))
        else:
            by_pair[key] = FusedEdge(DependencyEdge(d.edge.group, d.edge.dependent, d.edge.prerequisite, "fused"),
                                     d.prob, d.predicted_class, None, ("discriminator",))
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
) -> DatasetTables:
    """All warehouse rows of one tool set (the columns: warehouse/tables.py)."""
    import json

    ds, tools = toolset.name, toolset.tools

    def edge_row(e: DependencyEdge, prob: float, cls: int, source: str, **extra: Any) -> dict:
        return {"dataset": ds, "tool_group": e.group, "dependent": e.dependent, "prerequisite": e.prerequisite,
                "prob": prob, "predicted_class": cls, "source": source, "p_direction": None, "matched_params": None,
                "fused_from": None} | extra

    labels = None
    if len(probs):
        from models.discriminator import decide

        labels = decide(probs, decision.threshold if decision else None)
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
        "edges": [edge_row(e, 1.0, LABEL_A_DEPENDS_ON_B, "manual") for e in toolset.edges]
        + [edge_row(p.edge, p.prob, p.predicted_class, "discriminator", p_direction=p.p_direction)
           for p in predicted_edges]
        + [edge_row(s.edge, 1.0, s.predicted_class, "schema", matched_params=list(s.matched_params)) for s in schema]
        + [edge_row(f.edge, f.prob, f.predicted_class, "fused",
                    matched_params=list(f.matched_params) if f.matched_params is not None else None,
                    fused_from=list(f.fused_from)) for f in fused],
        "scored_pairs": [{"dataset": ds, "tool_group": tools[i].group, "tool_a": tools[i].tool_id,
                          "tool_b": tools[j].tool_id, "p_a_depends_on_b": float(p[0]),
                          "p_no_dependency": float(p[1]), "p_b_depends_on_a": float(p[2]),
                          "predicted_class": int(labels[n])} for n, ((i, j), p) in enumerate(zip(pairs, probs))],
        "candidate_pruning": [pruning.as_row(ds)] if pruning is not None else [],
        "edge_calibration": [] if decision is None else [{
            "dataset": ds, "discriminator": discriminator, "decision_rule": decision.rule,
            "threshold": decision.threshold, "criterion": decision.criterion,
            "threshold_source": decision.threshold_source, "both_orders": decision.both_orders,
            "min_prob": decision.min_prob,
            "calibration_json": json.dumps(decision.calibration, sort_keys=True) if decision.calibration else None,
            "pairs_scored": len(pairs), "edges_kept": len(predicted_edges)}],
        "tool_embeddings": [{"dataset": ds, "tool_id": t.tool_id, "kind": kind, "embedding": emb[n].tolist()}
                            for kind, emb in tool_embeddings.items() for n, t in enumerate(tools)],
        "query_embeddings": [{"dataset": ds, "query_id": q.query_id, "embedding": query_embeddings[n].tolist()}
                             for n, q in enumerate(toolset.queries)],
    }
    return DatasetTables(ds, rows)
