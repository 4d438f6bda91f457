"""Discriminator scoring of candidate pairs and the calibrated rule that turns its probabilities into edges.

Each unordered candidate pair {a, b} (a before b in tool-set order) is scored as <a, b>; the
3-class label covers both directions (class 0: a depends on b, class 2: b depends on a).
``both_orders=True`` (default) also scores <b, a> and averages it, label-swapped, with <a, b>
(test-time symmetry: removes the model's position bias, twice the cost).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from schemas.docs import canonical_doc_json
from schemas.name_rule import DEFAULT_MAX_PRODUCERS
from schemas.tdi import ID2LABEL, KIND_HEAD_ID2LABEL, LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY
from schemas.toolset import DependencyEdge, Tool
from tasks.common.progress import EVERY_S, CountProgress, PrefectProgressArtifact, run_say, ticking
from tasks.graph.kinds import dependency_kind
from tasks.graph.schema_rule import group_common_names, group_common_partial_inputs

log = logging.getLogger(__name__)


# models.discriminator.SCORING_PRECISIONS and build-graph's default "auto" (``resolved_precision``), named here so
# that the build-graph config needs no torch import
SCORING_PRECISIONS = ("auto", "fp32", "bf16", "int8", "onnx")
# where build-graph scores candidate pairs: this process, or shards on a Dask / Ray cluster (tasks/common/clusters.py)
SCORING_RUNNERS = ("local", "dask", "ray")


def resolved_precision(precision: str, device: str | None) -> str:
    """``auto``: onnx (the fp32 arithmetic in ONNX Runtime) where the pairs are scored on the CPU, fp32 (torch) on a
    GPU; any other value as it is."""
    if precision != "auto":
        return precision
    from models.sentence_encoder import pick_device

    return "onnx" if pick_device(device).type == "cpu" else "fp32"


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
    precision: str = "fp32",
    progress_every_s: float = EVERY_S,
    with_kind: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray | None]:
    """Class probabilities (n_pairs, 3) of <tools[i], tools[j]> from a discriminator checkpoint.
    ``with_kind``: (probabilities, the kind head's p(precondition) per pair, averaged over both orders; None
    for a checkpoint without the head).

    ``both_orders`` (default): the mean of p(<a,b>) and the label-swapped p(<b,a>), so the result
    does not depend on which tool comes first. ``progress``: a tqdm bar over the pairs (stderr). Whatever
    ``progress`` says, a scoring that runs ``progress_every_s`` seconds or longer logs a line that often
    (pairs scored of all, rate, time left; the Prefect run's logger inside a run, else this module's) and
    feeds a Prefect progress artifact inside a run: a log or the UI has no bar.
    ``max_producers``: output names more common than this in a group give the model no
    parameter-match hint (``models.discriminator.pair_texts``), as for the schema edges, and input
    names that more tools of the group partly match give no partial hint (``common_partial_inputs``).
    ``precision``: "fp32" (the reference), "onnx" (the same arithmetic in ONNX Runtime on the CPU, probabilities
    within about 1e-6), "auto" (onnx on the CPU, fp32 on a GPU), or the opt-in "bf16" / "int8"
    (``models.discriminator.scoring_model``: faster on CPU, probabilities within about 1e-2 of fp32, so a pair near
    the threshold may flip; bench/bench_scoring.py measures speed and agreement).
    """
    from tqdm.auto import tqdm

    from models.discriminator import has_kind_head, load_discriminator, predict_proba, scoring_model
    from models.sentence_encoder import pick_device

    model, tokenizer = load_discriminator(checkpoint)
    check_label_order(model.config.id2label, checkpoint)
    model.to(pick_device(device))
    kind = np.empty(len(pairs), dtype=np.float64) if has_kind_head(model) else None
    if not pairs:
        return (np.zeros((0, 3), dtype=np.float64), kind) if with_kind else np.zeros((0, 3), dtype=np.float64)
    asked, precision = precision, resolved_precision(precision, device)
    try:
        model = scoring_model(model, precision)  # int8: quantized once here, not per chunk; onnx: exported once
    except Exception as err:  # noqa: BLE001  (auto's engine could not take this model: torch's fp32 is the same)
        if asked != "auto":
            raise
        log.warning(f"scoring in torch fp32: this checkpoint could not be run by ONNX Runtime ({err})")
        precision = "fp32"
    docs = [canonical_doc_json(t.doc) for t in tools]
    docs_a, docs_b = [docs[i] for i, _ in pairs], [docs[j] for _, j in pairs]
    common = group_common_names(tools, max_producers)
    ignore = [common[tools[i].group] for i, _ in pairs]
    common_inputs = group_common_partial_inputs(tools, max_producers)
    ignore_inputs = [common_inputs[tools[i].group] for i, _ in pairs]
    chunk = max(batch_size * 16, 1)  # predict_proba sorts by length inside a chunk
    out = np.empty((len(pairs), 3), dtype=np.float64)
    lines = CountProgress(len(pairs), "scoring pairs" + (" (both orders)" if both_orders else ""), "pairs",
                          say=run_say(log), sinks=(PrefectProgressArtifact(""),), every_s=progress_every_s)
    # a timer for the lines: a chunk of pairs can take longer than a line's period on a CPU
    with tqdm(total=len(pairs) * (2 if both_orders else 1), desc="scoring pairs", unit="pair",
              disable=not progress, leave=False) as bar, ticking(lines, last_line="if_long"):
        for start in range(0, len(pairs), chunk):
            sl = slice(start, start + chunk)
            ab = predict_proba(model, tokenizer, docs_a[sl], docs_b[sl], max_length, batch_size,
                               ignore=ignore[sl], ignore_inputs=ignore_inputs[sl], precision=precision, with_kind=True)
            probs = ab.probs.numpy()
            p_pre = None if ab.p_precondition is None else ab.p_precondition.numpy().astype(np.float64)
            bar.update(len(probs))
            if both_orders:
                ba = predict_proba(model, tokenizer, docs_b[sl], docs_a[sl], max_length, batch_size,
                                   ignore=ignore[sl], ignore_inputs=ignore_inputs[sl], precision=precision,
                                   with_kind=True)
                # <b,a> class 0 is <a,b> class 2; the kind of a dependency does not depend on the order
                probs = (probs.astype(np.float64) + ba.probs.numpy()[:, [2, 1, 0]]) / 2.0
                p_pre = None if p_pre is None else (p_pre + ba.p_precondition.numpy()) / 2.0
                bar.update(len(probs))
            out[sl] = probs
            if kind is not None:
                kind[sl] = p_pre
            lines.advance(len(probs))
    return (out, kind) if with_kind else out


def check_label_order(id2label: dict, checkpoint: str | Path) -> None:
    """Refuse checkpoints whose classes are not the project's (wrong edges otherwise): the three classes, or
    the kind head's five (``schemas.tdi.KIND_HEAD_ID2LABEL``)."""
    got = {int(k): v for k, v in id2label.items()}
    if got not in (ID2LABEL, KIND_HEAD_ID2LABEL):
        raise ValueError(f"{checkpoint}: id2label {got} differs from the project's {ID2LABEL} "
                         f"(or, with the kind head, {KIND_HEAD_ID2LABEL})")


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
    def kind_threshold(self) -> float:
        """The cut on the kind head's p(precondition): calibration.json's ``kind_threshold``, else 0.5."""
        return float((self.calibration or {}).get("kind_threshold", 0.5))

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


# build-graph --max-prerequisites: the edges past a tool's third most probable prerequisite were right 3% of the time
# where the cut over-connected (TMDB held out of finetuning) and 5% on NesTools (bench/RESULTS.md)
DEFAULT_MAX_PREREQUISITES = 3


def cap_prerequisites(predicted: Sequence[PredictedEdge], k: int | None) -> list[PredictedEdge]:
    """The ``k`` most probable prerequisites of each dependent (by ``prob``; ties by the prerequisite's id), the
    rest dropped; ``k`` None keeps every edge. Real tools need few tools first (the gold graphs here give NesTools'
    consumers 1 to 3, API-Bank's 1, 77% and 82% of UltraTool's and TMDB's at most 3), while a cut that does not
    transfer to a catalog calls a third of its pairs dependent (bench/RESULTS.md, "TMDB held out of finetuning")."""
    if k is None:
        return list(predicted)
    if k < 1:
        raise ValueError(f"max prerequisites {k}: must be at least 1")
    by_dependent: dict[str, list[PredictedEdge]] = {}
    for p in predicted:
        by_dependent.setdefault(p.edge.dependent, []).append(p)
    kept = {id(p) for edges in by_dependent.values()
            for p in sorted(edges, key=lambda e: (-e.prob, e.edge.prerequisite))[:k]}
    return [p for p in predicted if id(p) in kept]


def edges_from_probabilities(
    tools: Sequence[Tool],
    pairs: Sequence[tuple[int, int]],
    probs: np.ndarray,
    min_prob: float = 0.0,
    threshold: float | None = None,
    p_precondition: np.ndarray | None = None,
    kind_threshold: float = 0.5,
) -> list[PredictedEdge]:
    """Discriminator edges by ``models.discriminator.decide(probs, threshold)``.

    threshold None: the argmax class must be 0 or 2; else p0 + p2 >= threshold, direction the larger
    of p0 and p2. Class 0 on <a, b>: a depends on b; class 2: b depends on a. The edge's ``prob`` is
    p0 + p2 (so every kept edge has prob >= threshold); ``min_prob`` is a further cut on it. The pair
    score names no parameter, so the edge's kind is the kind head's verdict where the checkpoint has one
    (``p_precondition`` per pair: "precondition" at ``kind_threshold`` or above, else "data"), else not known
    (``tasks.graph.kinds.dependency_kind``).
    """
    from models.discriminator import decide

    probs = np.asarray(probs, dtype=np.float64).reshape(-1, 3)
    labels = decide(probs, threshold) if len(probs) else np.zeros(0, dtype=int)
    out = []
    for n, ((i, j), p, cls) in enumerate(zip(pairs, probs, labels)):
        cls = int(cls)
        p_dep = float(p[LABEL_A_DEPENDS_ON_B] + p[LABEL_B_DEPENDS_ON_A])
        if cls == LABEL_NO_DEPENDENCY or p_dep < min_prob:
            continue
        assert cls in (LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A)
        dependent, prerequisite = (tools[i], tools[j]) if cls == LABEL_A_DEPENDS_ON_B else (tools[j], tools[i])
        precondition = None if p_precondition is None else bool(p_precondition[n] >= kind_threshold)
        edge = DependencyEdge(tools[i].group, dependent.tool_id, prerequisite.tool_id, "discriminator",
                              dependency_kind(through_parameter=False, precondition=precondition))
        out.append(PredictedEdge(edge, min(p_dep, 1.0), cls, float(p[cls])))
    return out
