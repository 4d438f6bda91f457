"""One real train-discriminator run on CPU: tiny BERT, tiny TDI shards, tiny tool sets."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from flows.train_discriminator import TrainDiscriminatorConfig, parse_args, resolve_pretrain_data, train_discriminator  # noqa: E402
from schemas.docs import canonical_doc_json, doc_id  # noqa: E402
from schemas.tdi import ID2LABEL, KIND_HEAD_ID2LABEL, TDI_PAIR_SCHEMA, swap_label  # noqa: E402
from schemas.toolset import DependencyEdge, Tool, ToolSet  # noqa: E402
from tasks.toolsets.readers import write_toolset_dir  # noqa: E402
from tests.test_discriminator import make_tiny_model, toy_toolset  # noqa: E402


def write_tiny_tdi(folder: Path, n_per_class: int = 8, preconditions: bool = False) -> Path:
    """Balanced TDI shards in the real Arrow schema: producer/consumer doc pairs and their swaps.
    ``preconditions``: every second dependent pair is a precondition (a check before an action, nothing passed)."""
    rows = []
    for split, n in (("train", n_per_class), ("validation", 3)):
        for i in range(n):
            producer = {"name": f"get_{split}_{i}", "description": f"returns item {i}", "input_params": [],
                        "output_params": [{"name": f"item_{i}", "type": "str", "description": "the item"}]}
            consumer = {"name": f"use_{split}_{i}", "description": f"uses item {i}", "output_params": [],
                        "input_params": [{"name": f"item_{i}", "type": "str", "description": "the item"}]}
            other = {"name": f"clock_{split}_{i}", "description": "tells the time", "input_params": [], "output_params": []}
            kind = "precondition" if preconditions and i % 2 else "data"
            if kind == "precondition":
                producer = {"name": f"check_{split}_{i}", "description": "checks the account", "input_params": [],
                            "output_params": [{"name": "verified", "type": "bool", "description": "checked"}]}
                consumer = {**consumer, "name": f"pay_{split}_{i}", "description": "pays"}
            for a, b, label, origin in ((consumer, producer, 0, "validated"), (producer, consumer, swap_label(0), "swapped"),
                                        (consumer, other, 1, "shuffled")):
                ja, jb = canonical_doc_json(a), canonical_doc_json(b)
                rows.append({"pair_id": doc_id(ja + jb), "doc_a": ja, "doc_b": jb, "tool_a_id": doc_id(ja),
                             "tool_b_id": doc_id(jb), "label": label, "label_name": ID2LABEL[label], "split": split,
                             "origin": origin, "source_a": f"rec{i}", "source_b": f"rec{i}",
                             "kind": None if label == 1 else kind})
    shards = folder / "shards"
    shards.mkdir(parents=True)
    for split in ("train", "validation"):
        table = pa.Table.from_pylist([r for r in rows if r["split"] == split], schema=TDI_PAIR_SCHEMA)
        pq.write_table(table, shards / f"{split}-00000.parquet")
    return folder


def test_training_reads_shards_of_schema_versions_1_to_3_and_refuses_others(tmp_path):
    from tasks.training.examples import load_tdi_examples

    v3 = write_tiny_tdi(tmp_path / "v3")
    assert pq.read_schema(next((v3 / "shards").glob("*.parquet"))).metadata[b"tgr.schema_version"] == b"3"
    # older datasets: version 2 before the kind columns, version 1 also before the parameter columns
    for version, drop in (("2", ["kind", "support"]), ("1", ["kind", "support", "consumer_param", "producer_output"]),
                          ("4", [])):
        (tmp_path / f"v{version}" / "shards").mkdir(parents=True)
        for f in (v3 / "shards").glob("*.parquet"):
            table = pq.read_table(f).drop_columns(drop)
            pq.write_table(table.replace_schema_metadata({"tgr.schema_version": version}), tmp_path / f"v{version}" / "shards" / f.name)
    train3, valid3 = load_tdi_examples(v3)
    assert len(train3) == 24 and len(valid3) == 9
    assert {(e.label, e.kind) for e in train3 + valid3} == {(0, "data"), (2, "data"), (1, None)}
    for version in ("1", "2"):  # their dependent rows are data pairs
        train, valid = load_tdi_examples(tmp_path / f"v{version}")
        assert (sorted(map(repr, train)), sorted(map(repr, valid))) == (sorted(map(repr, train3)), sorted(map(repr, valid3)))
    with pytest.raises(ValueError, match="schema version '4'"):
        load_tdi_examples(tmp_path / "v4")
    # a version-3 precondition row keeps its kind, and its swap made for training too
    f = next((v3 / "shards").glob("train-*.parquet"))
    table = pq.read_table(f)
    kinds = ["precondition" if k == "data" else k for k in table["kind"].to_pylist()]
    pq.write_table(table.set_column(table.schema.get_field_index("kind"), "kind", pa.array(kinds, pa.string())), f)
    train, _ = load_tdi_examples(v3)
    assert {(e.label, e.kind) for e in train} == {(0, "precondition"), (2, "precondition"), (1, None)}
    from tasks.training.examples import with_both_orders
    one_way = [e for e in train if e.label != 2]
    assert {(e.label, e.kind) for e in with_both_orders(one_way)} == {(0, "precondition"), (2, "precondition"), (1, None)}


def second_toolset() -> ToolSet:
    doc = lambda n, i, o: {"name": n, "description": f"{n} tool", "input_params":  # noqa: E731
                           [{"name": p, "type": "str", "description": p} for p in i],
                           "output_params": [{"name": p, "type": "str", "description": p} for p in o]}
    tools = [Tool("SearchMovie", "movies", doc("SearchMovie", ["query"], ["movie_id"])),
             Tool("GetCredits", "movies", doc("GetCredits", ["movie_id"], ["cast"])),
             Tool("GetImages", "movies", doc("GetImages", ["movie_id"], ["images"]))]
    return ToolSet("movies", tools, [DependencyEdge("movies", "GetCredits", "SearchMovie"),
                                     DependencyEdge("movies", "GetImages", "SearchMovie")])


@pytest.fixture()
def tiny_run(tmp_path):
    model_dir = make_tiny_model(tmp_path / "tiny-bert")
    tdi = write_tiny_tdi(tmp_path / "tdi" / "tiny", preconditions=True)
    finetune = [str(write_toolset_dir(toy_toolset(), tmp_path / "toy")), str(write_toolset_dir(second_toolset(), tmp_path / "movies"))]
    test = str(write_toolset_dir(second_toolset(), tmp_path / "test"))
    extra = str(write_toolset_dir(second_toolset(), tmp_path / "extra"))
    cfg = TrainDiscriminatorConfig(output=tmp_path / "run", pretrain_data=str(tdi), finetune=tuple(finetune), test=(test,),
                                   finetune_extra=(extra,),
                                   base_model=str(model_dir), max_length=64, batch_size=4, pretrain_epochs=1,
                                   finetune_epochs=2, pretrain_learning_rate=1e-3, finetune_learning_rate=1e-3,
                                   progress=False, seed=7, kind_head=True, parameter_scorer=False)
    return cfg


@pytest.mark.slow
def test_flow_trains_calibrates_evaluates_and_saves_a_loadable_checkpoint(tiny_run, prefect_harness):
    from dataclasses import replace

    from transformers import pipeline

    from models.discriminator import load_calibration, pair_texts

    # one none pair per finetuning set: the held-out report reads more of them than training and calibration
    tiny_run = replace(tiny_run, finetune_max_none=1)
    result = train_discriminator(tiny_run)
    out = Path(tiny_run.output)
    best = out / "best"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "README.md", "metrics.json", "calibration.json"):
        assert (best / name).exists(), name
    for name in ("metrics.json", "confusion_matrix_test.png", "training_curves.png", "precision_recall.png",
                 "pretrain/best/config.json"):
        assert (out / name).exists(), name
    assert list((out / "finetune").glob("checkpoint-*/trainer_state.json")), "the Trainer's resumable checkpoints"
    text = (out / "metrics.json").read_text()
    metrics = json.loads(text, parse_constant=lambda c: pytest.fail(f"metrics.json holds {c}: not strict JSON"))
    assert metrics["data"]["pretrain"]["source"].endswith("tiny")
    from tasks.training.precision import cpu_bf16_unit, train_in_bf16  # which arithmetic, and why, on this machine
    assert metrics["cpu_bf16_unit"] == cpu_bf16_unit() and metrics["trained_in_bf16"] is train_in_bf16("auto")
    # both orders: the shards hold each dependency pair and its swap; the 8 none pairs gain their swaps
    assert metrics["data"]["pretrain"]["train"] == {"a_depends_on_b": 8, "no_dependency": 16, "b_depends_on_a": 8}
    assert metrics["data"]["finetune"]["replay"] == min(tiny_run.finetune_replay, 32)
    # --finetune-extra joins the training side only: the validation split is the --finetune sets' own
    from flows.train_discriminator import build_toolset_pairs
    from tasks.training.examples import grouped_split, held_out_pairs, label_counts

    sampled = build_toolset_pairs.fn(tiny_run.finetune, tiny_run.benchmarks_root, tiny_run.finetune_max_none,
                                     tiny_run.split_seed)
    own = grouped_split(sampled, tiny_run.valid_fraction, tiny_run.split_seed)
    assert metrics["data"]["finetune"]["validation"] == label_counts(own[1])
    assert metrics["data"]["finetune"]["train"] == label_counts(own[0])
    # the held-out report: every pair of the held-out groups, none pairs the sample left out included
    every = build_toolset_pairs.fn(tiny_run.finetune, tiny_run.benchmarks_root, None, tiny_run.split_seed)
    report = label_counts(held_out_pairs(sampled, every, tiny_run.valid_fraction, tiny_run.split_seed))
    assert metrics["data"]["finetune"]["held_out_report"] == metrics["validation"]["finetune"]["counts"] == report
    assert report["no_dependency"] > metrics["data"]["finetune"]["validation"]["no_dependency"]
    assert {k: v for k, v in report.items() if k != "no_dependency"} == \
        {k: v for k, v in label_counts(own[1]).items() if k != "no_dependency"}
    assert metrics["data"]["finetune"]["extra"] == {tiny_run.finetune_extra[0]: {
        "groups": 1, "groups_held_out_by_the_parameter_level": 0, "view": "description",
        "pairs": {"a_depends_on_b": 2, "no_dependency": tiny_run.finetune_max_none, "b_depends_on_a": 2}}}
    # pretraining keeps the checkpoint of its lowest validation loss (--pretrain-select-metric loss), and a kept
    # checkpoint still at the class prior is said in metrics.json
    pre = metrics["stages"]["pretrain"]
    evals = [h for h in pre["history"] if "eval_loss" in h]
    assert len(evals) == 2 and pre["best_step"] == min(evals, key=lambda h: h["eval_loss"])["step"]
    kept_at_prior = next(h for h in evals if h["step"] == pre["best_step"])["eval_dependency_f1"] == 0
    assert ("warnings" in metrics) == kept_at_prior
    assert ("**Warning:** pretraining ended at the class prior" in (best / "README.md").read_text()) == kept_at_prior
    # test set = every ordered pair of the 3 movie tools: 2 edges in both directions + 2 none pairs
    test = metrics["test"]
    assert test["counts"] == {"a_depends_on_b": 2, "no_dependency": 2, "b_depends_on_a": 2}
    assert sum(map(sum, test["argmax"]["confusion_matrix"])) == 6
    assert test["calibrated"]["threshold"] == load_calibration(best)["threshold"] == metrics["calibration"]["threshold"]
    # held-out tool-set groups and the TDI validation split are reported apart; the cut is chosen on both
    assert set(metrics["validation"]) == {"finetune", "tdi"} and metrics["calibration"]["calibrated_on"] == ["finetune", "tdi"]
    # the cut is chosen on the sample (the report's extra none pairs are not calibration's)
    assert metrics["calibration"]["n_pairs"] == sum(metrics["data"]["finetune"]["validation"].values()) + \
        sum(metrics["validation"]["tdi"]["counts"].values())
    # each finetuning set's held-out part is also reported on its own, and the parts make up the whole
    by_set = metrics["validation_by_set"]
    assert len(by_set) == len(tiny_run.finetune) and "movies" in by_set
    assert {k: sum(part["counts"][k] for part in by_set.values()) for k in test["counts"]} == metrics["validation"]["finetune"]["counts"]
    assert "validation (finetune, held-out part of movies): discriminator, calibrated" in (best / "README.md").read_text()
    # beside each, the figures at calibration's none prior (as calibration weighs the pairs): the same recall, the
    # none pairs counted at their natural share
    for section in (metrics["validation"]["finetune"], *by_set.values()):
        prior = section["at_prior"]
        assert prior["none_per_dependency"] == metrics["calibration"]["none_per_dependency"] > 0
        assert prior["recall"] == pytest.approx(section["calibrated"]["dependency"]["recall"])
        assert prior["threshold"] == metrics["calibration"]["threshold"]
    assert "validation (finetune): discriminator, calibrated, at calibration's none prior" in (best / "README.md").read_text()
    assert test["direction"]["n"] == 4 and 0.0 <= test["direction"]["accuracy"] <= 1.0
    # the movie tools share movie_id: the parameter-match rule finds both edges with their direction
    assert test["schema_rule"]["dependency"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0}
    # so no gold dependency is beyond the rules: beyond-rule recall is undefined (null), its count 0
    for decision in ("argmax", "calibrated"):
        assert test[decision]["beyond_rule"]["n_gold"] == 0 and test[decision]["beyond_rule"]["recall"] is None
    assert set(result["test"]["argmax"]["dependency"]) == {"precision", "recall", "f1"}
    card = (best / "README.md").read_text()
    assert "paper Table 3" in card and "parameter-match rule" in card
    assert "## Limits" in card and "bench.param_head_errors" not in card  # no parameter level in this run
    assert "bench.draw_seed_grid" in card  # one run is one draw and one seed
    # the base is this project's [CLS] checkpoint: --pooling auto keeps its head
    assert result["pooling"] == "cls" and "trust_remote_code" not in card and "classifies [CLS]" in card
    assert "- test: recall n/a (0 of 0 gold dependencies neither name rule finds)" in card

    # the kind head (--kind-head): its cut chosen on the TDI validation pairs of known kind (1 precondition, 2 data
    # pairs there, both orders), P/R/F1 per kind on that split, the name rules' edges counted as data
    calibration = load_calibration(best)
    assert 0.0 <= calibration["kind_threshold"] <= 1.0 and calibration["n_kind_pairs"] == 6
    assert calibration["n_precondition"] == 2
    kinds = metrics["validation"]["tdi"]["calibrated"]["kinds"]
    assert kinds["precondition"]["n_gold"] == 2 and kinds["data"]["n_gold"] == 4
    assert metrics["validation"]["tdi"]["schema_rule"]["kinds"]["precondition"]["n_predicted"] == 0
    assert "kinds" not in metrics["validation"]["finetune"]["calibrated"] or \
        metrics["validation"]["finetune"]["calibrated"]["kinds"] is None  # the toy tool sets' edges have no kind
    assert "p(precondition | dependency)" in (best / "README.md").read_text()

    clf = pipeline("text-classification", model=str(best), device=-1)
    a, b = pair_texts({"name": "GetCredits", "description": "d", "input_params": [], "output_params": []}, "SearchMovie() -> movie")
    pred = clf({"text": a, "text_pair": b}, top_k=None)
    assert {p["label"] for p in pred} == set(KIND_HEAD_ID2LABEL.values())  # the joint of class and kind
    assert sum(p["score"] for p in pred) == pytest.approx(1.0, abs=1e-4)

    # evaluate-only: the checkpoint scores a tool set without training, with its stored calibration, at the length
    # it was trained with (64), whatever --max-length says
    only = train_discriminator(TrainDiscriminatorConfig(output=out / "eval", checkpoint=best, test=tiny_run.test,
                                                        max_length=16, batch_size=4, progress=False))
    assert json.loads((out / "eval" / "metrics.json").read_text())["config"]["max_length"] == 64
    assert load_calibration(best)["max_length"] == 64
    assert only["test"]["argmax"] == test["argmax"] and only["test"]["calibrated"] == test["calibrated"]
    assert not (out / "eval" / "pretrain").exists() and (out / "eval" / "metrics.json").exists()


@pytest.mark.slow
def test_flow_trains_both_levels_into_one_checkpoint_that_evaluation_and_build_graph_use(tmp_path, prefect_harness):
    """--parameter-scorer (the default): the retriever with its parameter head is trained after the cross-encoder and
    saved inside the checkpoint; the test gets a two-level row that the evaluate-only run repeats, and build-graph
    takes that scorer (and its retriever for candidates) from the checkpoint unless told otherwise."""
    from flows.build_graph import GraphConfig
    from tasks.graph.two_level import PARAMETER_SCORER_DIR
    from tests.test_mean_pooling import sentence_encoder
    from tests.test_retriever import _toolset_folder, make_tiny_encoder

    shop = _toolset_folder(tmp_path, "shopset")  # 6 groups with parameter edges: split 60/20/20 by group
    test = str(_toolset_folder(tmp_path, "shoptest", groups=1))
    # the base is a sentence encoder trained on the mean of its tokens: --pooling auto pools the pair that way
    cfg = TrainDiscriminatorConfig(output=tmp_path / "run", pretrain_data=str(write_tiny_tdi(tmp_path / "tdi" / "tiny")),
                                   finetune=(str(write_toolset_dir(second_toolset(), tmp_path / "movies")),),
                                   test=(test,), base_model=str(sentence_encoder(tmp_path / "tiny-st")), max_length=64,
                                   batch_size=4, progress=False, seed=7, retriever_toolsets=(str(shop),),
                                   finetune_extra=(),
                                   retriever_base_model=str(make_tiny_encoder(tmp_path / "tiny-encoder")),
                                   retriever_max_steps=2)
    result = train_discriminator(cfg)
    best = tmp_path / "run" / "best"
    assert result["pooling"] == "mean" and json.loads((best / "config.json").read_text())["model_type"] == "tgr_mean_pooled_bert"
    assert (best / "mean_pooled_bert.py").is_file() and "trust_remote_code=True" in (best / "README.md").read_text()
    # the card's limits name the bench that lists this checkpoint's parameter-level errors
    assert f"bench.param_head_errors --retriever {best / PARAMETER_SCORER_DIR}" in (best / "README.md").read_text()
    scorer = best / PARAMETER_SCORER_DIR
    assert (scorer / "param_head.json").is_file() and (scorer / "config.json").is_file()
    assert (tmp_path / "run" / PARAMETER_SCORER_DIR / "metrics.json").is_file()  # the retriever's own run folder
    # 6 groups split 4 / 1 / 1 (60/20/20), 2 parameter edges a group; the tiny TDI names no consumer input
    assert result["parameter_scorer"]["steps"] == 2 and result["parameter_scorer"]["examples"] == {"tdi": 0, "shopset": 8}
    two = result["test_two_level"]
    assert two["counts"] == result["test"]["counts"] and two["calibrated"]["threshold"] == 0.5
    assert sum(map(sum, two["calibrated"]["confusion_matrix"])) == sum(result["test"]["counts"].values())
    # beside it, as build-graph --cross-encoder-preconditions decides: the same pairs, and preconditions only add edges
    pre = result["test_two_level_preconditions"]
    assert pre["counts"] == two["counts"]
    called_none = [sum(row[1] for row in r["calibrated"]["confusion_matrix"]) for r in (two, pre)]
    assert called_none[1] <= called_none[0]
    assert "kinds" in pre["calibrated"]  # the edges it adds are preconditions: P/R/F1 per kind where the set has kinds
    checked = result["test_two_level_check_preconditions"]  # only where the prerequisite checks: between the two
    called_none.append(sum(row[1] for row in checked["calibrated"]["confusion_matrix"]))
    assert called_none[1] <= called_none[2] <= called_none[0] and checked["counts"] == two["counts"]
    # the default decision closed over chains of its edges (prerequisites_of's answer): it only adds, and counts them
    closed = result["test_two_level_closure"]
    assert closed["counts"] == two["counts"]
    assert sum(row[1] for row in closed["calibrated"]["confusion_matrix"]) == called_none[2] - closed["pairs_added"]
    again = train_discriminator(TrainDiscriminatorConfig(output=tmp_path / "eval", checkpoint=best, test=(test,),
                                                         max_length=64, batch_size=4, progress=False, seed=7))
    assert again["test_two_level"]["calibrated"] == two["calibrated"]
    # several --test sets: each is also reported alone, every row of the whole split between them
    movies = str(write_toolset_dir(second_toolset(), tmp_path / "movies_test"))
    both = train_discriminator(TrainDiscriminatorConfig(output=tmp_path / "eval2", checkpoint=best, test=(test, movies),
                                                        max_length=64, batch_size=4, progress=False, seed=7))
    parts = both["test_by_set"]
    assert list(parts) == ["shoptest", "movies_test"] and again["test_by_set"] is None
    for key in ("test", "test_two_level", "test_two_level_check_preconditions", "test_two_level_preconditions",
                "test_two_level_closure"):
        for view in ("argmax", "calibrated"):
            if view in both[key]:
                summed = [[sum(p[key][view]["confusion_matrix"][i][j] for p in parts.values()) for j in range(3)]
                          for i in range(3)]
                assert summed == both[key][view]["confusion_matrix"], (key, view)
    assert parts["shoptest"]["test"]["counts"] == result["test"]["counts"]
    from flows.train_discriminator import model_card
    summary = json.loads((tmp_path / "eval2" / "metrics.json").read_text())
    card = model_card(cfg, {**summary, "data": json.loads((tmp_path / "run" / "metrics.json").read_text())["data"]})
    checked = parts["movies_test"]["test_two_level_check_preconditions"]["calibrated"]["dependency"]
    assert (f"| test (movies_test alone): discriminator, two levels + preconditions whose prerequisite checks "
            f"(build-graph's default) | {checked['precision']:.3f} | {checked['recall']:.3f} | {checked['f1']:.3f} |") in card
    graph = GraphConfig(toolsets=(test,), discriminator=str(best), warehouse=str(tmp_path / "w.duckdb"))
    assert graph.param_discriminator == graph.retrieval_encoder == str(scorer)
    alone = GraphConfig(toolsets=(test,), discriminator=str(best), two_level=False, warehouse=str(tmp_path / "w.duckdb"))
    assert alone.param_discriminator is None and alone.retrieval_encoder is None


@pytest.mark.slow
def test_parameter_reranker_is_trained_into_the_checkpoint_and_scores_its_two_level_rows(tmp_path, prefect_harness):
    """--parameter-reranker: the parameter scorer inside the checkpoint carries the reranker, its held-out figures
    reach metrics.json and the card names it, and the two-level rows (and build-graph) score with it."""
    from tasks.graph.two_level import PARAMETER_SCORER_DIR
    from tasks.training.param_reranker import ParamReranker
    from tests.test_retriever import _toolset_folder, make_tiny_encoder

    shop = _toolset_folder(tmp_path, "shopset")
    test = str(_toolset_folder(tmp_path, "shoptest", groups=1))
    cfg = TrainDiscriminatorConfig(output=tmp_path / "run", pretrain_data=str(write_tiny_tdi(tmp_path / "tdi" / "tiny")),
                                   finetune=(), test=(test,), max_length=64, batch_size=4, progress=False, seed=7,
                                   retriever_toolsets=(str(shop),), finetune_extra=(),
                                   retriever_base_model=str(make_tiny_encoder(tmp_path / "tiny-encoder")),
                                   retriever_max_steps=2, parameter_reranker=True, parameter_reranker_max_steps=1)
    result = train_discriminator(cfg)
    best = tmp_path / "run" / "best"
    assert ParamReranker.present(best / PARAMETER_SCORER_DIR)
    reranker = json.loads((tmp_path / "run" / PARAMETER_SCORER_DIR / "metrics.json").read_text())["parameter_reranker"]
    assert reranker["trained"]["steps"] == 1
    assert result["parameter_scorer"]["reranker"] == reranker["test"] and "shopset" in reranker["test"]
    assert "its parameter reranker (`param_reranker/`" in (best / "README.md").read_text()
    # the evaluate-only run scores the same test pairs with the same scorer: the reranker's two-level row again
    again = train_discriminator(TrainDiscriminatorConfig(output=tmp_path / "eval", checkpoint=best, test=(test,),
                                                         max_length=64, batch_size=4, progress=False, seed=7))
    assert again["test_two_level"]["calibrated"] == result["test_two_level"]["calibrated"]


@pytest.mark.slow
def test_resume_continues_from_the_last_checkpoint(tiny_run, prefect_harness):
    train_discriminator(tiny_run)
    finetune = Path(tiny_run.output) / "finetune"
    first = json.loads(max(finetune.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1])).read_text())
    tiny_run.resume = True
    tiny_run.finetune_epochs = 3  # one more epoch: resume trains only epoch 3
    train_discriminator(tiny_run)
    last = json.loads(max(finetune.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1])).read_text())
    assert first["epoch"] == pytest.approx(2.0) and last["epoch"] == pytest.approx(3.0)
    assert last["global_step"] > first["global_step"]
    # the resumed run keeps the history of the steps it did not redo
    assert [h["step"] for h in last["log_history"] if "eval_loss" in h][: len([h for h in first["log_history"] if "eval_loss" in h])] == \
        [h["step"] for h in first["log_history"] if "eval_loss" in h]


def test_evaluate_only_rejects_a_folder_that_is_no_checkpoint(tmp_path):
    """Refused when the config is made (a Python call, the CLI, a deployment run), before any work."""
    with pytest.raises(ValueError, match="not a discriminator checkpoint"):
        TrainDiscriminatorConfig(output=tmp_path / "out", checkpoint=tmp_path, test=("apibank",), progress=False)
    with pytest.raises(SystemExit):
        parse_args(["--checkpoint", str(tmp_path)])


def test_the_validation_sample_follows_the_split_seed_not_the_training_seed(tmp_path):
    """Runs of several --seed values are measured on the same TDI validation rows (--split-seed, default 42); the
    training sample still follows --seed."""
    from flows.train_discriminator import TrainDiscriminatorConfig, load_pretraining_pairs

    folder = write_tiny_tdi(tmp_path / "tdi", n_per_class=12)
    runs = {seed: load_pretraining_pairs.fn(folder, 20, 6, seed, valid_seed=42) for seed in (1, 2)}
    assert [e.doc_a for e in runs[1][1]] == [e.doc_a for e in runs[2][1]] and len(runs[1][1]) == 6
    assert [e.doc_a for e in runs[1][0]] != [e.doc_a for e in runs[2][0]]
    other = load_pretraining_pairs.fn(folder, 20, 6, 1, valid_seed=7)[1]
    assert [e.doc_a for e in other] != [e.doc_a for e in runs[1][1]]
    assert load_pretraining_pairs.fn(folder, 20, 6, 1)[1] == load_pretraining_pairs.fn(folder, 20, 6, 1, valid_seed=1)[1]
    assert TrainDiscriminatorConfig(seed=1).split_seed == 42


def test_a_stage_at_the_class_prior_is_told_apart_by_its_kept_checkpoint():
    """TrainResult.at_class_prior: the checkpoint a stage keeps calls every validation pair "no dependency"."""
    from tasks.training.trainer import TrainResult

    history = [{"step": 10, "loss": 1.1}, {"step": 125, "eval_loss": 1.04, "eval_dependency_f1": 0.0},
               {"step": 250, "eval_loss": 0.91, "eval_dependency_f1": 0.31}]
    assert TrainResult(Path("b"), 0.37, 125, history).at_class_prior
    assert not TrainResult(Path("b"), 0.91, 250, history).at_class_prior
    assert TrainResult(Path("b"), 0.0, 999, history[:2]).at_class_prior  # a step not validated: the last evaluation
    assert not TrainResult(Path("b"), 0.0, 10, history[:1]).at_class_prior  # nothing validated: nothing to say


def test_a_precondition_share_draws_preconditions_first_and_keeps_the_class_balance():
    """--pretrain-precondition-share: the rows of kind precondition make up that share of the sample's dependent
    rows (as far as there are enough), and the sample keeps the data's share of none rows; without it, a plain
    seeded sample."""
    from flows.train_discriminator import sample_pretraining_rows
    from tasks.training.examples import PairExample

    rows = ([PairExample(f"p{i}", "x", i % 2 * 2, "tdi", kind="precondition") for i in range(60)]
            + [PairExample(f"d{i}", "x", i % 2 * 2, "tdi", kind="data") for i in range(1940)]
            + [PairExample(f"n{i}", "x", 1, "tdi") for i in range(2000)])
    plain = sample_pretraining_rows(rows, 400, 0, None)
    assert plain == sample_pretraining_rows(rows, 400, 0, 0.0) and len(set(e.doc_a for e in plain)) == 400
    sample = sample_pretraining_rows(rows, 400, 0, 0.25)
    assert len(sample) == len({e.doc_a for e in sample}) == 400
    assert sum(e.label == 1 for e in sample) == 200  # half none, as in the data
    assert sum(e.kind == "precondition" for e in sample) == 50  # a quarter of the 200 dependent rows (3% in the data)
    assert sample == sample_pretraining_rows(rows, 400, 0, 0.25) != sample_pretraining_rows(rows, 400, 1, 0.25)
    # more than there are: all of them
    assert sum(e.kind == "precondition" for e in sample_pretraining_rows(rows, 400, 0, 1.0)) == 60


def test_extra_finetune_pairs_drop_the_parameter_levels_test_groups_and_show_docs_as_the_view_says(tmp_path):
    """--finetune-extra: a set the parameter level also trains on gives none of the groups it holds out for its
    test (train-retriever's split); the default view shows each doc by name and description only."""
    from flows.train_discriminator import extra_finetune_pairs
    from tasks.training.param_examples import split_groups

    doc = lambda n, i, o: {"name": n, "description": f"{n} tool",  # noqa: E731
                           "input_params": [{"name": i, "type": "str", "description": i}],
                           "output_params": [{"name": o, "type": "str", "description": o}]}
    groups = [f"g{k}" for k in range(10)]
    tools = [Tool(f"{t}_{g}", g, doc(f"{t}_{g}", i, o)) for g in groups
             for t, i, o in (("find", "query", "item_id"), ("get", "item_id", "item"))]
    edges = [DependencyEdge(g, f"get_{g}", f"find_{g}") for g in groups]
    folder = str(write_toolset_dir(ToolSet("catalog", tools, edges), tmp_path / "catalog"))
    tested = split_groups(set(groups), (0.6, 0.2, 0.2), 0)[2]
    assert tested, "the split holds out some groups"

    base = dict(output=tmp_path / "run", finetune=(folder,), finetune_extra=(folder,), test=(folder,), progress=False)
    pairs, taken = extra_finetune_pairs.fn(TrainDiscriminatorConfig(**base, retriever_toolsets=(folder,)))
    assert {p.group.split("/")[1] for p in pairs} == set(groups) - tested
    assert taken == {folder: {"groups": 10 - len(tested), "groups_held_out_by_the_parameter_level": len(tested),
                              "view": "description", "pairs": {"a_depends_on_b": 10 - len(tested), "no_dependency": 0,
                                                               "b_depends_on_a": 10 - len(tested)}}}
    docs = [json.loads(d) for p in pairs for d in (p.doc_a, p.doc_b)]
    assert all(d["input_params"] == [] == d["output_params"] for d in docs)

    # a run without the parameter level holds out the same groups: its cross-encoder finetunes as the default's
    no_level, _ = extra_finetune_pairs.fn(TrainDiscriminatorConfig(**base, retriever_toolsets=(folder,),
                                                                   parameter_scorer=False))
    assert no_level == pairs

    # not a parameter-level set: every group; as published: the docs as they are
    pairs, taken = extra_finetune_pairs.fn(TrainDiscriminatorConfig(**base, retriever_toolsets=("nestools",),
                                                                    finetune_extra_view="as_published"))
    assert {p.group.split("/")[1] for p in pairs} == set(groups)
    assert taken[folder]["groups_held_out_by_the_parameter_level"] == 0
    assert all(json.loads(p.doc_a)["input_params"] for p in pairs)


def test_extra_finetune_none_pairs_follow_the_sets_edges_when_asked(tmp_path):
    """--finetune-extra-none-per-edge R: each extra set gives round(R x its edges) none pairs (seeded), its
    dependency pairs all kept; unset, at most --finetune-max-none as the --finetune sets."""
    from flows.train_discriminator import extra_finetune_pairs

    groups = [f"g{k}" for k in range(6)]  # 4 tools and 2 edges a group: 4 dependency pairs, 8 none pairs
    tools = [Tool(f"{t}_{g}", g, {"name": f"{t}_{g}", "description": f"{t} in {g}", "input_params": [],
                                  "output_params": []}) for g in groups
             for t in ("find", "get", "list", "send")]
    edges = [DependencyEdge(g, f"{c}_{g}", f"find_{g}") for g in groups for c in ("get", "send")]
    folder = str(write_toolset_dir(ToolSet("catalog", tools, edges), tmp_path / "catalog"))
    base = dict(output=tmp_path / "run", finetune=(folder,), finetune_extra=(folder,), test=(folder,),
                parameter_scorer=False, progress=False)
    # 10 x 12 edges asks for more none pairs than the 48 there are: all of them
    for per_edge, none in ((None, 5), (0.0, 0), (0.5, 6), (1.0, 12), (10.0, 6 * 8)):
        cfg = TrainDiscriminatorConfig(**base, finetune_max_none=5, finetune_extra_none_per_edge=per_edge)
        _, taken = extra_finetune_pairs.fn(cfg)
        assert taken[folder]["pairs"] == {"a_depends_on_b": 12, "no_dependency": none, "b_depends_on_a": 12}
    first, second = (extra_finetune_pairs.fn(TrainDiscriminatorConfig(**base, finetune_extra_none_per_edge=0.5))[0]
                     for _ in range(2))
    assert [(p.tool_a, p.tool_b) for p in first] == [(p.tool_a, p.tool_b) for p in second], "a seeded sample"
    with pytest.raises(ValueError, match="--finetune-extra-none-per-edge -1"):
        TrainDiscriminatorConfig(**base, finetune_extra_none_per_edge=-1.0)
    assert parse_args(["--finetune-extra-none-per-edge", "1"]).finetune_extra_none_per_edge == 1.0
    assert parse_args(["--finetune-extra-none-per-edge", "none"]).finetune_extra_none_per_edge is None


def test_finetune_extra_is_read_only_by_a_run_that_finetunes(tmp_path):
    assert TrainDiscriminatorConfig().finetune_extra == ("nestools",)
    assert TrainDiscriminatorConfig().finetune_extra_view == "description"
    assert TrainDiscriminatorConfig().extra_used()
    assert not TrainDiscriminatorConfig(finetune=(), pretrain_data="auto").extra_used()
    assert not TrainDiscriminatorConfig(finetune_extra=()).extra_used()
    assert parse_args(["--finetune-extra", ""]).finetune_extra == ()
    a, b = (str(write_toolset_dir(second_toolset(), tmp_path / name)) for name in ("a", "b"))
    cfg = parse_args(["--finetune-extra", f"{a},{b}", "--finetune-extra-view", "as_published"])
    assert (cfg.finetune_extra, cfg.finetune_extra_view) == ((a, b), "as_published")


@pytest.mark.parametrize("bad, message", [
    ({"batch_size": 0}, "--batch-size 0: must be at least 1"), ({"max_length": 0}, "--max-length 0"),
    ({"encoder_layers": 0}, "--encoder-layers 0"), ({"pretrain_max_pairs": 0}, "--pretrain-max-pairs 0"),
    ({"pretrain_evals": 0}, "--pretrain-evals 0"), ({"finetune_replay": -1}, "--finetune-replay -1"),
    ({"pretrain_epochs": 0.0}, "--pretrain-epochs 0.0: must be above 0"), ({"finetune_learning_rate": -1e-4}, "--finetune-learning-rate"),
    ({"calibration_prior": 0.0}, "--calibration-prior 0.0"), ({"max_steps": 0}, "--max-steps 0"),
    ({"hint_dropout": 1.5}, "--hint-dropout 1.5"), ({"valid_fraction": 1.0}, "--valid-fraction 1.0"),
    ({"pretrain_precondition_share": 1.2}, "--pretrain-precondition-share 1.2: must lie in [0, 1]"),
    ({"target_precision": 0.0}, "--target-precision 0.0"), ({"calibration": "best"}, "--calibration 'best'"),
    ({"calibrate_on": "all"}, "--calibrate-on 'all'"), ({"finetune_extra_view": "bare"}, "--finetune-extra-view 'bare'"),
    ({"finetune_extra": ("no/such/set",)}, "--finetune-extra 'no/such/set' is neither a benchmark"),
    ({"pooling": "max"}, "--pooling 'max': choose auto, mean, cls"), ({"test": ()}, "--test: name at least one"),
    ({"test": ("no/such/folder",)}, "--test 'no/such/folder' is neither a benchmark"),
    ({"finetune": ("nope",)}, "--finetune 'nope' is neither a benchmark"),
    ({"pretrain_data": "no/such/tdi"}, "no shards/*.parquet there"),
    ({"pretrain_data": "none", "finetune": ()}, "nothing to train"),
    ({"param_toolsets": ("nestools",)}, "--param-toolsets: only with --param-level"),
    ({"param_level": True, "param_name_dropout": 1.5}, "--param-name-dropout 1.5: must lie in [0, 1]"),
    ({"param_level": True, "param_max_examples": 0}, "--param-max-examples 0: must be at least 1"),
    ({"param_level": True, "pretrain_data": "none"}, "--param-level: nothing to train on"),
    ({"param_level": True, "param_toolsets": ("no/such/set",)}, "--param-toolsets 'no/such/set' is neither"),
    ({"parameter_reranker": True, "parameter_scorer": False}, "--parameter-reranker trains on the parameter scorer"),
    ({"parameter_reranker_max_steps": 0}, "--parameter-reranker-max-steps 0: must be at least 1"),
])
def test_config_refuses_a_bad_value_without_the_command_line(bad, message):
    """The checks live in TrainDiscriminatorConfig: a Python call and a Prefect deployment run are refused as the CLI is."""
    from pydantic import TypeAdapter

    with pytest.raises(ValueError, match=re.escape(message)):
        TrainDiscriminatorConfig(**bad)
    with pytest.raises(ValueError):  # what Prefect builds from a deployment's parameters (pydantic may refuse first)
        TypeAdapter(TrainDiscriminatorConfig).validate_python(bad)


def test_missing_pretraining_data_skips_or_errors(tmp_path):
    assert resolve_pretrain_data("none") is None
    assert resolve_pretrain_data("auto", artifacts=tmp_path / "nothing") is None
    with pytest.raises(FileNotFoundError, match="no shards"):
        resolve_pretrain_data(str(tmp_path / "missing"))
    unpublished = write_tiny_tdi(tmp_path / "tdi" / "x")  # shards but no manifest: a run that did not finish
    assert resolve_pretrain_data("auto", artifacts=tmp_path / "tdi") is None
    (unpublished / "manifest.json").write_text(json.dumps({"quality": {"success": False}}))
    assert resolve_pretrain_data("auto", artifacts=tmp_path / "tdi") is None  # failed its quality gate
    (unpublished / "manifest.json").write_text(json.dumps({"quality": {"success": True}}))
    assert resolve_pretrain_data("auto", artifacts=tmp_path / "tdi") == unpublished


def test_cli_parses_into_the_typed_config(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    cfg = parse_args(["--finetune", "ultratool,tmdb", "--test", "apibank", "--batch-size", "8", "--resume",
                      "--output", "artifacts/discriminator/x", "--finetune-max-none", "none", "--checkpoint", str(tmp_path),
                      "--no-symmetric", "--pretrain-epochs", "0.5"])
    assert cfg.finetune == ("ultratool", "tmdb") and cfg.test == ("apibank",)
    assert cfg.batch_size == 8 and cfg.resume is True and cfg.finetune_max_none is None
    assert cfg.checkpoint == tmp_path and cfg.symmetric is False and cfg.pretrain_epochs == 0.5
    assert parse_args(["--finetune", ""]).finetune == ()
    assert cfg.output == Path("artifacts/discriminator/x") and cfg.base_model == "offline-minilm"
