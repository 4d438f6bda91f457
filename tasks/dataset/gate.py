"""The last steps build-tdi and mine-tdi share, as Prefect tasks: the quality gate on the staged shards,
then the dataset's mix plot and the flow's card and the publish (``tasks.dataset.publish``), and the card as the run's
artifact."""
from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from tasks.common.plots import markdown_table, show_plot
from tasks.common.progress import EVERY_S, stage_progress
from tasks.dataset.plots import MIX_PLOT, origin_counts, plot_dataset_mix
from tasks.dataset.publish import gate_staged, publish_staged
from tasks.dataset.quality import QualityReport, validate_shards

PROGRESS_EVERY_S = EVERY_S  # seconds between two progress lines of the gate

# write_card(out_dir, manifest, folder): the README.md of the dataset at out_dir, written into folder
CardWriter = Callable[[Path, dict[str, Any], Path], Path]


@task(name="quality-gate", cache_policy=NO_CACHE)
def quality_gate(out_dir: Path, staging: Path) -> QualityReport:
    """Validate the staged shards; a failure publishes nothing (``tasks.dataset.publish``)."""
    # the total is set once the suites are made
    with stage_progress("quality gate", 0, "checks", say=get_run_logger().info, every_s=PROGRESS_EVERY_S) as progress:
        report = gate_staged(out_dir, staging, functools.partial(validate_shards, progress=progress))
    get_run_logger().info("quality gate: %d checks passed", len(report.checks))
    return report


@task(name="publish", cache_policy=NO_CACHE)
def publish(out_dir: Path, staging: Path, manifest: dict[str, Any], write_card: CardWriter) -> dict[str, Any]:
    plot_dataset_mix(staging, manifest)  # staged: published with the shards, linked from the card
    write_card(out_dir, manifest, staging)
    return publish_staged(out_dir, staging, manifest)


def publish_with_card(out_dir: Path, staging: Path, manifest: dict[str, Any], write_card: CardWriter,
                      artifact_key: str) -> dict[str, Any]:
    """Publish the staged dataset with its card, then show the card as the run's markdown artifact
    ``artifact_key``; returns the published manifest."""
    manifest = publish(out_dir, staging, manifest, write_card)
    create_markdown_artifact(key=artifact_key, markdown=(out_dir / "README.md").read_text(), description=str(out_dir))
    show_plot(out_dir / MIX_PLOT, f"{out_dir.name}: class and origin mix", mix_tables(out_dir, manifest),
              key=f"{artifact_key}-mix")
    return manifest


def mix_tables(folder: Path, manifest: dict[str, Any]) -> str:
    """The numbers of ``mix.png``: rows per class and per origin in each split."""
    origins = origin_counts(folder, manifest)
    return "\n\n".join([markdown_table([{"split": split, **per} for split, per in manifest["counts"].items()]),
                        markdown_table([{"split": split, **per} for split, per in origins.items()])])
