"""Parameter-level scoring of candidate pairs: each consumer input against each producer, the kept
parameter edges, and the tool edge as the max over the consumer's inputs (tool-level fallback without inputs)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from schemas.tdi import LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A
from schemas.toolset import DependencyEdge, ParameterEdge, Tool
from tasks.graph.checks import PreconditionScope, precondition_open, roles
from tasks.graph.kinds import dependency_kind
from tasks.graph.scoring import PredictedEdge
from tasks.graph.schema_rule import value_pairs
from tasks.training.param_examples import ParamExample, parameter_units
from tasks.training.param_head import HEAD_FILE, ParamHead, unit_features
from tasks.training.param_reranker import RERANKER_DIR, STACK_FEATURES, ParamReranker
from tasks.training.retriever import RETRIEVER_FILE


@dataclass(frozen=True)
class ParamScore:
    producer: int  # index into the tool list
    consumer: int
    param: str  # the consumer's input
    prob: float  # p(param takes the producer's output)


@dataclass(frozen=True)
class ParamToolEdge:
    predicted: PredictedEdge  # the tool edge (source 'discriminator')
    best_param: str | None  # the consumer input with the highest p; None: the tool-level fallback decided


def score_parameters(checkpoint: str | Path, tools: Sequence[Tool], pairs: Sequence[tuple[int, int]],
                     batch_size: int = 128, max_length: int | None = None, device: str | None = None,
                     encode: Callable[[list[str]], np.ndarray] | None = None) -> list[ParamScore]:
    """p(takes) of every (producer, consumer input) over both orders of the candidate ``pairs``: by the
    cross-encoder of ``checkpoint``, or, where the folder is a dependency retriever with a parameter head
    (``param_head.json``, train-retriever), by that head over the retriever's encodings (each tool and
    input encoded once); where the retriever also holds a parameter reranker (``param_reranker/``,
    train-retriever --reranker), by the reranker over the candidate units only (each input's top-k producers,
    or a name-rule match: the others are not scored, so they make no edge).

    A producer that returns nothing (``Tool.returns_nothing``) feeds no input: its units are not scored.

    ``encode``: the retriever's own encodings of texts, from elsewhere (build-graph's embedding cache, where its
    pruning has already encoded most of these texts with the same retriever); None: the retriever is loaded
    here and encodes them all."""
    from models.discriminator import load_calibration, load_discriminator, trained_max_length
    from tasks.training.param_scorer import PARAM_MAX_LENGTH, score_param_examples

    units = [u for u in parameter_units(tools, pairs) if not tools[u[0]].returns_nothing]  # it feeds no input
    if not units:
        return []
    if (Path(checkpoint) / RETRIEVER_FILE).is_file() and not (Path(checkpoint) / HEAD_FILE).is_file():
        raise ValueError(f"{checkpoint}: a dependency retriever without {HEAD_FILE} (train-retriever fits it on "
                         "tool sets with parameter edges); it cannot score parameters")
    if (Path(checkpoint) / HEAD_FILE).is_file():
        if encode is None:
            from models.sentence_encoder import EncoderConfig, SentenceEncoder

            encode = SentenceEncoder(EncoderConfig(str(checkpoint), batch_size=batch_size, device=device)).encode
        ordered = {(p, c) for p, c, _ in units}
        if ParamReranker.present(checkpoint):
            scored, probs = ParamReranker(Path(checkpoint) / RERANKER_DIR).score(tools, encode, ordered)
        else:
            scored, x = unit_features(tools, encode, ordered)
            probs = ParamHead.load(Path(checkpoint)).predict(x)
        return [ParamScore(p, c, q, float(v)) for (p, c, q), v in zip(scored, probs)]
    model, tokenizer = load_discriminator(checkpoint)
    if device:
        model.to(device)
    length = max_length or trained_max_length(load_calibration(checkpoint)) or PARAM_MAX_LENGTH
    examples = [ParamExample(tools[p].doc, tools[c].doc, q, 0, tools[c].group) for p, c, q in units]
    probs = score_param_examples(model, tokenizer, examples, int(length), batch_size)
    return [ParamScore(p, c, q, float(x)) for (p, c, q), x in zip(units, probs)]


def param_threshold(checkpoint: str | Path, threshold: float | None = None) -> float:
    """``threshold`` when given, else the cut in the checkpoint's calibration.json or parameter head (0.5
    without one)."""
    from models.discriminator import load_calibration

    if threshold is not None:
        return threshold
    if ParamReranker.present(checkpoint):
        return ParamHead.load(Path(checkpoint) / RERANKER_DIR, STACK_FEATURES).threshold
    if (Path(checkpoint) / HEAD_FILE).is_file():
        return ParamHead.load(Path(checkpoint)).threshold
    return float((load_calibration(checkpoint) or {}).get("threshold", 0.5))


def parameter_edges(tools: Sequence[Tool], scores: Sequence[ParamScore], threshold: float) -> list[tuple[ParameterEdge, float]]:
    """The scored parameters that reach ``threshold``: parameter edges (source 'discriminator'; the
    producer's output is not named by the scorer) with their probability."""
    return [(ParameterEdge(tools[s.consumer].tool_id, tools[s.producer].tool_id, s.param, None, "discriminator"), s.prob)
            for s in scores if s.prob >= threshold]


def cross_encoder_alone(tools: Sequence[Tool], has_inputs: Sequence[bool], producer: int, consumer: int) -> bool:
    """Whether the cross-encoder's edge ``consumer`` needs ``producer`` stands on its own: the consumer declares no
    inputs (the parameter level has nothing to score) and the producer may return something (not
    ``Tool.returns_nothing``). Otherwise only as a precondition, where ``precondition_open`` allows one."""
    return not has_inputs[consumer] and not tools[producer].returns_nothing


def param_tool_edges(tools: Sequence[Tool], pairs: Sequence[tuple[int, int]], scores: Sequence[ParamScore],
                     threshold: float, fallback: Sequence[PredictedEdge] = (),
                     preconditions: PreconditionScope = "off") -> list[ParamToolEdge]:
    """Tool edges from parameter scores: <consumer depends on producer> when its best input reaches
    ``threshold`` (prob = that input's p; it is kept as ``best_param``). Between two tools one edge at
    most: the direction with the higher p. A pair whose tools declare no inputs on either side keeps the
    tool-level edge of ``fallback`` (today's discriminator), if any; so does a direction whose
    consumer has no inputs when the other direction was not kept. Kind: "data" for an edge through an
    input, the fallback's own kind otherwise (``tasks.graph.kinds.dependency_kind``). A producer that returns
    nothing (``Tool.returns_nothing``) has no parameter scores (``score_parameters``) and its fallback edge stands
    only as a precondition, below.

    ``preconditions`` ("all", or "checks": where the prerequisite is a check that may gate the dependent,
    ``tasks.graph.checks.precondition_open``): a ``fallback`` edge whose consumer declares inputs is kept too, as
    a precondition, when no name rule sees a value pass between the two (``tasks.graph.schema_rule.value_pairs``):
    no input took the producer's output, yet the pair reads as dependent (``two_level_probs`` decides the same
    way)."""
    best: dict[tuple[int, int], ParamScore] = {}
    for s in scores:
        key = (s.producer, s.consumer)
        if key not in best or s.prob > best[key].prob:
            best[key] = s
    has_inputs = [bool(t.doc.get("input_params")) for t in tools]
    index = {t.tool_id: n for n, t in enumerate(tools)}
    by_pair = {frozenset((index[f.edge.dependent], index[f.edge.prerequisite])): f for f in fallback}
    valued = value_pairs(tools, [tuple(k) for k in by_pair]) if preconditions != "off" else set()
    said = roles(tools) if preconditions == "checks" else []
    out = []
    for i, j in pairs:
        options = [best[k] for k in ((i, j), (j, i)) if k in best and best[k].prob >= threshold]
        if options:
            s = max(options, key=lambda x: x.prob)
            cls = LABEL_A_DEPENDS_ON_B if s.consumer == i else LABEL_B_DEPENDS_ON_A
            edge = DependencyEdge(tools[i].group, tools[s.consumer].tool_id, tools[s.producer].tool_id, "discriminator",
                                  dependency_kind(through_parameter=True))
            out.append(ParamToolEdge(PredictedEdge(edge, s.prob, cls, s.prob), s.param))
            continue
        f = by_pair.get(frozenset((i, j)))
        if f is None:
            continue
        if cross_encoder_alone(tools, has_inputs, index[f.edge.prerequisite], index[f.edge.dependent]):
            out.append(ParamToolEdge(f, None))
        elif frozenset((i, j)) not in valued and precondition_open(
                preconditions, said, index[f.edge.prerequisite], index[f.edge.dependent]):
            edge = replace(f.edge, kind=dependency_kind(through_parameter=False, precondition=True))
            out.append(ParamToolEdge(replace(f, edge=edge), None))
    return out


def describe(scores: Sequence[ParamScore], edges: Sequence[ParamToolEdge], threshold: float) -> str:
    kept = int(np.sum([s.prob >= threshold for s in scores])) if scores else 0
    fallback = sum(e.best_param is None for e in edges)
    return (f"parameter scorer: {len(scores)} (producer, input) pairs scored, {kept} at p >= {threshold:.3f}; "
            f"{len(edges)} tool edges ({fallback} from the tool-level fallback)")
