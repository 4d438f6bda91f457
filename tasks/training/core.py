"""Pieces of discriminator training: pairs, splits, direction, metrics, calibration, the Trainer, plots.

The flow (flows/train_discriminator.py) composes these; each piece is small and testable on CPU.
"""
from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow.parquet as pq
import torch
from transformers import DataCollatorWithPadding, PreTrainedModel, PreTrainedTokenizerBase, Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from models.discriminator import LOSSES, encode_pairs
from schemas.docs import canonical_doc_json
from schemas.tdi import (ID2LABEL, LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY, NUM_LABELS,
                         TDI_PAIR_SCHEMA, swap_label)
from schemas.toolset import ToolSet
from tasks.common.atomic import hidden_sibling, replace_dir

log = logging.getLogger(__name__)

DEPENDENCY_CLASSES = (LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A)


@dataclass(frozen=True)
class PairExample:
    doc_a: str  # canonical doc JSON, the same text form as the TDI shards
    doc_b: str
    label: int
    group: str  # split unit: "<dataset>/<tool set group>" (or "tdi")
    tool_a: str = ""
    tool_b: str = ""


# ---------------------------------------------------------------------------------------------
# Pairs from tool sets


def pair_label(a: str, b: str, depends: set[tuple[str, str]]) -> int:
    """Label of <a, b> given (dependent, prerequisite) edges: 0 a->b, 2 a<-b, 1 otherwise."""
    if (a, b) in depends:
        return LABEL_A_DEPENDS_ON_B
    if (b, a) in depends:
        return LABEL_B_DEPENDS_ON_A
    return LABEL_NO_DEPENDENCY


def build_pairs(toolset: ToolSet, max_none: int | None = None, seed: int = 0) -> list[PairExample]:
    """Every ordered pair of distinct tools inside each group, labelled from the edges.

    Unlisted pairs are "no dependency", so the result is imbalanced like real use. With
    ``max_none`` the none class is subsampled (seeded) to at most that many pairs while every
    dependency pair is kept in both directions (the paper's API-Bank test set: 60/500/60).
    """
    depends = {(e.dependent, e.prerequisite) for e in toolset.edges}
    if any(a == b for a, b in depends):
        raise ValueError(f"{toolset.name}: an edge has the same tool on both sides")
    by_group: dict[str, list] = {}
    for tool in toolset.tools:
        by_group.setdefault(tool.group, []).append(tool)
    text = {t.tool_id: canonical_doc_json(t.doc) for t in toolset.tools}
    pairs = []
    for group in sorted(by_group):
        tools = by_group[group]
        for a in tools:
            for b in tools:
                if a.tool_id != b.tool_id:
                    pairs.append(PairExample(text[a.tool_id], text[b.tool_id], pair_label(a.tool_id, b.tool_id, depends),
                                             f"{toolset.name}/{group}", a.tool_id, b.tool_id))
    if max_none is not None:
        none = [i for i, p in enumerate(pairs) if p.label == LABEL_NO_DEPENDENCY]
        if len(none) > max_none:
            keep = set(random.Random(seed).sample(none, max_none))
            pairs = [p for i, p in enumerate(pairs) if p.label != LABEL_NO_DEPENDENCY or i in keep]
    return pairs


def label_counts(examples: Sequence[PairExample]) -> dict[str, int]:
    counts = np.bincount([e.label for e in examples], minlength=NUM_LABELS)
    return {ID2LABEL[k]: int(counts[k]) for k in range(NUM_LABELS)}


def grouped_split(
    examples: Sequence[PairExample], valid_fraction: float = 0.2, seed: int = 0
) -> tuple[list[PairExample], list[PairExample], str]:
    """Train/validation split where no group (tool set) straddles the split.

    Groups are shuffled (seeded) and moved to validation until it holds ``valid_fraction`` of
    the pairs; a group that would push validation past 1.25 x the target is skipped, so one
    large tool set does not turn a 20% split into 35%. With a single group the unit becomes the tool: a seeded ~10.6% of the tools are
    held out and every pair touching one of them goes to validation (1 - 0.894^2 = 20% of
    pairs), so validation always contains a tool never seen in training.
    """
    groups = sorted({e.group for e in examples})
    if len(groups) > 1:
        rng = random.Random(seed)
        rng.shuffle(groups)
        sizes = {g: 0 for g in groups}
        for e in examples:
            sizes[e.group] += 1
        target, held, total = valid_fraction * len(examples), set(), 0
        for g in groups:
            if total >= target or len(held) == len(groups) - 1:
                break
            if total + sizes[g] <= 1.25 * target:
                held.add(g)
                total += sizes[g]
        if not held:  # every group is larger than the margin: hold out the smallest one
            smallest = min(groups, key=lambda g: (sizes[g], g))
            held, total = {smallest}, sizes[smallest]
        train = [e for e in examples if e.group not in held]
        valid = [e for e in examples if e.group in held]
        return train, valid, (f"grouped by tool set: {len(held)} of {len(groups)} groups held out "
                              f"({sorted(held)}), {len(valid) / len(examples):.1%} of pairs")
    tools = sorted({e.tool_a for e in examples} | {e.tool_b for e in examples})
    n_held = max(1, round(len(tools) * (1 - math.sqrt(1 - valid_fraction))))
    held_tools = set(random.Random(seed).sample(tools, n_held))
    valid = [e for e in examples if e.tool_a in held_tools or e.tool_b in held_tools]
    train = [e for e in examples if not (e.tool_a in held_tools or e.tool_b in held_tools)]
    return train, valid, f"one group only: split by tool, {n_held} of {len(tools)} tools held out"


# ---------------------------------------------------------------------------------------------
# TDI shards


def load_tdi_examples(tdi_dir: Path) -> tuple[list[PairExample], list[PairExample]]:
    """Train and validation pairs of a build-tdi dataset (``<tdi_dir>/shards/*.parquet``)."""
    files = sorted((Path(tdi_dir) / "shards").glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"no Parquet shards under {Path(tdi_dir) / 'shards'}; run make build-tdi first")
    out: dict[str, list[PairExample]] = {"train": [], "validation": []}
    for file in files:
        table = pq.read_table(file)
        missing = set(TDI_PAIR_SCHEMA.names) - set(table.column_names)
        if missing:
            raise ValueError(f"{file}: not a TDI shard, missing columns {sorted(missing)}")
        cols = table.select(["doc_a", "doc_b", "label", "split", "tool_a_id", "tool_b_id"]).to_pydict()
        for doc_a, doc_b, label, split, ta, tb in zip(*cols.values()):
            if label not in ID2LABEL:
                raise ValueError(f"{file}: label {label!r} outside {sorted(ID2LABEL)}")
            if split not in out:
                raise ValueError(f"{file}: split {split!r} is neither train nor validation")
            out[split].append(PairExample(doc_a, doc_b, int(label), "tdi", ta, tb))
    return out["train"], out["validation"]


# ---------------------------------------------------------------------------------------------
# Direction: both orders of every pair


def with_both_orders(examples: Sequence[PairExample]) -> list[PairExample]:
    """``examples`` plus the swapped copy of every pair whose swap is missing (the swap is free data).

    <a, b> labelled 0 gives <b, a> labelled 2 and vice versa; "none" stays "none". Tool-set pairs
    and balanced TDI shards already hold both orders, so for them this adds nothing.
    """
    present = {(e.doc_a, e.doc_b) for e in examples}
    out = list(examples)
    for e in examples:
        if (e.doc_b, e.doc_a) not in present:
            present.add((e.doc_b, e.doc_a))
            out.append(PairExample(e.doc_b, e.doc_a, swap_label(e.label), e.group, e.tool_b, e.tool_a))
    return out


def swap_partners(examples: Sequence[PairExample]) -> np.ndarray:
    """Index of each pair's swapped pair in ``examples``, or -1 when it is absent."""
    index = {(e.doc_a, e.doc_b): i for i, e in enumerate(examples)}
    return np.array([index.get((e.doc_b, e.doc_a), -1) for e in examples], dtype=np.int64)


def symmetrize(probs: np.ndarray, partners: np.ndarray) -> np.ndarray:
    """Test-time symmetry: average p(a, b) with the label-swapped p(b, a) where the swap was scored."""
    probs = np.asarray(probs, dtype=np.float64)
    out = probs.copy()
    has = partners >= 0
    out[has] = (probs[has] + probs[partners[has]][:, [LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY, LABEL_A_DEPENDS_ON_B]]) / 2
    return out


# ---------------------------------------------------------------------------------------------
# Datasets for the Trainer (token ids once; the collator pads each batch dynamically)


def hint_mask(n: int, dropout: float, seed: int) -> list[bool]:
    """Which of ``n`` training pairs keep their parameter-match hint: a seeded ``dropout`` share
    does not, so the model cannot answer from the hint alone (it collapses onto it otherwise:
    every hinted pair the same probability, every other pair another)."""
    if not 0.0 <= dropout <= 1.0:
        raise ValueError(f"hint_dropout must be in [0, 1], got {dropout}")
    rng = np.random.default_rng(seed)
    return (rng.random(n) >= dropout).tolist()


def tokenized_dataset(tokenizer: PreTrainedTokenizerBase, examples: Sequence[PairExample], max_length: int,
                      hints: Sequence[bool] | None = None):
    """A ``datasets.Dataset`` of token ids and labels, in the order of ``examples``; ``hints``: per
    example, whether it leads with the parameter-match hint (default all)."""
    from datasets import Dataset

    enc = encode_pairs(tokenizer, [e.doc_a for e in examples], [e.doc_b for e in examples], max_length, hints=hints) \
        if examples else {"input_ids": [], "attention_mask": []}
    return Dataset.from_dict({**dict(enc), "labels": [e.label for e in examples]})


# ---------------------------------------------------------------------------------------------
# Metrics (sklearn), direction, calibration, the parameter-match baseline


def classification_metrics(y_true: Sequence[int], y_pred: Sequence[int]) -> dict[str, Any]:
    """Per-class and macro P/R/F1, accuracy, the confusion matrix and the dependency figures.

    ``dependency``: micro P/R/F1 over the two dependency classes, i.e. a pair counts as a true
    positive when it is predicted as a dependency *with the right direction*; precision is over
    all pairs predicted as 0 or 2, recall over all pairs labelled 0 or 2. This is the
    edge-finding quality the tool graph depends on (our reading of the paper's Table 3).
    """
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    y_true, y_pred = np.asarray(y_true, dtype=int), np.asarray(y_pred, dtype=int)
    labels = list(range(NUM_LABELS))
    if not len(y_true):
        zero = {"precision": 0.0, "recall": 0.0, "f1": 0.0}
        return {"n": 0, "accuracy": 0.0, "per_class": {ID2LABEL[k]: {**zero, "support": 0} for k in labels},
                "macro": zero, "dependency": zero, "dependency_macro": zero,
                "confusion_matrix": [[0] * NUM_LABELS for _ in labels]}
    p, r, f, support = precision_recall_fscore_support(y_true, y_pred, labels=labels, zero_division=0)
    per_class = {ID2LABEL[k]: {"precision": float(p[k]), "recall": float(r[k]), "f1": float(f[k]), "support": int(support[k])}
                 for k in labels}
    dep = list(DEPENDENCY_CLASSES)
    dp, dr, df, _ = precision_recall_fscore_support(y_true, y_pred, labels=dep, average="micro", zero_division=0)

    def mean(keys: Sequence[int], m: str) -> float:
        return float(np.mean([per_class[ID2LABEL[k]][m] for k in keys]))

    return {
        "n": int(len(y_true)),
        "accuracy": float((y_true == y_pred).mean()),
        "per_class": per_class,
        "macro": {m: mean(labels, m) for m in ("precision", "recall", "f1")},
        "dependency": {"precision": float(dp), "recall": float(dr), "f1": float(df)},
        "dependency_macro": {m: mean(dep, m) for m in ("precision", "recall", "f1")},
        "confusion_matrix": confusion_matrix(y_true, y_pred, labels=labels).tolist(),
    }


def direction_accuracy(y_true: Sequence[int], probs: np.ndarray) -> dict[str, Any]:
    """On the true dependency pairs: how often p(a->b) vs p(b->a) points the right way.

    Counted whatever the "none" probability, so it measures the sense of direction alone; 0.5 is
    a coin toss.
    """
    y_true = np.asarray(y_true, dtype=int)
    dep = np.isin(y_true, DEPENDENCY_CLASSES)
    if not dep.any():
        return {"n": 0, "accuracy": None}
    probs = np.asarray(probs)
    guess = np.where(probs[dep, LABEL_A_DEPENDS_ON_B] >= probs[dep, LABEL_B_DEPENDS_ON_A], LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A)
    return {"n": int(dep.sum()), "accuracy": float((guess == y_true[dep]).mean())}


CALIBRATION_CRITERIA = ("max_f1", "precision")


def natural_none_ratio(toolset: ToolSet) -> float:
    """"No dependency" pairs per dependency pair among all ordered same-group pairs of a tool set:
    the class prior a graph build meets, before any subsampling."""
    sizes: dict[str, int] = {}
    for t in toolset.tools:
        sizes[t.group] = sizes.get(t.group, 0) + 1
    total, dependent = sum(n * (n - 1) for n in sizes.values()), 2 * len(toolset.edges)
    return (total - dependent) / max(dependent, 1)


def none_weights(examples: Sequence[PairExample], ratio: float) -> np.ndarray:
    """Per-example weights that give the "none" pairs of each group source (``<dataset>`` of the
    ``group`` field) the ``ratio`` none-per-dependency prior; dependency pairs weigh 1."""
    weights = np.ones(len(examples))
    sources: dict[str, list[int]] = {}
    for i, e in enumerate(examples):
        sources.setdefault(e.group.split("/", 1)[0], []).append(i)
    for idx in sources.values():
        n_none = sum(examples[i].label == LABEL_NO_DEPENDENCY for i in idx)
        n_dep = len(idx) - n_none
        if n_none and n_dep:
            for i in idx:
                if examples[i].label == LABEL_NO_DEPENDENCY:
                    weights[i] = ratio * n_dep / n_none
    return weights


def choose_threshold(y_true: Sequence[int], probs: np.ndarray, criterion: str = "max_f1",
                     target_precision: float = 0.9, weights: np.ndarray | None = None) -> dict[str, Any]:
    """The cut on p(dependency) = p0 + p2 for ``models.discriminator.decide``, chosen on validation.

    ``max_f1``: the cut with the highest dependency F1 (direction must be right); ``precision``:
    the lowest cut whose precision reaches ``target_precision`` (most recall at that precision),
    falling back to max F1 when no cut reaches it. Ties keep the higher cut (fewer edges).
    ``weights`` (per pair, e.g. ``none_weights``) count a false positive as that many pairs: a
    validation set whose none class was subsampled then calibrates for the real class prior, where
    a cut chosen at a balanced prior lets far too many edges through.
    """
    if criterion not in CALIBRATION_CRITERIA:
        raise ValueError(f"unknown calibration criterion {criterion!r}; known: {', '.join(CALIBRATION_CRITERIA)}")
    y_true, probs = np.asarray(y_true, dtype=int), np.asarray(probs, dtype=np.float64)
    n_true = int(np.isin(y_true, DEPENDENCY_CLASSES).sum())
    p_dep = probs[:, LABEL_A_DEPENDS_ON_B] + probs[:, LABEL_B_DEPENDS_ON_A]
    direction = np.where(probs[:, LABEL_A_DEPENDS_ON_B] >= probs[:, LABEL_B_DEPENDS_ON_A], LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A)
    order = np.argsort(-p_dep, kind="stable")
    # predicting the top k pairs as dependencies: TP = right-direction true dependencies among them
    tp = np.cumsum(direction[order] == y_true[order])
    w = np.ones(len(y_true)) if weights is None else np.asarray(weights, dtype=np.float64)
    k = np.cumsum(np.where(direction[order] == y_true[order], 1.0, w[order]))  # weighted predicted positives
    last_of_tie = np.r_[p_dep[order][1:] != p_dep[order][:-1], True]  # a cut cannot split equal scores
    precision, recall = tp / k, tp / max(n_true, 1)
    f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
    valid = last_of_tie & (n_true > 0)
    if not valid.any():
        return {"criterion": criterion, "threshold": 1.0, "precision": 0.0, "recall": 0.0, "f1": 0.0, "n": int(len(y_true)),
                "note": "no dependency pairs in the calibration set: threshold 1.0 keeps no edge"}
    chosen, note = None, ""
    if criterion == "precision":
        ok = np.flatnonzero(valid & (precision >= target_precision))
        if ok.size:
            chosen = int(ok[np.argmax(recall[ok] + 1e-9 * k[ok])])  # most recall; the larger k on ties
        else:
            note = f"no cut reaches precision {target_precision}; fell back to max F1"
    if chosen is None:
        cand = np.flatnonzero(valid)
        chosen = int(cand[np.argmax(f1[cand] - 1e-9 * k[cand])])  # best F1; the smaller k on ties
    out = {"criterion": criterion, "threshold": float(p_dep[order][chosen]), "precision": float(precision[chosen]),
           "recall": float(recall[chosen]), "f1": float(f1[chosen]), "n": int(len(y_true)), "weighted": weights is not None}
    if criterion == "precision":
        out["target_precision"] = target_precision
    if note:
        out["note"] = note
    return out


def schema_rule_metrics(examples: Sequence[PairExample], partial: bool = False) -> dict[str, Any]:
    """The parameter-match rule (schemas.name_rule) on the same pairs: the baseline to beat.
    ``partial``: the looser rule that also counts partial name matches (``user_token`` -> ``token``)."""
    from schemas.name_rule import schema_rule_label

    parsed: dict[str, dict] = {}

    def doc(text: str) -> dict:
        if text not in parsed:
            parsed[text] = json.loads(text)
        return parsed[text]

    preds = [schema_rule_label(doc(e.doc_a), doc(e.doc_b), partial=partial) for e in examples]
    return classification_metrics([e.label for e in examples], preds)


def evaluate_probs(y_true: Sequence[int], probs: np.ndarray, threshold: float | None) -> dict[str, Any]:
    """Argmax metrics, calibrated metrics (when a threshold is given) and direction accuracy."""
    from models.discriminator import decide

    out = {"argmax": classification_metrics(y_true, decide(probs)), "direction": direction_accuracy(y_true, probs)}
    if threshold is not None:
        out["calibrated"] = {**classification_metrics(y_true, decide(probs, threshold)), "threshold": threshold}
    return out


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def make_compute_metrics(partners: np.ndarray | None):
    """``compute_metrics`` for the Trainer: symmetrized probabilities when swaps are in the eval set.

    Reports argmax dependency F1, the best F1 over cuts (what calibration will reach; the
    checkpoint choice), macro F1 and direction accuracy.
    """
    def compute_metrics(eval_pred) -> dict[str, float]:
        probs = softmax(eval_pred.predictions)
        if partners is not None:
            probs = symmetrize(probs, partners)
        y = np.asarray(eval_pred.label_ids)
        from models.discriminator import decide

        argmax = classification_metrics(y, decide(probs))
        best = choose_threshold(y, probs, "max_f1")
        direction = direction_accuracy(y, probs)["accuracy"]
        return {"dependency_f1": argmax["dependency"]["f1"], "dependency_f1_calibrated": best["f1"],
                "threshold": best["threshold"], "macro_f1": argmax["macro"]["f1"],
                "direction_accuracy": float(direction) if direction is not None else 0.0}

    return compute_metrics


def format_metrics_table(metrics: dict[str, Any], title: str) -> str:
    rows = [f"{title} (n={metrics['n']}, accuracy={metrics['accuracy']:.3f})",
            f"{'class':<28}{'P':>8}{'R':>8}{'F1':>8}{'support':>9}"]
    for name, m in metrics["per_class"].items():
        rows.append(f"{name:<28}{m['precision']:>8.3f}{m['recall']:>8.3f}{m['f1']:>8.3f}{m['support']:>9}")
    for name in ("macro", "dependency", "dependency_macro"):
        m = metrics[name]
        rows.append(f"{name:<28}{m['precision']:>8.3f}{m['recall']:>8.3f}{m['f1']:>8.3f}")
    return "\n".join(rows)


def format_comparison(rows: dict[str, dict[str, Any]], title: str) -> str:
    """One line per method: dependency P/R/F1 (direction must be right)."""
    out = [title, f"{'method':<40}{'P':>8}{'R':>8}{'F1':>8}"]
    for name, m in rows.items():
        d = m["dependency"]
        out.append(f"{name:<40}{d['precision']:>8.3f}{d['recall']:>8.3f}{d['f1']:>8.3f}")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Training: the Hugging Face Trainer with the paper's losses


@dataclass
class StageArguments:
    """One training stage (pretraining or finetuning); mapped onto ``TrainingArguments``."""

    epochs: float = field(default=3, metadata={"help": "passes over the training pairs"})
    batch_size: int = field(default=32, metadata={"help": "pairs per step"})
    eval_batch_size: int = field(default=128, metadata={"help": "pairs per evaluation step"})
    learning_rate: float = field(default=3e-5, metadata={"help": "peak AdamW learning rate"})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay (not on biases/LayerNorm)"})
    warmup_ratio: float = field(default=0.1, metadata={"help": "share of steps with linear warmup"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping"})
    max_length: int = field(default=160, metadata={"help": "word pieces per pair"})
    hint_dropout: float = field(default=0.0, metadata={"help": "share of training pairs shown without the "
                                                                 "parameter-match hint (validation keeps it)"})
    seed: int = field(default=42, metadata={"help": "seed of init, shuffling and dropout"})
    max_steps: int = field(default=-1, metadata={"help": "stop after this many steps (-1: all epochs)"})
    evals_per_epoch: int = field(default=1, metadata={"help": "validation runs (and checkpoints) per epoch"})
    select_metric: str = field(default="dependency_f1_calibrated",
                               metadata={"help": "compute_metrics key that picks the best checkpoint ('loss': lowest)"})
    progress: bool = field(default=True, metadata={"help": "tqdm bars"})


@dataclass
class TrainResult:
    best_dir: Path
    best_score: float
    best_step: int
    history: list[dict[str, Any]] = field(default_factory=list)  # the Trainer's log_history

    @property
    def step_losses(self) -> list[tuple[int, float]]:
        return [(h["step"], h["loss"]) for h in self.history if "loss" in h]

    @property
    def evaluations(self) -> list[dict[str, Any]]:
        return [h for h in self.history if "eval_loss" in h]


class DiscriminatorTrainer(Trainer):
    """``Trainer`` whose loss is a loss object on the logits (Eq. 1 or the category-averaged Eq. 2)."""

    def __init__(self, *args, loss: torch.nn.Module, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss = loss

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        loss = self.loss(outputs.logits, labels)
        return (loss, outputs) if return_outputs else loss


def pick_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def seed_everything(seed: int) -> None:
    from transformers import set_seed

    set_seed(seed)
    if not torch.cuda.is_available():  # CPU kernels have deterministic variants; CUDA runs stay fast
        torch.use_deterministic_algorithms(True, warn_only=True)


def training_arguments(args: StageArguments, out_dir: Path, n_train: int, has_valid: bool) -> TrainingArguments:
    cuda = torch.cuda.is_available()
    steps_per_epoch = max(1, math.ceil(n_train / args.batch_size))
    total = args.max_steps if args.max_steps > 0 else math.ceil(steps_per_epoch * args.epochs)
    every = max(1, steps_per_epoch // max(args.evals_per_epoch, 1))
    if args.max_steps > 0:
        every = min(every, args.max_steps)
    return TrainingArguments(
        output_dir=str(out_dir),
        num_train_epochs=args.epochs,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.eval_batch_size,
        learning_rate=args.learning_rate,
        weight_decay=args.weight_decay,
        warmup_steps=int(args.warmup_ratio * total),
        max_grad_norm=args.max_grad_norm,
        lr_scheduler_type="linear",
        train_sampling_strategy="group_by_length",  # batches of similar length: little padding
        eval_strategy="steps" if has_valid else "no",
        save_strategy="steps",
        eval_steps=every,
        save_steps=every,
        save_total_limit=2,  # the best and the latest checkpoint
        load_best_model_at_end=has_valid,
        metric_for_best_model=args.select_metric if has_valid else None,
        greater_is_better=args.select_metric != "loss",
        logging_steps=max(1, min(50, every // 2)),
        bf16=cuda,
        seed=args.seed,
        data_seed=args.seed,
        dataloader_num_workers=0,
        report_to="none",
        disable_tqdm=not args.progress,
        use_cpu=not cuda,
    )


def train_classifier(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train: Sequence[PairExample],
    valid: Sequence[PairExample],
    args: StageArguments,
    out_dir: Path,
    loss_name: str = "ce",
    resume: bool = False,
    stage: str = "train",
    best_dir: Path | None = None,
) -> TrainResult:
    """Train with the HF ``Trainer``; the best checkpoint on ``valid`` by ``args.select_metric``.

    ``out_dir`` holds the Trainer's ``checkpoint-*`` folders; with ``resume`` training continues
    from the newest one (``get_last_checkpoint``). Validation scores symmetrized probabilities
    when ``valid`` holds both orders of its pairs. The best model, with its tokenizer, is saved
    to ``best_dir`` (default ``out_dir/best``) in one step (``tasks.common.atomic.replace_dir``).
    """
    out_dir, best_dir = Path(out_dir), Path(best_dir or Path(out_dir) / "best")
    if not train:
        raise ValueError(f"{stage}: no training pairs")
    seed_everything(args.seed)
    train_ds = tokenized_dataset(tokenizer, train, args.max_length, hint_mask(len(train), args.hint_dropout, args.seed))
    valid_ds = tokenized_dataset(tokenizer, valid, args.max_length) if valid else None
    partners = swap_partners(valid) if valid else None
    trainer = DiscriminatorTrainer(
        model=model,
        args=training_arguments(args, out_dir, len(train), valid_ds is not None),
        train_dataset=train_ds,
        eval_dataset=valid_ds,
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=make_compute_metrics(partners) if valid_ds is not None else None,
        loss=LOSSES[loss_name](),
    )
    last = get_last_checkpoint(str(out_dir)) if resume and out_dir.is_dir() else None
    if resume:
        log.info("%s: %s", stage, f"resuming from {last}" if last else "--resume given but no checkpoint yet, starting fresh")
    trainer.train(resume_from_checkpoint=last)
    # the best model when validation exists (load_best_model_at_end), saved beside best_dir and swapped
    # in whole: a kill mid-save leaves the previous best_dir as it was
    saving = hidden_sibling(best_dir, "saving")
    shutil.rmtree(saving, ignore_errors=True)
    trainer.save_model(str(saving))
    replace_dir(saving, best_dir)
    state = trainer.state
    best_score = state.best_metric if state.best_metric is not None else float("nan")
    best_step = int(Path(state.best_model_checkpoint).name.split("-")[-1]) if state.best_model_checkpoint else state.global_step
    log.info("%s: best %s %.4f at step %d of %d", stage, args.select_metric, best_score, best_step, state.global_step)
    return TrainResult(best_dir=best_dir, best_score=float(best_score), best_step=best_step, history=list(state.log_history))


@torch.no_grad()
def predict_examples(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, examples: Sequence[PairExample],
                     max_length: int, batch_size: int, symmetric: bool = True, progress: bool = False) -> np.ndarray:
    """Class probabilities of ``examples``; ``symmetric`` averages each pair with its swap."""
    from models.discriminator import predict_proba

    if not examples:
        return np.zeros((0, NUM_LABELS))
    return predict_proba(model, tokenizer, [e.doc_a for e in examples], [e.doc_b for e in examples], max_length,
                         batch_size, symmetric=symmetric, progress=progress).numpy().astype(np.float64)


# ---------------------------------------------------------------------------------------------
# Plots (matplotlib, Agg: no display needed)


def plot_confusion(cm: Sequence[Sequence[int]], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cm = np.asarray(cm)
    names = [ID2LABEL[k] for k in range(NUM_LABELS)]
    fig, ax = plt.subplots(figsize=(5, 4.5))
    ax.imshow(cm, cmap="Blues")
    ax.set_xticks(range(NUM_LABELS), names, rotation=30, ha="right")
    ax.set_yticks(range(NUM_LABELS), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    for i in range(NUM_LABELS):
        for j in range(NUM_LABELS):
            ax.text(j, i, str(cm[i, j]), ha="center", va="center", color="white" if cm[i, j] > cm.max() / 2 else "black")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_training_curves(stages: dict[str, TrainResult], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for stage, res in stages.items():
        if res.step_losses:
            steps, losses = zip(*res.step_losses)
            window = max(1, len(losses) // 50)  # moving average keeps the curve readable
            smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
            axes[0].plot(steps[window - 1 :], smooth, label=f"{stage} train loss")
        evals = res.evaluations
        steps = [h["step"] for h in evals]
        axes[1].plot(steps, [h["eval_loss"] for h in evals], marker="o", label=f"{stage} valid loss")
        axes[1].plot(steps, [h.get("eval_dependency_f1_calibrated", float("nan")) for h in evals], marker="s",
                     linestyle="--", label=f"{stage} valid dependency F1 (best cut)")
    axes[0].set_xlabel("step")
    axes[1].set_xlabel("step (per stage)")
    for ax in axes:
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def strict_json(data: Any) -> Any:
    """``data`` with NaN/inf replaced by None and numpy scalars by Python ones: valid strict JSON."""
    if isinstance(data, dict):
        return {str(k): strict_json(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [strict_json(v) for v in data]
    if isinstance(data, np.generic):
        data = data.item()
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, Path):
        return str(data)
    return data


def write_json(path: Path, data: Any) -> Path:
    """Strict JSON (no NaN): any reader, not only Python's, can load it. Written to a temp file and
    renamed over ``path``: a kill mid-write leaves the previous file, never half of one."""
    text = json.dumps(strict_json(data), indent=2, default=str, allow_nan=False) + "\n"
    tmp = hidden_sibling(path, "tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path
