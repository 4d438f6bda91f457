"""Candidate pruning, pair scoring with a tiny random discriminator checkpoint, and the
build-graph / eval-retrieval flows end to end on a small tool set and on real API-Bank."""
from __future__ import annotations

import json
import logging
import os
import re

import numpy as np
import pytest

from schemas.tdi import ID2LABEL, LABEL2ID
from schemas.toolset import DependencyEdge, Query, Tool, ToolSet
from tasks.graph.edges import fuse_edges
from tasks.graph.pruning import (DEFAULT_PRUNING, ONE_GROUP_WARNING, log_groups, log_pruning, param_compatible,
                                 prune_candidates, pruning_rules, same_group_pairs, text_compatible)
from tasks.graph.schema_rule import group_common_names, named_types, schema_edges, types_agree
from tasks.graph.scoring import cap_prerequisites, check_label_order, edge_decision, edges_from_probabilities, score_pairs
from schemas.name_rule import normalise_param_name, schema_rule_label

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def doc(name, inputs=(), outputs=(), description=None):
    return {"name": name, "description": description or f"The {name} API.",
            "input_params": [{"name": n, "type": "str", "description": ""} for n in inputs],
            "output_params": [{"name": n, "type": "str", "description": ""} for n in outputs]}


TOOLS = [
    Tool("login", "account", doc("Login", ["username", "password"], ["userToken", "status"],
                                 "Log a user in and return a token.")),
    Tool("update_email", "account", doc("UpdateEmail", ["user_token", "email"], ["status"],
                                        "Change the email address of the user.")),
    Tool("delete_account", "account", doc("DeleteAccount", ["user_token"], ["status"],
                                          "Delete the account of the user.")),
    Tool("weather", "weather", doc("GetWeather", ["city"], ["temperature"], "Weather forecast for a city.")),
    Tool("clothes", "weather", doc("Clothing", ["temperature"], ["advice"], "Clothing advice for a temperature.")),
]
EDGES = [DependencyEdge("account", "update_email", "login"), DependencyEdge("account", "delete_account", "login"),
         DependencyEdge("weather", "clothes", "weather")]
TOYSET = ToolSet("toy", TOOLS, EDGES, [
    Query("q1", "I want to change my email address", ("update_email", "login")),
    Query("q2", "what should I wear in Paris tomorrow", ("clothes", "weather")),
])


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """A randomly initialised 2-layer BERT pair classifier with the packaged MiniLM tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from models.encoder_path import resolve_model_name_or_path

    try:
        tokenizer = AutoTokenizer.from_pretrained(resolve_model_name_or_path(None))
    except ModuleNotFoundError as exc:
        pytest.skip(f"packaged MiniLM tokenizer missing: {exc}")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512, num_labels=3,
                        id2label=dict(ID2LABEL), label2id=dict(LABEL2ID))
    path = tmp_path_factory.mktemp("disc") / "best"
    BertForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_param_names_and_compatibility():
    import tasks.graph.pruning as gp
    import schemas.name_rule as sr

    # One home for the helpers: the graph stage re-uses the name rule's objects, no copies.
    assert gp.output_names is sr.output_names and gp.content_words is sr.content_words
    assert normalise_param_name("userToken") == normalise_param_name("user_token") == "usertoken"
    assert param_compatible(TOOLS[0], TOOLS[1])  # Login.userToken -> UpdateEmail.user_token
    assert param_compatible(TOOLS[4], TOOLS[3])  # either direction
    assert not param_compatible(TOOLS[1], TOOLS[2])  # they only share the generic output "status"
    # No declared outputs: the name says what the tool returns (GetUserToken -> user_token).
    getter = Tool("get_token", "account", doc("GetUserToken", ["username"], []))
    assert param_compatible(getter, TOOLS[1])


def test_text_rule_without_any_parameters():
    search = Tool("s", "tmdb", doc("SearchMovie", description="Search and find movies."))
    credit = Tool("c", "tmdb", doc("GetMovieCredit", description="Get the cast and crew of a movie by its ID."))
    images = Tool("i", "tmdb", doc("GetPersonImage", description="Fetch the images of a person."))
    login = Tool("l", "bank", doc("account_login", description="Account Login Tool"))
    pay = Tool("p", "bank", doc("transfer_money", description="Perform transfer operation"))
    assert not param_compatible(search, credit)  # nothing declared: the params rule is blind here
    assert text_compatible(search, credit)  # SearchMovie's output "movie(s)" is in GetMovieCredit's text
    assert not text_compatible(search, images)
    assert text_compatible(login, pay) and text_compatible(pay, login)  # a gatekeeper (login) tool
    # An input named in the other tool's name: "token" in GetUserToken.
    assert text_compatible(Tool("a", "g", doc("AddAgenda", ["token"], ["status"], "Add an agenda item.")),
                           Tool("b", "g", doc("GetUserToken", ["username"], ["token"], "Get the token.")))


def test_pruning_counts_pairs_and_known_edges():
    assert same_group_pairs(TOOLS) == [(0, 1), (0, 2), (1, 2), (3, 4)]
    params = prune_candidates(TOOLS, strategy="params", known_edges=EDGES)
    assert params.candidates == [(0, 1), (0, 2), (3, 4)]
    assert (params.pairs_in_groups, params.pairs_removed) == (4, 1)
    assert (params.known_edges, params.known_edges_in_groups, params.known_edges_kept) == (3, 3, 3)
    assert params.known_edge_recall == 1.0 and params.as_row("toy")["known_edge_recall"] == 1.0
    assert prune_candidates(TOOLS, strategy="params").known_edge_recall is None  # no known edges
    # Embeddings where tool 1's nearest neighbour is 2 and 0's is 1: m = 1 keeps (0,1), (1,2), (3,4).
    emb = np.array([[1, 0.1, 0], [0.8, 1, 0], [0.5, 1, 0.1], [0, 0, 1], [0, 0.1, 1]], dtype=np.float32)
    near = prune_candidates(TOOLS, emb, "neighbours", neighbours=1, known_edges=EDGES)
    assert near.candidates == [(0, 1), (1, 2), (3, 4)] and near.known_edges_kept == 2
    both = prune_candidates(TOOLS, emb, "params+neighbours", neighbours=1, known_edges=EDGES)
    assert both.candidates == [(0, 1), (0, 2), (1, 2), (3, 4)]
    with pytest.raises(ValueError, match="needs tool embeddings"):
        prune_candidates(TOOLS, None, "neighbours")
    with pytest.raises(ValueError, match="unknown pruning"):
        prune_candidates(TOOLS, emb, "magic")
    with pytest.raises(ValueError, match="unknown pruning"):
        prune_candidates(TOOLS, emb, "params+params")
    assert pruning_rules(DEFAULT_PRUNING) == ("params", "text", "neighbours", "retrieval")
    assert pruning_rules("none") == ()
    assert prune_candidates(TOOLS, emb, DEFAULT_PRUNING, 1, EDGES, retrieved=set()).known_edge_recall == 1.0


def test_low_pruning_recall_is_a_loud_warning(caplog):
    near = prune_candidates(TOOLS, np.array([[1, 0.1, 0], [0.8, 1, 0], [0.5, 1, 0.1], [0, 0, 1], [0, 0.1, 1]]),
                            "neighbours", neighbours=1, known_edges=EDGES)
    with caplog.at_level(logging.INFO, logger="tasks.graph.pruning"):
        log_pruning("toy", near)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "recall 0.667 < 0.9" in warnings[0] and "2 of 3" in warnings[0]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tasks.graph.pruning"):
        log_pruning("toy", prune_candidates(TOOLS, strategy="params", known_edges=EDGES))
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "gold-edge recall 1.000" in caplog.records[0].getMessage()


def test_a_large_catalog_in_one_group_is_a_loud_warning(caplog):
    """A catalog without a group field reads as one group: every producer then competes with the whole catalog."""
    def tools(n, groups):
        return [Tool(f"t{k}", f"g{k % groups}", {"name": f"t{k}", "description": "d"}) for k in range(n)]

    with caplog.at_level(logging.INFO, logger="tasks.graph.pruning"):
        log_groups("big", tools(ONE_GROUP_WARNING + 1, 1))
    info, warning = (r.getMessage() for r in caplog.records)
    assert info == f"big: {ONE_GROUP_WARNING + 1} tools in 1 group, the largest 'g0' with {ONE_GROUP_WARNING + 1}"
    assert warning.startswith(f"ONE GROUP on big: all {ONE_GROUP_WARNING + 1} tools share group 'g0'")
    for n, groups in ((ONE_GROUP_WARNING, 1), (3 * ONE_GROUP_WARNING, 2)):  # small, or grouped: no warning
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="tasks.graph.pruning"):
            log_groups("set", tools(n, groups))
        assert [r.levelno for r in caplog.records] == [logging.INFO]
    half = 3 * ONE_GROUP_WARNING // 2
    assert caplog.records[0].getMessage() == f"set: {3 * ONE_GROUP_WARNING} tools in 2 groups, the largest 'g1' with {half}"


def _param_doc(name, description, inputs=(), outputs=()):
    return {"name": name, "description": description,
            "input_params": [{"name": n, "type": "str", "description": d} for n, d in inputs],
            "output_params": [{"name": n, "type": "str", "description": d} for n, d in outputs]}


# One group: list_files takes a folder that make_temp_dir creates; no parameter name or word says so.
MEANING_TOOLS = [
    Tool("make_temp_dir", "files", _param_doc("make_temp_dir", "Create a new temporary directory.",
                                              [("prefix", "text the name starts with")],
                                              [("tmp_dir", "location of the created directory")])),
    Tool("list_files", "files", _param_doc("list_files", "List what a folder contains.",
                                           [("path", "the folder to look into")], [("names", "the entries found")])),
    Tool("send_email", "files", _param_doc("send_email", "Send an email message.",
                                           [("recipient", "email address of the receiver"), ("body", "message text")],
                                           [("status", "sent or failed")])),
    Tool("get_weather", "files", _param_doc("get_weather", "Weather forecast for a city.",
                                            [("city", "name of the city")], [("temperature", "degrees celsius")])),
    Tool("convert_currency", "files", _param_doc("convert_currency", "Convert money between currencies.",
                                                 [("amount", "how much money"), ("currency", "target currency code")],
                                                 [("converted", "the amount in the target currency")])),
]
MEANING_EDGE = DependencyEdge("files", "list_files", "make_temp_dir")


@pytest.fixture(scope="module")
def minilm_encode():
    from models.sentence_encoder import EncoderConfig, SentenceEncoder

    try:
        encoder = SentenceEncoder(EncoderConfig())
    except ModuleNotFoundError as exc:
        pytest.skip(f"packaged MiniLM missing: {exc}")
    return lambda texts: encoder.encode(texts)


def test_retrieval_rule_keeps_a_meaning_match_that_the_name_rules_miss(minilm_encode):
    from tasks.graph.candidates import retrieval_candidates

    producer, consumer = MEANING_TOOLS[0], MEANING_TOOLS[1]
    assert not param_compatible(producer, consumer) and not text_compatible(producer, consumer)
    by_names = prune_candidates(MEANING_TOOLS, strategy="params+text", known_edges=[MEANING_EDGE])
    assert (0, 1) not in by_names.candidates and by_names.known_edge_recall == 0.0
    retrieved = retrieval_candidates(MEANING_TOOLS, minilm_encode, k=1)
    # path <- "location of the created directory", as (producer, consumer); k = 1: the one producer of its query
    assert {p for p, c in retrieved if c == 1} == {0}
    assert len(retrieved) <= 7  # one producer per query: 7 input parameters
    union = prune_candidates(MEANING_TOOLS, strategy="params+text+retrieval", known_edges=[MEANING_EDGE],
                             retrieved=retrieved)
    assert (0, 1) in union.candidates and union.known_edge_recall == 1.0
    assert union.ordered_pairs_kept < union.ordered_pairs_in_groups == 20


def test_retrieval_texts_and_top_k_per_query_by_hand():
    from schemas.dependency_text import parameter_queries, producer_text
    from tasks.graph.candidates import retrieval_texts, retrieve_producers

    assert parameter_queries(MEANING_TOOLS[1].doc) == ["path: the folder to look into (input of list files)"]
    assert parameter_queries(doc("GetMovieCredit", description="Cast and crew.")) == ["get movie credit: Cast and crew."]
    assert producer_text(MEANING_TOOLS[0].doc) == ("make temp dir: Create a new temporary directory.; returns "
                                                   "tmp dir: location of the created directory")
    texts = retrieval_texts(TOOLS)
    assert texts.consumer == [0, 0, 1, 1, 2, 3, 4] and len(texts.producers) == 5
    # Producers: 0..4 on axes; queries of tool 1 point at 0 then 2; tool 3's query at tool 4 (other group: 3, 4 only).
    producers = np.eye(5, dtype=np.float32)
    queries = np.array([[0, 1, 0.5, 0, 0],  # login's "username": best update_email (1), then 2
                        [0, 0.2, 0, 0, 0.9],  # login's "password": tool 4 is in another group: 1
                        [0.9, 0, 0.5, 0, 0], [0.1, 0.9, 0.8, 0, 0],  # update_email: 0 (then 2); 1 is itself: 2
                        [1, 0, 0, 0, 0], [0, 0, 0, 0, 1], [0, 0, 0, 1, 0]], dtype=np.float32)
    assert retrieve_producers(TOOLS, producers, queries, texts.consumer, 1) == {(1, 0), (0, 1), (2, 1), (0, 2),
                                                                                 (4, 3), (3, 4)}
    every = {(1, 0), (2, 0), (0, 1), (2, 1), (0, 2), (1, 2), (4, 3), (3, 4)}  # all ordered same-group pairs
    assert retrieve_producers(TOOLS, producers, queries, texts.consumer, 2) == every  # 2 of 2 others in account
    assert retrieve_producers(TOOLS, producers, queries, texts.consumer, 10) == every  # k capped by the group
    with pytest.raises(ValueError, match="at least 1"):
        retrieve_producers(TOOLS, producers, queries, texts.consumer, 0)


def test_recall_and_share_of_ordered_pairs_by_hand():
    # account: tools 0, 1, 2 (6 ordered pairs), weather: 3, 4 (2): 8 ordered same-group pairs.
    gold = EDGES + [DependencyEdge("account", "delete_account", "update_email")]  # 1 -> 2
    retrieved = {(2, 1), (0, 1)}  # (producer, consumer): delete_account -> update_email, login -> update_email
    alone = prune_candidates(TOOLS, strategy="retrieval", known_edges=gold, retrieved=retrieved)
    assert alone.candidates == [(0, 1), (1, 2)] and alone.kept_share == 0.5  # unordered pairs for the scorer
    assert (alone.ordered_pairs_kept, alone.ordered_pairs_in_groups, alone.ordered_share) == (2, 8, 0.25)
    # Of the 4 gold edges only login -> update_email is kept in its direction; 2 -> 1 does not keep 1 -> 2.
    assert (alone.known_edges_kept, alone.known_edge_recall) == (1, 0.25)
    union = prune_candidates(TOOLS, strategy="params+retrieval", known_edges=gold, retrieved=retrieved)
    # params keeps (0,1), (0,2), (3,4) in both orders (6); retrieval adds 2 -> 1 (login -> update_email is in already).
    assert union.candidates == [(0, 1), (0, 2), (1, 2), (3, 4)]
    assert (union.ordered_pairs_kept, union.ordered_share, union.known_edges_kept, union.known_edge_recall) == (
        7, 0.875, 3, 0.75)
    row = union.as_row("toy")
    assert (row["ordered_pairs_in_groups"], row["ordered_pairs_kept"], row["ordered_share_kept"]) == (8, 7, 0.875)
    assert "ordered pairs 7 of 8 (0.875)" in union.describe()
    # The symmetric rules keep both orders: their ordered share is their unordered one.
    params = prune_candidates(TOOLS, strategy="params", known_edges=gold)
    assert (params.ordered_pairs_kept, params.ordered_share, params.kept_share) == (6, 0.75, 0.75)
    with pytest.raises(ValueError, match="needs the retrieval rule's pairs"):
        prune_candidates(TOOLS, strategy="params+retrieval")
    with pytest.raises(ValueError, match="not two tools of one group"):
        prune_candidates(TOOLS, strategy="retrieval", retrieved={(0, 3)})


def test_candidate_recall_bench_judges_targets_and_the_default():
    from bench.candidate_recall import against_target, replaces_default, verdict
    from tasks.graph.pruning import PruningResult

    def result(kept, gold, ordered_kept, pairs=50):  # 100 ordered pairs
        return PruningResult("x", [], pairs, gold, gold, kept, ordered_kept)

    assert verdict(result(19, 20, 5), (0.9, 0.05)) == "meets"
    assert verdict(result(17, 20, 30), (0.9, 0.05)) == "misses: recall 0.050 short, share 0.250 over"
    assert verdict(result(18999, 20000, 5, 50), (0.95, 0.05)) == "misses: recall 0.0000 short"  # 0.94995 < 0.95
    rows = [("default", result(20, 20, 30)), ("cheap", result(18, 20, 4)), ("wide", result(20, 20, 31))]
    assert against_target(rows, (0.9, 0.05)) == (
        "best recall within 5% of ordered pairs: 0.900 (cheap), 0.000 short of 0.9; "
        "smallest share reaching recall 0.9: 0.040 (cheap), 0.000 over 5%.")
    # "wide": the default's recall at +0.01 share, nowhere better; "cheap" loses recall: neither replaces it.
    assert ": none. build-graph's default: " in replaces_default({"a": rows})
    better = [("default", result(18, 20, 30)), ("cheap", result(18, 20, 4)), ("wide", result(20, 20, 31))]
    # "wide" on b: a higher recall at +0.01 share; "cheap" on a loses recall.
    assert ": wide. build-graph's default: " in replaces_default({"a": rows, "b": better})
    assert ": cheap, wide. build-graph's default: " in replaces_default({"b": better})


def test_schema_edges_follow_the_rule_and_store_matched_names():
    found = schema_edges(TOOLS)
    got = {(s.edge.dependent, s.edge.prerequisite, s.edge.source, s.matched_params) for s in found}
    assert got == {("update_email", "login", "schema", ("usertoken",)),
                   ("delete_account", "login", "schema", ("usertoken",)),
                   ("clothes", "weather", "schema", ("temperature",))}
    index = {t.tool_id: i for i, t in enumerate(TOOLS)}
    for s in found:  # the same labels as schemas.name_rule on the pair <a, b> (a first in tool order)
        i, j = sorted((index[s.edge.dependent], index[s.edge.prerequisite]))
        assert schema_rule_label(TOOLS[i].doc, TOOLS[j].doc) == s.predicted_class
    assert schema_edges(TOOLS, [(1, 2)]) == []  # only "status" in common: no edge


def test_schema_edges_ignore_names_that_many_tools_of_a_group_produce():
    # three services of one category return an `id`; a tool that takes an `id` cannot say whose
    catalogue = [Tool(f"svc{k}::list", "finance", doc(f"List{k}", [], ["id", f"name{k}"])) for k in range(3)]
    catalogue += [Tool("quote::get", "finance", doc("GetQuote", ["id", "ticker"], ["price"])),
                  Tool("tickers::search", "finance", doc("SearchTicker", ["company"], ["ticker"]))]
    assert group_common_names(catalogue) == {"finance": frozenset({"id"})}
    found = {(s.edge.dependent, s.edge.prerequisite, s.matched_params) for s in schema_edges(catalogue)}
    assert found == {("quote::get", "tickers::search", ("ticker",))}
    everything = {(s.edge.dependent, s.edge.prerequisite) for s in schema_edges(catalogue, max_producers=None)}
    assert everything == {("quote::get", "tickers::search")} | {("quote::get", f"svc{k}::list") for k in range(3)}
    assert {(s.edge.dependent, s.edge.prerequisite) for s in schema_edges(catalogue, max_producers=3)} == everything


def test_schema_edges_need_one_value_by_type_where_both_sides_name_schema_types():
    def typed(name, inputs, outputs):
        return {"name": name, "description": name,
                "input_params": [{"name": n, "type": t, "description": ""} for n, t in inputs],
                "output_params": [{"name": n, "type": t, "description": ""} for n, t in outputs]}

    api = [Tool("read_settings", "api", typed("read_settings", [], [("deployments", "DeploymentsSettings")])),
           Tool("read_deployments", "api", typed("read_deployments", [("deployments", "DeploymentFilter | null")],
                                                 [("schedules", "array of DeploymentSchedule-Output")])),
           Tool("set_schedules", "api", typed("set_schedules", [("schedules", "array of DeploymentSchedule-Input")],
                                              [("total_runs", "integer")])),
           Tool("count_all", "api", typed("count_all", [("total_runs", "string")], []))]
    # settings of deployments are no filter of them; one model's -Input and -Output halves, or a primitive, agree
    found = {(s.edge.dependent, s.edge.prerequisite) for s in schema_edges(api)}
    assert found == {("set_schedules", "read_deployments"), ("count_all", "set_schedules")}
    assert named_types("array of FlowRunSlotSummary | null") == {"FlowRunSlotSummary"}
    assert named_types("Optional[Path]") == {"Path"} and named_types("Union[List[dict], dict]") is None
    assert named_types("DATE (YYYY-MM-DD)") is None and named_types("NoneType") is None
    assert types_agree(None, "Pet") and types_agree("array of Pet", "Pet") and not types_agree("Pet", "Owner")


def test_fused_graph_is_the_union_with_schema_direction_on_conflicts():
    pairs = [(0, 1), (1, 2)]
    # <login, update_email>: class 0 (login depends on update_email: the wrong way round);
    # <update_email, delete_account>: class 2 (delete_account depends on update_email).
    probs = np.array([[0.6, 0.3, 0.1], [0.1, 0.2, 0.7]])
    predicted = edges_from_probabilities(TOOLS, pairs, probs)
    fused = fuse_edges(predicted, schema_edges(TOOLS))
    got = {(f.edge.dependent, f.edge.prerequisite): (f.fused_from, f.prob) for f in fused}
    assert got == {("update_email", "login"): (("discriminator", "schema"), 1.0),
                   ("delete_account", "login"): (("schema",), 1.0),
                   ("clothes", "weather"): (("schema",), 1.0),
                   ("delete_account", "update_email"): (("discriminator",), pytest.approx(0.8))}
    assert all(f.edge.source == "fused" for f in fused)


def test_predicted_edges_carry_their_dependency_kind():
    from tasks.graph.kinds import dependency_kind

    assert dependency_kind(through_parameter=True) == "data"
    assert dependency_kind(through_parameter=False) is None
    assert dependency_kind(through_parameter=False, precondition=True) == "precondition"
    assert dependency_kind(through_parameter=False, precondition=False) == "data"  # the kind head says data
    assert dependency_kind(through_parameter=True, precondition=True) == "data"  # a value passed wins
    # schema edges are found through parameters; a discriminator pair score names none
    assert {s.edge.kind for s in schema_edges(TOOLS)} == {"data"}
    pairs, probs = [(0, 1), (1, 2)], np.array([[0.6, 0.3, 0.1], [0.1, 0.2, 0.7]])
    predicted = edges_from_probabilities(TOOLS, pairs, probs)
    assert [p.edge.kind for p in predicted] == [None, None]
    # a checkpoint with a kind head: its p(precondition) per pair against the calibrated kind cut
    headed = edges_from_probabilities(TOOLS, pairs, probs, p_precondition=np.array([0.9, 0.2]), kind_threshold=0.6)
    assert [p.edge.kind for p in headed] == ["precondition", "data"]
    assert [p.edge.kind for p in edges_from_probabilities(TOOLS, pairs, probs, p_precondition=np.array([0.9, 0.2]),
                                                          kind_threshold=0.95)] == ["data", "data"]
    fused = {(f.edge.dependent, f.edge.prerequisite): (f.fused_from, f.edge.kind)
             for f in fuse_edges(predicted, schema_edges(TOOLS))}
    # found by the schema rule (alone or with the discriminator): its data edge is kept; discriminator only: None
    assert fused == {("update_email", "login"): (("discriminator", "schema"), "data"),
                     ("delete_account", "login"): (("schema",), "data"), ("clothes", "weather"): (("schema",), "data"),
                     ("delete_account", "update_email"): (("discriminator",), None)}


def test_warehouse_edge_rows_carry_the_kind():
    from datetime import datetime

    from tasks.graph.edges import dataset_tables

    gold = [DependencyEdge("account", "update_email", "login", kind="data"),
            DependencyEdge("account", "delete_account", "login", kind="precondition"),
            DependencyEdge("weather", "clothes", "weather")]
    toolset = ToolSet("toy", TOOLS, gold, TOYSET.queries)
    predicted = edges_from_probabilities(TOOLS, [(1, 2)], np.array([[0.1, 0.2, 0.7]]))
    schema = schema_edges(TOOLS)
    rows = dataset_tables(toolset, "structured", ["t"] * len(TOOLS), "enc", None,
                          {"base": np.eye(len(TOOLS), 4, dtype=np.float32)}, np.zeros((2, 4), dtype=np.float32), None,
                          [], np.zeros((0, 3)), predicted, datetime(2024, 1, 1), schema,
                          fuse_edges(predicted, schema)).rows["edges"]
    kinds = {(r["source"], r["dependent"], r["prerequisite"]): r["kind"] for r in rows}
    assert kinds == {("manual", "update_email", "login"): "data", ("manual", "delete_account", "login"): "precondition",
                     ("manual", "clothes", "weather"): None,
                     ("discriminator", "delete_account", "update_email"): None,
                     **{(src, d, p): "data" for src in ("schema", "fused") for d, p in
                        (("update_email", "login"), ("delete_account", "login"), ("clothes", "weather"))},
                     ("fused", "delete_account", "update_email"): None}


def test_edge_metrics_by_hand_with_recall_per_gold_kind():
    from tasks.graph.metrics import describe, edge_metrics

    gold = [DependencyEdge("g", "b", "a", kind="data"), DependencyEdge("g", "c", "a", kind="data"),
            DependencyEdge("g", "c", "b", kind="precondition"), DependencyEdge("g", "d", "c")]
    predicted = [DependencyEdge("g", "b", "a", "schema", "data"),  # data gold found
                 DependencyEdge("g", "b", "c", "schema", "data"),  # c -> b reversed: direction counts, a miss
                 DependencyEdge("g", "c", "b", "discriminator"),  # precondition gold found
                 DependencyEdge("g", "d", "c", "discriminator"),  # unlabelled gold found
                 DependencyEdge("g", "e", "d", "discriminator")]  # no gold
    m = edge_metrics(gold, predicted)
    assert (m["true_positives"], m["predicted"], m["gold"]) == (3, 5, 4)
    assert m["precision"] == pytest.approx(3 / 5) and m["recall"] == pytest.approx(3 / 4)
    assert m["f1"] == pytest.approx(2 * 0.6 * 0.75 / 1.35)
    assert m["recall_by_gold_kind"] == {"data": {"gold": 2, "found": 1, "recall": 0.5},
                                        "precondition": {"gold": 1, "found": 1, "recall": 1.0},
                                        "unlabelled": {"gold": 1, "found": 1, "recall": 1.0}}
    assert m["predicted_kinds"] == {"data": 2, "precondition": 0, "unlabelled": 3}
    # a kind without gold edges has no recall (None, not 0); nothing predicted: P = R = F1 = 0
    empty = edge_metrics(gold[:2], [])
    assert empty["recall_by_gold_kind"]["precondition"] == {"gold": 0, "found": 0, "recall": None}
    assert (empty["precision"], empty["recall"], empty["f1"]) == (0.0, 0.0, 0.0)
    assert describe("toy", "schema", m) == (
        "toy: schema edges vs gold: P 0.600 R 0.750 F1 0.667 (3 of 5 predicted, 4 gold); recall by gold kind: "
        "data 0.500 (1/2), precondition 1.000 (1/1), unlabelled 1.000 (1/1)")


def test_edges_from_probabilities_by_hand():
    pairs = [(0, 1), (0, 2), (3, 4)]
    probs = np.array([[0.1, 0.2, 0.7],   # class 2 on <login, update_email>: update_email depends on login
                      [0.5, 0.3, 0.2],   # class 0: login depends on delete_account
                      [0.2, 0.6, 0.2]])  # argmax: no dependency; but p0 + p2 = 0.4
    edges = edges_from_probabilities(TOOLS, pairs, probs)  # argmax
    # prob = p0 + p2 (some dependency), p_direction = the chosen class alone.
    assert [(e.dependent, e.prerequisite, round(p, 6), c) for e, p, c in edges] == [
        ("update_email", "login", 0.8, 2), ("login", "delete_account", 0.7, 0)]
    assert [e.p_direction for e in edges] == [0.7, 0.5]
    assert [e.dependent for e, _, _ in edges_from_probabilities(TOOLS, pairs, probs, min_prob=0.75)] == ["update_email"]
    # A calibrated threshold on p0 + p2: 0.4 makes the third pair an edge (direction: p0 = p2 -> class 0),
    # 0.75 keeps only the first.
    low = edges_from_probabilities(TOOLS, pairs, probs, threshold=0.4)
    assert [(e.edge.dependent, e.edge.prerequisite, e.predicted_class) for e in low][-1] == ("weather", "clothes", 0)
    assert [e.edge.dependent for e in edges_from_probabilities(TOOLS, pairs, probs, threshold=0.75)] == ["update_email"]
    assert all(e.prob >= 0.4 for e in low)


def test_cap_keeps_each_dependents_most_probable_prerequisites():
    """``--max-prerequisites K``: per dependent, the K edges of highest prob survive (ties: the prerequisite's id),
    whatever the order the pairs were scored in; other dependents' edges are untouched."""
    pairs = [(1, 0), (1, 2), (1, 3), (1, 4), (4, 3)]
    probs = np.array([[0.85, 0.1, 0.05],   # update_email depends on login, 0.90
                      [0.9, 0.05, 0.05],   # update_email depends on delete_account, 0.95
                      [0.45, 0.1, 0.45],   # update_email depends on weather, 0.90 (a tie with login)
                      [0.6, 0.3, 0.1],     # update_email depends on clothes, 0.70
                      [0.8, 0.1, 0.1]])    # clothes depends on weather, 0.90
    edges = edges_from_probabilities(TOOLS, pairs, probs, threshold=0.5)
    assert len(edges) == 5 and cap_prerequisites(edges, None) == edges
    kept = [(e.edge.dependent, e.edge.prerequisite) for e in cap_prerequisites(edges, 2)]
    assert kept == [("update_email", "login"), ("update_email", "delete_account"), ("clothes", "weather")]
    assert [(e.edge.dependent, e.edge.prerequisite) for e in cap_prerequisites(edges[::-1], 1)] == [
        ("clothes", "weather"), ("update_email", "delete_account")]
    assert len(cap_prerequisites(edges, 4)) == 5
    with pytest.raises(ValueError, match="at least 1"):
        cap_prerequisites(edges, 0)


def test_edge_decision_reads_calibration_or_falls_back_to_argmax(tmp_path, caplog):
    ckpt = tmp_path / "best"
    ckpt.mkdir()
    with caplog.at_level(logging.WARNING, logger="tasks.graph.scoring"):
        d = edge_decision(ckpt)
    assert d.threshold is None and d.rule == "argmax" and d.both_orders
    assert any("no calibration.json" in r.getMessage() for r in caplog.records)
    (ckpt / "calibration.json").write_text(json.dumps({"threshold": 0.35, "criterion": "max_f1_validation"}))
    d = edge_decision(ckpt, both_orders=False)
    assert (d.threshold, d.criterion, d.threshold_source, d.rule) == (0.35, "max_f1_validation", "calibration.json",
                                                                        "threshold")
    d = edge_decision(ckpt, threshold=0.6)  # the --threshold flag wins
    assert (d.threshold, d.criterion, d.threshold_source) == (0.6, "--threshold", "--threshold")
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        edge_decision(ckpt, threshold=1.5)
    (ckpt / "calibration.json").write_text(json.dumps({"criterion": "x"}))
    with pytest.raises(ValueError, match="no 'threshold'"):
        edge_decision(ckpt)


def test_a_kind_head_checkpoint_scores_the_same_classes_and_gives_each_pair_a_kind(tiny_checkpoint, tmp_path):
    from models.discriminator import load_model, load_tokenizer

    headed = tmp_path / "headed"
    load_model(str(tiny_checkpoint), kind_head=True).save_pretrained(headed)  # widened: the same 3 classes
    load_tokenizer(str(tiny_checkpoint)).save_pretrained(headed)
    pairs = [(0, 1), (0, 2), (3, 4)]
    plain, none = score_pairs(tiny_checkpoint, TOOLS, pairs, batch_size=2, progress=False, with_kind=True)
    probs, p_pre = score_pairs(headed, TOOLS, pairs, batch_size=2, progress=False, with_kind=True)
    assert none is None and p_pre.shape == (3,)
    np.testing.assert_allclose(probs, plain, atol=1e-6)
    np.testing.assert_allclose(p_pre, 0.5, atol=1e-6)  # a widened head has not learned a kind yet
    np.testing.assert_allclose(score_pairs(headed, TOOLS, pairs, batch_size=2, progress=False), plain, atol=1e-6)
    check_label_order(load_model(str(headed)).config.id2label, headed)  # five outputs are the project's too
    with pytest.raises(ValueError, match="differs from the project's"):
        check_label_order({0: "a", 1: "b", 2: "c", 3: "d", 4: "e"}, headed)


def test_score_pairs_with_a_tiny_checkpoint(tiny_checkpoint):
    pairs = [(0, 1), (0, 2), (3, 4)]
    probs = score_pairs(tiny_checkpoint, TOOLS, pairs, batch_size=2, both_orders=False, progress=False)
    assert probs.shape == (3, 3)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    # Averaging with the swapped order makes the scores order-free: <b,a> is <a,b> label-swapped.
    # (the default; batch_size 1 makes chunks of 16 pairs, so chunking is exercised on 3 pairs too)
    ab = score_pairs(tiny_checkpoint, TOOLS, pairs, batch_size=1)
    ba = score_pairs(tiny_checkpoint, TOOLS, [(j, i) for i, j in pairs], progress=False)
    np.testing.assert_allclose(ab, ba[:, [2, 1, 0]], atol=1e-6)
    assert score_pairs(tiny_checkpoint, TOOLS, []).shape == (0, 3)
    with pytest.raises(ValueError, match="id2label"):
        check_label_order({0: "no_dependency", 1: "a_depends_on_b", 2: "b_depends_on_a"}, "ckpt")


@pytest.fixture(scope="module")
def confident_checkpoint(tiny_checkpoint, tmp_path_factory):
    """The tiny checkpoint trained for a few steps on the toy set's pairs: clear, varied decisions (not coin
    flips near 1/3 each), so that a faster path that moves the probabilities a little must keep the edges."""
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    from models.discriminator import encode_pairs
    from schemas.docs import canonical_doc_json

    model = BertForSequenceClassification.from_pretrained(tiny_checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    ids = {t.tool_id: n for n, t in enumerate(TOOLS)}
    depends = {(ids[e.dependent], ids[e.prerequisite]) for e in EDGES}
    # the pairs <a, b> in tool order, as score_pairs scores them with both_orders=False (a 2-layer, 32-wide
    # model does not learn a direction from the segment order, so it is trained on one order only)
    pairs = [(i, j) for i in range(len(TOOLS)) for j in range(i + 1, len(TOOLS))]
    labels = torch.tensor([0 if (i, j) in depends else 2 if (j, i) in depends else 1 for i, j in pairs])
    docs = [canonical_doc_json(t.doc) for t in TOOLS]
    batch = tokenizer.pad(encode_pairs(tokenizer, [docs[i] for i, _ in pairs], [docs[j] for _, j in pairs], 128),
                          return_tensors="pt")
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny steps: thread hand-offs cost more than they save (10x on a busy machine)
    try:
        for _ in range(150):
            optimizer.zero_grad()
            model(**batch, labels=labels).loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    path = tmp_path_factory.mktemp("confident") / "best"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_length_sorted_dynamic_padding_scores_each_pair_as_alone(confident_checkpoint):
    """The predict path (pairs sorted by length, each batch padded only to its longest pair, inference_mode)
    gives what each pair gives scored alone, unpadded, under no_grad: the reference."""
    import torch

    from models.discriminator import encode_pairs, load_discriminator
    from schemas.docs import canonical_doc_json

    pairs = [(i, j) for i in range(len(TOOLS)) for j in range(len(TOOLS)) if i != j]
    probs = score_pairs(confident_checkpoint, TOOLS, pairs, batch_size=8, max_length=256, both_orders=False,
                        progress=False, max_producers=None)
    model, tokenizer = load_discriminator(confident_checkpoint)
    docs = [canonical_doc_json(t.doc) for t in TOOLS]
    enc = encode_pairs(tokenizer, [docs[i] for i, _ in pairs], [docs[j] for _, j in pairs], 256)
    assert len({len(ids) for ids in enc["input_ids"]}) > 3  # lengths differ: the padding is exercised
    with torch.no_grad():
        alone = np.stack([model(**{k: torch.tensor([enc[k][n]]) for k in enc}).logits.softmax(-1)[0].numpy()
                          for n in range(len(pairs))])
    np.testing.assert_allclose(probs, alone, atol=1e-5)


@pytest.mark.parametrize("precision, tolerance", [("int8", 0.05), ("bf16", 0.05)])
def test_faster_precisions_keep_the_edge_decisions_of_fp32(confident_checkpoint, precision, tolerance):
    """--scoring-precision int8 / bf16 move the probabilities a little and keep every edge of fp32 scoring."""
    from models.discriminator import decide

    pairs = [(i, j) for i in range(len(TOOLS)) for j in range(i + 1, len(TOOLS))]
    fp32 = score_pairs(confident_checkpoint, TOOLS, pairs, progress=False, max_producers=None, both_orders=False)
    fast = score_pairs(confident_checkpoint, TOOLS, pairs, progress=False, max_producers=None, both_orders=False,
                       precision=precision)
    assert 0 < np.abs(fast - fp32).max() < tolerance  # other arithmetic (so a different path ran), close numbers
    assert len(set(decide(fp32).tolist())) > 1  # the tiny model does not say one class for every pair
    for threshold in (None, 0.5):
        assert [(e, c) for e, _, c in edges_from_probabilities(TOOLS, pairs, fast, threshold=threshold)] == \
               [(e, c) for e, _, c in edges_from_probabilities(TOOLS, pairs, fp32, threshold=threshold)]


def test_onnx_scoring_gives_fp32_probabilities_from_a_file_exported_once_per_set_of_weights(confident_checkpoint,
                                                                                             tmp_path):
    """--scoring-precision onnx (auto's choice on a CPU): the same fp32 arithmetic in ONNX Runtime, so every
    probability within 1e-5 of torch's and every decision the same; the export is kept per set of weights."""
    import torch

    from models.discriminator import decide, load_discriminator, predict_proba, scoring_model
    from models.onnx_scoring import OnnxPairClassifier
    from schemas.docs import canonical_doc_json
    from tasks.graph.scoring import resolved_precision

    pairs = [(i, j) for i in range(len(TOOLS)) for j in range(len(TOOLS)) if i != j]
    fp32 = score_pairs(confident_checkpoint, TOOLS, pairs, progress=False, max_producers=None, precision="fp32")
    onnx = score_pairs(confident_checkpoint, TOOLS, pairs, progress=False, max_producers=None, precision="onnx")
    auto = score_pairs(confident_checkpoint, TOOLS, pairs, progress=False, max_producers=None, precision="auto")
    np.testing.assert_allclose(onnx, fp32, atol=1e-5)
    assert (decide(onnx) == decide(fp32)).all() and len(set(decide(fp32).tolist())) > 1
    np.testing.assert_array_equal(auto, onnx)  # auto on this CPU is onnx
    assert resolved_precision("auto", "cpu") == "onnx" and resolved_precision("int8", None) == "int8"

    model, tokenizer = load_discriminator(confident_checkpoint)
    runner = OnnxPairClassifier(model, tmp_path / "onnx")
    assert isinstance(scoring_model(model, "onnx"), OnnxPairClassifier)
    assert isinstance(model.classifier, torch.nn.Linear)  # the torch model is left as it was
    assert len(list((tmp_path / "onnx").glob("*.onnx"))) == 1
    OnnxPairClassifier(model, tmp_path / "onnx")  # the same weights: the same file, not exported again
    assert len(list((tmp_path / "onnx").glob("*.onnx"))) == 1
    with torch.no_grad():
        model.classifier.bias[0] += 2.0  # changed weights (a retrained model): a file of their own
    changed = OnnxPairClassifier(model, tmp_path / "onnx")
    assert len(list((tmp_path / "onnx").glob("*.onnx"))) == 2
    docs = [canonical_doc_json(t.doc) for t in TOOLS]
    a, b = [docs[i] for i, _ in pairs], [docs[j] for _, j in pairs]  # padded batches of several lengths
    now = predict_proba(model, tokenizer, a, b, 256, 4)
    torch.testing.assert_close(predict_proba(changed, tokenizer, a, b, 256, 4), now, atol=1e-5, rtol=0)
    assert not torch.allclose(predict_proba(runner, tokenizer, a, b, 256, 4), now, atol=1e-5, rtol=0)  # the old file
    assert not list((tmp_path / "onnx").glob(".build-*"))  # no half-written export left


def test_auto_scores_in_torch_where_onnx_cannot_take_the_model_and_onnx_takes_models_without_token_types(
        confident_checkpoint, tmp_path, monkeypatch):
    import torch
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    import models.onnx_scoring as onnx_scoring
    from models.onnx_scoring import OnnxPairClassifier

    # a model without token_type_ids in its forward(): each input goes to it by name
    torch.manual_seed(0)
    distil = DistilBertForSequenceClassification(DistilBertConfig(vocab_size=50, dim=16, n_layers=1, n_heads=2,
                                                                  hidden_dim=32, num_labels=3)).eval()
    ids, mask = torch.tensor([[1, 7, 9, 2, 0], [1, 4, 4, 8, 2]]), torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    with torch.no_grad():
        expected = distil(input_ids=ids, attention_mask=mask).logits
    got = OnnxPairClassifier(distil, tmp_path / "onnx")(input_ids=ids, attention_mask=mask,
                                                       token_type_ids=torch.zeros_like(ids)).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)

    pairs = [(i, j) for i in range(len(TOOLS)) for j in range(i + 1, len(TOOLS))]
    fp32 = score_pairs(confident_checkpoint, TOOLS, pairs, progress=False, precision="fp32")

    def refuse(*_args, **_kwargs):
        raise RuntimeError("no exporter for this model")

    monkeypatch.setattr(onnx_scoring.OnnxPairClassifier, "__init__", refuse)
    np.testing.assert_array_equal(score_pairs(confident_checkpoint, TOOLS, pairs, progress=False, precision="auto"),
                                  fp32)  # torch's fp32, the same arithmetic
    with pytest.raises(RuntimeError, match="no exporter"):  # asked for by name: the error, not another engine
        score_pairs(confident_checkpoint, TOOLS, pairs, progress=False, precision="onnx")


def test_scoring_model_quantizes_a_copy_and_refuses_unknown_precisions(confident_checkpoint):
    import torch

    from models.discriminator import SCORING_PRECISIONS, load_discriminator, scoring_model
    from tasks.graph.scoring import SCORING_PRECISIONS as CONFIG_PRECISIONS

    assert CONFIG_PRECISIONS == ("auto", *SCORING_PRECISIONS)  # build-graph's choices: the model's, and auto
    model, _ = load_discriminator(confident_checkpoint)
    assert scoring_model(model, "fp32") is model
    bf16 = scoring_model(model, "bf16")
    assert {q.dtype for q in bf16.parameters()} == {torch.bfloat16} and scoring_model(bf16, "bf16") is bf16
    assert {q.dtype for q in model.parameters()} == {torch.float32}  # a copy: the fp32 model is left as it was
    quantized = scoring_model(model, "int8")
    kinds = {type(m).__module__ for m in quantized.modules() if "Linear" in type(m).__name__}
    assert kinds and all("quantized" in k for k in kinds)  # every Linear layer is an int8 one
    assert isinstance(model.classifier, torch.nn.Linear)  # the fp32 model is left as it was
    with pytest.raises(ValueError, match="one of fp32, bf16, int8"):
        scoring_model(model, "fp16")
    with pytest.raises(ValueError, match="one of fp32, bf16, int8"):
        score_pairs(confident_checkpoint, TOOLS, [(0, 1)], progress=False, precision="fp16")


def test_build_and_eval_flows_end_to_end(tiny_checkpoint, tmp_path, prefect_harness):
    from flows.build_graph import GraphConfig, build_graph, parse_args
    from flows.eval_retrieval import EvalConfig, eval_retrieval
    from tasks.toolsets.readers import write_toolset_dir
    from warehouse.build import connect, rows_of

    folder = write_toolset_dir(TOYSET, tmp_path / "toy")
    target = tmp_path / "wh" / "tgr.duckdb"
    (tiny_checkpoint / "calibration.json").write_text(json.dumps({"threshold": 0.5, "criterion": "test"}))
    try:
        cfg = parse_args(["--toolset", str(folder), "--warehouse", str(target), "--discriminator",
                          str(tiny_checkpoint), "--pruning", "none", "--batch-size", "4", "--no-progress"])
        assert cfg.both_orders and cfg.threshold is None and cfg.schema_edges
        out = build_graph(cfg)
    finally:
        (tiny_checkpoint / "calibration.json").unlink()
    summary = out["datasets"]["toy"]
    assert summary["scored_pairs"] == 4 and summary["manual_edges"] == 3 and summary["schema_edges"] == 3
    assert summary["edge_decision"] == {"rule": "threshold", "threshold": 0.5, "criterion": "test",
                                        "threshold_source": "calibration.json", "both_orders": True}
    con = connect(target)
    kinds = {k for (k,) in con.execute("SELECT DISTINCT kind FROM tool_embeddings").fetchall()}
    assert kinds == {"base", "tgr_manual", "tgr_discriminator", "tgr_schema", "tgr_fused"}
    n_disc = con.execute("SELECT count(*) FROM edges WHERE source = 'discriminator'").fetchone()[0]
    assert n_disc == summary["discriminator_edges"]
    # Every scored pair the threshold calls a dependency became exactly one discriminator edge, with prob p0 + p2.
    assert n_disc == con.execute("SELECT count(*) FROM scored_pairs "
                                 "WHERE p_a_depends_on_b + p_b_depends_on_a >= 0.5").fetchone()[0]
    assert n_disc == con.execute("SELECT count(*) FROM scored_pairs WHERE predicted_class <> 1").fetchone()[0]
    assert con.execute("SELECT count(*) FROM edges WHERE source = 'discriminator' AND prob < 0.5").fetchone()[0] == 0
    cal = rows_of(con, "SELECT decision_rule, threshold, criterion, threshold_source, both_orders, pairs_scored, "
                       "edges_kept, calibration_json->>'criterion' AS stored FROM edge_calibration")
    assert cal == [{"decision_rule": "threshold", "threshold": 0.5, "criterion": "test",
                    "threshold_source": "calibration.json", "both_orders": True, "pairs_scored": 4,
                    "edges_kept": n_disc, "stored": "test"}]
    schema = con.execute("SELECT dependent, prerequisite, matched_params FROM edges WHERE source = 'schema' "
                         "ORDER BY 1").fetchall()
    assert schema == [("clothes", "weather", ["temperature"]), ("delete_account", "login", ["usertoken"]),
                      ("update_email", "login", ["usertoken"])]
    pruning = rows_of(con, "SELECT strategy, known_edge_recall FROM candidate_pruning")
    assert pruning == [{"strategy": "none", "known_edge_recall": 1.0}]
    n_fused = con.execute("SELECT count(*) FROM edges WHERE source = 'fused'").fetchone()[0]
    assert n_fused == summary["fused_edges"] >= 3
    params = json.loads(con.execute("SELECT params_json FROM edge_lineage WHERE source = 'discriminator'").fetchone()[0])
    assert params["scoring_precision"] == "onnx"  # which arithmetic made the edges is on record (auto, on a CPU)
    # kinds: schema edges data, the discriminator's pair scores none; each source measured against the 3 gold
    # edges (TOYSET's say no kind: all 'unlabelled'), its true positives recounted in SQL
    assert {k for (k,) in con.execute("SELECT DISTINCT kind FROM edges WHERE source = 'schema'").fetchall()} == {"data"}
    assert con.execute("SELECT count(*) FROM edges WHERE source = 'discriminator' AND kind IS NOT NULL").fetchone() == (0,)
    metrics = summary["edge_metrics"]
    assert set(metrics) == {"schema", "discriminator", "fused"}
    for source, m in metrics.items():
        hits = con.execute("SELECT count(*) FROM edges p JOIN edges g USING (dataset, dependent, prerequisite) "
                           "WHERE p.source = ? AND g.source = 'manual'", [source]).fetchone()[0]
        assert m["true_positives"] == hits and m["recall"] == pytest.approx(hits / 3)
        assert m["recall_by_gold_kind"]["unlabelled"] == {"gold": 3, "found": hits, "recall": pytest.approx(hits / 3)}
        assert m["recall_by_gold_kind"]["data"]["gold"] == m["recall_by_gold_kind"]["precondition"]["gold"] == 0
    con.close()

    result = eval_retrieval(EvalConfig(warehouse=str(target), out_dir=str(tmp_path / "eval")))
    methods = {r["method"] for r in result["rows"]}
    graphs = ("embedding+TGR-d", "embedding+TGR-m", "embedding+TGR-s", "embedding+TGR-f")
    assert methods == {"BM25", "TF-IDF", "embedding", *graphs, *(f"{m}(cv)" for m in graphs),  # cv: fused, w by CV
                       "L3", "L3+TGR-d", "L3+TGR-m"}  # L3: the paper's encoder, always ranked
    assert all(v == 1.0 for v in result["sql_agreement"]["toy"].values())
    # 5 tools and k = 10: every method finds every gold tool.
    assert all(r["recall"] == 1.0 and r["pass_rate"] == 1.0 for r in result["rows"] if r["k"] == 10)
    assert (tmp_path / "eval" / "retrieval.png").stat().st_size > 0
    assert "| embedding+TGR-m |" in (tmp_path / "eval" / "retrieval.md").read_text()
    stored = connect(target).execute("SELECT count(*) FROM retrieval_metrics").fetchone()[0]
    assert stored == len(result["rows"]) == 28


def test_paper_encoder_rows_equal_a_warehouse_built_with_that_encoder(tmp_path, prefect_harness):
    """``L3`` / ``L3+TGR-m`` score exactly as ``embedding`` / ``embedding+TGR-m`` of a warehouse whose own
    encoder is paraphrase-MiniLM-L3-v2 (the same texts, encoder and Eq. 3, computed at eval time), and
    not as the warehouse's own encoder does."""
    from flows.build_graph import GraphConfig, build_graph
    from flows.eval_retrieval import PAPER_ENCODER, paper_encoder_rankings, paper_encoder_scores, rank_all
    from tasks.retrieval.inputs import load_inputs
    from tasks.retrieval.ranking import cosine_scores
    from tasks.toolsets.readers import write_toolset_dir

    folder = write_toolset_dir(TOYSET, tmp_path / "toy")
    built = {}
    for encoder in ("offline-minilm", PAPER_ENCODER):
        target = tmp_path / encoder / "tgr.duckdb"
        build_graph(GraphConfig(toolsets=[str(folder)], warehouse=str(target), discriminator=None, encoder=encoder,
                                progress=False))
        built[encoder] = target
    default, own = load_inputs.fn(str(built["offline-minilm"]), "toy"), load_inputs.fn(str(built[PAPER_ENCODER]), "toy")
    scores = paper_encoder_scores(str(built["offline-minilm"]), default, PAPER_ENCODER)
    assert set(scores) == {"L3", "L3+TGR-m"}  # no discriminator edges in this warehouse: no L3+TGR-d
    for method, kind in (("L3", "base"), ("L3+TGR-m", "tgr_manual")):
        np.testing.assert_allclose(scores[method], cosine_scores(own.query_embeddings, own.embeddings[kind]), atol=1e-5)
        assert not np.allclose(scores[method], cosine_scores(default.query_embeddings, default.embeddings[kind]), atol=1e-3)
    ranked = paper_encoder_rankings.fn(str(built["offline-minilm"]), default, PAPER_ENCODER, 5)
    mine = rank_all.fn(own, 5)
    assert ranked["L3"] == mine["embedding"] and ranked["L3+TGR-m"] == mine["embedding+TGR-m"]


def test_build_graph_without_calibration_falls_back_to_argmax(tiny_checkpoint, tmp_path, prefect_harness):
    from flows.build_graph import GraphConfig, build_graph
    from tasks.toolsets.readers import write_toolset_dir
    from warehouse.build import connect

    folder = write_toolset_dir(TOYSET, tmp_path / "toy")
    target = tmp_path / "tgr.duckdb"
    out = build_graph(GraphConfig(toolsets=[str(folder)], warehouse=str(target), discriminator=str(tiny_checkpoint),
                                  pruning="params", both_orders=False, progress=False, schema_edges=False))
    assert out["datasets"]["toy"]["edge_decision"]["rule"] == "argmax"
    con = connect(target)
    assert con.execute("SELECT decision_rule, threshold, both_orders FROM edge_calibration").fetchall() == [
        ("argmax", None, False)]
    assert con.execute("SELECT count(*) FROM edges WHERE source IN ('schema', 'fused')").fetchone()[0] == 0
    # argmax: an edge exactly where the stored class probabilities have a dependency argmax
    n_argmax = con.execute("SELECT count(*) FROM scored_pairs WHERE greatest(p_a_depends_on_b, p_b_depends_on_a) "
                           "> p_no_dependency").fetchone()[0]
    assert con.execute("SELECT count(*) FROM edges WHERE source = 'discriminator'").fetchone()[0] == n_argmax


def test_build_graph_caps_each_tools_prerequisites_and_records_the_cap(tiny_checkpoint, tmp_path, prefect_harness):
    """With a cut of 0 every scored pair of the one group is an edge; ``max_prerequisites=1`` leaves each dependent
    its most probable prerequisite among them, and the lineage says the cap was on."""
    from flows.build_graph import GraphConfig, build_graph
    from tasks.toolsets.readers import write_toolset_dir
    from warehouse.build import connect

    one_group = ToolSet("toy", [Tool(t.tool_id, "all", t.doc) for t in TOOLS], [], TOYSET.queries)
    folder = write_toolset_dir(one_group, tmp_path / "toy")
    counts = {}
    for cap in (None, 1):
        target = tmp_path / f"tgr-{cap}.duckdb"
        build_graph(GraphConfig(toolsets=[str(folder)], warehouse=str(target), discriminator=str(tiny_checkpoint),
                                pruning="params+text", threshold=0.0, max_prerequisites=cap, progress=False,
                                schema_edges=False))
        con = connect(target)
        per_dependent = con.execute("SELECT dependent, count(*), max(prob) FROM edges WHERE source = 'discriminator' "
                                    "GROUP BY dependent ORDER BY dependent").fetchall()
        counts[cap] = per_dependent
        params = json.loads(con.execute("SELECT params_json FROM edge_lineage WHERE source = 'discriminator'").fetchone()[0])
        assert params["max_prerequisites"] == cap
    assert max(n for _, n, _ in counts[None]) > 1  # the uncapped graph gives some tool several prerequisites
    assert [(d, 1, p) for d, _, p in counts[None]] == counts[1]  # one each, the most probable, no tool lost


def test_build_graph_labels_discriminator_edges_with_the_kind_head_and_keeps_a_data_graph(tiny_checkpoint, tmp_path,
                                                                                         prefect_harness):
    from flows.build_graph import GraphConfig, build_graph
    from models.discriminator import load_model, load_tokenizer
    from tasks.toolsets.readers import write_toolset_dir
    from warehouse.build import connect

    headed = tmp_path / "headed"  # widened: every dependency at p(precondition) 0.5
    load_model(str(tiny_checkpoint), kind_head=True).save_pretrained(headed)
    load_tokenizer(str(tiny_checkpoint)).save_pretrained(headed)
    folder = write_toolset_dir(TOYSET, tmp_path / "toy")
    for kind_cut, kind in ((0.4, "precondition"), (0.6, "data")):
        (headed / "calibration.json").write_text(json.dumps({"threshold": 0.0, "criterion": "max_f1", "both_orders": False,
                                                             "kind_threshold": kind_cut}))
        target = tmp_path / f"tgr-{kind}.duckdb"
        build_graph(GraphConfig(toolsets=[str(folder)], warehouse=str(target), discriminator=str(headed),
                                pruning="params", both_orders=False, progress=False, schema_edges=False))
        con = connect(target)
        n_pairs = con.execute("SELECT count(*) FROM scored_pairs").fetchone()[0]
        assert n_pairs > 0
        # threshold 0: every scored pair is an edge, each of the kind the head's cut gives
        assert con.execute("SELECT kind, count(*) FROM edges WHERE source = 'discriminator' GROUP BY kind").fetchall() == [
            (kind, n_pairs)]
        embedding_kinds = {k for (k,) in con.execute("SELECT DISTINCT kind FROM tool_embeddings").fetchall()}
        # a data-only graph only where the head called some edge a precondition
        assert ("tgr_discriminator_data" in embedding_kinds) == (kind == "precondition")
        params = json.loads(con.execute("SELECT params_json FROM edge_lineage WHERE source = 'discriminator'").fetchone()[0])
        assert params["kind_threshold"] == kind_cut
        con.close()


def test_build_graph_records_retrieval_recall_and_share_of_pairs(tmp_path, prefect_harness, monkeypatch):
    """--pruning params+retrieval: the rule runs in the flow; recall and the share of ordered pairs kept
    reach the summary, the warehouse (candidate_pruning) and the log."""
    from flows.build_graph import GraphConfig, build_graph
    from tasks.graph.candidates import retrieval_candidates
    from tasks.toolsets.readers import write_toolset_dir
    from warehouse.build import connect, rows_of

    toyset = ToolSet("meaning", MEANING_TOOLS, [MEANING_EDGE])
    folder = write_toolset_dir(toyset, tmp_path / "meaning")
    target = tmp_path / "tgr.duckdb"
    import flows.build_graph as flow_module

    logged = []  # what the build log says (Prefect's run logger is not reachable from caplog)
    monkeypatch.setattr(flow_module, "log_pruning", lambda name, pruning, logger: logged.append(pruning.describe()))
    out = build_graph(GraphConfig(toolsets=[str(folder)], warehouse=str(target), discriminator=None,
                                  pruning="params+retrieval", retrieval_k=1, progress=False, transitions=False))
    from models.sentence_encoder import SentenceEncoder

    expected = prune_candidates(MEANING_TOOLS, strategy="params+retrieval", known_edges=[MEANING_EDGE],
                                retrieved=retrieval_candidates(MEANING_TOOLS, SentenceEncoder().encode, 1))
    summary = out["datasets"]["meaning"]["pruning"]
    assert summary == expected.as_row("meaning") and summary["known_edge_recall"] == 1.0
    assert 0 < summary["ordered_share_kept"] < 1 and summary["ordered_pairs_in_groups"] == 20
    stored = rows_of(connect(target), "SELECT strategy, known_edge_recall, ordered_pairs_kept, ordered_share_kept "
                                      "FROM candidate_pruning")
    assert stored == [{k: summary[k] for k in ("strategy", "known_edge_recall", "ordered_pairs_kept",
                                               "ordered_share_kept")}]
    assert logged == [expected.describe()] and "gold-edge recall 1.000" in logged[0]
    assert f"ordered pairs {summary['ordered_pairs_kept']} of 20 ({summary['ordered_share_kept']:.3f})" in logged[0]


def test_parse_args_flags(tmp_path):
    from flows.build_graph import parse_args

    cfg = parse_args(["--toolset", "apibank,tmdb", "--toolset", " ultratool", "--no-discriminator", "--single-order",
                      "--threshold", "0.3", "--no-schema-edges", "--pruning", "text+neighbours", "--no-progress",
                      "--no-transitions", "--max-producers", "0", "--trajectories", "tmdb=runs,1.jsonl",
                      "--trajectories", "more.jsonl", "--split", "0.5,0.25,0.25"])
    assert (cfg.toolsets, cfg.discriminator, cfg.both_orders, cfg.threshold, cfg.schema_edges, cfg.pruning) == (
        ("apibank", "tmdb", "ultratool"), None, False, 0.3, False, "text+neighbours")
    assert (cfg.progress, cfg.transitions, cfg.max_producers, cfg.trajectories, cfg.split_fractions) == (
        False, False, None, ("tmdb=runs,1.jsonl", "more.jsonl"), (0.5, 0.25, 0.25))  # a file name keeps its comma
    assert parse_args(["--toolset", "x", "--no-discriminator"]).pruning == DEFAULT_PRUNING
    assert parse_args(["--toolset", "x", "--no-discriminator"]).scoring_precision == "auto"  # onnx on a CPU
    assert parse_args(["--toolset", "x", "--no-discriminator", "--scoring-precision", "int8"]).scoring_precision == "int8"
    for bad in (["--pruning", "magic"], ["--threshold", "2"], ["--beta", "1.5"], ["--split", "0.5,0.5"],
                ["--scoring-precision", "fp16"]):
        with pytest.raises(SystemExit):
            parse_args(["--toolset", "x", "--no-discriminator", *bad])
    for bad in ([], ["--discriminator", str(tmp_path), "--no-discriminator"], ["--discriminator", str(tmp_path)]):
        with pytest.raises(SystemExit):  # one of the two, and a checkpoint with a config.json
            parse_args(["--toolset", "x", *bad])
    with pytest.raises(SystemExit):
        parse_args(["--no-discriminator"])  # --toolset is required


@pytest.mark.parametrize("bad, message", [
    ({"beta": 1.5}, "--beta 1.5: must lie in [0, 1]"), ({"alpha": -1.0}, "--alpha -1.0: must not be negative"),
    ({"threshold": 2.0}, "--threshold 2.0"), ({"min_prob": -0.1}, "--min-prob -0.1"),
    ({"split_fractions": (0.5, 0.5, 0.5)}, "--split 0.5,0.5,0.5"), ({"split_fractions": (0.5, 0.5)}, "--split 0.5,0.5"),
    ({"evaluator_concurrency": 0}, "--evaluator-concurrency 0"), ({"batch_size": 0}, "--batch-size 0"),
    ({"neighbours": 0}, "--neighbours 0"), ({"retrieval_k": 0}, "--retrieval-k 0"), ({"max_length": 0}, "--max-length 0"), ({"max_producers": 0}, "--max-producers 0"),
    ({"check_partners": -1}, "--check-partners -1: must be at least 0"),
    ({"max_prerequisites": 0}, "--max-prerequisites 0: must be at least 1"),
    ({"pruning": "magic"}, "unknown pruning strategy 'magic'"), ({"gcn_direction": "up"}, "--gcn-direction 'up'"),
    ({"embed_style": "x"}, "--embed-style 'x'"), ({"rule_score": 4}, "--rule-score 4"), ({"betas": (1.0,)}, "below 1"),
    ({"alphas": ()}, "--alphas"), ({"toolsets": ()}, "--toolset"), ({"evaluator": "gpt"}, "rule, llm"),
    ({"scoring_precision": "fp16"}, "--scoring-precision 'fp16': one of auto, fp32, bf16, int8, onnx"),
    ({"param_threshold": 0.5}, "--param-threshold: only with --param-discriminator"),
    ({"param_discriminator": "no/such/param/best"}, "--param-discriminator no/such/param/best: no config.json there"),
])
def test_graph_config_refuses_a_bad_value_without_the_command_line(bad, message):
    """The checks live in GraphConfig: a Python call and a Prefect deployment run are refused as the CLI is."""
    from pydantic import TypeAdapter

    from flows.build_graph import GraphConfig

    with pytest.raises(ValueError, match=re.escape(message)):
        GraphConfig(**bad)
    with pytest.raises(ValueError):  # what Prefect builds from a deployment's parameters (pydantic may refuse first)
        TypeAdapter(GraphConfig).validate_python(bad)


def test_graph_config_refuses_a_discriminator_folder_without_config_json(tmp_path):
    from flows.build_graph import GraphConfig

    with pytest.raises(ValueError, match="no config.json there"):
        GraphConfig(discriminator=str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert GraphConfig(discriminator=str(tmp_path)).discriminator == str(tmp_path)


@pytest.mark.slow
def test_build_graph_on_real_apibank_manual_edges(shared_data, tmp_path, prefect_harness):
    from flows.build_graph import GraphConfig, build_graph
    from warehouse.build import connect

    target = tmp_path / "tgr.duckdb"
    out = build_graph(GraphConfig(toolsets=["apibank"], warehouse=str(target), data_root=str(shared_data / "benchmarks")))
    con = connect(target)
    # 71 tools, 311 queries; 27 gold edges in the file, 1 crosses groups and is rejected by the importer.
    assert con.execute("SELECT count(*) FROM tools").fetchone()[0] == 71
    assert con.execute("SELECT count(*) FROM queries").fetchone()[0] == 311
    assert con.execute("SELECT count(*) FROM edges WHERE source = 'manual'").fetchone()[0] == 26
    # The default pruning (params+text+neighbours+retrieval) keeps every gold edge.
    pruning = out["datasets"]["apibank"]["pruning"]
    assert pruning["known_edges_in_groups"] == 26 and pruning["known_edges_kept"] == 26
    assert pruning["known_edge_recall"] == 1.0 and pruning["strategy"] == "params+text+neighbours+retrieval"
    # Schema edges: GetUserToken's output token feeds AddAgenda's input token.
    matched = con.execute("SELECT matched_params FROM edges WHERE source = 'schema' AND dependent = 'AddAgenda' "
                          "AND prerequisite = 'GetUserToken'").fetchone()
    assert matched == (["token"],)
    assert pruning["pairs_kept"] < pruning["pairs_in_groups"]
    style = con.execute("SELECT embed_style FROM datasets").fetchone()[0]
    assert style == "description"  # API-Bank is embedded from descriptions, as in the paper
    prereq = con.execute("SELECT list(prerequisite) FROM prerequisites_of('apibank', 'manual', 'AddAgenda')")
    assert prereq.fetchone()[0] == ["GetUserToken"]
    # API-Bank's gold edges are data flow (values reused), and so are the schema edges; the call order of the
    # training dialogues gives precondition edges (issue 22)
    n_schema, order = out["datasets"]["apibank"]["schema_edges"], out["datasets"]["apibank"]["call_order"]
    assert order["edges"] == order["accepted"] > 0 and order["generic_first_steps"].keys() == {"ToolSearcher"}
    assert con.execute("SELECT source, kind, count(*) FROM edges WHERE source <> 'transition' "
                       "GROUP BY ALL ORDER BY ALL").fetchall() == [
        ("call_order", "precondition", order["edges"]), ("manual", "data", 26), ("schema", "data", n_schema)]
    assert con.execute("SELECT DISTINCT kind FROM edges WHERE source = 'transition'").fetchall() == [(None,)]  # call order
    assert con.execute("SELECT list(prerequisite) FROM prerequisites_of('apibank', 'manual', 'AddAgenda', "
                       "kind := 'data')").fetchone()[0] == ["GetUserToken"]
    # the schema edges against the gold ones, recounted in SQL: every gold edge is a data edge
    metrics = out["datasets"]["apibank"]["edge_metrics"]
    assert set(metrics) == {"schema", "call_order"}  # no discriminator: no discriminator or fused edges to measure
    hits = con.execute("SELECT count(*) FROM edges s JOIN edges g USING (dataset, dependent, prerequisite) "
                       "WHERE s.source = 'schema' AND g.source = 'manual'").fetchone()[0]
    assert metrics["schema"]["true_positives"] == hits > 0
    assert metrics["schema"]["recall_by_gold_kind"] == {
        "data": {"gold": 26, "found": hits, "recall": hits / 26},
        "precondition": {"gold": 0, "found": 0, "recall": None}, "unlabelled": {"gold": 0, "found": 0, "recall": None}}


def test_same_ranking_accepts_only_tie_swaps():
    from flows.eval_retrieval import same_ranking

    scores = {"a": 0.9, "b": 0.5, "c": 0.5, "d": 0.1}
    assert same_ranking(["a", "c", "b"], scores, [0.9, 0.5, 0.5])  # b and c tie
    assert not same_ranking(["a", "d", "b"], scores, [0.9, 0.5, 0.5])
    assert not same_ranking(["a", "b"], scores, [0.9, 0.5, 0.5])


# ---------------------------------------------------------------------------------------------
# Parameter-level edges (warehouse table parameter_edges, macro producers_of)


def test_schema_parameter_edges_name_the_real_parameters():
    from schemas.toolset import ParameterEdge
    from tasks.graph.schema_rule import schema_parameter_edges

    found = schema_parameter_edges(TOOLS, schema_edges(TOOLS))
    # the rule matched the normalised "usertoken": back to UpdateEmail's user_token and Login's userToken
    assert sorted(found, key=lambda e: e.dependent) == [
        ParameterEdge("clothes", "weather", "temperature", "temperature", "schema"),
        ParameterEdge("delete_account", "login", "user_token", "userToken", "schema"),
        ParameterEdge("update_email", "login", "user_token", "userToken", "schema")]
    # a producer without declared outputs matched through its name: the input is known, the output is not
    tools = [Tool("token", "g", doc("GetUserToken", ["user"])), Tool("edit", "g", doc("EditProfile", ["UserToken", "bio"]))]
    assert schema_parameter_edges(tools, schema_edges(tools)) == [ParameterEdge("edit", "token", "UserToken", None, "schema")]


def test_parameter_edges_rows_leave_every_other_table_as_it_was():
    from datetime import datetime

    from schemas.toolset import ParameterEdge
    from tasks.graph.edges import dataset_tables

    def tables(toolset):
        emb = {"base": np.eye(len(TOOLS), 4, dtype=np.float32)}
        return dataset_tables(toolset, "structured", ["t"] * len(TOOLS), "enc", None, emb,
                              np.zeros((2, 4), dtype=np.float32), None, [], np.zeros((0, 3)), [],
                              datetime(2024, 1, 1), schema_edges(TOOLS)).rows

    gold = (ParameterEdge("update_email", "login", "user_token", "userToken"),
            ParameterEdge("clothes", "weather", "temperature"))
    plain = tables(TOYSET)
    with_params = tables(ToolSet("toy", TOOLS, EDGES, TOYSET.queries, parameter_edges=gold))
    assert {t: r for t, r in with_params.items() if t != "parameter_edges"} == {
        t: r for t, r in plain.items() if t != "parameter_edges"}
    rows = {(r["source"], r["dependent"], r["consumer_param"], r["producer_output"], r["probability"])
            for r in with_params["parameter_edges"]}
    assert rows - {(r["source"], r["dependent"], r["consumer_param"], r["producer_output"], r["probability"])
                   for r in plain["parameter_edges"]} == {
        ("manual", "update_email", "user_token", "userToken", 1.0), ("manual", "clothes", "temperature", None, 1.0)}
    assert {r["source"] for r in plain["parameter_edges"]} == {"schema"}


def test_readme_producers_of_example_gives_its_answer_on_a_nestools_domain(shared_data, tmp_path, prefect_harness):
    """The README's producers_of block, run verbatim on a warehouse that build-graph made from one NesTools
    domain (the whole of the tool's group, so the name rule sees what it sees on the full set); its answer
    is the comment under the query."""
    from flows.build_graph import GraphConfig, build_graph
    from tasks.toolsets.readers import load_benchmark, write_toolset_dir
    from tests.conftest import REPO_ROOT
    from warehouse.build import connect

    readme = (REPO_ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```sql\n(.*?)```", readme, re.S) if "producers_of(" in b)
    lines = block.splitlines()
    sql = "\n".join(l for l in lines if not l.startswith("--"))
    expected = [tuple(cell.strip() for cell in l[3:].split("|")) for l in lines if l.startswith("-- ") and "|" in l]
    dataset, tool = re.search(r"producers_of\('([^']+)', '([^']+)'", sql).groups()

    full = load_benchmark(dataset, shared_data / "benchmarks")
    group = next(t.group for t in full.tools if t.tool_id == tool)
    ids = {t.tool_id for t in full.tools if t.group == group}
    domain = ToolSet(dataset, [t for t in full.tools if t.group == group], [e for e in full.edges if e.group == group],
                     [q for q in full.queries if set(q.gold_tools) <= ids],
                     parameter_edges=tuple(e for e in full.parameter_edges if e.dependent in ids))
    folder = write_toolset_dir(domain, tmp_path / dataset)
    target = tmp_path / "wh" / "tgr.duckdb"
    build_graph(GraphConfig(toolsets=[str(folder)], warehouse=str(target), discriminator=None, progress=False))
    con = connect(target)
    assert [tuple(str(v) for v in row) for row in con.execute(sql).fetchall()] == expected
    assert len(expected) >= 2
    n_manual = con.execute("SELECT count(*) FROM parameter_edges WHERE source = 'manual'").fetchone()[0]
    assert n_manual == len(domain.parameter_edges) > 0
    lineage = dict(con.execute("SELECT source, input_files FROM edge_lineage").fetchall())
    assert set(lineage) == {"manual", "schema"} and str(folder / "param_edges.jsonl") in lineage["manual"]


@pytest.mark.slow
def test_scoring_on_a_local_dask_cluster_gives_the_same_edges_as_in_process(tiny_checkpoint, tmp_path, prefect_harness):
    from flows.build_graph import GraphConfig, build_graph
    from tasks.toolsets.readers import write_toolset_dir
    from warehouse.build import connect

    folder = write_toolset_dir(TOYSET, tmp_path / "toy")
    rows = {}
    for runner in ("local", "dask"):
        target = tmp_path / f"{runner}.duckdb"
        build_graph(GraphConfig(toolsets=[str(folder)], warehouse=str(target), discriminator=str(tiny_checkpoint),
                                pruning="params+text", progress=False, schema_edges=False, scoring_runner=runner,
                                scoring_workers=2))
        con = connect(target)
        rows[runner] = (con.execute("SELECT tool_a, tool_b, p_a_depends_on_b, p_no_dependency, p_b_depends_on_a "
                                    "FROM scored_pairs ORDER BY ALL").fetchall(),
                        con.execute("SELECT dependent, prerequisite FROM edges WHERE source = 'discriminator' "
                                    "ORDER BY ALL").fetchall())
        con.close()
    (local_pairs, local_edges), (dask_pairs, dask_edges) = rows["local"], rows["dask"]
    assert len(local_pairs) == len(dask_pairs) > 2  # more pairs than one shard
    assert [r[:2] for r in local_pairs] == [r[:2] for r in dask_pairs]
    np.testing.assert_allclose([r[2:] for r in local_pairs], [r[2:] for r in dask_pairs], atol=1e-5)
    assert local_edges == dask_edges


def test_the_scoring_runner_is_checked():
    from flows.build_graph import GraphConfig

    with pytest.raises(ValueError, match="--scoring-runner 'spark'"):
        GraphConfig(scoring_runner="spark")
    with pytest.raises(ValueError, match="--scoring-workers 0"):
        GraphConfig(scoring_workers=0)
    assert GraphConfig(scoring_runner="dask", dask_address="").dask_address is None
