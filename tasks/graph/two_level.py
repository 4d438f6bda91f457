"""Two levels of one discriminator checkpoint (train-discriminator's default): a tool pair whose consumer declares
inputs is scored input by input by the checkpoint's parameter scorer (``parameter_scorer/``, a dependency
retriever with its parameter head), the rest by the tool-level cross-encoder. Light on purpose (numpy only):
build-graph's config finds the parameter scorer here before any model is loaded.

With ``preconditions`` ("checks" or "all") the cross-encoder also speaks between two tools that declare inputs:
where no input takes a value from the other tool (the parameter level found no edge, and no name rule sees a
value pass), its edge is a precondition, the producer called first with no value passed; with "checks" only
where the producer is a check that may gate the consumer (``tasks.graph.checks``: TGR's "prior verification").
With "off" such a pair is never a precondition edge."""
from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from schemas.tdi import LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A
from schemas.toolset import Tool
from tasks.graph.checks import PreconditionScope, may_gate, precondition_open, roles
from tasks.training.param_head import HEAD_FILE

if TYPE_CHECKING:
    from tasks.graph.param_scoring import ParamScore

PARAMETER_SCORER_DIR = "parameter_scorer"  # inside a discriminator checkpoint: a train-retriever best/ folder
TWO_LEVEL_CUT = 0.5  # two_level_probs puts both scorers' own cuts here


def parameter_scorer_of(discriminator: str | Path | None) -> Path | None:
    """The parameter scorer a discriminator checkpoint carries (``<checkpoint>/parameter_scorer``: a dependency
    retriever with its parameter head, trained by train-discriminator), or None."""
    if discriminator is None:
        return None
    folder = Path(discriminator) / PARAMETER_SCORER_DIR
    return folder if (folder / HEAD_FILE).is_file() else None


def declares_inputs(tools: Sequence[Tool]) -> list[bool]:
    """Per tool, whether it declares inputs: a consumer that does is decided by the parameter level, one that
    does not by the tool-level cross-encoder."""
    return [bool(t.doc.get("input_params")) for t in tools]


def cross_encoder_pairs(tools: Sequence[Tool], pairs: Sequence[tuple[int, int]],
                        preconditions: PreconditionScope = "off",
                        gated: Collection[tuple[int, int]] | None = None) -> list[tuple[int, int]]:
    """The candidate pairs the tool-level cross-encoder can still decide when the parameter level scores the rest:
    those with a tool that declares no inputs; with ``preconditions`` "all" every pair, with "checks" also those
    where one tool may gate the other (``checks.may_gate``: between two tools that declare inputs it can still add
    a precondition), of them only those in ``gated`` when given (``checks.check_pairs``' (i < j), each check's
    nearest tools: a large group's candidates hold checks times tools such pairs). With "off", between two such
    tools each direction is decided input by input, so their cross-encoder scores would never be read
    (``param_tool_edges``, ``two_level_probs``)."""
    if preconditions == "all":
        return list(pairs)
    has_inputs = declares_inputs(tools)
    said = roles(tools) if preconditions == "checks" else []

    def open_to_check(i: int, j: int) -> bool:
        if gated is not None:
            return (min(i, j), max(i, j)) in gated
        return may_gate(said[i], said[j]) or may_gate(said[j], said[i])

    return [(i, j) for i, j in pairs if not (has_inputs[i] and has_inputs[j]) or (said and open_to_check(i, j))]


def rescale(p: float, cut: float) -> float:
    """``p`` mapped monotonically onto [0, 1] with ``cut`` at 0.5, so that scores with different cuts compare."""
    cut = min(max(cut, 1e-6), 1 - 1e-6)
    return 0.5 * p / cut if p < cut else 0.5 + 0.5 * (p - cut) / (1 - cut)


def two_level_probs(tools: Sequence[Tool], ordered: Sequence[tuple[int, int]], cross_probs: np.ndarray,
                    cross_cut: float | None, scores: Sequence[ParamScore], param_cut: float,
                    preconditions: PreconditionScope = "off",
                    gated: Collection[tuple[int, int]] | None = None) -> np.ndarray:
    """Class probabilities (n, 3) of the ordered pairs (a, b) (class 0: a depends on b) that decide at 0.5
    (``models.discriminator.decide(probs, 0.5)``) exactly as build-graph's two-level edges do
    (``param_tool_edges``): an edge through the consumer's best input when a direction's parameter score
    reaches ``param_cut``, the higher of the two; otherwise the cross-encoder's edge (``cross_probs``: its
    dependency mass p0 + p2 at ``cross_cut``, 0.5 without one) where its consumer declares no inputs, and with
    ``preconditions`` also where it does but no name rule sees a value pass (a precondition; with "checks" only
    where the producer is a check that may gate the consumer and, given ``gated``, the pair is one build-graph
    scores: ``precondition_open``). Below the cuts, the
    pair's dependency mass is the best of those scores, each rescaled to put its own cut at 0.5 (a ranking for
    precision-recall curves)."""
    from tasks.graph.param_scoring import cross_encoder_alone  # here: this module stays light (numpy only)
    from tasks.graph.schema_rule import value_pairs

    best: dict[tuple[int, int], float] = {}
    for s in scores:
        best[(s.producer, s.consumer)] = max(s.prob, best.get((s.producer, s.consumer), 0.0))
    has_inputs = declares_inputs(tools)
    valued = value_pairs(tools, sorted({(min(p), max(p)) for p in ordered})) if preconditions != "off" else set()
    said = roles(tools) if preconditions == "checks" else []
    cross_probs = np.asarray(cross_probs, dtype=np.float64).reshape(-1, 3)
    out = np.zeros((len(ordered), 3))
    for k, (a, b) in enumerate(ordered):
        p0, p2 = cross_probs[k, LABEL_A_DEPENDS_ON_B], cross_probs[k, LABEL_B_DEPENDS_ON_A]
        cross_class = LABEL_A_DEPENDS_ON_B if p0 >= p2 else LABEL_B_DEPENDS_ON_A
        cross_consumer = a if cross_class == LABEL_A_DEPENDS_ON_B else b
        cross_mass = rescale(p0 + p2, 0.5 if cross_cut is None else cross_cut)
        param = [(rescale(best[(b, a)], param_cut), LABEL_A_DEPENDS_ON_B)] if (b, a) in best else []
        param += [(rescale(best[(a, b)], param_cut), LABEL_B_DEPENDS_ON_A)] if (a, b) in best else []
        kept = [o for o in param if o[0] >= 0.5]
        # the cross-encoder decides a consumer without inputs (unless its producer returns nothing); with
        # preconditions, one with inputs too where no value passes by name (the parameter level found none either)
        cross_open = cross_encoder_alone(tools, has_inputs, a + b - cross_consumer, cross_consumer) or (
            frozenset((a, b)) not in valued and precondition_open(preconditions, said, a + b - cross_consumer,
                                                                  cross_consumer, gated))
        if kept:
            mass, cls = max(kept)
        elif cross_mass >= 0.5 and cross_open:
            mass, cls = cross_mass, cross_class
        else:  # no edge: the best score below the cuts, for ranking
            options = param + ([(cross_mass, cross_class)] if cross_open else [])
            mass, cls = max(options) if options else (0.0, LABEL_A_DEPENDS_ON_B)
            mass = min(mass, 0.5 - 1e-9)
        out[k, cls] = mass
        out[k, 1] = 1.0 - mass
    return out
