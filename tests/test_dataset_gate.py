"""The gate-and-publish steps build-tdi and mine-tdi share (tasks/dataset/gate.py): both flows run these
Prefect tasks, not copies; the gate passes and publishes with the flow's card, or fails and publishes nothing."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prefect import Task, flow

import flows.build_tdi
import flows.mine_tdi
import tasks.dataset.gate as gate
from tasks.dataset.balance import BalanceConfig, balance_pairs
from tasks.dataset.publish import fresh_staging
from tasks.dataset.quality import QualityGateError, QualityReport
from tasks.dataset.shards import ShardConfig, build_manifest, write_shards
from tests.test_balance_shards import _pairs


@pytest.mark.parametrize("module, card", [(flows.build_tdi, "write_dataset_card"), (flows.mine_tdi, "write_mined_card")])
def test_both_flows_run_the_shared_gate_and_publish(module, card):
    assert module.quality_gate is gate.quality_gate and module.publish_with_card is gate.publish_with_card
    assert callable(getattr(module, card))  # the one part each flow brings: its dataset card
    own = [name for name, obj in vars(module).items()
           if isinstance(obj, Task) and obj.fn.__module__ == module.__name__ and obj.name in ("quality-gate", "publish")]
    assert not own, f"{module.__name__} defines its own {own}"
    assert (gate.quality_gate.name, gate.publish.name) == ("quality-gate", "publish")  # the task names of the runs


def _card(out_dir: Path, manifest: dict[str, Any], folder: Path) -> Path:
    path = folder / "README.md"
    path.write_text(f"# {manifest['dataset']}: {manifest['total_rows']} rows\n")
    return path


@flow
def gate_then_publish(out: str) -> dict[str, Any]:
    """The flows' last steps on a small synthetic dataset: stage the shards, gate, manifest, publish."""
    out_dir = Path(out)
    balanced = balance_pairs(_pairs(60), BalanceConfig(per_class=40, validation_fraction=0.2, seed=3))
    staging = fresh_staging(out_dir)
    infos = write_shards(balanced.rows, staging, ShardConfig(rows_per_shard=40, seed=3))
    report = gate.quality_gate(out_dir, staging)
    manifest = build_manifest(out_dir.name, infos, {"quality": {"success": report.success, "checks": len(report.checks)}})
    return gate.publish_with_card(out_dir, staging, manifest, _card, "test-gate-dataset")


def test_a_passing_gate_publishes_the_shards_with_the_flows_card(tmp_path, prefect_harness):
    from prefect.artifacts import Artifact

    out = tmp_path / "ds"
    manifest = gate_then_publish(str(out))
    assert json.loads((out / "manifest.json").read_text()) == manifest and manifest["quality"]["success"]
    assert json.loads((out / "quality.json").read_text())["success"]
    assert sorted(p.name for p in (out / "shards").glob("*.parquet")) == sorted(s["file"].split("/")[-1] for s in manifest["shards"])
    card = (out / "README.md").read_text()
    assert card == f"# ds: {manifest['total_rows']} rows\n"
    assert Artifact.get("test-gate-dataset").data == card


def test_a_failing_gate_publishes_nothing_and_writes_no_card(tmp_path, prefect_harness, monkeypatch):
    monkeypatch.setattr(gate, "validate_shards",
                        lambda d, progress=None: QualityReport(success=False, checks=[{"success": False, "expectation": "injected"}]))
    out = tmp_path / "ds"
    with pytest.raises(QualityGateError, match="nothing was published"):
        gate_then_publish(str(out))
    assert not (out / "manifest.json").exists() and not (out / "README.md").exists()
    assert list((out / ".failed" / "shards").glob("*.parquet")) and not (out / ".failed" / "README.md").exists()


def test_sources_json_is_published_with_its_version_and_unpublished_without(tmp_path):
    """mine-tdi's sources.json (tasks/mining/pin.py) switches with the shards; build-tdi writes none."""
    from tasks.dataset.publish import publish_staged

    out = tmp_path / "ds"

    def publish_version(sources: str | None) -> None:
        staging = fresh_staging(out)
        (staging / "shards").mkdir()
        (staging / "quality.json").write_text("{}")
        (staging / "README.md").write_text("card")
        if sources is not None:
            (staging / "sources.json").write_text(sources)
        publish_staged(out, staging, {"sources": sources})

    publish_version("first")
    assert (out / "sources.json").read_text() == "first"
    publish_version("second")
    assert (out / "sources.json").read_text() == "second"
    publish_version(None)
    assert not (out / "sources.json").is_symlink() and not (out / "sources.json").exists()
    assert json.loads((out / "manifest.json").read_text()) == {"sources": None}
