"""Plots of a training run: the confusion matrix and the loss / F1 curves (matplotlib, Agg: no display
needed)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from schemas.tdi import ID2LABEL, NUM_LABELS
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
