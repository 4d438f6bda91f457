"""Crash safety of every publish (issue 12, item 3): a real subprocess is killed with SIGKILL at a
chosen point of a dataset publish, a warehouse build and a checkpoint save. Afterwards the previous
output must be whole and consistent (manifest sha256s match the files on disk), or, when the kill
came after the final switch, the new one complete; never a mix. The next run must succeed.

Kill points are deterministic, not timed: the child patches a function it calls mid-write, and on
the chosen call it tells the parent through a pipe and blocks; the parent then sends SIGKILL.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 300  # upper bound on any wait for a child (imports are slow on a busy 2-core machine)
AT_KILL_POINT = b"at kill point"


# =============================================================================================
# Child side: arm one kill point, run the job, block at the point until killed


def _resolve(target: str) -> tuple[Any, str]:
    """``pkg.module.attr`` or ``pkg.module.Class.attr`` -> (owner object, attribute name)."""
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:-1]:
            owner = getattr(owner, name)
        return owner, parts[-1]
    raise ValueError(f"cannot resolve {target}")


def _matches(kill: dict, args: tuple) -> bool:
    if "arg" not in kill:
        return True
    if len(args) <= kill["arg"]:
        return False
    path = Path(os.fsdecode(args[kill["arg"]])) if isinstance(args[kill["arg"]], (str, bytes, os.PathLike)) else None
    if path is None:
        return False
    return (kill.get("name", path.name) == path.name and kill.get("parent", path.parent.name) == path.parent.name
            and kill.get("contains", "") in str(path))


def _arm(kill: dict, fd: int) -> None:
    """Patch ``kill['target']``: its ``nth`` matching call stops the process there. ``when``:
    before the real call; after it; ``torn`` after it with the written file cut to half its size (a
    write the kill interrupted); ``half_rmtree`` with half of the folder's files deleted."""
    owner, name = _resolve(kill["target"])
    real = getattr(owner, name)
    seen = 0

    def stop() -> None:
        os.write(fd, AT_KILL_POINT + b"\n")
        threading.Event().wait()  # until SIGKILL

    def hooked(*args: Any, **kwargs: Any) -> Any:
        nonlocal seen
        if not _matches(kill, args):
            return real(*args, **kwargs)
        seen += 1
        if seen != kill.get("nth", 1):
            return real(*args, **kwargs)
        when = kill["when"]
        if when == "before":
            stop()
        if when == "half_rmtree":
            files = sorted(p for p in Path(args[0]).rglob("*") if p.is_file())
            for path in files[: max(1, len(files) // 2)]:
                path.unlink()
            stop()
        out = real(*args, **kwargs)
        if when == "torn":
            path = Path(os.fsdecode(args[kill["arg"]]))
            with open(path, "r+b") as fh:
                fh.truncate(path.stat().st_size // 2)
        stop()
        return out

    setattr(owner, name, hooked)


def _child_main() -> None:
    spec = json.loads(sys.argv[1])
    fd = spec["fd"]
    _arm(spec["kill"], fd)
    JOBS[spec["job"]](**spec["args"])
    os.write(fd, b"finished without reaching the kill point\n")


def run_and_kill(job: str, kill: dict, log: Path, **args: Any) -> None:
    """Run ``job(**args)`` in a fresh interpreter and SIGKILL it at ``kill``; fails when the child
    ends, or reports, without reaching the point."""
    read_end, write_end = os.pipe()
    spec = json.dumps({"job": job, "args": args, "kill": kill, "fd": write_end})
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", "from tests.test_crash_safety import _child_main; _child_main()", spec],
                                cwd=REPO_ROOT, env=env, pass_fds=(write_end,), stdout=out, stderr=subprocess.STDOUT)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], WAIT_S)
        message = os.read(read_end, 200) if ready else b"(no word within the time limit)"
        if not message.startswith(AT_KILL_POINT):
            proc.kill()
            proc.wait(WAIT_S)
            pytest.fail(f"{job}: the child did not stop at {kill}: {message!r}; its output:\n{log.read_text()[-4000:]}")
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(WAIT_S) == -signal.SIGKILL
    finally:
        os.close(read_end)
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT_S)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# =============================================================================================
# 1. Dataset publish (tasks/dataset/publish.py, in the order of tasks/dataset/gate.py that build-tdi and mine-tdi run)

DATASET_VARIANTS = {"old": (60, 40, 3), "new": (110, 90, 8)}  # validated pairs, per class, seed


def _structural_gate(shard_dir: Path):
    """A quick stand-in for the great-expectations gate in the children: schema and class balance."""
    import pyarrow.parquet as pq

    from schemas.tdi import TDI_PAIR_SCHEMA
    from tasks.dataset.quality import QualityReport

    table = pq.read_table(shard_dir)
    labels = table.column("label").to_pylist()
    checks = [{"expectation": "schema", "success": table.schema.names == TDI_PAIR_SCHEMA.names},
              {"expectation": "balanced", "success": labels.count(0) == labels.count(1) == labels.count(2) > 0}]
    return QualityReport(success=all(c["success"] for c in checks), checks=checks)


def publish_dataset(out: str, variant: str, real_gate: bool = False) -> dict:
    """One publish of a small synthetic dataset, step for step as the flows do it: the books, a
    fresh staging folder, the shards, the gate, the card, then the publish; under the folder lock."""
    from tasks.dataset.accounting import write_records_db
    from tasks.dataset.balance import BalanceConfig, balance_pairs
    from tasks.dataset.publish import dataset_lock, fresh_staging, gate_staged, publish_staged
    from tasks.dataset.quality import validate_shards
    from tasks.dataset.shards import ShardConfig, build_manifest, write_dataset_card, write_shards
    from tests.test_balance_shards import _pairs

    out_dir = Path(out)
    n, per_class, seed = DATASET_VARIANTS[variant]
    pairs = _pairs(n)
    balanced = balance_pairs(pairs, BalanceConfig(per_class=per_class, validation_fraction=0.2, seed=seed))
    rejected = {r.record_id: r for r in balanced.rejections}
    outcomes = [{"record_id": p.record_id, "status": "rejected" if p.record_id in rejected else "accepted",
                 "stage": rejected[p.record_id].stage if p.record_id in rejected else "dataset",
                 "reason": rejected[p.record_id].reason if p.record_id in rejected else "in_dataset",
                 "detail": None, "raw_text": None} for p in pairs]
    with dataset_lock(out_dir):
        summary = write_records_db(out_dir / "records.duckdb", outcomes, [], len(pairs))
        staging = fresh_staging(out_dir)
        infos = write_shards(balanced.rows, staging, ShardConfig(rows_per_shard=40, seed=seed))
        report = gate_staged(out_dir, staging, validate_shards if real_gate else _structural_gate)
        manifest = build_manifest(out_dir.name, infos, {
            "variant": variant, "accounting": summary.as_dict(),
            "quality": {"success": report.success, "checks": len(report.checks)}})
        write_dataset_card(out_dir, manifest, staging)
        return publish_staged(out_dir, staging, manifest)


def assert_published(out: Path, expected: dict, books: list[dict]) -> None:
    """``out`` publishes exactly ``expected``: the manifest, the shards it lists and nothing else
    (sha256, rows, label counts from the data), a passing quality.json, the card of these counts;
    records.duckdb opens read-only and balances, and holds one of ``books``."""
    import duckdb
    import pyarrow.parquet as pq

    from schemas.tdi import ID2LABEL
    from tasks.dataset.accounting import check_accounting

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest == expected
    on_disk = sorted(p.name for p in (out / "shards").glob("*.parquet"))
    assert on_disk == sorted(Path(s["file"]).name for s in manifest["shards"]), "shards of two versions mixed"
    for shard in manifest["shards"]:
        path = out / shard["file"]
        assert _sha256(path) == shard["sha256"], f"{path} does not match its manifest"
        assert pq.ParquetFile(path).metadata.num_rows == shard["rows"]
    rows = pq.read_table(out / "shards").select(["split", "label"]).to_pylist()
    assert len(rows) == manifest["total_rows"]
    counts: dict[str, dict[str, int]] = {}
    for r in rows:
        per = counts.setdefault(r["split"], {name: 0 for name in ID2LABEL.values()})
        per[ID2LABEL[r["label"]]] += 1
    assert counts == manifest["counts"]
    assert json.loads((out / "quality.json").read_text())["success"]
    card = (out / "README.md").read_text()
    for split, per in manifest["counts"].items():
        assert f"| {split} | " + " | ".join(str(per[n]) for n in ID2LABEL.values()) + " |" in card
    con = duckdb.connect(str(out / "records.duckdb"), read_only=True)
    try:
        assert check_accounting(con).as_dict() in books
    finally:
        con.close()


def assert_tidy(out: Path) -> None:
    """Nothing a killed run left: no staging, one version, no half-made links."""
    from tasks.dataset.publish import VERSIONS

    leftovers = sorted(p.name for p in out.iterdir()
                       if p.name in (".staging", ".failed") or p.name.endswith((".link", ".old", ".tmp")))
    assert leftovers == [] and len(list((out / VERSIONS).iterdir())) == 1


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, Any]:
    """The first version, published once with the real quality gate (copied per test), and the
    manifest a complete second publish makes."""
    root = tmp_path_factory.mktemp("datasets")
    old = publish_dataset(str(root / "template" / "ds"), "old", real_gate=True)
    new = publish_dataset(str(root / "reference" / "ds"), "new")
    assert old["total_rows"] != new["total_rows"] and len(old["shards"]) != len(new["shards"])
    return {"template": root / "template" / "ds", "old": old, "new": new,
            "books": [old["accounting"], new["accounting"]]}


DATASET_KILLS = {  # id: (kill point, which version must be published after the kill)
    "books-replace": ({"target": "os.replace", "arg": 1, "name": "records.duckdb", "when": "before"}, "old"),
    "shard-write": ({"target": "pyarrow.parquet.write_table", "arg": 1, "nth": 2, "when": "torn"}, "old"),
    "shard-hash": ({"target": "tasks.dataset.shards.sha256_file", "nth": 2, "when": "before"}, "old"),
    "quality-gate": ({"target": "tests.test_crash_safety._structural_gate", "when": "before"}, "old"),
    "quality-json": ({"target": "pathlib.Path.write_text", "arg": 0, "name": "quality.json", "when": "torn"}, "old"),
    "card": ({"target": "pathlib.Path.write_text", "arg": 0, "name": "README.md", "when": "torn"}, "old"),
    "manifest-write": ({"target": "pathlib.Path.write_text", "arg": 0, "name": "manifest.json", "when": "torn"}, "old"),
    "staging-to-version": ({"target": "os.rename", "arg": 1, "parent": ".versions", "when": "before"}, "old"),
    "before-switch": ({"target": "os.replace", "arg": 1, "name": ".current", "when": "before"}, "old"),
    "after-switch": ({"target": "os.replace", "arg": 1, "name": ".current", "when": "after"}, "new"),
    "dropping-old-version": ({"target": "shutil.rmtree", "arg": 0, "parent": ".versions", "when": "half_rmtree"}, "new"),
}


@pytest.mark.parametrize("point", list(DATASET_KILLS))
def test_a_killed_dataset_publish_leaves_one_whole_version(point: str, datasets: dict, tmp_path: Path) -> None:
    kill, survives = DATASET_KILLS[point]
    out = tmp_path / "ds"
    shutil.copytree(datasets["template"], out, symlinks=True)
    assert_published(out, datasets["old"], datasets["books"])

    run_and_kill("dataset", kill, tmp_path / "child.log", out=str(out), variant="new")
    assert_published(out, datasets[survives], datasets["books"])

    # the next run: the dead run's staging folder, stray version and lock are no obstacle
    assert publish_dataset(str(out), "new") == datasets["new"]
    assert_published(out, datasets["new"], [datasets["new"]["accounting"]])
    assert_tidy(out)


def test_a_folder_published_before_versions_is_converted(datasets: dict, tmp_path: Path) -> None:
    """The layout older runs left (real shards/ and manifest.json in the folder) publishes into versions."""
    from tasks.dataset.publish import published_version

    out = tmp_path / "ds"
    version = published_version(datasets["template"])
    shutil.copytree(version, out)
    shutil.copy2(datasets["template"] / "records.duckdb", out / "records.duckdb")
    (out / ".lock").write_text("pid 1")  # older runs left their lock file
    (out / "shards.old").mkdir()  # what the old publish left when killed
    assert not (out / "shards").is_symlink()
    assert_published(out, datasets["old"], datasets["books"])
    assert publish_dataset(str(out), "new") == datasets["new"]
    assert (out / "shards").is_symlink() and (out / "manifest.json").is_symlink()
    assert_published(out, datasets["new"], [datasets["new"]["accounting"]])
    assert_tidy(out)


# =============================================================================================
# 2. Warehouse build (warehouse/build.py: temp folder, rename, flock)


def build_warehouse_job(target: str, second: bool) -> dict:
    from tests.test_warehouse import DIM, tiny_dataset
    from warehouse.build import build_warehouse

    datasets = [tiny_dataset("tiny", extra_edges=[("e", "f")]), tiny_dataset("other")] if second else [tiny_dataset()]
    return build_warehouse(target, datasets, DIM)


def assert_warehouse(target: Path, rows: dict[str, int]) -> None:
    from warehouse.build import check_integrity, connect

    con = connect(target, read_only=True)
    try:
        assert {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in rows} == rows
        check_integrity(con)
    finally:
        con.close()


@pytest.fixture(scope="module")
def warehouses(tmp_path_factory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("warehouses")
    old = build_warehouse_job(str(root / "template" / "tgr.duckdb"), second=False)
    new = build_warehouse_job(str(root / "reference" / "tgr.duckdb"), second=True)
    assert old["rows"] != new["rows"]
    return {"template": root / "template", "old": old["rows"], "new": new["rows"]}


WAREHOUSE_KILLS = {
    "writing-inputs": ({"target": "pyarrow.parquet.write_table", "nth": 3, "arg": 1, "when": "torn"}, "old"),
    "sql-steps": ({"target": "warehouse.build.render_sql", "nth": 3, "when": "before"}, "old"),
    "integrity-check": ({"target": "warehouse.build.check_integrity", "when": "before"}, "old"),
    "before-rename": ({"target": "os.replace", "arg": 1, "name": "tgr.duckdb", "when": "before"}, "old"),
    "after-rename": ({"target": "os.replace", "arg": 1, "name": "tgr.duckdb", "when": "after"}, "new"),
}


@pytest.mark.parametrize("point", list(WAREHOUSE_KILLS))
def test_a_killed_warehouse_build_leaves_the_previous_file(point: str, warehouses: dict, tmp_path: Path) -> None:
    kill, survives = WAREHOUSE_KILLS[point]
    folder = tmp_path / "wh"
    shutil.copytree(warehouses["template"], folder)
    target = folder / "tgr.duckdb"

    run_and_kill("warehouse", kill, tmp_path / "child.log", target=str(target), second=True)
    assert_warehouse(target, warehouses[survives])
    assert list(folder.glob(".tgr.duckdb.build-*")), "the kill came mid-build: its temp folder is still there"

    assert build_warehouse_job(str(target), second=True)["rows"] == warehouses["new"]
    assert_warehouse(target, warehouses["new"])
    assert sorted(p.name for p in folder.iterdir()) == ["tgr.duckdb"]  # a clean build leaves no lock file


# =============================================================================================
# 3. Checkpoint save (tasks/training/trainer.py: train_classifier; flows/train_discriminator.py: best/)

CHECKPOINT_VARIANTS = {"old": (1, 1e-3), "new": (2, 5e-3)}  # seed, learning rate
MAX_LENGTH = 48


def _toy_pairs():
    from tasks.training.examples import build_pairs
    from tests.test_discriminator import toy_toolset

    return build_pairs(toy_toolset())


def _calibrate(checkpoint: Path) -> dict:
    from models.discriminator import load_discriminator
    from tasks.training.metrics import choose_threshold
    from tasks.training.trainer import predict_examples

    pairs = _toy_pairs()
    model, tokenizer = load_discriminator(checkpoint)
    probs = predict_examples(model, tokenizer, pairs, MAX_LENGTH, 16)
    return choose_threshold([p.label for p in pairs], probs, "max_f1")


def save_checkpoint(run: str, model_dir: str, variant: str) -> dict:
    """A new best checkpoint the way flows.train_discriminator makes one: train_classifier saves it
    into the staged folder, calibration.json goes beside it, then finish_checkpoint swaps it in."""
    from flows.train_discriminator import STAGED_BEST, finish_checkpoint
    from models.discriminator import CALIBRATION_FILE, load_model, load_tokenizer
    from tasks.common.atomic import restore_dir
    from tasks.training.strict_json import write_json
    from tasks.training.trainer import StageArguments, train_classifier

    run_dir = Path(run)
    best, staged = run_dir / "best", run_dir / STAGED_BEST
    restore_dir(best)
    shutil.rmtree(staged, ignore_errors=True)
    seed, lr = CHECKPOINT_VARIANTS[variant]
    pairs = _toy_pairs()
    args = StageArguments(epochs=1, batch_size=4, eval_batch_size=16, learning_rate=lr, max_length=MAX_LENGTH,
                          seed=seed, max_steps=2, progress=False)
    train_classifier(load_model(model_dir), load_tokenizer(model_dir), pairs, pairs, args, run_dir / "finetune",
                     stage=variant, best_dir=staged)
    calibration = {**_calibrate(staged), "variant": variant}
    write_json(staged / CALIBRATION_FILE, calibration)
    finish_checkpoint(staged, best, {"variant": variant, "calibration": calibration}, f"# tiny checkpoint ({variant})\n")
    return calibration


def assert_checkpoint(best: Path, variant: str, template: Path | None = None) -> None:
    """``best`` is one complete checkpoint of ``variant``: it loads, its calibration.json parses and
    is the calibration of these weights, metrics.json and the card are of the same save."""
    from models.discriminator import load_calibration

    calibration = load_calibration(best)
    assert calibration is not None and calibration["variant"] == variant
    again = _calibrate(best)  # loads with load_discriminator
    for key in ("threshold", "precision", "recall", "f1"):
        assert calibration[key] == pytest.approx(again[key], rel=1e-4, abs=1e-6), key
    assert json.loads((best / "metrics.json").read_text())["calibration"] == calibration
    assert (best / "README.md").read_text() == f"# tiny checkpoint ({variant})\n"
    if template is not None:  # the previous checkpoint, byte for byte
        assert {p.name: _sha256(p) for p in best.iterdir()} == {p.name: _sha256(p) for p in template.iterdir()}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    from tests.test_discriminator import make_tiny_model

    root = tmp_path_factory.mktemp("checkpoints")
    model_dir = make_tiny_model(root / "tiny-bert")
    save_checkpoint(str(root / "template"), str(model_dir), "old")
    assert_checkpoint(root / "template" / "best", "old")
    return {"model": model_dir, "template": root / "template"}


CHECKPOINT_KILLS = {
    "weights": ({"target": "transformers.modeling_utils.safe_save_file", "arg": 1, "contains": ".saving",
                 "when": "torn"}, "old"),
    "staged-in-place": ({"target": "os.rename", "arg": 1, "name": ".best.new", "when": "after"}, "old"),
    "calibration-json": ({"target": "pathlib.Path.write_text", "arg": 0, "contains": "calibration.json",
                          "when": "torn"}, "old"),
    "model-card": ({"target": "pathlib.Path.write_text", "arg": 0, "name": "README.md", "when": "torn"}, "old"),
    "before-swap": ({"target": "tasks.common.atomic.exchange_paths", "arg": 1, "name": "best", "when": "before"}, "old"),
    "after-swap": ({"target": "tasks.common.atomic.exchange_paths", "arg": 1, "name": "best", "when": "after"}, "new"),
}


@pytest.mark.parametrize("point", list(CHECKPOINT_KILLS))
def test_a_killed_checkpoint_save_leaves_the_previous_best(point: str, checkpoints: dict, tmp_path: Path) -> None:
    from flows.train_discriminator import STAGED_BEST

    kill, survives = CHECKPOINT_KILLS[point]
    run = tmp_path / "run"
    shutil.copytree(checkpoints["template"], run)

    run_and_kill("checkpoint", kill, tmp_path / "child.log", run=str(run), model_dir=str(checkpoints["model"]),
                 variant="new")
    best = run / "best"
    assert_checkpoint(best, survives, checkpoints["template"] / "best" if survives == "old" else None)

    # the next save cleans what the dead one left and swaps in a complete checkpoint; --resume's
    # Trainer checkpoints are untouched by the best/ swap
    save_checkpoint(str(run), str(checkpoints["model"]), "new")
    assert_checkpoint(best, "new")
    assert not [p.name for p in run.iterdir() if p.name.startswith(".")], f"leftovers next to best/ ({STAGED_BEST})"
    from transformers.trainer_utils import get_last_checkpoint

    assert get_last_checkpoint(str(run / "finetune")) is not None


JOBS = {"dataset": publish_dataset, "warehouse": build_warehouse_job, "checkpoint": save_checkpoint}


def test_replace_dir_without_atomic_exchange_undoes_a_kill_between_its_renames(tmp_path: Path, monkeypatch) -> None:
    """Where the file system cannot exchange two folders, replace_dir renames the old one aside
    first; the state a kill between the two renames leaves is put back by the next save."""
    import tasks.common.atomic as atomic

    dst, src = tmp_path / "best", tmp_path / ".best.new"
    for folder, text in ((dst, "old"), (src, "new")):
        folder.mkdir()
        (folder / "weights").write_text(text)
    monkeypatch.setattr(atomic, "exchange_paths", lambda a, b: False)
    os.replace(dst, atomic.hidden_sibling(dst, "old"))  # the first rename, then the kill
    atomic.restore_dir(dst)
    assert (dst / "weights").read_text() == "old" and not atomic.hidden_sibling(dst, "old").exists()
    atomic.replace_dir(src, dst)
    assert (dst / "weights").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["best"]
