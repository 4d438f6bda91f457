"""Plots of a training run: the confusion matrix, the loss / F1 curves and the dependency precision-recall
curve against the name rules (matplotlib, Agg: no display needed)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from schemas.tdi import ID2LABEL, NUM_LABELS
from tasks.common.plots import pyplot
from tasks.training.metrics import dependency_curve
from tasks.training.trainer import TrainResult


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


def dependency_pr_curve(y_true: Sequence[int], probs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Precision, recall and cut of calling every pair with p(dependency) = p0 + p2 >= cut a dependency, at each
    cut between distinct scores: the curve ``tasks.training.metrics.choose_threshold`` picks its cut on
    (unweighted; a true positive has the right direction)."""
    cuts, tp, k, last_of_tie, n_true = dependency_curve(y_true, probs)
    if not n_true:  # no recall to draw
        return np.zeros(0), np.zeros(0), np.zeros(0)
    return (tp / k)[last_of_tie], (tp / n_true)[last_of_tie], cuts[last_of_tie]


# the points drawn over each curve: (label, section of the report, marker); the partial rule counts exact and
# partial name matches (tasks.training.metrics.rule_labels)
PR_POINTS = (("name rule, exact", "schema_rule", "s"), ("name rule, exact or partial", "schema_rule_partial", "D"),
             ("discriminator, argmax", "argmax", "^"), ("discriminator, calibrated cut", "calibrated", "o"))


def plot_precision_recall(sets: dict[str, tuple[Sequence[int], np.ndarray, dict[str, Any]]], path: Path) -> Path:
    """One panel per evaluation set ``{title: (gold labels, class probabilities, its report section)}``: the
    discriminator's dependency precision-recall curve (``dependency_pr_curve``) with the name rules, argmax and
    the calibrated cut as points (their dependency P/R from the report, direction must be right)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, max(len(sets), 1), figsize=(5.2 * max(len(sets), 1), 4.6), squeeze=False)
    for ax, (title, (y, probs, section)) in zip(axes[0], sets.items()):
        precision, recall, _ = dependency_pr_curve(y, probs)
        if len(precision):
            ax.plot(recall, precision, marker=".", markersize=3, label="discriminator, p(dependency) >= cut, each cut")
        else:
            ax.text(0.5, 0.5, "no dependency pairs", ha="center", va="center", transform=ax.transAxes)
        for label, key, marker in PR_POINTS:
            if key in section:
                d = section[key]["dependency"]
                ax.scatter([d["recall"]], [d["precision"]], marker=marker, s=50, zorder=3,
                           label=f"{label} (P {d['precision']:.2f}, R {d['recall']:.2f})"
                                 + (f", cut {section[key]['threshold']:.3f}" if key == "calibrated" else ""))
        ax.set(xlim=(-0.02, 1.02), ylim=(-0.02, 1.02), xlabel="recall (dependency, right direction)",
               ylabel="precision", title=f"{title} (n={len(y)})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
