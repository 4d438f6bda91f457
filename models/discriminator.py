"""The TGR dependency discriminator: a BERT-family 3-class sequence-pair classifier.

Input is ``[CLS] text(doc_a) [SEP] text(doc_b) [SEP]`` (the tokenizer's pair encoding) with
``truncation="longest_first"`` so that both documents keep tokens when the pair is too long.
``doc_text`` renders an API doc as a signature line first (name, inputs, outputs), then the
descriptions: what decides a dependency (an output of one tool feeding an input of the other)
stays inside a short ``max_length``, where the canonical JSON spends its first tokens on the
description and may lose ``output_params`` to truncation.
Labels follow schemas.tdi (0 a_depends_on_b, 1 no_dependency, 2 b_depends_on_a).

The kind head: a checkpoint may have five outputs instead of three (``schemas.tdi.KIND_HEAD_ID2LABEL``), each
dependency class split into data flow and precondition (the prerequisite must run first, no value passed).
The five form one distribution; summed over kind they are the three classes (``class_logits``), so the
3-class loss, calibration, ``decide`` and every 3-class reader are unchanged, and a Hugging Face pipeline
shows the five joint probabilities. The kind is trained only on dependent pairs whose kind is known
(``PreconditionKindLoss`` on ``kind_logit``). ``has_kind_head`` tells the two kinds of checkpoint apart.
"""
from __future__ import annotations

import json
from pathlib import Path
from collections.abc import Collection, Sequence
from typing import Literal, NamedTuple, overload

import numpy as np
import torch
import torch.nn.functional as F
from transformers import (AutoConfig, AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel,
                          PreTrainedTokenizerBase)

from models.discriminator_defaults import DEFAULT_MAX_LENGTH, POOLINGS, check_pooling  # noqa: F401 - re-exported; torch-free home
from models.encoder_path import layer_cut, resolve_model_name_or_path, trained_pooling  # noqa: F401 - re-exported
from models.mean_pooled_bert import MEAN_POOLED_BERT, MeanPooledBertConfig, MeanPooledBertForSequenceClassification
from schemas.docs import parse_doc
from schemas.tdi import (ID2LABEL, KIND_HEAD_ID2LABEL, LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY,
                         NUM_LABELS)


def pair_texts(doc_a: str | dict, doc_b: str | dict, ignore: Collection[str] = frozenset(),
               hints: bool = True, ignore_inputs: Collection[str] = frozenset()) -> tuple[str, str]:
    """The two segments of a pair: each doc's text, led by the parameter-match evidence.

    When an output name of the other tool equals one of this tool's input names
    (``schemas.name_rule.feeds``), the segment starts with ``takes token from the other tool.``;
    when an input only partly names the other's output (``schemas.name_rule.partial_feeds``:
    ``token`` <- ``user_token``, ``movie_id`` <- ``movie``), with the weaker
    ``may take token from the other tool's user_token.``; when neither tool declares any parameter and
    one names the whole of the other's (name-derived) output in its name or description
    (``schemas.name_rule.mentioned_outputs``), with the weakest, ``mentions movie, which the other
    tool returns.``. The evidence is a hint, not the answer: the
    model learns from the labels when a shared name is a real hand-over (``token``) and when it is a
    coincidence (``time``, ``location``), and finds dependencies that share no name from the
    descriptions. The hint moves with its doc, so swapping a and b swaps the segments exactly
    (test-time symmetry stays exact). ``ignore``: names that are no evidence in the pair's tool
    group (``schemas.name_rule.common_output_names``); ``ignore_inputs``: input names that too many tools
    of the group partly match to be partial evidence (``schemas.name_rule.common_partial_inputs``). ``hints=False``: the docs alone (training's
    ``hint_dropout``, so the model also learns to read the signatures and descriptions).
    """
    a, b = parse_doc(doc_a), parse_doc(doc_b)
    text_a, text_b = doc_text(a if a is not None else doc_a), doc_text(b if b is not None else doc_b)
    if a is None or b is None or not hints:
        return text_a, text_b

    def evidence(producer: dict, consumer: dict) -> str:
        found, said = hint_evidence(producer, consumer, ignore, ignore_inputs), []
        if found.exact:
            said.append(f"takes {', '.join(found.exact)} from the other tool.")
        if found.partial:
            said.append(f"may take {', '.join(i for i, _ in found.partial)} from the other tool's "
                        f"{', '.join(sorted({o for _, o in found.partial}))}.")
        if found.mentioned:
            said.append(f"mentions {', '.join(found.mentioned)}, which the other tool returns.")
        return " ".join(said + [""])

    return evidence(b, a) + text_a, evidence(a, b) + text_b


class HintEvidence(NamedTuple):
    """What ``pair_texts`` tells the model about ``consumer`` taking from ``producer``."""

    exact: list[str]  # normalised names (schemas.name_rule.feeds)
    partial: list[tuple[str, str]]  # (input, output) (schemas.name_rule.partial_feeds)
    mentioned: list[str]  # only without either of the above (schemas.name_rule.mentioned_outputs)

    @property
    def kind(self) -> str:
        return "exact" if self.exact else "partial" if self.partial else "mention" if self.mentioned else "none"


def hint_evidence(producer: dict, consumer: dict, ignore: Collection[str] = frozenset(),
                  ignore_inputs: Collection[str] = frozenset()) -> HintEvidence:
    """The evidence that ``consumer`` takes a value of ``producer``, strongest first (``pair_texts``)."""
    from schemas.name_rule import feeds, mentioned_outputs, normalise_param_name, partial_feeds

    exact = sorted(feeds(producer, consumer, ignore=ignore))
    partial = partial_feeds(producer, consumer, ignore=ignore, ignore_inputs=ignore_inputs)
    mentioned = [] if exact or partial else [w for w in mentioned_outputs(consumer, producer)
                                             if normalise_param_name(w) not in ignore]
    return HintEvidence(exact, partial, mentioned)


def doc_text(doc: str | dict) -> str:
    """``GetUserToken(username: str, password: str) -> token: str. Get the user's token. username: ...``

    Takes a doc dict or its canonical JSON. A doc that declares no outputs shows the output its
    name implies (``schemas.name_rule.name_derived_output``), the same reading the parameter
    rule uses, so tool sets that list inputs only still show the model what a tool produces.
    """
    from schemas.name_rule import name_derived_output

    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except json.JSONDecodeError:
            return doc  # already text (e.g. a user scoring free-form descriptions)
    def sig(params: list[dict]) -> str:
        return ", ".join(f"{p['name']}: {p['type']}" for p in params)

    outputs = doc.get("output_params") or []
    if outputs:
        returns = sig(outputs)
    else:
        derived = name_derived_output(doc.get("name", ""))
        returns = derived or "none"
    param_notes = " ".join(f"{p['name']}: {p['description']}" for p in (doc.get("input_params") or []) + outputs
                           if p.get("description"))
    text = f"{doc.get('name', '')}({sig(doc.get('input_params') or [])}) -> {returns}. {doc.get('description', '')}"
    return f"{text} {param_notes}".strip()


def load_tokenizer(base_model: str | None) -> PreTrainedTokenizerBase:
    """Tokenizer of ``base_model`` ("offline-minilm", a hub id such as bert-base-uncased, or a folder)."""
    return AutoTokenizer.from_pretrained(resolve_model_name_or_path(base_model))


# A checkpoint pooled by the mean (models/mean_pooled_bert.py) loads through the Auto classes like any other.
AutoConfig.register(MEAN_POOLED_BERT, MeanPooledBertConfig, exist_ok=True)
AutoModelForSequenceClassification.register(MeanPooledBertConfig, MeanPooledBertForSequenceClassification, exist_ok=True)


def pooling_of(model_type: str | None) -> str:
    """``mean`` for the mean-pooled discriminator's model type, ``cls`` for any other (classified by [CLS])."""
    return "mean" if model_type == MEAN_POOLED_BERT else "cls"


def checkpoint_pooling(folder: str | Path) -> str:
    """What the checkpoint saved in ``folder`` classifies, read from its config.json alone."""
    return pooling_of(json.loads((Path(folder) / "config.json").read_text()).get("model_type"))


def model_pooling(model: PreTrainedModel) -> str:
    """What a loaded discriminator classifies."""
    return pooling_of(model.config.model_type)


# the kind head's outputs: a->b and b->a as preconditions (0 and 2 are then the data-flow halves)
A_PRECONDITION, B_PRECONDITION = 3, 4
NUM_KIND_HEAD_LABELS = len(KIND_HEAD_ID2LABEL)


def head_labels(kind_head: bool) -> dict[int, str]:
    """The output names of a discriminator: the three classes, or the five of the kind head."""
    return dict(KIND_HEAD_ID2LABEL if kind_head else ID2LABEL)


def has_kind_head(model: PreTrainedModel) -> bool:
    """Whether ``model`` has the kind head's five outputs (checkpoints trained before it have three)."""
    return int(model.config.num_labels) == NUM_KIND_HEAD_LABELS


def class_logits(logits: torch.Tensor) -> torch.Tensor:
    """The three classes' logits (n, 3): as they are, or, from the kind head's five, each dependency class's
    two kinds summed in probability (logsumexp): their softmax is the three classes' probabilities exactly."""
    if logits.shape[-1] == NUM_LABELS:
        return logits
    return torch.stack([torch.logaddexp(logits[:, LABEL_A_DEPENDS_ON_B], logits[:, A_PRECONDITION]),
                        logits[:, LABEL_NO_DEPENDENCY],
                        torch.logaddexp(logits[:, LABEL_B_DEPENDS_ON_A], logits[:, B_PRECONDITION])], dim=-1)


def kind_logit(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log p(precondition) / p(data) of each pair's own dependency direction (``labels`` 0 or 2; a "no
    dependency" row gets the a->b one, never trained on): the logit of the kind given the dependency."""
    b_first = labels == LABEL_B_DEPENDS_ON_A
    data = torch.where(b_first, logits[:, LABEL_B_DEPENDS_ON_A], logits[:, LABEL_A_DEPENDS_ON_B])
    precondition = torch.where(b_first, logits[:, B_PRECONDITION], logits[:, A_PRECONDITION])
    return precondition - data


def p_precondition(logits: torch.Tensor) -> torch.Tensor:
    """p(precondition | some dependency) of each pair from the kind head's five logits: the precondition
    share of the dependency classes' probability, both directions together."""
    p = logits.float().softmax(-1)
    pre = p[:, A_PRECONDITION] + p[:, B_PRECONDITION]
    return pre / (pre + p[:, LABEL_A_DEPENDS_ON_B] + p[:, LABEL_B_DEPENDS_ON_A]).clamp_min(1e-12)


def _project_head(path: str) -> int | None:
    """The number of outputs of a checkpoint this project saved (its labels are ours), else None."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError):
        return None
    names = {int(k): v for k, v in (config.id2label or {}).items()}
    return len(names) if names in (head_labels(False), head_labels(True)) else None


def add_kind_head(model: PreTrainedModel) -> PreTrainedModel:
    """Widen a 3-class checkpoint's output layer to the kind head's five, keeping what it says: each dependency
    class's row is copied to its precondition twin and both biases lowered by log 2, so the three classes'
    probabilities are unchanged and every dependency starts at p(precondition) 0.5."""
    import math

    found = [(name, m) for name, m in model.named_modules()
             if isinstance(m, torch.nn.Linear) and m.out_features == NUM_LABELS and "classifier" in name]
    if not found:
        raise ValueError(f"{type(model).__name__}: no 3-output classifier layer to widen for the kind head")
    name, old = found[-1]
    new = torch.nn.Linear(old.in_features, NUM_KIND_HEAD_LABELS, bias=old.bias is not None)
    with torch.no_grad():
        rows = [LABEL_A_DEPENDS_ON_B, LABEL_NO_DEPENDENCY, LABEL_B_DEPENDS_ON_A, LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A]
        new.weight.copy_(old.weight[rows])
        if old.bias is not None:
            shift = torch.tensor([math.log(2), 0.0, math.log(2), math.log(2), math.log(2)], dtype=old.bias.dtype)
            new.bias.copy_(old.bias[rows] - shift)
    parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
    setattr(parent, name.rpartition(".")[2], new)
    labels = head_labels(True)
    model.config.num_labels = len(labels)  # also resets id2label to placeholders: set ours after
    model.config.id2label, model.config.label2id = labels, {v: k for k, v in labels.items()}
    model.num_labels = len(labels)
    return model


def mean_pooled_classifier(path: str, config, flag: str, **head) -> MeanPooledBertForSequenceClassification:
    """The BERT-family encoder at ``path`` (``config``: its config) with a classifier over the mean of its tokens
    (``head``: num_labels and the like, over the config's); ``flag`` names the option a refusal points to."""
    if config.model_type not in ("bert", MEAN_POOLED_BERT):
        raise ValueError(f"{flag} mean is built for BERT-family encoders; {path} is {config.model_type!r}: "
                         f"use {flag} cls (its own head)")
    fields = {k: v for k, v in config.to_dict().items() if k not in ("model_type", "architectures", "auto_map")}
    return MeanPooledBertForSequenceClassification.from_pretrained(path, config=MeanPooledBertConfig(**{**fields, **head}))


def load_model(base_model: str | None, num_layers: int | None = None, kind_head: bool = False,
               pooling: str = "auto") -> PreTrainedModel:
    """A 3-label classifier on top of ``base_model``; a fresh head when the base is an encoder.

    ``pooling`` (an encoder only; a checkpoint keeps its own): ``mean`` classifies the mean of the tokens
    (``MeanPooledBertForSequenceClassification``, BERT-family encoders), ``cls`` the [CLS] token through the
    model's own head, ``auto`` as the encoder was trained (``trained_pooling``: mean for all-MiniLM-L6-v2).

    ``kind_head``: five outputs instead (``KIND_HEAD_ID2LABEL``): a fresh head of five on an encoder, and a
    3-class checkpoint of this project widened to five (``add_kind_head``). A checkpoint saved by this project
    is otherwise loaded as is (one with the kind head keeps it whatever ``kind_head`` says).
    ``num_layers`` keeps only the first N transformer layers (the rest of the weights are not
    loaded): about N/L of the compute, for training on CPU within minutes. A model with N layers
    or fewer is loaded whole.
    """
    check_pooling(pooling, "pooling")
    path = resolve_model_name_or_path(base_model)
    outputs = _project_head(path)
    labels = head_labels(outputs == NUM_KIND_HEAD_LABELS if outputs else kind_head)
    head = dict(num_labels=len(labels), id2label=labels, label2id={v: k for k, v in labels.items()},
                **layer_cut(path, num_layers))
    config = None
    if outputs is None and pooling != "cls":
        try:
            config = AutoConfig.from_pretrained(path)
        except (OSError, ValueError):
            pass  # no config to read: the Auto class below says what is wrong with the path
    if config is not None and (trained_pooling(path, config) if pooling == "auto" else pooling) == "mean":
        model = mean_pooled_classifier(path, config, "--pooling", **head)
    else:
        model = AutoModelForSequenceClassification.from_pretrained(path, **head)
    if kind_head and not has_kind_head(model):
        model = add_kind_head(model)
    return model


def encode_pairs(
    tokenizer: PreTrainedTokenizerBase,
    docs_a: Sequence[str],
    docs_b: Sequence[str],
    max_length: int = DEFAULT_MAX_LENGTH,
    ignore: Sequence[Collection[str]] | None = None,
    hints: Sequence[bool] | None = None,
    ignore_inputs: Sequence[Collection[str]] | None = None,
) -> dict[str, list[list[int]]]:
    """Token ids of each pair of docs (dicts, canonical JSON or text) without padding.

    ``ignore``: per pair, the names that are no parameter-match evidence in its group.
    ``hints``: per pair, whether its segments lead with that evidence (default: all do).
    ``ignore_inputs``: per pair, the input names that are no partial evidence in its group.
    """
    ignore = ignore if ignore is not None else [frozenset()] * len(docs_a)
    hints = hints if hints is not None else [True] * len(docs_a)
    ignore_inputs = ignore_inputs if ignore_inputs is not None else [frozenset()] * len(docs_a)
    texts = [pair_texts(a, b, skip, hint, skip_in)
             for a, b, skip, hint, skip_in in zip(docs_a, docs_b, ignore, hints, ignore_inputs)]
    return tokenizer(
        [a for a, _ in texts],
        [b for _, b in texts],
        truncation="longest_first",
        max_length=max_length,
        padding=False,
    )


class CategoryAveragedLoss(torch.nn.Module):
    """Eq. 2 as a loss object (sentence-transformers style): ``loss(logits, labels)``."""

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return category_averaged_loss(logits, labels)


class CrossEntropyLoss(torch.nn.Module):
    """Eq. 1: mean cross-entropy (balanced pretraining data)."""

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return plain_loss(logits, labels)


def category_averaged_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Eq. 2: the sum over classes present in the batch of the mean cross-entropy of that class.

    L = - sum_k (1 / N_k) sum_{i in class k} log p(i, k). Classes absent from the batch add
    nothing, so a batch of only "no dependency" pairs gives the plain mean CE.
    """
    per_item = F.cross_entropy(logits.float(), labels, reduction="none")
    present = torch.unique(labels)
    return torch.stack([per_item[labels == k].mean() for k in present]).sum()


def plain_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Eq. 1: mean cross-entropy over the batch (balanced pretraining data)."""
    return F.cross_entropy(logits.float(), labels)


LOSSES = {"ce": CrossEntropyLoss, "category_averaged": CategoryAveragedLoss}

KIND_UNKNOWN, KIND_CODE_DATA, KIND_CODE_PRECONDITION = -1, 0, 1  # the kind head's targets ("kinds" column)


def kind_code(label: int, kind: str | None) -> int:
    """The kind head's target of a pair: 1 precondition, 0 data, -1 not trained on (no dependency, or a
    dependency whose kind is not known, such as UltraTool's call-order links)."""
    if label == LABEL_NO_DEPENDENCY or kind is None:
        return KIND_UNKNOWN
    return KIND_CODE_PRECONDITION if kind == "precondition" else KIND_CODE_DATA


class PreconditionKindLoss(torch.nn.Module):
    """The kind head's loss: binary cross-entropy of ``kind_logit`` (precondition against data in the pair's
    own direction) on the dependent pairs of known kind, summed and divided by the batch size, so each pair
    weighs what it weighs in the class loss. Not averaged per kind: with preconditions about 5% of the mined
    dependent pairs, the one precondition of a batch took half of the kind loss, its gradient dominated the
    clipped step and the class loss stopped moving (a pretraining that stayed at ln 3); the cut on
    p(precondition) chosen on validation (``choose_kind_cut``) handles the imbalance instead. Zero when the
    batch holds no such pair. With plain CE on the three classes, the sum is the joint likelihood of the five
    outputs."""

    def forward(self, logits: torch.Tensor, labels: torch.Tensor, kinds: torch.Tensor) -> torch.Tensor:
        known = kinds >= 0
        if not bool(known.any()):
            return logits.sum() * 0.0  # keeps the graph: every step has a loss with a gradient
        z, target = kind_logit(logits[known].float(), labels[known]), kinds[known].float()
        return F.binary_cross_entropy_with_logits(z, target, reduction="sum") / len(kinds)


def decide(probs: np.ndarray, threshold: float | None = None) -> np.ndarray:
    """Labels from class probabilities (n, 3).

    Without a threshold: argmax. With one: a pair is a dependency when ``p0 + p2``, the
    probability of *some* dependency, reaches ``threshold``; its direction is the larger of p0 and
    p2. The threshold is chosen on validation data (``choose_threshold``) and stored beside the
    checkpoint (``calibration.json``), so the graph step keeps an edge by a calibrated cut.
    """
    probs = np.asarray(probs, dtype=np.float64)
    if threshold is None:
        return probs.argmax(-1)
    direction = np.where(probs[:, LABEL_A_DEPENDS_ON_B] >= probs[:, LABEL_B_DEPENDS_ON_A], LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A)
    dependent = probs[:, LABEL_A_DEPENDS_ON_B] + probs[:, LABEL_B_DEPENDS_ON_A] >= threshold
    return np.where(dependent, direction, LABEL_NO_DEPENDENCY)


CALIBRATION_FILE = "calibration.json"


def load_calibration(checkpoint: str | Path) -> dict | None:
    """The calibration a training run stored beside ``checkpoint`` (threshold, criterion, figures), or None."""
    path = Path(checkpoint) / CALIBRATION_FILE
    return json.loads(path.read_text()) if path.exists() else None


def trained_max_length(calibration: dict | None) -> int | None:
    """The word pieces per pair a checkpoint was trained and calibrated with (its ``load_calibration``), or None
    where it does not say: scored at another length, its cut no longer holds."""
    length = (calibration or {}).get("max_length")
    return int(length) if length else None


# fp32: the reference; onnx: the same fp32 arithmetic in ONNX Runtime (CPU); bf16, int8 change the numbers (opt-in)
SCORING_PRECISIONS = ("fp32", "bf16", "int8", "onnx")


def scoring_model(model: PreTrainedModel, precision: str = "fp32") -> PreTrainedModel:
    """The model ``predict_proba`` runs at ``precision``: fp32 the model itself; bf16 a copy with bf16
    weights (about 1.7x on CPUs with AVX512-BF16/AMX; autocast over fp32 weights gains only about 1.2x,
    as it casts every weight on every batch); int8 a copy whose Linear layers are dynamically quantized
    (``torch.ao.quantization.quantize_dynamic``: int8 weights, activations quantized per batch; CPU only); onnx
    the model exported to ONNX and run by ONNX Runtime in fp32 (``models.onnx_scoring``; CPU only: probabilities
    within about 1e-6 of fp32's, 1.4-1.65x its speed on 2 cores). Prepare once per scoring run, not per call: it takes
    about a second (onnx: a few seconds the first time a checkpoint is exported)."""
    if precision not in SCORING_PRECISIONS:
        raise ValueError(f"scoring precision {precision!r}: one of {', '.join(SCORING_PRECISIONS)}")
    if precision == "fp32" or getattr(model, "scoring_precision", "fp32") == precision:
        return model
    import copy
    import warnings

    if precision == "onnx":
        from models.onnx_scoring import OnnxPairClassifier

        return OnnxPairClassifier(model)  # type: ignore[return-value]  (predict_proba's side of a model)
    if precision == "bf16":
        prepared = copy.deepcopy(model).eval().to(torch.bfloat16)
    else:
        if next(model.parameters()).device.type != "cpu":
            raise ValueError("int8 scoring (dynamic quantization) runs on CPU only; use fp32 or bf16 on a GPU")
        from torch.ao.quantization import quantize_dynamic

        with warnings.catch_warnings():  # torch.ao's deprecation notices say nothing actionable here
            warnings.simplefilter("ignore")
            prepared = quantize_dynamic(model.eval(), {torch.nn.Linear}, dtype=torch.qint8, inplace=False)
    prepared.scoring_precision = precision
    return prepared


class PairScores(NamedTuple):
    """What a discriminator says of each pair: the three classes' probabilities (n, 3), and the probability
    that its dependency is a precondition (n,) where the checkpoint has a kind head (None otherwise)."""

    probs: torch.Tensor
    p_precondition: torch.Tensor | None


@overload
def predict_proba(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, docs_a: Sequence[str], docs_b: Sequence[str],
                  max_length: int = ..., batch_size: int = ..., symmetric: bool = ..., progress: bool = ...,
                  ignore: Sequence[Collection[str]] | None = ..., ignore_inputs: Sequence[Collection[str]] | None = ...,
                  precision: str = ..., with_kind: Literal[False] = ...) -> torch.Tensor: ...


@overload
def predict_proba(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, docs_a: Sequence[str], docs_b: Sequence[str],
                  max_length: int = ..., batch_size: int = ..., symmetric: bool = ..., progress: bool = ...,
                  ignore: Sequence[Collection[str]] | None = ..., ignore_inputs: Sequence[Collection[str]] | None = ...,
                  precision: str = ..., with_kind: Literal[True] = ...) -> PairScores: ...


def unordered_pairs(docs_a: Sequence[str], docs_b: Sequence[str]) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """The distinct unordered pairs among ``(docs_a[i], docs_b[i])``: the index of each one's first pair, and per
    pair the position of its unordered pair among those and whether it is that first pair swapped. Validation and
    test sets hold both orders of their pairs, which symmetric scoring scores alike."""
    first: dict[tuple[str, str], int] = {}
    reps, where, flipped = [], [], []
    for i, pair in enumerate(zip(docs_a, docs_b)):
        swapped = pair not in first and pair[::-1] in first
        key = pair[::-1] if swapped else pair
        if key not in first:
            first[key] = len(reps)
            reps.append(i)
        where.append(first[key])
        flipped.append(swapped)
    return reps, torch.tensor(where, dtype=torch.long), torch.tensor(flipped, dtype=torch.bool)


@torch.inference_mode()
def predict_proba(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    docs_a: Sequence[str],
    docs_b: Sequence[str],
    max_length: int = DEFAULT_MAX_LENGTH,
    batch_size: int = 64,
    symmetric: bool = False,
    progress: bool = False,
    ignore: Sequence[Collection[str]] | None = None,
    ignore_inputs: Sequence[Collection[str]] | None = None,
    precision: str = "fp32",
    with_kind: bool = False,
) -> torch.Tensor | PairScores:
    """Class probabilities (n, 3) for doc pairs, in input order; batches sorted by length and padded
    only to their longest pair (not to ``max_length``). ``with_kind``: ``PairScores``, the probabilities
    and the kind head's p(precondition) (None without a kind head); symmetric scoring averages it too.

    ``symmetric``: also score every pair swapped and average ``p(a, b)`` with the label-swapped
    ``p(b, a)`` (test-time symmetry: twice the cost, no position bias, consistent directions).
    ``precision``: "fp32" (the reference), "bf16" or "int8" (``scoring_model``; pass a model it prepared, or
    each call prepares a copy). On CUDA the forward always runs under bf16 autocast.
    """
    if symmetric and ignore is None and ignore_inputs is None:
        reps, where, flipped = unordered_pairs(docs_a, docs_b)
        if len(reps) < len(docs_a):  # both orders of a pair score alike (swapped): each unordered pair once
            once = predict_proba(model, tokenizer, [docs_a[i] for i in reps], [docs_b[i] for i in reps], max_length,
                                 batch_size, True, progress, precision=precision, with_kind=True)
            probs = once.probs[where]
            probs[flipped] = probs[flipped][:, [LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY, LABEL_A_DEPENDS_ON_B]]
            kind = None if once.p_precondition is None else once.p_precondition[where]
            return PairScores(probs, kind) if with_kind else probs
    if symmetric:
        forward = predict_proba(model, tokenizer, docs_a, docs_b, max_length, batch_size, progress=progress,
                                ignore=ignore, ignore_inputs=ignore_inputs, precision=precision, with_kind=True)
        backward = predict_proba(model, tokenizer, docs_b, docs_a, max_length, batch_size, progress=progress,
                                 ignore=ignore, ignore_inputs=ignore_inputs, precision=precision, with_kind=True)
        probs = (forward.probs + backward.probs[:, [LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY, LABEL_A_DEPENDS_ON_B]]) / 2
        kind = None if forward.p_precondition is None else (forward.p_precondition + backward.p_precondition) / 2
        return PairScores(probs, kind) if with_kind else probs
    from tqdm.auto import tqdm

    model = scoring_model(model, precision).eval()  # as is when already prepared (score_pairs does it once)
    device = next(model.parameters(), torch.empty(0)).device
    bf16 = device.type == "cuda"
    enc = encode_pairs(tokenizer, docs_a, docs_b, max_length, ignore, ignore_inputs=ignore_inputs)
    order = sorted(range(len(docs_a)), key=lambda i: len(enc["input_ids"][i]))
    out = torch.empty(len(docs_a), NUM_LABELS)
    kind = torch.empty(len(docs_a)) if has_kind_head(model) else None
    for start in tqdm(range(0, len(order), batch_size), desc="scoring pairs", unit="batch", disable=not progress, leave=False):
        idx = order[start : start + batch_size]
        batch = tokenizer.pad({k: [enc[k][i] for i in idx] for k in enc}, return_tensors="pt")
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(**batch).logits
        out[idx] = class_logits(logits.float()).softmax(-1).cpu()
        if kind is not None:
            kind[idx] = p_precondition(logits).cpu()
    return PairScores(out, kind) if with_kind else out


def load_discriminator(path: str | Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Model and tokenizer of a checkpoint folder written by flows.train_discriminator (``.../best``)."""
    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path} is not a discriminator checkpoint (no config.json); run make train-discriminator")
    return AutoModelForSequenceClassification.from_pretrained(path), AutoTokenizer.from_pretrained(path)
