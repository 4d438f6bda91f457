"""The parameter reranker: a cross-encoder over (consumer input, producer) texts that rescores the dependency
retriever's candidate units, stacked with the parameter head's features in one logistic regression.

Retrieve, then rerank: the bi-encoder (tasks/training/retriever.py) encodes each tool and input once and keeps,
per consumer input, its top-k producers (and every unit a name rule matches); the cross-encoder reads the input
and the producer together, which only those few units can afford on a CPU. The stacked head sees the
reranker's logit beside the head's features (``tasks/training/param_head.py``) and its cut is chosen, as the
head's, on grouped cross-validation over groups neither model trained on."""
from __future__ import annotations

import logging
import math
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from models.discriminator_defaults import check_pooling
from schemas.toolset import Tool, ToolSet
from tasks.common.atomic import hidden_sibling, replace_dir
from tasks.common.progress import EVERY_S, stage_progress
from tasks.training.param_examples import param_text, producer_text
from tasks.training.param_head import FEATURES, OUTPUT_DROPOUT, ParamHead, Unit, fit_on_toolsets, unit_features, unit_gold
from tasks.training.precision import cpu_autocast

log = logging.getLogger(__name__)

RERANKER_DIR = "param_reranker"  # inside a retriever folder: the cross-encoder and its stacked head
STACK_FEATURES = ("reranker",) + FEATURES  # the reranker's logit first, then the head's features
RERANKER_LOSSES = ("listwise", "pointwise")
_RANK, _EXACT, _PARTIAL = (FEATURES.index(f) for f in ("inverse_rank", "exact", "partial"))


@dataclass
class RerankerArguments:
    """How the reranker is trained (train-retriever's --reranker-* flags). Defaults: measured in
    bench/RESULTS.md ("Parameter reranker")."""

    layers: int = 6  # transformer layers kept from the retriever's encoder
    epochs: int = 2
    negatives_per_positive: int = 4  # hard negatives (the retriever's other candidates) drawn afresh each epoch
    learning_rate: float = 5e-5
    batch_size: int = 32
    max_length: int = 128
    name_dropout: float = 0.3  # share of training units shown by meaning only (identifier dropout)
    candidate_k: int = 5  # a unit is a candidate when its producer is among the input's top-k (or a name rule fires)
    seed: int = 0
    max_steps: int = -1  # stop after this many steps (tests); -1: all epochs
    # "listwise": per consumer input, a softmax over its gold unit, up to negatives_per_positive of its other
    # candidates and a "none of them" slot (logit 0); "pointwise": class-balanced BCE per unit
    loss: str = "listwise"
    none_inputs_per_positive: float = 1.0  # listwise: inputs with no gold candidate (target "none") per gold input
    bf16: bool = False  # the forward pass in bf16 mixed precision (the loss and the saved weights stay fp32)
    # what the cross-encoder classifies: "mean" of the pair's tokens, as the retriever it starts from was trained
    # (bench/RESULTS.md, "The reranker pooled as its retriever was trained"), or "cls" (BERT's pooler over [CLS]);
    # "auto": mean for a BERT-family retriever, else the model's own head
    pooling: str = "auto"

    def __post_init__(self) -> None:
        for name in ("layers", "epochs", "negatives_per_positive", "batch_size", "max_length", "candidate_k"):
            if getattr(self, name) < 1:
                raise ValueError(f"reranker {name} {getattr(self, name)}: must be at least 1")
        if not 0.0 <= self.name_dropout <= 1.0 or self.learning_rate <= 0:
            raise ValueError("reranker name_dropout must lie in [0, 1] and learning_rate be positive")
        if self.loss not in RERANKER_LOSSES:
            raise ValueError(f"reranker loss {self.loss!r}: one of {', '.join(RERANKER_LOSSES)}")
        if self.none_inputs_per_positive < 0:
            raise ValueError(f"reranker none_inputs_per_positive {self.none_inputs_per_positive}: must be >= 0")
        check_pooling(self.pooling, "reranker pooling")


def candidate_mask(x: np.ndarray, k: int) -> np.ndarray:
    """Units (rows of ``unit_features``) the reranker scores: the producer is among the input's top-``k``
    producers of the group by the retriever, or the exact or partial name rule fires."""
    return (x[:, _RANK] >= 1.0 / k - 1e-9) | (x[:, _EXACT] > 0) | (x[:, _PARTIAL] > 0)


def candidates_of(units: Sequence[Unit], x: np.ndarray, k: int) -> tuple[list[Unit], np.ndarray]:
    """Of ``units`` and their head features ``x`` (``unit_features``), the candidates (``candidate_mask``)."""
    keep = candidate_mask(x, k) if len(units) else np.zeros(0, dtype=bool)
    return [u for u, m in zip(units, keep) if m], x[keep]


def candidate_units(tools: Sequence[Tool], encode: Callable[[list[str]], np.ndarray], k: int,
                    pairs=None) -> tuple[list[Unit], np.ndarray]:
    """The candidate units of ``tools``' groups (of the ordered ``pairs`` only, when given) and their head
    features."""
    return candidates_of(*unit_features(tools, encode, pairs), k)


def unit_texts(tools: Sequence[Tool], units: Sequence[Unit], drop: Sequence[bool] | None = None
               ) -> tuple[list[str], list[str]]:
    """The cross-encoder's two texts per unit: the consumer input (``param: ...; input of ...``) and the
    producer (``producer: ...; returns ...``); ``drop``: per unit, names by meaning only."""
    drop = drop or [False] * len(units)
    return ([param_text(tools[c].doc, q, drop_name=d) for (_, c, q), d in zip(units, drop)],
            [producer_text(tools[p].doc, drop_names=d) for (p, _, _), d in zip(units, drop)])


def _load(folder: str | Path):
    """A trained reranker and its tokenizer, pooled as it was trained (older ones by [CLS])."""
    import models.discriminator  # noqa: F401 - registers the mean-pooled model type with the Auto classes
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    return (AutoModelForSequenceClassification.from_pretrained(str(folder), num_labels=1),
            AutoTokenizer.from_pretrained(str(folder)))


def _from_retriever(base: str | Path, layers: int | None, pooling: str):
    """A fresh one-logit cross-encoder on the retriever's first ``layers`` layers, and its pooling. The retriever
    is a bi-encoder trained on the mean of its tokens (``models.sentence_encoder``), whatever pooling record its
    base came with, so ``auto`` is ``mean`` for a BERT-family retriever."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from models.discriminator import mean_pooled_classifier

    head = {"num_labels": 1, **({"num_hidden_layers": layers} if layers else {})}
    config = AutoConfig.from_pretrained(str(base))
    if pooling == "auto":
        pooling = "mean" if config.model_type == "bert" else "cls"
    if pooling == "mean":
        return mean_pooled_classifier(str(base), config, "--reranker-pooling", **head), pooling
    return AutoModelForSequenceClassification.from_pretrained(str(base), **head), pooling


@torch.no_grad()
def reranker_logits(model, tokenizer, texts: tuple[list[str], list[str]], max_length: int = 128,
                    batch_size: int = 64, progress_every_s: float = EVERY_S) -> np.ndarray:
    """One logit per (input, producer) text pair, batched by length (little padding). A pass that runs
    ``progress_every_s`` or longer (a 10^3-tool catalog: minutes) says its count, rate and time left."""
    a, b = texts
    model.eval()
    out = np.zeros(len(a), dtype=np.float32)
    order = sorted(range(len(a)), key=lambda i: len(a[i]) + len(b[i]))
    with stage_progress("parameter reranker", len(order), "pairs", every_s=progress_every_s) as progress:
        for s in range(0, len(order), batch_size):
            idx = order[s:s + batch_size]
            enc = tokenizer([a[i] for i in idx], [b[i] for i in idx], truncation=True, max_length=max_length,
                            padding=True, return_tensors="pt")
            out[idx] = model(**enc).logits[:, 0].float().numpy()
            progress.advance(len(idx))
    return out


@dataclass(frozen=True)
class RerankerExamples:
    """Candidate units of training groups with their gold label (the texts are built per epoch: dropout)."""

    tools: list[Tool]
    units: list[Unit]
    gold: np.ndarray


def reranker_examples(toolsets: Sequence[tuple[ToolSet, set[str]]], encode: Callable[[list[str]], np.ndarray],
                      k: int) -> RerankerExamples:
    """The candidate units of each set's ``groups`` (sets with parameter edges) and their gold labels."""
    tools, units, gold = [], [], []
    for ts, groups in toolsets:
        if not ts.parameter_edges or not groups:
            continue
        part = ts.only_groups(groups)
        got, _ = candidate_units(part.tools, encode, k)
        offset = len(tools)
        tools += part.tools
        units += [(p + offset, c + offset, q) for p, c, q in got]
        gold.append(unit_gold(part, part.tools, got))
    return RerankerExamples(tools, units, np.concatenate(gold) if gold else np.zeros(0, dtype=bool))


class PointwiseLoss:
    """Class-balanced binary cross-entropy per unit. An epoch is every positive and a fresh seeded draw of
    ``negatives_per_positive`` negatives per positive, ``batch_size`` units a step."""

    def __init__(self, examples: RerankerExamples, args: RerankerArguments):
        self.positives = [i for i, g in enumerate(examples.gold) if g]
        self.negatives = [i for i, g in enumerate(examples.gold) if not g]
        self.drawn = min(len(self.negatives), args.negatives_per_positive * len(self.positives))  # per epoch
        self.weight = self.drawn / max(1, len(self.positives))  # positives count as much as the negatives drawn
        self.batch_size = args.batch_size

    def steps_per_epoch(self) -> int:
        return math.ceil((len(self.positives) + self.drawn) / self.batch_size)

    def epoch(self, rng: random.Random) -> list[list[list[int]]]:
        """The epoch's batches, each a list of one-unit lists (the listwise shape)."""
        drawn = self.positives + rng.sample(self.negatives, self.drawn)
        rng.shuffle(drawn)
        return [[[i] for i in drawn[s:s + self.batch_size]] for s in range(0, len(drawn), self.batch_size)]

    def __call__(self, logits: torch.Tensor, lists: list[list[int]], gold: np.ndarray) -> torch.Tensor:
        y = torch.tensor([float(gold[u[0]]) for u in lists])
        w = torch.where(y > 0, self.weight, 1.0)
        return (torch.nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none") * w).sum() / w.sum()


class ListwiseLoss:
    """Per consumer input, cross-entropy of a softmax over its candidate units and a "none of them" slot
    (logit 0): the target is its gold unit, or "none" where it has none. The input's candidates compete, as they
    do when an edge is kept (measured: bench/RESULTS.md, "Parameter reranker", the listwise sweep). An epoch is
    every input with a gold candidate (its gold unit and a fresh draw of up to ``negatives_per_positive`` others)
    and a fresh draw of ``none_inputs_per_positive`` inputs without one per such input; a step holds
    ``batch_size // (negatives_per_positive + 1)`` inputs, about ``batch_size`` units."""

    def __init__(self, examples: RerankerExamples, args: RerankerArguments):
        by_input: dict[tuple[int, str], list[int]] = {}
        for i, (_, c, q) in enumerate(examples.units):
            by_input.setdefault((c, q), []).append(i)
        self.with_gold = [(g, [i for i in idx if not examples.gold[i]])
                          for idx in by_input.values() if (g := [i for i in idx if examples.gold[i]])]
        self.without = [idx for idx in by_input.values() if not any(examples.gold[i] for i in idx)]
        self.n_none = min(len(self.without), round(args.none_inputs_per_positive * len(self.with_gold)))
        self.negatives = args.negatives_per_positive
        self.inputs_per_step = max(1, args.batch_size // (args.negatives_per_positive + 1))

    def steps_per_epoch(self) -> int:
        return math.ceil((len(self.with_gold) + self.n_none) / self.inputs_per_step)

    def epoch(self, rng: random.Random) -> list[list[list[int]]]:
        """The epoch's batches, each a list of inputs, each input the units of its list (gold first, if any)."""
        lists = [[gold[0]] + rng.sample(others, min(len(others), self.negatives)) for gold, others in self.with_gold]
        lists += [rng.sample(idx, min(len(idx), self.negatives + 1)) for idx in rng.sample(self.without, self.n_none)]
        rng.shuffle(lists)
        step = self.inputs_per_step
        return [lists[s:s + step] for s in range(0, len(lists), step)]

    def __call__(self, logits: torch.Tensor, lists: list[list[int]], gold: np.ndarray) -> torch.Tensor:
        loss, at = logits.new_zeros(()), 0
        for units in lists:
            z = torch.cat([logits[at:at + len(units)], logits.new_zeros(1)])
            target = 0 if gold[units[0]] else len(units)  # gold first; else the "none" slot
            loss = loss + torch.nn.functional.cross_entropy(z[None], torch.tensor([target]))
            at += len(units)
        return loss / len(lists)


def train_param_reranker(examples: RerankerExamples, base: str | Path, args: RerankerArguments,
                         folder: Path) -> dict:
    """Train the cross-encoder from ``base`` (the retriever's weights) on ``examples`` with ``args.loss``
    (:class:`ListwiseLoss` or :class:`PointwiseLoss`: fresh seeded negatives each epoch), AdamW with linear
    warm-up and decay; saved to ``folder`` (written whole or not at all). Returns what was done."""
    from transformers import AutoTokenizer

    positives = int(examples.gold.sum())
    negatives = len(examples.gold) - positives
    if not positives or not negatives:
        raise ValueError("the parameter reranker needs gold and non-gold candidate units of training groups "
                         "(a --toolset with parameter edges)")
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    model, pooling = _from_retriever(base, args.layers, args.pooling)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    loss_fn = {"listwise": ListwiseLoss, "pointwise": PointwiseLoss}[args.loss](examples, args)
    total = loss_fn.steps_per_epoch() * args.epochs
    if args.max_steps > 0:
        total = min(total, args.max_steps)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.01)
    warmup = max(1, total // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * max(0.0, (total - s) / total))
    step, started, losses, seen = 0, time.time(), [], 0
    model.train()
    while step < total:
        for lists in loss_fn.epoch(rng):
            if step >= total:
                break
            batch = [i for units in lists for i in units]
            a, b = unit_texts(examples.tools, [examples.units[i] for i in batch],
                              [rng.random() < args.name_dropout for _ in batch])
            enc = tokenizer(a, b, truncation=True, max_length=args.max_length, padding=True, return_tensors="pt")
            with cpu_autocast(args.bf16):
                logits = model(**enc).logits[:, 0]
            loss = loss_fn(logits.float(), lists, examples.gold)
            seen += len(batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            step += 1
            losses.append(float(loss.detach()))
            if step % 50 == 0 or step == total:
                log.info("reranker step %d/%d: loss %.4f (%.0f s)", step, total, float(np.mean(losses[-50:])),
                         time.time() - started)
    folder = Path(folder)
    tmp = hidden_sibling(folder, "tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    replace_dir(tmp, folder)
    return {"steps": step, "pooling": pooling, "positives": positives, "negatives": negatives, "units_seen": seen,
            "seconds": round(time.time() - started, 1), "final_loss": float(np.mean(losses[-50:])),
            "arguments": asdict(args)}


def stacked_rows(tools: Sequence[Tool], units: Sequence[Unit], x: np.ndarray, model, tokenizer, k: int,
                 max_length: int) -> tuple[list[Unit], np.ndarray]:
    """Of ``units`` and their head features ``x`` (``unit_features``), the candidates and their stacked features
    (``STACK_FEATURES``: the reranker's logit, then the head's)."""
    units, x = candidates_of(units, x, k)
    if not units:
        return [], np.zeros((0, len(STACK_FEATURES)), dtype=np.float32)
    logits = reranker_logits(model, tokenizer, unit_texts(tools, units), max_length)
    return units, np.column_stack([logits, x]).astype(np.float32)


def fit_stacked_head(toolsets: Sequence[ToolSet], encode, folder: Path, k: int, max_length: int,
                     output_dropout: float = OUTPUT_DROPOUT, seed: int = 0) -> ParamHead:
    """The stacked head fitted on the candidate units of ``toolsets`` (validation groups, with parameter
    edges) as the head is (``fit_on_toolsets``: with the outputs-removed copy, cut by grouped CV)."""
    model, tokenizer = _load(folder)

    def rows(tools, enc):
        return stacked_rows(tools, *unit_features(tools, enc), model, tokenizer, k, max_length)

    head = fit_on_toolsets(toolsets, encode, output_dropout, seed, rows, STACK_FEATURES, STACK_FEATURES)
    head.candidate_k = k
    return head


class ParamReranker:
    """A trained reranker folder (``<retriever>/param_reranker``) ready to score: the cross-encoder, its
    stacked head (``param_head.json`` beside it) and the candidate rule it was fitted with."""

    def __init__(self, folder: str | Path, max_length: int = 128):
        self.folder = Path(folder)
        self.head = ParamHead.load(self.folder, STACK_FEATURES)
        if not self.head.candidate_k:
            raise ValueError(f"{self.folder}: its stacked head names no candidate_k (train-retriever --reranker)")
        self.model, self.tokenizer = _load(self.folder)
        self.max_length = max_length

    @staticmethod
    def present(retriever: str | Path) -> bool:
        return (Path(retriever) / RERANKER_DIR / "config.json").is_file()

    def score(self, tools: Sequence[Tool], encode, pairs=None) -> tuple[list[Unit], np.ndarray]:
        """p(takes) of every candidate unit of ``tools``' groups (of the ordered ``pairs`` only, when given);
        units outside the candidates are not scored."""
        return self.score_units(tools, *unit_features(tools, encode, pairs))

    def score_units(self, tools: Sequence[Tool], units: Sequence[Unit], x: np.ndarray) -> tuple[list[Unit], np.ndarray]:
        """``score`` of units whose head features are already computed (``unit_features``)."""
        units, stacked = stacked_rows(tools, units, x, self.model, self.tokenizer, self.head.candidate_k,
                                      self.max_length)
        return units, self.head.predict(stacked) if units else np.zeros(0)
