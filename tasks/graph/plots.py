"""build-graph's ``candidate_recall.png``: per tool set with gold edges, the share of gold edges candidate pruning
keeps (in their own direction) against the share of ordered same-group pairs it keeps (what scoring costs), one
curve per pruning strategy over the retrieval rule's k (``tasks.graph.candidates.retrieval_recall``), and the
build's own setting marked (its ``PruningResult``)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tasks.common.plots import pyplot
from tasks.graph.pruning import PruningResult, pruning_rules

CANDIDATE_RECALL_PLOT = "candidate_recall.png"  # beside the warehouse (build-graph's metrics live in it)
CURVE_KS = (1, 3, 5, 10)  # the retrieval rule's k along each curve (the build's own k is added)
CURVE_STRATEGIES = ("retrieval", "params+retrieval")  # besides the build's own strategy, when it has the rule
MARKERS, STYLES = ("o", "s", "^", "D"), ("-", "--", ":", "-.")


def curve_settings(k: int, share: float | None) -> list[tuple[int, float | None]]:
    """The (k, share cap) settings of the curves: ``CURVE_KS`` and the build's k, at the build's share cap."""
    return [(x, share) for x in sorted({*CURVE_KS, k})]


def curve_strategies(strategy: str) -> list[str]:
    """``CURVE_STRATEGIES`` and the build's strategy when the retrieval rule is in it (without it, k changes
    nothing: the build's point alone shows it)."""
    extra = [strategy] if "retrieval" in pruning_rules(strategy) else []
    return list(dict.fromkeys([*CURVE_STRATEGIES, *extra]))


def operating_point(pruning: PruningResult, k: int) -> dict[str, Any]:
    """The build's own point: its strategy, the retrieval k it used, recall and ordered share."""
    return {"strategy": pruning.strategy, "k": k if "retrieval" in pruning_rules(pruning.strategy) else None,
            "recall": pruning.known_edge_recall, "ordered_share": pruning.ordered_share,
            "gold_edges": pruning.known_edges_in_groups, "kept": pruning.known_edges_kept,
            "ordered_pairs_kept": pruning.ordered_pairs_kept, "ordered_pairs": pruning.ordered_pairs_in_groups}


def table_rows(curves: Mapping[str, Sequence[dict]], points: Mapping[str, dict]) -> list[dict]:
    """What the figure draws, a row per point: the artifact's table."""
    rows = []
    for dataset, curve in curves.items():
        rows += [{"dataset": dataset, "strategy": r["strategy"], "k": r["k"], "recall": r["recall"],
                  "ordered_share": r["ordered_share"], "gold_kept": f"{r['kept']}/{r['gold_edges']}", "build": ""}
                 for r in curve]
        p = points[dataset]
        rows.append({"dataset": dataset, "strategy": p["strategy"], "k": p["k"], "recall": p["recall"],
                     "ordered_share": p["ordered_share"], "gold_kept": f"{p['kept']}/{p['gold_edges']}",
                     "build": "this build"})
    return rows


def candidate_recall_figure(curves: Mapping[str, Sequence[dict]], points: Mapping[str, dict], title: str = ""):
    """One panel per tool set: a line per strategy through its (ordered share, recall) at each k (``curves``:
    ``retrieval_recall`` rows), each point labelled with its k, and the build's point (``points``) as a star."""
    plt = pyplot()
    names = list(curves)
    fig, axes = plt.subplots(1, max(len(names), 1), figsize=(5.4 * max(len(names), 1), 4.6), squeeze=False)
    if not names:
        axes[0][0].text(0.5, 0.5, "no tool set with gold edges", ha="center", va="center",
                        transform=axes[0][0].transAxes)
        axes[0][0].set_axis_off()
    for ax, name in zip(axes[0], names):
        rows = [r for r in curves[name] if r["recall"] is not None]
        for n, strategy in enumerate(dict.fromkeys(r["strategy"] for r in rows)):
            line = sorted((r for r in rows if r["strategy"] == strategy), key=lambda r: r["k"])
            xs, ys = [r["ordered_share"] for r in line], [r["recall"] for r in line]
            # styles differ: where tools declare no inputs, params+retrieval is retrieval's curve, drawn over it
            ax.plot(xs, ys, marker=MARKERS[n % len(MARKERS)], markersize=5 - n % 3, linestyle=STYLES[n % len(STYLES)],
                    label=strategy)
            for r in line:
                ax.annotate(f"k={r['k']}", (r["ordered_share"], r["recall"]), textcoords="offset points",
                            xytext=(4, -9), fontsize=6)
        p = points[name]
        if p["recall"] is not None:
            k = f", k={p['k']}" if p["k"] is not None else ""
            ax.scatter([p["ordered_share"]], [p["recall"]], marker="*", s=220, color="black", zorder=4,
                       label=f"this build: {p['strategy']}{k}\n(recall {p['recall']:.3f}, share {p['ordered_share']:.3f})")
        gold = p["gold_edges"]
        ax.set(xlim=(0, min(1.0, max([p["ordered_share"], *(r["ordered_share"] for r in rows)]) * 1.15 + 0.01)),
               ylim=(-0.02, 1.02), xlabel="share of ordered same-group pairs kept",
               ylabel="gold edges kept (own direction)", title=f"{name}: {gold} gold edges in groups")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_candidate_recall(curves: Mapping[str, Sequence[dict]], points: Mapping[str, dict], path: Path,
                          title: str = "") -> Path:
    """``candidate_recall_figure`` written to ``path``; returns the path."""
    fig = candidate_recall_figure(curves, points, title)
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return Path(path)
