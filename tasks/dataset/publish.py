"""Publish-or-nothing for dataset folders: stage, gate, then switch to the new version in one step.

A dataset folder is *published* when it holds ``manifest.json`` (``flows.train_discriminator
.published_tdi`` and ``--pretrain-data auto`` read manifests, never folder times). A run writes
its shards and quality report into ``<out>/.staging``; only when the quality gate passes are they
published. A run that fails the gate leaves the published dataset as it was and keeps its staged
files in ``<out>/.failed`` for inspection. ``dataset_lock`` keeps two runs off one folder.

Crash safety: each published version is a folder ``<out>/.versions/<version>`` holding
``shards/``, ``quality.json``, ``README.md`` (mine-tdi's also ``sources.json``) and ``manifest.json``,
and ``<out>/shards``, ``<out>/manifest.json`` etc. are fixed relative links through one link
``<out>/.current`` to it.
A publish renames the staging folder to a new version and then replaces ``.current`` (one
``rename``): a kill -9 at any point leaves readers the previous version whole (its manifest
describing exactly the shards beside it) or the new one whole, never a mix. The next run removes
what a killed one left (``.staging``, versions no link names, half-made links); the lock is an
flock the kernel drops with its holder. A folder published before versions existed is converted
at its next publish: during that one publish it is unpublished (no manifest), never mixed.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tasks.common.locks import BusyError, exclusive_lock
from tasks.dataset.plots import MIX_PLOT
from tasks.dataset.quality import QualityGateError, QualityReport

STAGING = ".staging"
FAILED = ".failed"
VERSIONS = ".versions"  # one folder per published version
CURRENT = ".current"  # link to the published version: the one switch of a publish
MANIFEST = "manifest.json"
# what a publish reaches through CURRENT, each by a fixed link of the same name; the manifest last
PUBLISHED_PARTS = ("shards", "quality.json", "README.md")
# parts a version may hold (mine-tdi's sources.json, tasks/mining/pin.py; mine-tdi's mix.png,
# tasks/dataset/plots.py): linked when it does, the link removed when it does not
OPTIONAL_PARTS = ("sources.json", MIX_PLOT)


def fresh_staging(out_dir: Path) -> Path:
    """An empty ``<out>/.staging`` (a crashed run's leftovers are dropped)."""
    staging = out_dir / STAGING
    shutil.rmtree(staging, ignore_errors=True)
    _tidy(out_dir)
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
    """Make the staged parts plus ``manifest`` the published version in one step (module doc)."""
    text = json.dumps(manifest, indent=2, default=str)
    (staging / MANIFEST).write_text(text)
    version = out_dir / VERSIONS / f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    version.parent.mkdir(exist_ok=True)
    os.rename(staging, version)
    legacy = out_dir / MANIFEST
    if legacy.exists() and not legacy.is_symlink():  # published before versions: unpublish, then convert
        legacy.unlink()
    optional = [part for part in OPTIONAL_PARTS if (version / part).exists()]
    for part in (*PUBLISHED_PARTS, *optional, MANIFEST):
        _link(out_dir / part, f"{CURRENT}/{part}")
    _link(out_dir / CURRENT, f"{VERSIONS}/{version.name}")  # the switch
    for part in sorted(set(OPTIONAL_PARTS) - set(optional)):
        if (out_dir / part).is_symlink():
            (out_dir / part).unlink()  # the previous version's, no longer published
    _tidy(out_dir)
    shutil.rmtree(out_dir / FAILED, ignore_errors=True)
    return json.loads(text)


def published_version(out_dir: Path) -> Path | None:
    """The folder of the published version (None: nothing published with versions)."""
    current = out_dir / CURRENT
    return out_dir / VERSIONS / Path(os.readlink(current)).name if current.is_symlink() else None


def _link(path: Path, target: str) -> None:
    """Make ``path`` a relative link to ``target`` in one rename (a real folder of the layout before
    versions is moved aside first, then deleted)."""
    if path.is_symlink() and os.readlink(path) == target:
        return
    tmp = path.with_name(f"{path.name}.link")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    if path.is_dir() and not path.is_symlink():
        aside = path.with_name(f"{path.name}.old")
        shutil.rmtree(aside, ignore_errors=True)
        os.rename(path, aside)
    os.replace(tmp, path)


def _tidy(out_dir: Path) -> None:
    """Drop what a killed run left: versions no link names, half-made links, the layout before
    versions' ``<part>.old`` and ``manifest.json.tmp``. Call holding ``dataset_lock``."""
    current = published_version(out_dir)
    versions = out_dir / VERSIONS
    if versions.is_dir():
        for version in versions.iterdir():
            if version != current:
                shutil.rmtree(version, ignore_errors=True)
    for name in (CURRENT, *PUBLISHED_PARTS, *OPTIONAL_PARTS, MANIFEST):
        (out_dir / f"{name}.link").unlink(missing_ok=True)
        old = out_dir / f"{name}.old"
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)
    (out_dir / f"{MANIFEST}.tmp").unlink(missing_ok=True)


class DatasetBusyError(BusyError):
    """Another run holds the dataset folder's lock."""


def dataset_lock(out_dir: Path) -> contextlib.AbstractContextManager[None]:
    """Hold ``<out>/.lock`` for a whole run: a second run on the same folder fails at once instead
    of mixing its staged files and books with the first one's (``tasks.common.locks``)."""
    return exclusive_lock(out_dir / ".lock", str(out_dir), DatasetBusyError)
