"""Lineage rows (table ``edge_lineage``): what produced the edges of one dataset and source.

Every edge joins to one row on (dataset, source); the build refuses edges without one. Hashes
are sha256: of each input file, and of a checkpoint folder as a whole (its files' relative
names and contents, sorted), so two builds from the same weights show the same value.
"""
from __future__ import annotations

import hashlib
import json
from datetime import datetime
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tasks.common.checksums import sha256_file


def folder_sha256(folder: Path) -> str:
    """sha256 over the sorted (relative name, file sha256) pairs of every file under ``folder``."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(folder).as_posix()}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest()


def tdi_manifest_of(checkpoint: Path) -> Path | None:
    """The manifest.json of the TDI dataset the checkpoint was pretrained on, as its run's
    metrics.json names it (``config.pretrain_data``; the checkpoint's own copy first)."""
    for metrics in (checkpoint / "metrics.json", checkpoint.parent / "metrics.json"):
        if metrics.is_file():
            data = (json.loads(metrics.read_text(encoding="utf-8")).get("config") or {}).get("pretrain_data")
            if data and data != "none":
                manifest = Path(data) / "manifest.json"
                return manifest if manifest.is_file() else None
    return None


def checkpoint_lineage(checkpoint: str | Path) -> dict[str, Any]:
    """Checkpoint path and hash, and the TDI manifest it was trained on with its hash. Training
    does not record the manifest's hash, so a TDI folder rewritten after training shows one the
    model never saw: ``tdi_manifest_newer_than_checkpoint`` says so."""
    folder = Path(checkpoint)
    manifest = tdi_manifest_of(folder)
    weights = [p.stat().st_mtime for p in folder.iterdir() if p.is_file()]
    return {"checkpoint": str(folder), "checkpoint_sha256": folder_sha256(folder),
            "tdi_manifest": str(manifest) if manifest else None,
            "tdi_manifest_sha256": sha256_file(manifest) if manifest else None,
            "tdi_manifest_newer_than_checkpoint":
                manifest.stat().st_mtime > max(weights) if manifest and weights else None}


def lineage_row(dataset: str, source: str, producer: str, built_at: datetime, flow_run_id: str | None,
                input_files: Sequence[str | Path] = (), params: dict[str, Any] | None = None,
                checkpoint: dict[str, Any] | None = None, threshold: float | None = None) -> dict[str, Any]:
    files = [str(f) for f in input_files]
    return {"dataset": dataset, "source": source, "producer": producer, "input_files": files,
            "input_sha256": [sha256_file(Path(f)) for f in files], "threshold": threshold,
            "params_json": json.dumps(params, sort_keys=True, default=str) if params else None,
            "flow_run_id": flow_run_id, "built_at": built_at} | (checkpoint or {})
