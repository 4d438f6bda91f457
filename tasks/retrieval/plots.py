"""eval-retrieval's ``retrieval.png``: Recall@5 and NDCG@5 of every method, one panel per evaluation set (a dataset
on all its queries; a dataset's held-out test queries, where ToolNet's methods are scored, as a panel of its own),
drawn from the metric rows the flow writes to ``retrieval_metrics`` and ``retrieval.md``."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tasks.common.plots import pyplot

RETRIEVAL_PLOT = "retrieval.png"  # beside retrieval.md
PLOT_METRICS = (("recall", "R@5"), ("ndcg", "NDCG@5"))  # what the figure draws, at k = PLOT_K
PLOT_K = 5


def evaluation_set(row: dict[str, Any]) -> str:
    """The panel a metric row belongs to: the dataset, and the query split when it is not every query."""
    split = row.get("query_split", "all")
    return row["dataset"] if split == "all" else f"{row['dataset']} ({split} queries)"


def plot_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows the figure draws, one per set and method (k = 5), in the rows' order: what the artifact's table
    shows beside it."""
    return [{"set": evaluation_set(r), "method": r["method"], "queries": r["n_queries"],
             **{label: r[metric] for metric, label in PLOT_METRICS}} for r in rows if r["k"] == PLOT_K]


def retrieval_figure(rows: Sequence[dict[str, Any]]):
    """The figure: per evaluation set a panel of horizontal bars, one pair per method (R@5, NDCG@5), each bar
    labelled with its value. No rows at k = 5: a figure that says so."""
    plt = pyplot()
    drawn = plot_rows(rows)
    sets = list(dict.fromkeys(r["set"] for r in drawn))
    per_set = {s: [r for r in drawn if r["set"] == s] for s in sets}
    heights = [max(len(v), 1) * 0.55 + 1.0 for v in per_set.values()] or [2.0]
    fig, axes = plt.subplots(len(heights), 1, figsize=(8.5, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    if not sets:
        axes[0][0].text(0.5, 0.5, f"no metric rows at k = {PLOT_K}", ha="center", va="center",
                        transform=axes[0][0].transAxes)
        axes[0][0].set_axis_off()
    bar = 0.38
    for ax, (name, items) in zip(axes[:, 0], per_set.items()):
        ys = list(range(len(items)))
        for i, (_metric, label) in enumerate(PLOT_METRICS):
            bars = ax.barh([y + (i - 0.5) * bar for y in ys], [r[label] for r in items], bar, label=label)
            ax.bar_label(bars, fmt="%.3f", fontsize=7, padding=2)
        ax.set_yticks(ys, [r["method"] for r in items], fontsize=8)
        ax.invert_yaxis()  # the table's order, top to bottom
        ax.set_xlim(0, 1.08)
        ax.set_title(f"{name}: {items[0]['queries']} queries", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[-1][0].set_xlabel(f"score at k = {PLOT_K} (every query ranks all tools of its data set)", fontsize=8)
    fig.tight_layout()
    return fig


def plot_retrieval(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """``retrieval_figure`` written to ``path``; returns the path."""
    fig = retrieval_figure(rows)
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return Path(path)
