"""Hostile inputs, the flows' own (issue 21 items 1, 2, 4, 5, 9): every input is checked before any work, and a
command line, a Python call and a deployment are refused alike.

Each case runs the real surface and asserts the one clear error and that nothing was started or written:

* paths (a typo among good tree roots, a missing path, a file given as a folder, a tool set or benchmark that is
  not on disk, a folder that cannot be written): the command line through a subprocess (a usage error, exit 2,
  naming the path, before Prefect starts) or the flow's Python call (a ``ValueError`` before the first folder,
  lock or model exists); a missing benchmark says in one line where to get it;
* numbers out of range: the config dataclass (the CLI, a Python call and Prefect's deployment parameters all
  construct it), and the command line for the ones that used to crash late;
* eval-retrieval: an unwritable warehouse or report folder is found first; a warehouse write that fails late
  anyway comes after the report is written, and says so;
* the warehouse macros: an unknown dataset, edge source, embedding kind or tool, a bad k or n, is an error
  naming it (DuckDB ``error()`` in the SQL), never an empty answer; a known tool with nothing to list is empty.
"""
from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
from pydantic import TypeAdapter

from tests.conftest import REPO_ROOT

GOOD_MODULE = '''def load(path):
    """Read a file."""
    return open(path).read()


def parse(text):
    """Split the text."""
    return text.split()


def run(path):
    """Load and parse."""
    return parse(load(path))
'''


def user_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "PREFECT_API_URL")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    return env


def cli(module: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """``python -m flows.<module> ARGS`` in ``tmp_path`` (relative outputs land there)."""
    return subprocess.run([sys.executable, "-m", f"flows.{module}", *args], cwd=tmp_path, env=user_env(tmp_path),
                          capture_output=True, text=True, timeout=120)


def assert_usage_error(done: subprocess.CompletedProcess, module: str, *fragments: str) -> None:
    """Exit 2, one line ``python -m flows.<module>: error: ...`` holding every fragment; Prefect never started."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith(f"python -m flows.{module}: error: "), lines
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert "prefect" not in done.stdout.lower() + done.stderr.lower().replace("prefect-home", "")


def written(root: Path, *ignore: str) -> list[str]:
    """Every path under ``root`` but the inputs the case made (``ignore``) and Prefect's home."""
    skip = {"prefect-home", *ignore}
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if not any(part in skip for part in p.relative_to(root).parts))


def tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "io.py").write_text(GOOD_MODULE)
    return root


def toolset_folder(root: Path) -> Path:
    from schemas.toolset import DependencyEdge, Query, Tool, ToolSet
    from tasks.toolsets.readers import write_toolset_dir

    doc = lambda name: {"name": name, "description": f"{name} a thing", "input_params": [], "output_params": []}  # noqa: E731
    tools = (Tool("a", "g", doc("a")), Tool("b", "g", doc("b")))
    return write_toolset_dir(ToolSet("toy", tools, (DependencyEdge("b", "a", "g"),), (Query("q", "a then b", ("a", "b")),)),
                             root)


# ==================================================================================================
# 1. Paths, on the command line: a usage error naming the path, exit 2, nothing written


def _mine_tree_typo(tmp: Path) -> list[str]:
    return ["--source", "tree", "--tree-paths", f"{tree(tmp / 'good')},{tmp / 'typo'}"]


def _mine_tree_missing(tmp: Path) -> list[str]:
    return ["--source", "tree", "--tree-paths", str(tmp / "nowhere")]


def _mine_tree_is_a_file(tmp: Path) -> list[str]:
    (tmp / "one.py").write_text(GOOD_MODULE)
    return ["--source", "tree", "--tree-paths", str(tmp / "one.py")]


def _mine_tree_without_python(tmp: Path) -> list[str]:
    (tmp / "docs").mkdir()
    (tmp / "docs" / "README.md").write_text("no code here")
    return ["--source", "tree", "--tree-paths", str(tmp / "docs")]


def _mine_tree_dangling_link(tmp: Path) -> list[str]:
    (tmp / "gone").symlink_to(tmp / "never-made")
    return ["--source", "tree", "--tree-paths", str(tmp / "gone")]


def _mine_tree_without_paths(tmp: Path) -> list[str]:
    return ["--source", "tree"]


def _mine_codesearchnet_missing(tmp: Path) -> list[str]:
    return ["--source", "codesearchnet", "--codesearchnet-path", str(tmp / "csn")]


def _mine_mix_without_shards(tmp: Path) -> list[str]:
    (tmp / "llm-set").mkdir()
    return ["--source", "tree", "--tree-paths", str(tree(tmp / "good")), "--mix-tdi", str(tmp / "llm-set")]


def _mine_output_root_is_a_file(tmp: Path) -> list[str]:
    (tmp / "out").write_text("a file")
    return ["--source", "tree", "--tree-paths", str(tree(tmp / "good"))]


OUT = ["--output-root", "out", "--dataset", "mined"]

MINE_PATHS = [
    pytest.param(_mine_tree_typo, ("--tree-paths", "typo: no such folder"), id="good and mistyped tree roots"),
    pytest.param(_mine_tree_missing, ("nowhere: no such folder",), id="missing tree root"),
    pytest.param(_mine_tree_is_a_file, ("one.py: a file, not a source tree",), id="a file given as a tree"),
    pytest.param(_mine_tree_without_python, ("docs: no *.py file under it",), id="tree without Python files"),
    pytest.param(_mine_tree_dangling_link, ("gone: no such folder (a dangling or looping symlink)",),
                 id="tree root is a dangling symlink"),
    pytest.param(_mine_tree_without_paths, ("--source tree needs --tree-paths",), id="source tree without paths"),
    pytest.param(_mine_codesearchnet_missing, ("--codesearchnet-path", "csn is not a directory"),
                 id="missing CodeSearchNet release"),
    pytest.param(_mine_mix_without_shards, ("--mix-tdi", "llm-set: no shards/*.parquet there"),
                 id="mix-tdi folder without shards"),
    pytest.param(_mine_output_root_is_a_file, ("out is a file, not a folder",), id="output root is a file"),
]


@pytest.mark.parametrize("build, fragments", MINE_PATHS)
def test_mine_tdi_bad_path_is_a_usage_error_and_nothing_is_written(tmp_path, build, fragments):
    args = build(tmp_path)
    inputs = set(written(tmp_path))
    done = cli("mine_tdi", [*OUT, *args], tmp_path)
    assert_usage_error(done, "mine_tdi", *fragments)
    assert set(written(tmp_path)) == inputs  # no output folder, records.duckdb or .lock
    assert not (tmp_path / "out" / "mined").exists()


def test_mine_tdi_python_call_refuses_a_bad_tree_before_the_lock(tmp_path):
    from flows.mine_tdi import MineTDIConfig, mine_tdi

    with pytest.raises(ValueError, match="--tree-paths .*typo: no such folder"):
        MineTDIConfig(source=("tree",), tree_paths=(str(tree(tmp_path / "good")), str(tmp_path / "typo")),
                      output_root=str(tmp_path / "out"))
    with pytest.raises(ValueError, match="typo: no such folder"):  # what Prefect builds from deployment parameters
        TypeAdapter(MineTDIConfig).validate_python({"source": ["tree"], "tree_paths": [str(tmp_path / "typo")]})
    (tmp_path / "root-file").write_text("x")
    cfg = MineTDIConfig(source=("tree",), tree_paths=(str(tmp_path / "good"),), output_root=str(tmp_path / "root-file"))
    with pytest.raises(ValueError, match="root-file is a file, not a folder"):
        mine_tdi.fn(cfg)
    assert written(tmp_path) == ["good", "good/pkg", "good/pkg/__init__.py", "good/pkg/io.py", "root-file"]


# ==================================================================================================
# 2. Tool sets, benchmarks, checkpoints and outputs of the other flows: refused before any work


def test_train_discriminator_without_shared_benchmarks_says_where_to_get_them(tmp_path):
    """A clone without ../shared: refused at once (it used to mine and pretrain for minutes first)."""
    (tmp_path / "no-shared").mkdir()
    done = cli("train_discriminator", ["--benchmarks-root", str(tmp_path / "no-shared"), "--output", "run"], tmp_path)
    assert_usage_error(done, "train_discriminator",
                       "--finetune ultratool: no benchmark folder", "https://github.com/WxxShirley/GNN4TaskPlan @f148669",
                       "--test apibank: no benchmark folder", "https://github.com/AlibabaResearch/DAMO-ConvAI @1d76900",
                       "pass --benchmarks-root DIR or a tool set folder")
    assert written(tmp_path) == ["no-shared"]


def test_train_discriminator_python_call_refuses_a_missing_benchmark_before_any_work(tmp_path):
    from flows.train_discriminator import TrainDiscriminatorConfig, train_discriminator

    cfg = TrainDiscriminatorConfig(output=tmp_path / "run", benchmarks_root=tmp_path / "none", pretrain_data="none",
                                   finetune=(str(toolset_folder(tmp_path / "toy")),), test=("tmdb",), progress=False)
    with pytest.raises(ValueError, match=r"--test tmdb: no benchmark folder .*none/tmdb; get RestBench-TMDB from "
                                         r"https://github.com/WxxShirley/GNN4TaskPlan @f148669 \(MIT\)"):
        train_discriminator.fn(cfg)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("case", ["output under a file", "param tool set missing", "tool set folder without tools",
                                  "finetuning folder with a bad doc"])
def test_train_discriminator_other_bad_paths_are_refused_before_any_work(tmp_path, case):
    from flows.train_discriminator import TrainDiscriminatorConfig, train_discriminator

    toy = str(toolset_folder(tmp_path / "toy"))
    kwargs: dict[str, Any] = {"output": tmp_path / "run", "pretrain_data": "none", "finetune": (toy,), "test": (toy,),
                              "progress": False}
    if case == "output under a file":
        (tmp_path / "file").write_text("x")
        kwargs["output"], message = tmp_path / "file" / "run", "file is a file, not a folder"
    elif case == "param tool set missing":
        kwargs |= {"param_level": True, "param_toolsets": ("nestools",), "benchmarks_root": tmp_path / "none"}
        message = "--param-toolsets nestools: no benchmark folder .*https://github.com/hhan1018/NesTools @fb617f3"
    elif case == "finetuning folder with a bad doc":  # read after pretraining: it used to fail minutes in
        bad = tmp_path / "bad-docs"
        bad.mkdir()
        no_params = {"tool_id": "a", "group": "g", "doc": {"name": "a", "description": "a"}}
        (bad / "tools.jsonl").write_text(json.dumps(no_params) + "\n")
        kwargs["finetune_extra"] = (str(bad),)
        message = r"--finetune-extra .*bad-docs: .*tools.jsonl:1: doc of 'a' fails the API doc schema"
    else:
        (tmp_path / "empty-set").mkdir()
        kwargs["test"], message = (str(tmp_path / "empty-set"),), "empty-set has no tools.jsonl"
    with pytest.raises(ValueError, match=message):
        train_discriminator.fn(TrainDiscriminatorConfig(**kwargs))
    assert not (tmp_path / "run").exists()


def test_build_graph_missing_benchmark_is_a_usage_error_naming_its_source(tmp_path):
    (tmp_path / "no-shared").mkdir()
    done = cli("build_graph", ["--toolset", "apibank", "--toolset", "toolbench_stable", "--data-root",
                               str(tmp_path / "no-shared"), "--no-discriminator", "--warehouse", "wh/tgr.duckdb"], tmp_path)
    assert_usage_error(done, "build_graph", "--toolset apibank: no benchmark folder",
                       "--toolset toolbench_stable: no benchmark folder",
                       "https://github.com/THUNLP-MT/StableToolBench @aa4ed9f (Apache-2.0)", "pass --data-root DIR")
    assert written(tmp_path) == ["no-shared"]


def _graph_missing_folder(tmp: Path) -> tuple[dict, str]:
    return {"toolsets": (str(tmp / "nowhere"),)}, "nowhere': neither a benchmark"


def _graph_folder_without_tools(tmp: Path) -> tuple[dict, str]:
    (tmp / "set").mkdir()
    return {"toolsets": (str(tmp / "set"),)}, "set has no tools.jsonl"


def _graph_file_as_toolset(tmp: Path) -> tuple[dict, str]:
    (tmp / "tools.jsonl").write_text("{}")
    return {"toolsets": (str(tmp / "tools.jsonl"),)}, "tools.jsonl: a file, not a tool set folder"


def _graph_missing_trajectories(tmp: Path) -> tuple[dict, str]:
    return {"trajectories": (str(tmp / "runs.jsonl"),)}, "--trajectories .*runs.jsonl: no such file"


def _graph_warehouse_under_a_file(tmp: Path) -> tuple[dict, str]:
    (tmp / "wh").write_text("x")
    return {"warehouse": str(tmp / "wh" / "tgr.duckdb")}, "--warehouse .*wh is a file, not a folder"


def _graph_warehouse_is_a_folder(tmp: Path) -> tuple[dict, str]:
    (tmp / "wh.duckdb").mkdir()
    return {"warehouse": str(tmp / "wh.duckdb")}, "wh.duckdb: a folder, not a file"


@pytest.mark.parametrize("build", [_graph_missing_folder, _graph_folder_without_tools, _graph_file_as_toolset,
                                   _graph_missing_trajectories, _graph_warehouse_under_a_file, _graph_warehouse_is_a_folder],
                         ids=lambda f: f.__name__.removeprefix("_graph_").replace("_", " "))
def test_build_graph_bad_path_is_refused_before_any_work(tmp_path, build):
    from flows.build_graph import GraphConfig, build_graph

    changes, message = build(tmp_path)
    cfg = GraphConfig(**{"toolsets": (str(toolset_folder(tmp_path / "toy")),), "discriminator": None,
                         "warehouse": str(tmp_path / "out" / "tgr.duckdb"), "progress": False, **changes})
    inputs = set(written(tmp_path))
    with pytest.raises(ValueError, match=message):
        build_graph.fn(cfg)
    assert set(written(tmp_path)) == inputs


def tiny_warehouse(path: Path) -> Path:
    from tests.test_warehouse import DIM, tiny_dataset
    from warehouse.build import build_warehouse

    build_warehouse(path, [tiny_dataset()], DIM)
    return path


def test_eval_retrieval_missing_warehouse_is_a_usage_error(tmp_path):
    done = cli("eval_retrieval", ["--warehouse", "wh/tgr.duckdb", "--out-dir", "eval"], tmp_path)
    assert_usage_error(done, "eval_retrieval", "--warehouse wh/tgr.duckdb: no warehouse file there")
    assert written(tmp_path) == []


def test_eval_retrieval_report_folder_under_a_file_is_refused_before_any_work(tmp_path):
    from flows.eval_retrieval import EvalConfig, eval_retrieval

    wh = tiny_warehouse(tmp_path / "wh" / "tgr.duckdb")
    (tmp_path / "reports").write_text("x")
    before = wh.read_bytes()
    with pytest.raises(ValueError, match="--out-dir .*reports is a file, not a folder"):
        eval_retrieval.fn(EvalConfig(warehouse=str(wh), out_dir=str(tmp_path / "reports" / "eval")))
    assert wh.read_bytes() == before and written(tmp_path) == ["reports", "wh", "wh/tgr.duckdb"]


def _emulated_access(path: Any, mode: int, *args: Any, **kwargs: Any) -> bool:
    """``os.access`` as a user who is not root sees it: the owner's permission bits (root may write anywhere)."""
    bits = {os.R_OK: stat.S_IRUSR, os.W_OK: stat.S_IWUSR, os.X_OK: stat.S_IXUSR}
    try:
        st_mode = os.stat(path).st_mode
    except OSError:
        return False
    return all(st_mode & bit for flag, bit in bits.items() if mode & flag)


def test_eval_retrieval_read_only_warehouse_folder_is_found_before_the_work(tmp_path, monkeypatch):
    """The probe's case: every metric was computed, then os.replace failed. Now the folder is checked first."""
    from flows.eval_retrieval import EvalConfig, eval_retrieval

    wh = tiny_warehouse(tmp_path / "wh" / "tgr.duckdb")
    before = wh.read_bytes()
    (tmp_path / "wh").chmod(0o555)
    try:
        if os.geteuid() == 0:  # root writes through any permission bits: ask as a user would
            monkeypatch.setattr(os, "access", _emulated_access)
        with pytest.raises(ValueError, match=r"--warehouse .*tgr.duckdb: .*wh is not writable"):
            eval_retrieval.fn(EvalConfig(warehouse=str(wh), out_dir=str(tmp_path / "eval")))
        if os.geteuid() != 0:  # the command line alike (a subprocess cannot take the emulation above)
            done = cli("eval_retrieval", ["--warehouse", str(wh), "--out-dir", "eval"], tmp_path)
            assert_usage_error(done, "eval_retrieval", "wh is not writable")
    finally:
        (tmp_path / "wh").chmod(0o755)
    assert wh.read_bytes() == before and not (tmp_path / "eval").exists()


def test_eval_retrieval_writes_the_report_before_a_failing_warehouse_write(tmp_path, monkeypatch, prefect_harness):
    """A warehouse write that fails anyway (a disk full, a lock lost): the report is on disk, the error says so."""
    import flows.eval_retrieval as er

    wh = tiny_warehouse(tmp_path / "wh" / "tgr.duckdb")
    before = wh.read_bytes()

    def refuse(target: Any, change: Any) -> None:
        raise PermissionError(13, "Permission denied", str(target))  # what os.replace raised in the probe

    monkeypatch.setattr(er, "update_warehouse", refuse)
    with pytest.raises(er.MetricsNotStored) as failure:
        er.eval_retrieval(er.EvalConfig(warehouse=str(wh), out_dir=str(tmp_path / "eval"), rerank=False,
                                        sql_check=False, paper_encoder=None, cv_folds=2))
    report = tmp_path / "eval" / "retrieval.md"
    assert report.is_file() and "| BM25 |" in report.read_text()
    message = str(failure.value)
    assert f"the metrics are in {report}" in message and "PermissionError" in message and str(wh) in message
    assert wh.read_bytes() == before


@pytest.mark.parametrize("case", ["missing warehouse", "report folder under a file"])
def test_gtool_bad_path_is_refused_before_any_work(tmp_path, case):
    from flows.gtool import GToolConfig, gtool

    wh = tmp_path / "wh" / "tgr.duckdb"
    if case == "missing warehouse":
        message = "no warehouse file there"
    else:
        tiny_warehouse(wh)
        (tmp_path / "reports").write_text("x")
        message = "reports is a file, not a folder"
    inputs = set(written(tmp_path))
    with pytest.raises(ValueError, match=message):
        gtool.fn(GToolConfig(warehouse=str(wh), out_dir=str(tmp_path / "reports" / "gtool")))
    assert set(written(tmp_path)) == inputs


# ==================================================================================================
# 3. Numbers out of range: refused by the config dataclass (CLI, Python call and deployment alike)


def _configs() -> dict[str, type]:
    from flows.build_graph import GraphConfig
    from flows.build_tdi import BuildTDIConfig
    from flows.eval_retrieval import EvalConfig
    from flows.gtool import GToolConfig
    from flows.mine_tdi import MineTDIConfig
    from flows.train_discriminator import TrainDiscriminatorConfig

    return {"mine": MineTDIConfig, "graph": GraphConfig, "train": TrainDiscriminatorConfig, "gtool": GToolConfig,
            "tdi": BuildTDIConfig, "eval": EvalConfig}


BAD_NUMBERS = [  # (flow, fields, message)
    ("mine", {"per_class": -5}, "--per-class -5: a whole number >= 1"),
    ("mine", {"validation_fraction": 2.0}, r"--validation-fraction 2.0: must lie in \[0, 1\)"),
    ("mine", {"validation_fraction": -0.1}, r"--validation-fraction -0.1: must lie in \[0, 1\)"),
    ("mine", {"output_dropout": -0.5}, r"--output-dropout -0.5: a share, must lie in \[0, 1\]"),
    ("mine", {"hard_negative_share": 7.0}, r"--hard-negative-share 7.0: a share"),
    ("mine", {"workers": 0}, "--workers 0: a whole number >= 1"),
    ("mine", {"rows_per_shard": 0}, "--rows-per-shard 0: a whole number >= 1"),
    ("mine", {"limit_files": 0}, "--limit-files 0"),
    ("mine", {"max_producers_per_param": 0}, "--max-producers-per-param 0"),
    ("mine", {"concurrency": 0}, "--concurrency 0"),
    ("mine", {"min_order_support": 0}, "--min-order-support 0: a whole number >= 1"),
    ("mine", {"source": ("nosuchsource",)}, "--source nosuchsource: unknown 'nosuchsource'; choose from stdlib"),
    ("mine", {"source": ()}, "--source .empty.: name at least one"),
    ("mine", {"dataset": "../elsewhere"}, "--dataset '../elsewhere': one folder name"),
    ("graph", {"neighbours": -1}, "--neighbours -1: must be at least 1"),
    ("graph", {"batch_size": 0}, "--batch-size 0: must be at least 1"),
    ("graph", {"retrieval_k": 0}, "--retrieval-k 0: must be at least 1"),
    ("graph", {"min_prob": 1.5}, r"--min-prob 1.5: must lie in \[0, 1\]"),
    ("graph", {"order_min_support": 0}, "--order-min-support 0: must be at least 1"),
    ("graph", {"order_generic_min_tools": 0}, "--order-generic-min-tools 0: must be at least 1"),
    ("graph", {"order_min_consistency": 0.5}, r"--order-min-consistency 0.5: must lie in \(0.5, 1\]"),
    ("graph", {"order_min_consistency": 1.5}, r"--order-min-consistency 1.5: must lie in \(0.5, 1\]"),
    ("graph", {"order_generic_share": 0.0}, r"--order-generic-share 0.0: must lie in \(0, 1\]"),
    ("train", {"select_metric": "f1"}, "--select-metric 'f1': one of dependency_f1_calibrated"),
    ("train", {"pretrain_select_metric": "f1"}, "--pretrain-select-metric 'f1': one of dependency_f1_calibrated"),
    ("train", {"pooling": "max"}, "--pooling 'max': choose auto, mean, cls"),
    ("train", {"batch_size": 0}, "--batch-size 0: must be at least 1"),
    ("train", {"max_length": 0}, "--max-length 0: must be at least 1"),
    ("train", {"valid_fraction": 1.0}, "--valid-fraction 1.0"),
    ("gtool", {"hidden": 0}, "--hidden 0: must be at least 1"),
    ("gtool", {"heads": 0}, "--heads 0: must be at least 1"),
    ("gtool", {"dropout": 1.0}, r"--dropout 1.0: must lie in \[0, 1\)"),
    ("gtool", {"rho": -0.1}, r"--rho -0.1: must lie in \[0, 1\)"),
    ("gtool", {"lr": 0.0}, "--lr 0.0: must be above 0"),
    ("gtool", {"weight_decay": -1.0}, "--weight-decay -1.0: must not be negative"),
    ("gtool", {"completion_max_ratio": 0.0}, "--completion-max-ratio 0.0: must be above 0"),
    ("gtool", {"candidates": 0}, "--candidates 0: must be at least 1"),
    ("gtool", {"batch": 0}, "--batch 0: must be at least 1"),
    ("tdi", {"limit": 0}, "--limit 0: must be at least 1"),
    ("tdi", {"max_code_chars": 0}, "--max-code-chars 0"),
    ("tdi", {"precondition_share": 1.5}, r"--precondition-share 1.5: must lie in \[0, 1\]"),
    ("tdi", {"mined_per_class": -3}, "--mined-per-class -3: a count >= 0"),
    ("tdi", {"balance": {"per_class": 0}}, "--per-class 0: must be at least 1"),
    ("tdi", {"balance": {"validation_fraction": 2.0}}, r"--validation-fraction 2.0: must lie in \[0, 1\)"),
    ("tdi", {"shards": {"rows_per_shard": 0}}, "--rows-per-shard 0: must be at least 1"),
    ("tdi", {"llm": {"max_tokens": 0}}, "--max-tokens 0: must be at least 1"),
    ("tdi", {"llm": {"timeout_s": 0.0}}, "--timeout-s 0.0: must be above 0"),
    ("tdi", {"llm": {"price_in_per_mtok": -1.0}}, "--price-in -1.0: must not be negative"),
    ("eval", {"cv_folds": 1}, "cv_folds 1"),
]


def _nested(cls: type, fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` as constructor arguments: a nested dict becomes the default nested config with those changes."""
    defaults = cls()
    return {k: dataclasses.replace(getattr(defaults, k), **v) if isinstance(v, dict) else v for k, v in fields.items()}


@pytest.mark.parametrize("flow, fields, message", BAD_NUMBERS,
                         ids=[f"{f}-{'-'.join(map(str, v))}" for f, v, _ in BAD_NUMBERS])
def test_a_number_out_of_range_is_refused_by_the_config(flow, fields, message):
    cls = _configs()[flow]
    with pytest.raises(ValueError, match=message):  # the command line and a Python call build this
        cls(**_nested(cls, fields))
    deployment = {k: ({**dataclasses.asdict(getattr(cls(), k)), **v} if isinstance(v, dict) else
                      list(v) if isinstance(v, tuple) else v) for k, v in fields.items()}
    with pytest.raises(ValueError, match=message):  # what Prefect builds from a deployment's parameters
        TypeAdapter(cls).validate_python(deployment)


@pytest.mark.parametrize("module, args, fragment", [
    ("mine_tdi", ["--rows-per-shard", "0"], "--rows-per-shard 0"),  # used to be a ZeroDivisionError after mining
    ("mine_tdi", ["--source", "nosuchsource"], "unknown 'nosuchsource'"),
    ("mine_tdi", ["--validation-fraction", "2"], "--validation-fraction 2.0"),
    ("build_graph", ["--toolset", "TOY", "--no-discriminator", "--batch-size", "0"], "--batch-size 0"),  # after 45 s
    ("build_graph", ["--toolset", "TOY", "--no-discriminator", "--neighbours", "-1"], "--neighbours -1"),
], ids=lambda v: v if isinstance(v, str) and not v.startswith("-") else None)
def test_late_crashing_numbers_are_usage_errors_on_the_command_line(tmp_path, module, args, fragment):
    toy = str(toolset_folder(tmp_path / "toy"))
    inputs = set(written(tmp_path))
    done = cli(module, [a.replace("TOY", toy) for a in args] + (["--output-root", "out"] if module == "mine_tdi" else
                                                                  ["--warehouse", "wh/tgr.duckdb"]), tmp_path)
    assert_usage_error(done, module, fragment)
    assert set(written(tmp_path)) == inputs


def test_select_metrics_are_what_the_trainer_reports():
    """--select-metric is checked against a list: it must be the keys compute_metrics returns (and the loss)."""
    from types import SimpleNamespace

    from flows.train_discriminator import SELECT_METRICS
    from tasks.training.metrics import make_compute_metrics

    logits = np.log(np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8], [0.6, 0.3, 0.1]]))
    keys = set(make_compute_metrics(None)(SimpleNamespace(predictions=logits, label_ids=np.array([0, 1, 2, 0]))))
    assert set(SELECT_METRICS) - {"loss"} == keys - {"threshold"}


def test_benchmark_sources_are_those_of_the_shared_data_readme(shared_data):
    from tasks.toolsets.availability import BENCHMARK_SOURCES
    from tasks.toolsets.readers import BENCHMARKS

    assert set(BENCHMARK_SOURCES) == set(BENCHMARKS)
    rows = {line.split("|")[1].strip(" `"): line for line in (shared_data / "README.md").read_text().splitlines()
            if line.startswith("| `benchmarks/")}
    for name, src in BENCHMARK_SOURCES.items():
        row = rows[f"benchmarks/{name}/"]
        repo, commit = src.source.removeprefix("https://github.com/").split(" ")[:2]
        assert f"{repo} {commit}" in row and src.license in row, (name, row)


# ==================================================================================================
# 4. The warehouse macros: an unknown name or a bad number is an error naming it, never an empty answer


@pytest.fixture(scope="module")
def macro_warehouse(tmp_path_factory):
    from warehouse.build import connect

    con = connect(tiny_warehouse(tmp_path_factory.mktemp("macros") / "tgr.duckdb"))
    yield con
    con.close()


MACRO_ERRORS = [
    ("prerequisites_of('nope', 'manual', 'a')", "prerequisites_of: no dataset nope in the warehouse (it has: tiny)"),
    ("prerequisites_of(NULL, 'manual', 'a')", "prerequisites_of: no dataset NULL"),
    ("prerequisites_of('tiny', 'manul', 'a')", "prerequisites_of: tiny has no edge source manul (it has: discriminator, manual)"),
    ("prerequisites_of('tiny', 'manual', 'zz')", "prerequisites_of: tiny has no tool zz"),
    ("prerequisites_of('tiny', 'manual', NULL)", "prerequisites_of: tiny has no tool NULL"),
    ("tool_top_k('tiny', 'base', [1, 0, 0, 0], 0)", "tool_top_k: k must be a positive integer, got 0"),
    ("tool_top_k('nope', 'base', [1, 0, 0, 0], 3)", "tool_top_k: no dataset nope"),
    ("tool_top_k('tiny', 'tgr_manul', [1, 0, 0, 0], 3)", "tool_top_k: tiny has no tool embeddings of kind tgr_manul (it has: base)"),
    ("tool_top_k('tiny', NULL, [1, 0, 0, 0], 3)", "tool_top_k: tiny has no tool embeddings of kind NULL"),
    ("query_top_k('tiny', 'base', 0)", "query_top_k: k must be a positive integer, got 0"),
    ("query_top_k('tiny', 'base', -2)", "query_top_k: k must be a positive integer, got -2"),
    ("query_top_k('tiny', 'base', NULL)", "query_top_k: k must be a positive integer, got NULL"),
    ("query_top_k('nope', 'base', 3)", "query_top_k: no dataset nope"),
    ("query_top_k('tiny', 'tgr_manul', 3)", "query_top_k: tiny has no tool embeddings of kind tgr_manul"),
    ("next_tools('nope', 'a', 3)", "next_tools: no dataset nope"),
    ("next_tools('tiny', 'zz', 3)", "next_tools: tiny has no tool zz"),
    ("next_tools('tiny', 'a', NULL)", "next_tools: k must be a positive integer, got NULL"),
    ("next_tools_at('tiny', 'a', 0, 1)", "next_tools_at: k must be a positive integer, got 0"),
    ("next_tools_at('tiny', 'zz', 3, 1)", "next_tools_at: tiny has no tool zz"),
    ("next_tools_at('tiny', 'a', 3, -1)", "n is an iteration >= 0 (0: the static graph), got -1"),
    ("transition_weights_at('nope', 0)", "transition_weights_at: no dataset nope"),
    ("transition_weights_at('tiny', NULL)", "n is an iteration >= 0 (0: the static graph), got NULL"),
    ("producers_of('nope', 'a', 'x')", "producers_of: no dataset nope"),
]


@pytest.mark.parametrize("call, message", MACRO_ERRORS, ids=[c for c, _ in MACRO_ERRORS])
def test_a_macro_refuses_an_unknown_name_or_a_bad_number(macro_warehouse, call, message):
    with pytest.raises(duckdb.Error) as failure:
        macro_warehouse.execute(f"SELECT * FROM {call}").fetchall()
    assert message in str(failure.value)


def test_a_macro_refuses_bound_values_alike(macro_warehouse):
    """Values bound from Python (how a program calls them) get the same errors as literals."""
    for sql, params, message in [
        ("SELECT * FROM prerequisites_of(?, ?, ?)", ["tiny", "manual", "x'; DROP TABLE edges; --"], "has no tool x'; DROP"),
        ("SELECT * FROM query_top_k(?, ?, ?)", ["tiny", "base", 0], "k must be a positive integer, got 0"),
        ("SELECT * FROM tool_top_k(?, ?, ?, ?)", ["tiny", "tgr_fused", [1.0, 0.0, 0.0, 0.0], 2], "no tool embeddings of kind tgr_fused"),
        ("SELECT * FROM next_tools(?, ?, ?)", [None, "a", 2], "no dataset NULL"),
    ]:
        with pytest.raises(duckdb.Error, match=message.replace("?", r"\?")):
            macro_warehouse.execute(sql, params).fetchall()
    assert macro_warehouse.execute("SELECT count(*) FROM edges").fetchone()[0] > 0


def test_a_known_name_with_nothing_to_list_is_an_empty_answer(macro_warehouse):
    con = macro_warehouse
    assert con.execute("SELECT count(*) FROM prerequisites_of('tiny', 'manual', 'f')").fetchone() == (0,)  # no edges
    assert con.execute("SELECT count(*) FROM prerequisites_of('tiny', 'schema', 'a')").fetchone() == (0,)  # built, none found
    assert con.execute("SELECT count(*) FROM next_tools('tiny', 'a', 3)").fetchone() == (0,)  # no transitions built
    assert con.execute("SELECT count(*) FROM transition_weights_at('tiny', 0)").fetchone() == (0,)
    assert [r[0] for r in con.execute("SELECT prerequisite FROM prerequisites_of('tiny', 'manual', 'd') ORDER BY 1").fetchall()] \
        == ["a", "b", "c"]
    assert len(con.execute("SELECT * FROM query_top_k('tiny', 'base', 2)").fetchall()) == 2
