"""The plot of a TDI dataset folder: ``mix.png`` (classes per split, row origins per split, dependent pairs per
kind), drawn from its manifest and the ``origin`` column of its shards, for mine-tdi's and build-tdi's folders
alike; the shared publish step (tasks/dataset/gate.py) stages it beside the shards and the card links it."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from tasks.common.plots import pyplot

MIX_PLOT = "mix.png"  # beside the shards of a dataset version; the card links it
# the origins the two flows write (schemas/tdi.py's origin column), in the order the plot shows them
KNOWN_ORIGINS = ("mined", "mined_swapped", "hard_negative", "mined_shuffled", "shuffled", "validated", "swapped")


def origin_counts(folder: Path, manifest: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Rows per origin in each split: the manifest's ``rows_by_class_and_origin`` summed over classes, or, for a
    manifest written before it, read from the ``origin`` column of the shards the manifest lists."""
    table = manifest.get("rows_by_class_and_origin")
    if table:
        return {split: dict(sum((Counter(origins) for origins in per.values()), Counter())) for split, per in table.items()}
    import pyarrow.parquet as pq

    out: dict[str, Counter] = {}
    for shard in manifest["shards"]:
        column = pq.read_table(folder / shard["file"], columns=["origin"]).column("origin").to_pylist()
        out.setdefault(shard["split"], Counter()).update(column)
    return {split: dict(c) for split, c in out.items()}


def _grouped_bars(ax, table: dict[str, dict[str, int]], keys: list[str], title: str) -> None:
    """One group of bars per key, one bar per split, each labelled with its count."""
    splits = list(table)
    width = 0.8 / max(len(splits), 1)
    for i, split in enumerate(splits):
        xs = [k + (i - (len(splits) - 1) / 2) * width for k in range(len(keys))]
        bars = ax.bar(xs, [table[split].get(key, 0) for key in keys], width, label=split)
        ax.bar_label(bars, fontsize=7)
    ax.set_xticks(range(len(keys)), keys, rotation=25, ha="right")
    ax.set_title(title)
    ax.set_ylabel("rows" if "pairs" not in title else "pairs")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def plot_dataset_mix(folder: Path, manifest: dict[str, Any] | None = None, path: Path | None = None) -> Path:
    """``mix.png`` of the dataset in ``folder`` (its shards; ``manifest`` default: ``folder/manifest.json``,
    so a staging folder, before the manifest is written, passes it): bars of the class mix per split, the
    origin mix per split and the dependent pairs per kind (a manifest from before kinds: that panel says so).
    Written to ``path`` (default ``folder/mix.png``); returns the path."""
    folder = Path(folder)
    if manifest is None:
        manifest = json.loads((folder / "manifest.json").read_text())
    path = Path(path) if path is not None else folder / MIX_PLOT
    counts: dict[str, dict[str, int]] = manifest["counts"]
    origins = origin_counts(folder, manifest)
    seen = {o for per in origins.values() for o in per}
    origin_keys = [o for o in KNOWN_ORIGINS if o in seen] + sorted(seen - set(KNOWN_ORIGINS))
    kinds = manifest.get("dependent_pairs_by_kind") or {}

    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    labels = list(next(iter(counts.values()), {}))
    _grouped_bars(axes[0], counts, labels, "classes per split")
    _grouped_bars(axes[1], origins, origin_keys, "row origins per split")
    if kinds:
        _grouped_bars(axes[2], kinds, list(next(iter(kinds.values()))), "dependent pairs per kind")
    else:
        axes[2].text(0.5, 0.5, "no dependency kinds in this manifest\n(written before schema version 3)",
                     ha="center", va="center", transform=axes[2].transAxes)
        axes[2].set_axis_off()
    total = sum(n for per in counts.values() for n in per.values())
    fig.suptitle(f"{manifest.get('dataset', folder.name)}: {total} rows")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
