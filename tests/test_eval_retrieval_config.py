"""eval-retrieval's one config surface: EvalConfig's checks refuse a Python call, a deployment run and a
command line alike, and the generated command line keeps today's flags, defaults and meanings."""
from __future__ import annotations

import dataclasses

import pytest
from pydantic import TypeAdapter

from flows.eval_retrieval import PAPER_ENCODER, RERANK_FIRST_STAGES, EvalConfig, parse_args
from tasks.common.cli import build_parser, options, to_argv

BAD = [({"ks": (5,)}, "5 and 10"), ({"ks": (0, 5, 10)}, ">= 1"), ({"rerank_first_stages": ("BM25", "bm26")}, "bm26"),
       ({"datasets": ("apibank", "")}, "empty dataset"), ({"warehouse": ""}, "must not be empty"),
       ({"graph_weights": (0.0, 0.5)}, "0 and 1 among them"), ({"graph_weights": (0.0, 1.0, 2.0)}, r"in \[0, 1\]"),
       ({"cv_folds": 1}, "cv_folds 1")]


@pytest.mark.parametrize("values, message", BAD)
def test_a_bad_value_is_refused_by_constructing_the_config(values, message):
    with pytest.raises(ValueError, match=message):
        EvalConfig(**values)
    with pytest.raises(ValueError, match=message):  # what Prefect builds from a deployment's parameters
        TypeAdapter(EvalConfig).validate_python({k: list(v) if isinstance(v, tuple) else v for k, v in values.items()})


def test_a_bad_value_on_the_command_line_is_one_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--dataset", "apibank", "--dataset", ""])
    assert exit_.value.code == 2 and "empty dataset" in capsys.readouterr().err


def test_every_flag_default_is_the_dataclass_default():
    defaults = EvalConfig()
    parser = build_parser(EvalConfig, "prog")
    for o in options(EvalConfig):
        assert parser.get_default(o.dest) == o.default == getattr(defaults, o.paths[0][0]), o.flag
    assert parse_args([]) == defaults and parse_args(to_argv(defaults)) == defaults
    assert {o.flag for o in options(EvalConfig)} == {"warehouse", "dataset", "out-dir", "rerank", "sql-check", "rerank-seed",
                                                     "paper-encoder", "graph-weights", "cv-folds", "cv-seed"}
    # ks and the first stages: Python and deployments only


def test_todays_command_lines_keep_working():
    assert parse_args([]) == EvalConfig("artifacts/warehouse/tgr.duckdb", (), (5, 10), "artifacts/eval", True, True, 0,
                                        RERANK_FIRST_STAGES, PAPER_ENCODER)
    cfg = parse_args(["--warehouse", "w.duckdb", "--dataset", "apibank", "--dataset", "tmdb", "--out-dir", "o", "--no-rerank",
                      "--no-sql-check", "--rerank-seed", "3", "--paper-encoder", "None"])
    assert cfg == dataclasses.replace(EvalConfig(), warehouse="w.duckdb", datasets=("apibank", "tmdb"), out_dir="o",
                                      rerank=False, sql_check=False, rerank_seed=3, paper_encoder=None)
    assert parse_args(["--paper-encoder", "all-minilm-l6"]).paper_encoder == "all-minilm-l6"
    fusion = parse_args(["--graph-weights", "0,0.3,1", "--cv-folds", "3", "--cv-seed", "4"])
    assert (fusion.graph_weights, fusion.cv_folds, fusion.cv_seed) == ((0.0, 0.3, 1.0), 3, 4)
    assert parse_args(to_argv(fusion)) == fusion
    assert parse_args(to_argv(cfg)) == cfg
