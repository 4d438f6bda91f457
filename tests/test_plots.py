"""The plots the flows write beside what they report: mine-tdi's mix.png (published with the shards, shown in the
card) and train-discriminator's precision_recall.png (the dependency P-R curve with the name rules as points)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tasks.dataset.plots import MIX_PLOT, origin_counts, plot_dataset_mix
from tasks.dataset.shards import ShardConfig, build_manifest, write_shards
from tasks.training.examples import build_pairs
from tasks.training.metrics import choose_threshold, evaluate_with_rules
from tasks.training.plots import dependency_pr_curve, plot_precision_recall
from tests.test_discriminator import toy_toolset
from tests.test_mining import _bigger_tree
from tests.test_train_flow import write_tiny_tdi

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path, least_bytes: int = 10_000) -> None:
    """A real image: the PNG signature, and more bytes than an empty figure's."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is no PNG"
    assert len(data) > least_bytes, f"{path}: {len(data)} bytes, too small to hold the bars"


def test_mine_tdi_publishes_mix_png_with_the_shards_and_the_card_shows_it(tmp_path: Path, prefect_harness) -> None:
    from flows.mine_tdi import _parse_args, mine_tdi
    from tasks.dataset.publish import published_version

    src = _bigger_tree(tmp_path / "src")
    manifest = mine_tdi(_parse_args(["--source", "tree", "--tree-paths", str(src), "--output-root", str(tmp_path / "out"),
                                     "--dataset", "mini", "--workers", "1", "--validation-fraction", "0.2"]))
    out = tmp_path / "out" / "mini"
    assert_png(out / MIX_PLOT)
    # published through the version link like the shards: a reader never sees another version's plot
    assert (out / MIX_PLOT).is_symlink() and (published_version(out) / MIX_PLOT).is_file()
    assert f"]({MIX_PLOT})" in (out / "README.md").read_text()
    # the origins it draws are the shards' rows: mined and its swap per dependent pair, negatives for the rest
    origins = origin_counts(out, manifest)
    rows = pq.read_table(out / "shards").to_pylist()
    for split, per_label in manifest["counts"].items():
        assert sum(origins[split].values()) == sum(per_label.values()) == sum(r["split"] == split for r in rows)
        assert origins[split]["mined"] == origins[split]["mined_swapped"] == per_label["a_depends_on_b"]
        assert origins[split]["hard_negative"] + origins[split].get("shuffled", 0) == per_label["no_dependency"]


def _build_tdi_like_folder(tmp_path: Path) -> tuple[Path, dict]:
    """A build-tdi style folder (origins validated / swapped / shuffled) with its manifest, as build-tdi stages it."""
    rows = pq.read_table(write_tiny_tdi(tmp_path / "tiny") / "shards").to_pylist()
    folder = tmp_path / "built"
    infos = write_shards(rows, folder, ShardConfig(rows_per_shard=10, seed=3))
    return folder, build_manifest(folder.name, infos, {})


def test_mix_plot_of_a_build_tdi_folder_and_of_an_old_manifest(tmp_path: Path) -> None:
    folder, manifest = _build_tdi_like_folder(tmp_path)
    assert origin_counts(folder, manifest) == {"train": {"validated": 8, "swapped": 8, "shuffled": 8},
                                               "validation": {"validated": 3, "swapped": 3, "shuffled": 3}}
    (folder / "manifest.json").write_text(json.dumps(manifest))  # a published folder: the manifest is read from it
    assert_png(plot_dataset_mix(folder))
    # a manifest written before dependency kinds still plots (its kind panel says it has none)
    old = {k: v for k, v in manifest.items() if k != "dependent_pairs_by_kind"}
    assert_png(plot_dataset_mix(folder, old, tmp_path / "old.png"))


def _toy_evaluation(seed: int) -> tuple[list[int], np.ndarray, dict]:
    """Real tool-set pairs, scored by a noisy stand-in for the model, reported as train-discriminator reports."""
    examples = build_pairs(toy_toolset(), max_none=None, seed=0)
    y = np.array([e.label for e in examples])
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.ones(3), size=len(y)) + 2.0 * np.eye(3)[y] * rng.random((len(y), 1))
    probs /= probs.sum(1, keepdims=True)
    cut = choose_threshold(y, probs)["threshold"]
    return list(y), probs, evaluate_with_rules(examples, probs, cut)


def test_pr_curve_holds_the_calibrated_cut_and_ends_at_full_recall_of_the_right_direction() -> None:
    y, probs, section = _toy_evaluation(seed=1)
    precision, recall, cuts = dependency_pr_curve(y, probs)
    assert len(precision) == len(recall) == len(cuts) > 1 and np.all(np.diff(cuts) < 0) and np.all(np.diff(recall) >= 0)
    calibrated = section["calibrated"]
    at = int(np.flatnonzero(cuts == calibrated["threshold"])[0])
    assert precision[at] == pytest.approx(calibrated["dependency"]["precision"])
    assert recall[at] == pytest.approx(calibrated["dependency"]["recall"])
    # the lowest cut calls every pair a dependency: recall is the share pointed the right way, precision over all
    y_arr = np.asarray(y)
    right = (np.where(probs[:, 0] >= probs[:, 2], 0, 2) == y_arr) & (y_arr != 1)
    assert recall[-1] == pytest.approx(right.sum() / (y_arr != 1).sum())
    assert precision[-1] == pytest.approx(right.sum() / len(y))
    assert [len(a) for a in dependency_pr_curve([1, 1], np.array([[0.1, 0.8, 0.1], [0.2, 0.6, 0.2]]))] == [0, 0, 0]


def test_precision_recall_png_per_evaluation_set(tmp_path: Path) -> None:
    sets = {f"set {seed}": _toy_evaluation(seed) for seed in (1, 2)}
    assert all("schema_rule" in s and "schema_rule_partial" in s for _, _, s in sets.values())
    assert_png(plot_precision_recall(sets, tmp_path / "precision_recall.png"), least_bytes=30_000)
    # an evaluate-only run without calibration: no cut point, still a plot
    y, probs, _ = sets["set 1"]
    no_cut = {k: v for k, v in _toy_evaluation(1)[2].items() if k != "calibrated"}
    assert_png(plot_precision_recall({"test": (y, probs, no_cut)}, tmp_path / "argmax_only.png"))
