"""Pieces of discriminator training: pairs from tool sets, splits, batching, the loop, metrics, plots.

The flow (flows/train_discriminator.py) composes these; each piece is small and testable on CPU.
"""
from __future__ import annotations

import json
import logging
import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow.parquet as pq
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase, get_linear_schedule_with_warmup

from models.discriminator import LOSSES, encode_pairs
from schemas.docs import canonical_doc_json
from schemas.tdi import ID2LABEL, LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY, NUM_LABELS, TDI_PAIR_SCHEMA
from schemas.toolset import ToolSet

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
# Batching: token ids once, dynamic padding, length-sorted buckets


class TokenizedPairs:
    def __init__(self, tokenizer: PreTrainedTokenizerBase, examples: Sequence[PairExample], max_length: int):
        self.tokenizer = tokenizer
        self.encoded = (encode_pairs(tokenizer, [e.doc_a for e in examples], [e.doc_b for e in examples], max_length)
                        if examples else {"input_ids": [], "token_type_ids": [], "attention_mask": []})
        self.labels = [e.label for e in examples]
        self.lengths = [len(ids) for ids in self.encoded["input_ids"]]

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        feats = {k: [v[i] for i in indices] for k, v in self.encoded.items()}
        out = self.tokenizer.pad(feats, return_tensors="pt")
        out["labels"] = torch.tensor([self.labels[i] for i in indices], dtype=torch.long)
        return dict(out)


def bucket_batches(lengths: Sequence[int], batch_size: int, seed: int | None, bucket_factor: int = 50) -> list[list[int]]:
    """Index batches of similar length: little padding, still a random order when seeded.

    With a seed: shuffle, cut into chunks of ``batch_size * bucket_factor``, sort each chunk by
    length, cut into batches and shuffle the batch order. Without: one length-sorted pass (eval).
    """
    idx = list(range(len(lengths)))
    if seed is None:
        idx.sort(key=lambda i: lengths[i])
        return [idx[s : s + batch_size] for s in range(0, len(idx), batch_size)]
    rng = random.Random(seed)
    rng.shuffle(idx)
    chunk = batch_size * bucket_factor
    batches = []
    for s in range(0, len(idx), chunk):
        part = sorted(idx[s : s + chunk], key=lambda i: lengths[i])
        batches += [part[j : j + batch_size] for j in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


# ---------------------------------------------------------------------------------------------
# Metrics


def classification_metrics(y_true: Sequence[int], y_pred: Sequence[int]) -> dict[str, Any]:
    """Per-class and macro P/R/F1, accuracy, the confusion matrix and the dependency figures.

    ``dependency``: micro P/R/F1 over the two dependency classes, i.e. a pair counts as a true
    positive when it is predicted as a dependency *with the right direction*; precision is
    over all pairs predicted as 0 or 2, recall over all pairs labelled 0 or 2. This is the
    edge-finding quality the tool graph depends on (our reading of the paper's Table 3).
    """
    y_true, y_pred = np.asarray(y_true, dtype=int), np.asarray(y_pred, dtype=int)
    cm = np.zeros((NUM_LABELS, NUM_LABELS), dtype=int)  # rows: true, cols: predicted
    np.add.at(cm, (y_true, y_pred), 1)

    def prf(tp: float, n_pred: float, n_true: float) -> dict[str, float]:
        p = tp / n_pred if n_pred else 0.0
        r = tp / n_true if n_true else 0.0
        return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0}

    per_class = {}
    for k in range(NUM_LABELS):
        per_class[ID2LABEL[k]] = {**prf(cm[k, k], cm[:, k].sum(), cm[k, :].sum()), "support": int(cm[k, :].sum())}
    macro = {m: float(np.mean([per_class[ID2LABEL[k]][m] for k in range(NUM_LABELS)])) for m in ("precision", "recall", "f1")}
    dep = list(DEPENDENCY_CLASSES)
    dependency = prf(sum(cm[k, k] for k in dep), cm[:, dep].sum(), cm[dep, :].sum())
    dependency_macro = {m: float(np.mean([per_class[ID2LABEL[k]][m] for k in dep])) for m in ("precision", "recall", "f1")}
    return {
        "n": int(len(y_true)),
        "accuracy": float((y_true == y_pred).mean()) if len(y_true) else 0.0,
        "per_class": per_class,
        "macro": macro,
        "dependency": {k: float(v) for k, v in dependency.items()},
        "dependency_macro": dependency_macro,
        "confusion_matrix": cm.tolist(),
    }


def format_metrics_table(metrics: dict[str, Any], title: str) -> str:
    rows = [f"{title} (n={metrics['n']}, accuracy={metrics['accuracy']:.3f})",
            f"{'class':<28}{'P':>8}{'R':>8}{'F1':>8}{'support':>9}"]
    for name, m in metrics["per_class"].items():
        rows.append(f"{name:<28}{m['precision']:>8.3f}{m['recall']:>8.3f}{m['f1']:>8.3f}{m['support']:>9}")
    for name in ("macro", "dependency", "dependency_macro"):
        m = metrics[name]
        rows.append(f"{name:<28}{m['precision']:>8.3f}{m['recall']:>8.3f}{m['f1']:>8.3f}")
    return "\n".join(rows)


# ---------------------------------------------------------------------------------------------
# The training loop


@dataclass
class LoopConfig:
    epochs: int = 3
    batch_size: int = 32
    eval_batch_size: int = 128
    learning_rate: float = 3e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    max_length: int = 256
    seed: int = 42
    max_steps_per_epoch: int | None = None  # bound CPU time; None = the whole epoch
    select_metric: str = "dependency.f1"  # "<section>.<metric>" of classification_metrics
    progress: bool = True


@dataclass
class TrainResult:
    best_dir: Path
    best_score: float
    best_epoch: int
    history: list[dict[str, Any]] = field(default_factory=list)
    step_losses: list[tuple[int, float]] = field(default_factory=list)


def pick_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if not torch.cuda.is_available():  # CPU kernels have deterministic variants; CUDA runs stay fast
        torch.use_deterministic_algorithms(True, warn_only=True)


def metric_value(metrics: dict[str, Any], path: str) -> float:
    section, name = path.split(".")
    return float(metrics[section][name])


@torch.no_grad()
def evaluate(model: PreTrainedModel, data: TokenizedPairs, batch_size: int, loss_name: str = "ce") -> tuple[dict[str, Any], float]:
    """Metrics and mean loss of ``model`` on ``data``."""
    model.eval()
    device = next(model.parameters()).device
    preds = np.empty(len(data), dtype=int)
    losses, weights = [], []
    for idx in bucket_batches(data.lengths, batch_size, seed=None):
        batch = {k: v.to(device) for k, v in data.batch(idx).items()}
        labels = batch.pop("labels")
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(**batch).logits
        losses.append(float(LOSSES[loss_name](logits, labels)))
        weights.append(len(idx))
        preds[idx] = logits.argmax(-1).cpu().numpy()
    metrics = classification_metrics(data.labels, preds.tolist())
    return metrics, float(np.average(losses, weights=weights)) if losses else float("nan")


def _save_checkpoint(model, tokenizer, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def train_classifier(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train: Sequence[PairExample],
    valid: Sequence[PairExample],
    cfg: LoopConfig,
    out_dir: Path,
    loss_name: str = "ce",
    resume: bool = False,
    stage: str = "train",
    best_dir: Path | None = None,
) -> TrainResult:
    """AdamW + linear warmup, grad clipping, bf16 autocast on CUDA, best-on-validation checkpoint.

    ``out_dir/last`` holds model, tokenizer and ``training_state.pt`` (optimizer, scheduler,
    epoch, history) after every epoch; with ``resume`` training continues from there. The
    checkpoint with the best ``cfg.select_metric`` on ``valid`` is saved to ``best_dir``
    (default ``out_dir/best``).
    """
    out_dir = Path(out_dir)
    device = pick_device()
    seed_everything(cfg.seed)
    train_data = TokenizedPairs(tokenizer, train, cfg.max_length)
    valid_data = TokenizedPairs(tokenizer, valid, cfg.max_length)
    if not len(train_data):
        raise ValueError(f"{stage}: no training pairs")
    steps_per_epoch = math.ceil(len(train_data) / cfg.batch_size)
    if cfg.max_steps_per_epoch:
        steps_per_epoch = min(steps_per_epoch, cfg.max_steps_per_epoch)
    total_steps = steps_per_epoch * cfg.epochs

    no_decay = ("bias", "LayerNorm.weight", "layernorm", "norm.weight")
    params = [
        {"params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)], "weight_decay": cfg.weight_decay},
        {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(cfg.warmup_ratio * total_steps), total_steps)

    result = TrainResult(best_dir=Path(best_dir or out_dir / "best"), best_score=-float("inf"), best_epoch=-1)
    start_epoch, global_step = 0, 0
    state_file = out_dir / "last" / "training_state.pt"
    if resume and state_file.exists():
        state = torch.load(state_file, weights_only=False)
        from transformers import AutoModelForSequenceClassification

        model.load_state_dict(AutoModelForSequenceClassification.from_pretrained(out_dir / "last").state_dict())
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        start_epoch, global_step = state["epoch"] + 1, state["global_step"]
        result.history, result.step_losses = state["history"], state["step_losses"]
        result.best_score, result.best_epoch = state["best_score"], state["best_epoch"]
        log.info("%s: resumed from %s after epoch %d (step %d)", stage, state_file, state["epoch"], global_step)
    elif resume:
        log.info("%s: --resume given but no %s yet, starting fresh", stage, state_file)
    model.to(device)
    loss_fn = LOSSES[loss_name]

    for epoch in range(start_epoch, cfg.epochs):
        model.train()
        batches = bucket_batches(train_data.lengths, cfg.batch_size, seed=cfg.seed + epoch)[:steps_per_epoch]
        running, seen = 0.0, 0
        bar = tqdm(batches, desc=f"{stage} epoch {epoch + 1}/{cfg.epochs}", disable=not cfg.progress, leave=False)
        for idx in bar:
            batch = {k: v.to(device) for k, v in train_data.batch(idx).items()}
            labels = batch.pop("labels")
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                logits = model(**batch).logits
            loss = loss_fn(logits, labels)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            global_step += 1
            loss_value = loss.item()
            running += loss_value * len(idx)
            seen += len(idx)
            result.step_losses.append((global_step, loss_value))
            bar.set_postfix(loss=f"{loss_value:.4f}")
        metrics, valid_loss = evaluate(model, valid_data, cfg.eval_batch_size, loss_name) if len(valid_data) else ({}, float("nan"))
        score = metric_value(metrics, cfg.select_metric) if metrics else float(epoch)  # no validation: keep the last
        result.history.append({"epoch": epoch + 1, "step": global_step, "train_loss": running / max(seen, 1),
                               "valid_loss": valid_loss, "valid": metrics, "score": score})
        log.info("%s epoch %d: train loss %.4f, valid loss %.4f, %s %.4f", stage, epoch + 1,
                 running / max(seen, 1), valid_loss, cfg.select_metric, score)
        if score > result.best_score:
            result.best_score, result.best_epoch = score, epoch + 1
            _save_checkpoint(model, tokenizer, result.best_dir)
        _save_checkpoint(model, tokenizer, out_dir / "last")
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "epoch": epoch,
                    "global_step": global_step, "history": result.history, "step_losses": result.step_losses,
                    "best_score": result.best_score, "best_epoch": result.best_epoch, "config": asdict(cfg)}, state_file)
    return result


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
        epochs = [h["epoch"] for h in res.history]
        axes[1].plot(epochs, [h["valid_loss"] for h in res.history], marker="o", label=f"{stage} valid loss")
        axes[1].plot(epochs, [h["score"] for h in res.history], marker="s", linestyle="--", label=f"{stage} valid score")
    axes[0].set_xlabel("step")
    axes[1].set_xlabel("epoch")
    for ax in axes:
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return path
