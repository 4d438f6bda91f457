"""Publish-or-nothing for dataset folders: stage, gate, then swap in.

A dataset folder is *published* when it holds ``manifest.json`` (``flows.train_discriminator
.published_tdi`` and ``--pretrain-data auto`` read manifests, never folder times). A run writes
its shards and quality report into ``<out>/.staging``; only when the quality gate passes are they
moved into place, the manifest last. A run that fails the gate leaves the published dataset as it
was and keeps its staged files in ``<out>/.failed`` for inspection. ``dataset_lock`` keeps two runs
off one folder.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tasks.locks import BusyError, exclusive_lock
from tasks.quality import QualityGateError, QualityReport

STAGING = ".staging"
FAILED = ".failed"
# what a publish moves from staging into the dataset folder, the manifest last
PUBLISHED_PARTS = ("shards", "quality.json", "README.md")


def fresh_staging(out_dir: Path) -> Path:
    """An empty ``<out>/.staging`` (a crashed run's leftovers are dropped)."""
    staging = out_dir / STAGING
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def gate_staged(out_dir: Path, staging: Path, validate: Callable[[Path], QualityReport]) -> QualityReport:
    """Run the quality gate on the staged shards; on failure move them to ``<out>/.failed`` and raise."""
    report = validate(staging / "shards")
    (staging / "quality.json").write_text(
        json.dumps({"success": report.success, "checks": report.checks}, indent=2, default=str))
    if not report.success:
        failed = out_dir / FAILED
        shutil.rmtree(failed, ignore_errors=True)
        os.replace(staging, failed)
        raise QualityGateError(
            f"{len(report.failures())} quality checks failed; nothing was published (the staged shards and "
            f"quality.json are in {failed}): {json.dumps(report.failures(), default=str)[:2000]}")
    return report


def publish_staged(out_dir: Path, staging: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Swap the staged parts in and write ``manifest.json`` last (atomically).

    The old manifest goes first, so a crash half-way leaves a folder that is not published rather
    than a manifest that describes other shards.
    """
    (out_dir / "manifest.json").unlink(missing_ok=True)
    for part in PUBLISHED_PARTS:
        src, dst = staging / part, out_dir / part
        if not src.exists():
            continue
        old = out_dir / f"{part}.old"
        if old.is_dir():
            shutil.rmtree(old)
        if dst.exists():
            os.replace(dst, old)
        os.replace(src, dst)
        if old.is_dir():
            shutil.rmtree(old)
        else:
            old.unlink(missing_ok=True)
    text = json.dumps(manifest, indent=2, default=str)
    tmp = out_dir / "manifest.json.tmp"
    tmp.write_text(text)
    os.replace(tmp, out_dir / "manifest.json")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(out_dir / FAILED, ignore_errors=True)
    return json.loads(text)


class DatasetBusyError(BusyError):
    """Another run holds the dataset folder's lock."""


def dataset_lock(out_dir: Path) -> contextlib.AbstractContextManager[None]:
    """Hold ``<out>/.lock`` for a whole run: a second run on the same folder fails at once instead
    of mixing its staged files and books with the first one's (``tasks.locks``)."""
    return exclusive_lock(out_dir / ".lock", str(out_dir), DatasetBusyError)
