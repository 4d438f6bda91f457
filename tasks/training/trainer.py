"""Discriminator training on the Hugging Face ``Trainer``: token datasets, the stage arguments, the
paper's losses, the best-checkpoint save, and prediction."""
from __future__ import annotations

import logging
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from transformers import (DataCollatorWithPadding, PreTrainedModel, PreTrainedTokenizerBase, Trainer,
                          TrainerCallback, TrainingArguments)
from transformers.trainer_utils import get_last_checkpoint

from models.discriminator import (LOSSES, PreconditionKindLoss, checkpoint_pooling, class_logits, encode_pairs,
                                  has_kind_head, kind_code, model_pooling)
from schemas.tdi import NUM_LABELS
from tasks.common.atomic import hidden_sibling, replace_dir
from tasks.common.progress import EVERY_S, CountProgress, PrefectProgressArtifact, run_say, ticking
from tasks.training.examples import PairExample, swap_partners
from tasks.training.metrics import make_compute_metrics
from tasks.training.progress import ProgressLinesCallback

log = logging.getLogger(__name__)


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
    """A ``datasets.Dataset`` of token ids, labels and the kind head's targets (``kinds``:
    ``models.discriminator.kind_code``), in the order of ``examples``; ``hints``: per example, whether it
    leads with the parameter-match hint (default all)."""
    from datasets import Dataset

    enc = encode_pairs(tokenizer, [e.doc_a for e in examples], [e.doc_b for e in examples], max_length, hints=hints) \
        if examples else {"input_ids": [], "attention_mask": []}
    return Dataset.from_dict({**dict(enc), "labels": [e.label for e in examples],
                              "kinds": [kind_code(e.label, e.kind) for e in examples]})


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
    kind_weight: float = field(default=1.0, metadata={"help": "weight of the kind head's loss (a model without "
                                                                "the head ignores it)"})
    seed: int = field(default=42, metadata={"help": "seed of init, shuffling and dropout"})
    max_steps: int = field(default=-1, metadata={"help": "stop after this many steps (-1: all epochs)"})
    evals_per_epoch: int = field(default=1, metadata={"help": "validation runs (and checkpoints) per epoch"})
    select_metric: str = field(default="dependency_f1_calibrated",
                               metadata={"help": "compute_metrics key that picks the best checkpoint ('loss': lowest)"})
    progress: bool = field(default=True, metadata={"help": "tqdm bars"})
    bf16: bool | None = field(default=None, metadata={
        "help": "bf16 mixed precision (autocast; the weights stay fp32): True or False forces it (train_in_bf16 "
                "decides for train-discriminator); None: on CUDA only"})
    ema_decay: float | None = field(default=None, metadata={
        "help": "validate, keep and save an exponential moving average of the weights (this decay per step, warmed "
                "up as min(decay, (1 + t) / (10 + t))) instead of the last step's; None: the weights as trained"})
    length_grouped: bool = field(default=False, metadata={
        "help": "batches of similar length (the Trainer's group_by_length): about 1.3x the pairs/s on CPU, but a "
                "TDI pair then shares its batch with its swap and its near-duplicates, and pretraining fell to the "
                "class prior (bench/RESULTS.md, 'Pretraining that falls to the prior'); off: batches drawn at random"})


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

    @property
    def at_class_prior(self) -> bool:
        """Whether the kept checkpoint calls every validation pair "no dependency" at the argmax (dependency F1 0):
        a stage that never left the class prior (bench/RESULTS.md, "Pretraining that falls to the prior").
        False where nothing was validated."""
        kept = [h for h in self.evaluations if h.get("step") == self.best_step] or self.evaluations[-1:]
        return bool(kept) and kept[-1].get("eval_dependency_f1") == 0


class WeightAverage:
    """An exponential moving average of a model's floating-point weights, updated after each optimizer step
    (Polyak averaging: the average of the last steps' weights moves less with the batch order and the seed
    than any one step's). ``decay`` is warmed up as min(decay, (1 + t) / (10 + t)), so early steps do not
    pull the average toward the initial weights. Checkpoints hold the average, so a resumed run trains on from
    it and starts a new average."""

    def __init__(self, model: torch.nn.Module, decay: float):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"ema decay {decay}: must lie strictly between 0 and 1")
        self.decay, self.updates = decay, 0
        self.shadow = {n: p.detach().clone() for n, p in model.named_parameters() if p.dtype.is_floating_point}

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        self.updates += 1
        d = min(self.decay, (1 + self.updates) / (10 + self.updates))
        for n, p in model.named_parameters():
            if n in self.shadow:
                self.shadow[n].mul_(d).add_(p.detach(), alpha=1 - d)

    @torch.no_grad()
    def swap(self, model: torch.nn.Module) -> None:
        """Exchange the model's weights with the average (twice: as before)."""
        for n, p in model.named_parameters():
            if n in self.shadow:
                live = p.detach().clone()
                p.copy_(self.shadow[n])
                self.shadow[n].copy_(live)


class WeightAverageCallback(TrainerCallback):
    def __init__(self, average: WeightAverage):
        self.average = average

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.average.update(model)


class DiscriminatorTrainer(Trainer):
    """``Trainer`` whose loss is a loss object on the three classes' logits (Eq. 1 or the category-averaged
    Eq. 2), plus ``kind_weight`` times the kind head's loss where the model has the head. With ``average``
    (a ``WeightAverage``), validation and checkpoints see the averaged weights and training the live ones."""

    def __init__(self, *args, loss: torch.nn.Module, kind_weight: float = 1.0, average: WeightAverage | None = None,
                 **kwargs):
        super().__init__(*args, **kwargs)
        self.loss, self.kind_loss, self.kind_weight = loss, PreconditionKindLoss(), kind_weight
        self.average = average
        if average is not None:
            self.add_callback(WeightAverageCallback(average))

    def _maybe_log_save_evaluate(self, *args, **kwargs):
        if self.average is None:
            return super()._maybe_log_save_evaluate(*args, **kwargs)
        self.average.swap(self.model)  # validate and save the average; train on from the live weights
        try:
            return super()._maybe_log_save_evaluate(*args, **kwargs)
        finally:
            self.average.swap(self.model)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels, kinds = inputs.pop("labels"), inputs.pop("kinds", None)
        outputs = model(**inputs)
        loss = self.loss(class_logits(outputs.logits), labels)
        if kinds is not None and self.kind_weight > 0 and outputs.logits.shape[-1] > NUM_LABELS:
            loss = loss + self.kind_weight * self.kind_loss(outputs.logits, labels, kinds)
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
        train_sampling_strategy="group_by_length" if args.length_grouped else "random",
        eval_strategy="steps" if has_valid else "no",
        save_strategy="steps",
        eval_steps=every,
        save_steps=every,
        save_total_limit=2,  # the best and the latest checkpoint
        load_best_model_at_end=has_valid,
        metric_for_best_model=args.select_metric if has_valid else None,
        greater_is_better=args.select_metric != "loss",
        logging_steps=max(1, min(50, every // 2)),
        label_names=["labels", "kinds"],  # kept by the Trainer's column filter; compute_metrics gets both
        bf16=cuda if args.bf16 is None else args.bf16,
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
    last = get_last_checkpoint(str(out_dir)) if resume and out_dir.is_dir() else None
    # a run folder started with the other pooling (an older run under the new default): its weights, loaded into
    # this model, would be read through a head they were not trained for
    if last is not None and (was := checkpoint_pooling(last)) != model_pooling(model):
        raise ValueError(f"{stage}: {last} was trained pooling by {was}, this model pools by "
                         f"{model_pooling(model)}: resume with --pooling {was}")
    seed_everything(args.seed)
    train_ds = tokenized_dataset(tokenizer, train, args.max_length, hint_mask(len(train), args.hint_dropout, args.seed))
    valid_ds = tokenized_dataset(tokenizer, valid, args.max_length) if valid else None
    partners = swap_partners(valid) if valid else None
    average = WeightAverage(model, args.ema_decay) if args.ema_decay is not None else None
    trainer = DiscriminatorTrainer(
        model=model,
        args=training_arguments(args, out_dir, len(train), valid_ds is not None),
        train_dataset=train_ds,
        eval_dataset=valid_ds,
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=make_compute_metrics(partners) if valid_ds is not None else None,
        loss=LOSSES[loss_name](),
        kind_weight=args.kind_weight,
        average=average,
        callbacks=[ProgressLinesCallback(stage)],  # lines and a Prefect bar beside tqdm's (docs/discriminator.md)
    )
    if resume:
        log.info("%s: %s", stage, f"resuming from {last}" if last else "--resume given but no checkpoint yet, starting fresh")
    trainer.train(resume_from_checkpoint=last)
    if average is not None and valid_ds is None:  # with validation the best checkpoint, saved averaged, is loaded
        average.swap(trainer.model)
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
                     max_length: int, batch_size: int, symmetric: bool = True, progress: bool = False,
                     what: str = "predicting pairs", progress_every_s: float = EVERY_S,
                     with_kind: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray | None]:
    """Class probabilities of ``examples``; ``symmetric`` averages each pair with its swap. ``progress``:
    tqdm bars. A pass of ``progress_every_s`` seconds or longer also logs a line that often (``what``: pairs
    done of all, rate, time left) and feeds a Prefect progress artifact inside a run; it runs in chunks of
    16 batches of similar length for that (each chunk sorted by length inside, as in one pass).
    ``with_kind``: (probabilities, the kind head's p(precondition) per pair, or None without the head)."""
    from models.discriminator import predict_proba

    kind = np.full(len(examples), np.nan) if has_kind_head(model) else None
    if not examples:
        out = np.zeros((0, NUM_LABELS))
        return (out, kind) if with_kind else out
    chunk = max(batch_size * 16, 1)
    out = np.empty((len(examples), NUM_LABELS), dtype=np.float64)
    lines = CountProgress(len(examples), what, "pairs", say=run_say(log), sinks=(PrefectProgressArtifact(""),),
                          every_s=progress_every_s)
    # chunks of pairs of similar length (characters, a proxy for word pieces): as little padding as one pass
    order = sorted(range(len(examples)), key=lambda i: len(examples[i].doc_a) + len(examples[i].doc_b))
    with ticking(lines, last_line="if_long"):  # a timer: one chunk can take longer than a line's period
        for start in range(0, len(order), chunk):
            part = order[start: start + chunk]
            scored = predict_proba(model, tokenizer, [examples[i].doc_a for i in part], [examples[i].doc_b for i in part],
                                   max_length, batch_size, symmetric=symmetric, progress=progress, with_kind=True)
            out[part] = scored.probs.numpy()
            if kind is not None:
                kind[part] = scored.p_precondition.numpy()
            lines.advance(len(part))
    return (out, kind) if with_kind else out
