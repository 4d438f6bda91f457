"""The parameter-level scorer (issue 20 item 3): examples from tool sets and TDI v2 shards, identifier
dropout, the parameter-level name rule, tool edges as the max over inputs, and a tiny model trained for
a few steps whose kept parameters reach the warehouse rows with source 'discriminator'."""
from __future__ import annotations

import json
import os
import random
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from schemas.tdi import TDI_PAIR_SCHEMA  # noqa: E402
from schemas.toolset import DependencyEdge, ParameterEdge, Tool, ToolSet  # noqa: E402
from tests.test_discriminator import make_tiny_model  # noqa: E402
from tasks.graph.param_scoring import ParamScore, param_tool_edges, parameter_edges  # noqa: E402
from tasks.graph.scoring import PredictedEdge  # noqa: E402
from tasks.training.param_examples import (TAKES, TAKES_NOT, ParamExample, load_tdi_param_examples,  # noqa: E402
                                           pair_example, param_rule, param_text, parameter_units, split_groups,
                                           toolset_param_examples, unit_labels)


def doc(name, inputs=(), outputs=(), description=None):
    return {"name": name, "description": description or f"The {name} API.",
            "input_params": [{"name": n, "type": "str", "description": d} for n, d in inputs],
            "output_params": [{"name": n, "type": "str", "description": d} for n, d in outputs]}


TOOLS = [
    Tool("get_user", "shop", doc("get_user", [("email", "the user's email")], [("user_id", "the user's id")])),
    Tool("list_orders", "shop", doc("list_orders", [("user_id", "whose orders"), ("limit", "how many")],
                                    [("orders", "the orders")])),
    Tool("open_account", "shop", doc("open_account", [("customer", "the user who opens it")],
                                     [("account_number", "the new account")])),
    Tool("ping", "shop", doc("ping")),  # no inputs, no outputs
    Tool("weather", "sky", doc("weather", [("city", "a city")], [("temperature", "degrees")])),
    Tool("clothes", "sky", doc("clothes", [("temperature", "degrees outside")], [("advice", "what to wear")])),
]
PARAM_EDGES = (ParameterEdge("list_orders", "get_user", "user_id", "user_id"),
               ParameterEdge("open_account", "get_user", "customer", "user_id"),  # meaning, not name
               ParameterEdge("clothes", "weather", "temperature", "temperature"))
TOYSET = ToolSet("toy", TOOLS, [DependencyEdge("shop", "list_orders", "get_user"),
                                DependencyEdge("shop", "open_account", "get_user"),
                                DependencyEdge("sky", "clothes", "weather")], [], PARAM_EDGES)


# ---------------------------------------------------------------------------------------------
# Examples


def test_toolset_examples_are_the_gold_edges_and_other_inputs_of_the_same_group():
    examples = toolset_param_examples(TOYSET, {"shop"}, negatives_per_positive=100)
    pos = {(e.producer_id, e.consumer_id, e.param) for e in examples if e.label == TAKES}
    neg = {(e.producer_id, e.consumer_id, e.param) for e in examples if e.label == TAKES_NOT}
    assert pos == {("get_user", "list_orders", "user_id"), ("get_user", "open_account", "customer")}
    assert ("get_user", "list_orders", "limit") in neg  # another input of the same consumer
    assert ("list_orders", "get_user", "email") in neg  # the other order of a candidate pair
    assert not pos & neg and all(e.group == "toy/shop" for e in examples)
    assert not any("weather" in (e.producer_id, e.consumer_id) for e in examples)  # only the groups asked for
    # every (producer, input) unit of the group: 4 tools, 4 inputs, each input against the 3 other tools
    assert len(examples) == 4 * 3
    few = toolset_param_examples(TOYSET, {"shop"}, negatives_per_positive=1)
    assert sum(e.label == TAKES for e in few) == 2 and sum(e.label == TAKES_NOT for e in few) == 2


def test_units_cover_both_orders_and_skip_consumers_without_inputs():
    shop = [t for t in TOOLS if t.group == "shop"]
    units = parameter_units(shop, [(0, 3), (0, 1)])  # get_user-ping, get_user-list_orders
    assert units == [(3, 0, "email"), (0, 1, "user_id"), (0, 1, "limit"), (1, 0, "email")]
    assert unit_labels(shop, units, TOYSET) == [0, 1, 0, 0]


def _write_shard(path, rows):
    cols = {f.name: [r.get(f.name) for r in rows] for f in TDI_PAIR_SCHEMA}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pydict(cols, schema=TDI_PAIR_SCHEMA), path)


def test_tdi_examples_from_version_2_shards(tmp_path):
    producer = doc("make_tmp_dir", [], [("tmp_dir", "")])
    consumer = doc("copy_tree", [("path", "where to copy"), ("mode", "")], [])
    other = doc("tmp_cleanup", [("tmp_name", ""), ("force", "")], [])
    a, b, c = (json.dumps(d, sort_keys=True) for d in (consumer, producer, other))
    base = {"pair_id": "p", "split": "train", "source_a": "s", "source_b": "s"}
    rows = [base | {"doc_a": a, "doc_b": b, "tool_a_id": "copy", "tool_b_id": "mk", "label": 0, "label_name": "x",
                    "origin": "mined", "consumer_param": "path", "producer_output": "tmp_dir"},
            base | {"doc_a": b, "doc_b": a, "tool_a_id": "mk", "tool_b_id": "copy", "label": 2, "label_name": "x",
                    "origin": "mined_swapped", "consumer_param": "path", "producer_output": "tmp_dir"},  # the same pair
            base | {"doc_a": b, "doc_b": c, "tool_a_id": "mk", "tool_b_id": "clean", "label": 1, "label_name": "x",
                    "origin": "hard_negative"}]
    _write_shard(tmp_path / "shards" / "train-00000-of-00001.parquet", rows)
    examples = load_tdi_param_examples(tmp_path, "train", negatives_per_positive=5)
    by = {(e.producer_id, e.consumer_id, e.param): e.label for e in examples}
    assert by.pop(("mk", "copy", "path")) == TAKES  # once, though the row and its swap both hold it
    assert by.pop(("mk", "copy", "mode")) == TAKES_NOT  # another input of the consumer
    assert by.pop(("mk", "clean", "tmp_name")) == TAKES_NOT  # the 'no dependency' row: the name-overlap input
    assert set(by.values()) <= {TAKES_NOT}
    v1 = tmp_path / "v1"
    _write_shard(v1 / "shards" / "train-00000-of-00001.parquet", rows)
    table = pq.read_table(v1 / "shards" / "train-00000-of-00001.parquet").drop_columns(["consumer_param", "producer_output"])
    pq.write_table(table, v1 / "shards" / "train-00000-of-00001.parquet")
    with pytest.raises(ValueError, match="no consumer_param"):
        load_tdi_param_examples(v1, "train")


def test_identifier_dropout_shows_meaning_instead_of_names():
    e = ParamExample(TOOLS[0].doc, TOOLS[2].doc, "customer", TAKES, "g")
    shown = pair_example(e)
    assert shown.doc_a.startswith("param: customer (str): the user who opens it; input of open_account")
    assert "returns user_id (str): the user's id" in shown.doc_b and shown.label == 0
    dropped = pair_example(e, name_dropout=1.0, rng=random.Random(0))
    assert "customer" not in dropped.doc_a and "the user who opens it" in dropped.doc_a
    assert "user_id" not in dropped.doc_b and "the user's id" in dropped.doc_b
    # no description: the name is kept, as words
    assert param_text(doc("f", [("tmp_dir", "")]), "tmp_dir", drop_name=True).startswith("param: tmp dir (str)")
    assert pair_example(ParamExample(TOOLS[0].doc, TOOLS[2].doc, "customer", TAKES_NOT, "g")).label == 1
    rng = random.Random(3)
    half = [pair_example(e, 0.5, rng).doc_a.startswith("param: customer") for _ in range(400)]
    assert 0.4 < np.mean(half) < 0.6


def test_param_rule_exact_partial_or_none():
    assert param_rule(TOOLS[0].doc, "user_id") == "exact"
    assert param_rule(TOOLS[0].doc, "userId") == "exact"
    assert param_rule(doc("g", [], [("user_token", "")]), "token") == "partial"
    assert param_rule(TOOLS[0].doc, "customer") is None


def test_split_groups_is_seeded_and_disjoint():
    groups = {f"g{i}" for i in range(20)}
    tr, va, te = split_groups(groups, seed=1)
    assert (len(tr), len(va), len(te)) == (14, 3, 3) and tr | va | te == groups
    assert not (tr & va or tr & te or va & te)
    assert split_groups(groups, seed=1) == (tr, va, te) and split_groups(groups, seed=2) != (tr, va, te)


# ---------------------------------------------------------------------------------------------
# Tool edges from parameter scores


def test_tool_edge_is_the_max_over_inputs_with_a_fallback_only_without_inputs():
    tools = TOOLS[:4]  # get_user 0, list_orders 1, open_account 2, ping 3
    pairs = [(0, 1), (0, 2), (0, 3), (1, 2)]
    scores = [ParamScore(0, 1, "user_id", 0.9), ParamScore(0, 1, "limit", 0.2), ParamScore(1, 0, "email", 0.6),
              ParamScore(0, 2, "customer", 0.4), ParamScore(2, 0, "email", 0.1),
              ParamScore(3, 0, "email", 0.05), ParamScore(1, 2, "customer", 0.3), ParamScore(2, 1, "user_id", 0.2)]
    fallback = [PredictedEdge(DependencyEdge("shop", "ping", "get_user", "discriminator"), 0.8, 2, 0.8),  # ping: no inputs
                PredictedEdge(DependencyEdge("shop", "open_account", "list_orders", "discriminator"), 0.9, 0, 0.9)]
    edges = param_tool_edges(tools, pairs, scores, 0.5, fallback)
    got = [(e.predicted.edge.dependent, e.predicted.edge.prerequisite, e.best_param, e.predicted.prob) for e in edges]
    # list_orders <- get_user through user_id (0.9 beats the other direction's 0.6); open_account's best is 0.4:
    # no edge; ping declares no inputs: the tool-level edge stands; open_account has inputs, so its
    # tool-level edge does not override the parameter scores
    assert got == [("list_orders", "get_user", "user_id", 0.9), ("ping", "get_user", None, 0.8)]
    assert edges[0].predicted.predicted_class == 2  # the scored pair is <get_user, list_orders>: b depends on a
    # through an input: data; the tool-level fallback names no parameter: its own kind (not known)
    assert [e.predicted.edge.kind for e in edges] == ["data", None]
    kept = parameter_edges(tools, scores, 0.5)
    assert [(e.dependent, e.prerequisite, e.consumer_param, e.source, p) for e, p in kept] == [
        ("list_orders", "get_user", "user_id", "discriminator", 0.9), ("get_user", "list_orders", "email", "discriminator", 0.6)]


# ---------------------------------------------------------------------------------------------
# A tiny model: train a few steps, calibrate, score, write rows


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The tiny model trained for a few steps on every parameter unit of the toy set, calibrated on them."""
    from models.discriminator import load_model, load_tokenizer
    from tasks.training.param_scorer import score_param_examples, train_param_scorer
    from tasks.training.trainer import StageArguments

    tmp = tmp_path_factory.mktemp("param-scorer")
    base = make_tiny_model(tmp / "tiny")
    examples = toolset_param_examples(TOYSET, None, negatives_per_positive=100)
    args = StageArguments(epochs=30, batch_size=8, learning_rate=5e-3, warmup_ratio=0.0, max_length=64, seed=0,
                          evals_per_epoch=1, progress=False, length_grouped=True)  # as train-discriminator's parameter level
    model, tokenizer = load_model(str(base)), load_tokenizer(str(base))
    before = score_param_examples(model, tokenizer, examples, 64)
    result, calibration = train_param_scorer(model, tokenizer, examples, examples, args, tmp / "run", 0.0)
    return tmp, result.best_dir, calibration, examples, before


def test_tiny_scorer_trains_calibrates_and_writes_discriminator_parameter_rows(trained):
    from models.discriminator import load_calibration, load_model, load_tokenizer
    from tasks.graph.edges import dataset_tables
    from tasks.graph.param_scoring import param_threshold, score_parameters
    from tasks.training.param_scorer import param_metrics, score_param_examples

    tmp, best, calibration, examples, before = trained
    assert best == tmp / "run" / "best" and (best / "config.json").exists()
    assert load_calibration(best) == json.loads(json.dumps(calibration))
    assert calibration["level"] == "parameter" and param_threshold(best) == calibration["threshold"]
    trained_p = score_param_examples(load_model(str(best)), load_tokenizer(str(best)), examples, 64)
    y = np.array([e.label for e in examples])
    # the few steps separate the gold inputs from the others on the data it saw (it did not before)
    assert trained_p[y == 1].min() > trained_p[y == 0].max()
    assert not before[y == 1].min() > before[y == 0].max()
    metrics = param_metrics(examples, trained_p, calibration["threshold"])
    assert metrics["model"]["f1"] == 1.0 and metrics["gold"] == 3
    assert metrics["beyond_rule"]["n_gold"] == 1 and metrics["beyond_rule"]["recall"] == 1.0  # customer <- get_user

    tools = TOYSET.tools
    pairs = [(i, j) for i in range(len(tools)) for j in range(i + 1, len(tools)) if tools[i].group == tools[j].group]
    scores = score_parameters(best, tools, pairs, batch_size=4)
    assert len(scores) == len(parameter_units(tools, pairs))
    kept = parameter_edges(tools, scores, param_threshold(best))
    assert {(e.dependent, e.prerequisite, e.consumer_param) for e, _ in kept} == {
        (e.dependent, e.prerequisite, e.consumer_param) for e in PARAM_EDGES}
    edges = param_tool_edges(tools, pairs, scores, param_threshold(best))
    assert {(e.predicted.edge.dependent, e.predicted.edge.prerequisite, e.best_param) for e in edges} == {
        ("list_orders", "get_user", "user_id"), ("open_account", "get_user", "customer"), ("clothes", "weather", "temperature")}
    table = dataset_tables(TOYSET, "name", ["x"] * len(tools), "enc", None, {}, np.zeros((0, 4)), None, [],
                           np.zeros((0, 3)), [e.predicted for e in edges], datetime(2026, 1, 1), scored_parameters=kept)
    rows = [r for r in table.rows["parameter_edges"] if r["source"] == "discriminator"]
    assert len(rows) == 3 and all(0.0 <= r["probability"] <= 1.0 and r["producer_output"] is None for r in rows)
    assert {r["consumer_param"] for r in rows} == {"user_id", "customer", "temperature"}
    assert sum(r["source"] == "discriminator" for r in table.rows["edges"]) == 3
    assert {r["kind"] for r in table.rows["edges"] if r["source"] == "discriminator"} == {"data"}


def test_build_graph_writes_parameter_edges_and_tool_edges_from_the_scorer(trained, tmp_path, prefect_harness):
    from flows.build_graph import GraphConfig, build_graph
    from tasks.toolsets.readers import write_toolset_dir
    from warehouse.build import connect

    best = trained[1]
    folder = write_toolset_dir(TOYSET, tmp_path / "toy")
    target = tmp_path / "tgr.duckdb"
    out = build_graph(GraphConfig(toolsets=[str(folder)], warehouse=str(target), discriminator=None,
                                  param_discriminator=str(best), pruning="none", progress=False, schema_edges=False))
    assert out["datasets"]["toy"]["discriminator_edges"] == 3
    con = connect(target)
    assert sorted(con.execute("SELECT dependent, prerequisite, consumer_param FROM parameter_edges "
                              "WHERE source = 'discriminator'").fetchall()) == sorted(
        (e.dependent, e.prerequisite, e.consumer_param) for e in PARAM_EDGES)
    assert sorted(con.execute("SELECT dependent, prerequisite FROM edges WHERE source = 'discriminator'").fetchall()) == [
        ("clothes", "weather"), ("list_orders", "get_user"), ("open_account", "get_user")]
    params = json.loads(con.execute("SELECT params_json FROM edge_lineage WHERE source = 'discriminator'").fetchone()[0])
    assert params["param_discriminator"] == str(best)


def test_with_two_levels_the_cross_encoder_scores_only_pairs_with_a_tool_without_inputs(trained, tmp_path, prefect_harness):
    """Between two tools that declare inputs the parameter level decides, so build-graph does not ask the tool-level
    cross-encoder about them: ``scored_pairs`` holds the pairs with ``ping`` (no inputs), and the tool edges are
    the parameter level's plus, at most, cross-encoder edges into ``ping``."""
    from flows.build_graph import GraphConfig, build_graph
    from tasks.toolsets.readers import write_toolset_dir
    from warehouse.build import connect

    folder = write_toolset_dir(TOYSET, tmp_path / "toy")
    target = tmp_path / "tgr.duckdb"
    build_graph(GraphConfig(toolsets=[str(folder)], warehouse=str(target), pruning="none", progress=False,
                            discriminator=str(make_tiny_model(tmp_path / "tool-level")), param_discriminator=str(trained[1]),
                            schema_edges=False))
    con = connect(target)
    scored = con.execute("SELECT tool_a, tool_b FROM scored_pairs").fetchall()
    assert sorted(map(sorted, scored)) == [["get_user", "ping"], ["list_orders", "ping"], ["open_account", "ping"]]
    edges = set(con.execute("SELECT dependent, prerequisite FROM edges WHERE source = 'discriminator'").fetchall())
    through_inputs = {("clothes", "weather"), ("list_orders", "get_user"), ("open_account", "get_user")}
    assert through_inputs <= edges and all(d == "ping" for d, _ in edges - through_inputs)


def test_with_cross_encoder_preconditions_a_pair_without_a_passed_value_can_be_a_precondition_edge(
        trained, tmp_path, prefect_harness):
    """``--cross-encoder-preconditions``: the cross-encoder scores every candidate pair, and between two tools that declare inputs its
    edge stands as a precondition where the parameter level found none and no name rule sees a value pass. With
    ``--threshold 0`` it calls every pair dependent, so the one such pair of the toy set (list_orders and
    open_account: no output of one is an input of the other) is the one precondition edge."""
    from flows.build_graph import GraphConfig, build_graph
    from tasks.toolsets.readers import write_toolset_dir
    from warehouse.build import connect

    folder = write_toolset_dir(TOYSET, tmp_path / "toy")
    target = tmp_path / "tgr.duckdb"
    build_graph(GraphConfig(toolsets=[str(folder)], warehouse=str(target), pruning="none", progress=False,
                            discriminator=str(make_tiny_model(tmp_path / "tool-level")), param_discriminator=str(trained[1]),
                            schema_edges=False, threshold=0.0, cross_encoder_preconditions="all"))
    con = connect(target)
    assert con.execute("SELECT count(*) FROM scored_pairs").fetchone()[0] == 7  # every same-group pair: 6 + 1
    rows = con.execute("SELECT dependent, prerequisite, kind FROM edges WHERE source = 'discriminator'").fetchall()
    through_inputs = {("clothes", "weather"), ("list_orders", "get_user"), ("open_account", "get_user")}
    assert {(d, p) for d, p, k in rows if k == "data"} == through_inputs
    with_inputs = {t.tool_id for t in TOOLS if t.doc["input_params"]}
    assert [(frozenset((d, p)), k) for d, p, k in rows if {d, p} <= with_inputs and k != "data"] == [
        (frozenset(("list_orders", "open_account")), "precondition")]
    # ping declares no inputs: its three pairs are the cross-encoder's edges, as without preconditions
    assert sum("ping" in (d, p) for d, p, _ in rows) == 3
    # "checks": no tool of the toy set checks, so the cross-encoder is asked about ping's pairs alone, and adds none
    con.close()
    build_graph(GraphConfig(toolsets=[str(folder)], warehouse=str(target), pruning="none", progress=False,
                            discriminator=str(make_tiny_model(tmp_path / "tool-level")), param_discriminator=str(trained[1]),
                            schema_edges=False, threshold=0.0, cross_encoder_preconditions="checks"))
    con = connect(target)
    assert sorted(map(sorted, con.execute("SELECT tool_a, tool_b FROM scored_pairs").fetchall())) == [
        ["get_user", "ping"], ["list_orders", "ping"], ["open_account", "ping"]]
    assert con.execute("SELECT count(*) FROM edges WHERE kind = 'precondition'").fetchone()[0] == 0


def test_with_checks_each_check_is_scored_with_its_nearest_tools_only(trained, tmp_path, prefect_harness):
    """``--check-partners N``: the cross-encoder scores a tool that checks with the N tools it may gate that are most
    like it, not with every one (a large group would cost checks x tools pairs), whether pruning kept the pair or
    not; those pruning dropped join the candidates. 0 scores every such pair."""
    from flows.build_graph import GraphConfig, build_graph
    from tasks.toolsets.readers import write_toolset_dir
    from warehouse.build import connect

    tools = [*TOOLS, Tool("verify_user", "shop", doc("verify_user", [("token", "a session token")], [("valid", "it holds")])),
             Tool("close_account", "shop", doc("close_account", [("account_number", "the account to close")]))]
    folder = write_toolset_dir(ToolSet("toy", tools, [], [], ()), tmp_path / "toy")
    tool_level = str(make_tiny_model(tmp_path / "tool-level"))
    # verify_user may gate the two actions of its group (not get_user or list_orders: they read)
    gated = {frozenset(("verify_user", "open_account")), frozenset(("verify_user", "close_account"))}
    for pruning in ("params", "none"):  # "params" keeps neither check pair, "none" keeps both
        scored = {}
        for partners in (0, 1):
            target = tmp_path / f"tgr-{pruning}-{partners}.duckdb"
            out = build_graph(GraphConfig(toolsets=[str(folder)], warehouse=str(target), pruning=pruning, progress=False,
                                          discriminator=tool_level, param_discriminator=str(trained[1]),
                                          schema_edges=False, cross_encoder_preconditions="checks",
                                          check_partners=partners))
            con = connect(target)
            scored[partners] = {frozenset(p) for p in con.execute("SELECT tool_a, tool_b FROM scored_pairs").fetchall()
                                if "ping" not in p}  # ping declares no inputs: the cross-encoder decides its pairs
            con.close()
            assert out["datasets"]["toy"]["check_pairs_added"] == (2 - partners if pruning == "params" else 0)
        assert scored[0] == gated and len(scored[1]) == 1 and scored[1] < gated


def test_train_flow_param_level_trains_on_tool_set_groups_and_saves_a_calibrated_checkpoint(tmp_path):
    """``--param-level``: the flow's helper splits the tool set's groups 80/20, trains, and leaves
    ``<output>/param/best`` with its calibration.json."""
    import logging

    from flows.train_discriminator import TrainDiscriminatorConfig, train_param_level
    from models.discriminator import load_calibration
    from tasks.toolsets.readers import write_toolset_dir

    copies = {f"{g}{k}": g for k in range(3) for g in ("shop", "sky")}  # 6 groups: 5 to train, 1 to validate
    tools = [Tool(f"{t.tool_id}@{g}", g, t.doc) for g, src in copies.items() for t in TOOLS if t.group == src]
    params = tuple(ParameterEdge(f"{e.dependent}@{g}", f"{e.prerequisite}@{g}", e.consumer_param, e.producer_output)
                   for g in copies for e in PARAM_EDGES if any(t.tool_id == f"{e.dependent}@{g}" for t in tools))
    folder = write_toolset_dir(ToolSet("toy6", tools, [], [], params), tmp_path / "toy6")
    base = make_tiny_model(tmp_path / "tiny")
    cfg = TrainDiscriminatorConfig(output=tmp_path / "run", pretrain_data="none", finetune=(str(folder),),
                                   test=(str(folder),), base_model=str(base), param_level=True,
                                   param_toolsets=(str(folder),), max_steps=3, progress=False)
    out = train_param_level(cfg, tmp_path / "run", 4, logging.getLogger("test"))
    best = tmp_path / "run" / "param" / "best"
    assert out["best_dir"] == str(best) and (best / "config.json").exists()
    assert load_calibration(best)["level"] == "parameter" and out["calibration"]["threshold"] == load_calibration(best)["threshold"]
    assert out["train"] > out["validation"] > 0
