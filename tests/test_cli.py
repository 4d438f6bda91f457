"""Config in one place (issue 8): the command lines are generated from the flows' config dataclasses,
every default is the dataclass's, prefect.yaml passes overrides only, and a deployment run honours
OPENAI_BASE_URL as the command line does."""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import TypeAdapter

from flows.build_tdi import BuildTDIConfig, build_tdi, config_from_args
from flows.mine_tdi import MineTDIConfig, _parse_args
from tasks.mining.pin import describe_sources, write_sources
from tasks.common.cli import Option, build_parser, config_from_namespace, options, parse_config, to_argv
from tasks.llm.config import EMBEDDED, LLMConfig
from tasks.sources.spec import SourceSpec
from tests.conftest import REPO_ROOT
from tests.openai_server import FakeOpenAIServer
from tests.test_llm_faults import write_tree

CONFIGS = [BuildTDIConfig, MineTDIConfig]


@pytest.fixture(autouse=True)
def _no_env_endpoint(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


PIN: dict[str, str] = {}  # mine-tdi's --pin value: MineTDIConfig's __post_init__ reads the file


@pytest.fixture(scope="module", autouse=True)
def _pin_file(tmp_path_factory):
    PIN["path"] = str(write_sources(tmp_path_factory.mktemp("pin"), describe_sources([])))
    mix = tmp_path_factory.mktemp("mix")  # --mix-tdi is checked to hold shards
    (mix / "shards").mkdir()
    (mix / "shards" / "train-00000-of-00001.parquet").write_bytes(b"")
    PIN["mix"] = str(mix)


def at(cfg: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        cfg = getattr(cfg, name)
    return cfg


def other_value(o: Option) -> Any:
    """A valid value of ``o`` that is not its default."""
    if o.kind is bool:
        return not o.default
    if o.choices:
        return next(c for c in o.choices if c != o.default and c != "codesearchnet")  # codesearchnet needs a path
    if o.kind is tuple:
        if o.flag == "source":  # mine-tdi: names of its sources are checked (tree and codesearchnet need a path)
            return ("stdlib",)
        return ("valid",) if o.flag == "partitions" else ("a", "b")
    if o.kind is int:
        return 7 if o.default is None else o.default + 3
    if o.kind is float:
        return 0.5 if o.default in (None, 0.0) else o.default / 2
    if o.flag == "pin":
        return PIN["path"]
    if o.flag == "mix-tdi":
        return PIN["mix"]
    if o.flag == "push-to-hub":  # a hub repo id is namespace/name
        return "user/x-push-to-hub"
    return f"x-{o.flag}"


def with_values(cls: type, values: dict[str, Any]) -> Any:
    """``cls`` with the given option values (by flag), as the parser builds it."""
    namespace = argparse.Namespace(**{o.dest: values.get(o.flag, o.default) for o in options(cls)})
    return config_from_namespace(cls, namespace)


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_every_cli_default_is_the_dataclass_default(cls):
    defaults = cls()
    parser = build_parser(cls, "prog")
    for o in options(cls):
        for path in o.paths:  # --seed sets two fields: one default for both
            assert parser.get_default(o.dest) == o.default == at(defaults, path), (o.flag, path)
    assert parse_config(cls, [], "prog") == defaults  # no flag: the dataclass's config, nothing else
    assert parse_config(cls, to_argv(defaults), "prog") == defaults


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_each_flag_sets_its_field_and_nothing_else(cls, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # mine-tdi's LLM counts need an endpoint
    defaults = cls()
    for o in options(cls):
        value = other_value(o)
        cfg = parse_config(cls, o.render(value), "prog")
        expected = defaults
        for path in o.paths:
            if len(path) == 1:
                expected = dataclasses.replace(expected, **{path[0]: value})
            else:
                expected = dataclasses.replace(expected, **{path[0]: dataclasses.replace(at(expected, path[:1]), **{path[1]: value})})
        assert cfg == expected, o.flag


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("optional", ["values", "none"])
def test_the_generated_cli_round_trips_every_field(cls, optional):
    values = {o.flag: other_value(o) for o in options(cls)}
    if optional == "none":
        values.update({o.flag: None for o in options(cls) if o.optional})
    forced = {"rewrite-docs", "judge-sample"} if cls is MineTDIConfig and values["base-url"] is None else set()
    values.update({flag: 0 for flag in forced})  # an LLM review needs an endpoint
    if cls is MineTDIConfig and values["pin"] is not None:
        values["limit-files"] = None  # a pin fixes the file list: no sample of it
    cfg = with_values(cls, values)
    for o in options(cls):
        assert at(cfg, o.paths[0]) == values[o.flag], o.flag
        assert values[o.flag] != o.default or o.flag in forced or (o.optional and values[o.flag] is None), o.flag
    assert parse_config(cls, to_argv(cfg), "prog") == cfg


def test_every_field_is_on_the_command_line_or_deliberately_not():
    """A new field shows up as a flag unless its nested config names what it exposes."""
    on_cli = {p for o in options(BuildTDIConfig) for p in o.paths}
    for f in dataclasses.fields(BuildTDIConfig):
        spec = f.metadata.get("cli")
        if isinstance(spec, dict):
            assert {(f.name, sub) for sub in spec} <= on_cli
        else:
            assert (f.name,) in on_cli, f.name
    assert {o.flag for o in options(MineTDIConfig)} == {f.name.replace("_", "-") for f in dataclasses.fields(MineTDIConfig)}


def test_todays_command_lines_keep_working():
    cfg = config_from_args([
        "--source", "tree", "--source-path", "/", "--sample-seed", "-1", "--limit", "-1", "--languages", "python,java",
        "--base-url", "http://gpu:8000/v1", "--model", "m", "--concurrency", "32", "--price-in", "0.15", "--price-out", "0.6",
        "--rpm", "600", "--tpm", "90000", "--batch", "--batch-poll-s", "5", "--per-class", "92000", "--seed", "7",
        "--rows-per-shard", "10", "--chunk-size", "50", "--task-runner", "dask", "--dask-address", "", "--dask-workers", "4",
    ])
    assert (cfg.source.kind, cfg.source.path, cfg.source.sample_seed, cfg.limit, cfg.source.languages) == ("tree", "/", None, None, ("python", "java"))
    llm = cfg.llm
    assert (llm.base_url, llm.model, llm.concurrency, llm.price_in_per_mtok, llm.price_out_per_mtok) == ("http://gpu:8000/v1", "m", 32, 0.15, 0.6)
    assert (llm.rpm_limit, llm.tpm_limit, llm.batch, llm.batch_poll_s) == (600, 90000, True, 5.0)
    assert (cfg.balance.per_class, cfg.balance.seed, cfg.shards.seed, cfg.shards.rows_per_shard) == (92000, 7, 7, 10)
    assert (cfg.chunk_size, cfg.task_runner, cfg.dask_address, cfg.dask_workers) == (50, "dask", None, 4)


def test_an_unset_endpoint_and_concurrency_resolve_once_for_cli_and_deployment(monkeypatch):
    assert BuildTDIConfig().llm.base_url is None and BuildTDIConfig().llm.concurrency is None
    embedded = BuildTDIConfig().resolved().llm
    assert (embedded.base_url, embedded.concurrency) == (EMBEDDED, 1)  # the embedded server has one slot
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env-endpoint/v1")
    endpoint = BuildTDIConfig().resolved().llm
    assert (endpoint.base_url, endpoint.concurrency) == ("http://env-endpoint/v1", 16)
    assert config_from_args([]).resolved() == BuildTDIConfig().resolved()  # the CLI and a deployment: one rule
    given = dataclasses.replace(BuildTDIConfig(), llm=LLMConfig(model="m", base_url="http://given/v1", concurrency=3)).resolved()
    assert (given.llm.base_url, given.llm.concurrency) == ("http://given/v1", 3)
    with pytest.raises(ValueError, match="--batch needs an endpoint"):
        dataclasses.replace(BuildTDIConfig(), llm=LLMConfig(model="m", base_url=EMBEDDED, batch=True)).resolved()
    assert MineTDIConfig().base_url == "http://env-endpoint/v1" == MineTDIConfig(base_url=None).base_url
    assert _parse_args(["--judge-sample", "2"]).base_url == "http://env-endpoint/v1"


def _defaults_of(cls: type) -> Any:
    return cls()


def _config_class(dotted: str) -> type:
    module, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("flow, cls", [("flows/build_tdi.py:build_tdi", BuildTDIConfig), ("flows/mine_tdi.py:mine_tdi", MineTDIConfig)])
def test_prefect_yaml_passes_overrides_only(flow, cls):
    deployments = [d for d in yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())["deployments"] if d["entrypoint"] == flow]
    assert deployments
    defaults = _defaults_of(cls)

    def check(given: dict, default: Any, where: str) -> None:
        for key, value in given.items():
            here = getattr(default, key)
            if isinstance(value, dict) and dataclasses.is_dataclass(here):
                check(value, here, f"{where}.{key}")
            else:
                assert value != here, f"{where}.{key}: {value!r} is the default; leave it out"

    for d in deployments:
        cfg = d["parameters"]["cfg"]
        check(cfg, defaults, d["name"])
        TypeAdapter(cls).validate_python(cfg)  # what Prefect builds from it


@pytest.mark.slow
def test_a_deployment_run_with_no_base_url_uses_openai_base_url(tmp_path, prefect_harness, monkeypatch):
    """What prefect.yaml's deployments do: the flow called with a cfg whose llm.base_url is None."""
    src = write_tree(tmp_path / "src", 8)
    cfg = BuildTDIConfig(dataset="deployed", output_root=str(tmp_path / "out"),
                         source=SourceSpec(kind="tree", path=str(src)), limit=None,
                         llm=LLMConfig(model="fake", cache_dir=str(tmp_path / "cache")))
    assert cfg.llm.base_url is None
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        manifest = build_tdi(cfg)
        assert server.requests >= 8 * 3  # the env endpoint answered every agent call (no embedded server started)
    assert manifest["llm"]["base_url"] == server.base_url
    recorded = json.loads((tmp_path / "out" / "deployed" / "manifest.json").read_text())["config"]["llm"]
    assert (recorded["base_url"], recorded["concurrency"]) == (server.base_url, 16)
    assert manifest["accounting"]["read"] == 8


TRAIN_AND_GRAPH = ["flows.train_discriminator.TrainDiscriminatorConfig", "flows.build_graph.GraphConfig"]


@pytest.mark.parametrize("flow, dotted", [("flows/train_discriminator.py:train_discriminator", TRAIN_AND_GRAPH[0]),
                                          ("flows/build_graph.py:build_graph", TRAIN_AND_GRAPH[1])])
def test_prefect_yaml_passes_overrides_only_to_train_and_graph(flow, dotted, tmp_path, monkeypatch):
    """These configs check their input folders when made, so the deployments are validated where the inputs
    exist, as on a worker after make mine-tdi and make train-discriminator."""
    (tmp_path / "artifacts/tdi/tdi-mined/shards").mkdir(parents=True)
    (tmp_path / "artifacts/tdi/tdi-mined/shards/train-00000.parquet").write_bytes(b"")
    (tmp_path / "artifacts/discriminator/minilm/best").mkdir(parents=True)
    (tmp_path / "artifacts/discriminator/minilm/best/config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    test_prefect_yaml_passes_overrides_only(flow, _config_class(dotted))


@pytest.mark.parametrize("dotted", TRAIN_AND_GRAPH)
def test_train_and_graph_command_lines_are_generated_from_their_configs(dotted, tmp_path):
    cls = _config_class(dotted)
    defaults = cls()
    parser = build_parser(cls, "prog")
    for o in options(cls):
        assert o.field_value(parser.get_default(o.dest)) == o.default == at(defaults, o.paths[0]), o.flag
    required = ["--toolset", "apibank", "--no-discriminator"] if cls.__name__ == "GraphConfig" else []
    assert parse_config(cls, required, "prog") == defaults
    assert parse_config(cls, to_argv(defaults), "prog") == defaults
    (tmp_path / "config.json").write_text("{}")  # a checkpoint folder
    if cls.__name__ == "GraphConfig":
        cfg = cls(toolsets=("apibank", str(tmp_path)), discriminator=str(tmp_path), both_orders=False, max_producers=None,
                  trajectories=("apibank=runs,1.jsonl", "more.jsonl"), split_fractions=(0.5, 0.25, 0.25), alphas=(0.2,),
                  embed_style="structured", gcn_direction="dependent_to_prerequisite", rule_score=3, threshold=0.4,
                  schema_edges=False, transitions=False, evaluator_concurrency=2)
    else:
        cfg = cls(output=tmp_path / "run", checkpoint=tmp_path, finetune=(), test=("apibank", str(tmp_path)),
                  encoder_layers=None, calibration="precision", calibrate_on="tdi", max_steps=5, symmetric=False,
                  batch_size=8, benchmarks_root=tmp_path, recalibrate=True, pretrain_data="none", method_docs="receiver",
                  parameter_dropout=0.5, pretrain_select_metric="dependency_f1", pooling="cls")
    assert parse_config(cls, to_argv(cfg), "prog") == cfg


@pytest.mark.parametrize("dotted", TRAIN_AND_GRAPH)
def test_help_of_train_and_graph_is_generated_from_their_configs(dotted):
    module = dotted.rsplit(".", 1)[0]
    shown = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO_ROOT, capture_output=True, text=True,
                           timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"usage: python -m {module}")
    for o in options(_config_class(dotted)):
        assert f"--{o.flag}" in shown.stdout, o.flag
    if module == "flows.build_graph":
        assert "--no-discriminator" in shown.stdout and "--single-order" in shown.stdout
