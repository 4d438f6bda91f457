"""Candidate pruning, pair scoring with a tiny random discriminator checkpoint, and the
build-graph / eval-retrieval flows end to end on a small tool set and on real API-Bank."""
from __future__ import annotations

import os
import numpy as np
import pytest

from schemas.tdi import ID2LABEL, LABEL2ID
from schemas.toolset import DependencyEdge, Query, Tool, ToolSet
from tasks.graph_edges import (
    check_label_order,
    edges_from_probabilities,
    normalise_param_name,
    param_compatible,
    prune_candidates,
    same_group_pairs,
    score_pairs,
)

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
    assert normalise_param_name("userToken") == normalise_param_name("user_token") == "usertoken"
    assert param_compatible(TOOLS[0], TOOLS[1])  # Login.userToken -> UpdateEmail.user_token
    assert param_compatible(TOOLS[4], TOOLS[3])  # either direction
    assert not param_compatible(TOOLS[1], TOOLS[2])  # they only share the generic output "status"


def test_pruning_counts_pairs_and_known_edges():
    assert same_group_pairs(TOOLS) == [(0, 1), (0, 2), (1, 2), (3, 4)]
    params = prune_candidates(TOOLS, strategy="params", known_edges=EDGES)
    assert params.candidates == [(0, 1), (0, 2), (3, 4)]
    assert (params.pairs_in_groups, params.pairs_removed) == (4, 1)
    assert (params.known_edges, params.known_edges_in_groups, params.known_edges_kept) == (3, 3, 3)
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


def test_edges_from_probabilities_by_hand():
    pairs = [(0, 1), (0, 2), (3, 4)]
    probs = np.array([[0.1, 0.2, 0.7],   # class 2 on <login, update_email>: update_email depends on login
                      [0.5, 0.3, 0.2],   # class 0: login depends on delete_account (prob 0.5)
                      [0.2, 0.6, 0.2]])  # no dependency
    edges = edges_from_probabilities(TOOLS, pairs, probs)
    assert [(e.dependent, e.prerequisite, p, c) for e, p, c in edges] == [
        ("update_email", "login", 0.7, 2), ("login", "delete_account", 0.5, 0)]
    assert [e.dependent for e, _, _ in edges_from_probabilities(TOOLS, pairs, probs, min_prob=0.6)] == ["update_email"]


def test_score_pairs_with_a_tiny_checkpoint(tiny_checkpoint):
    pairs = [(0, 1), (0, 2), (3, 4)]
    probs = score_pairs(tiny_checkpoint, TOOLS, pairs, batch_size=2)
    assert probs.shape == (3, 3)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    # Averaging with the swapped order makes the scores order-free: <b,a> is <a,b> label-swapped.
    ab = score_pairs(tiny_checkpoint, TOOLS, pairs, both_orders=True)
    ba = score_pairs(tiny_checkpoint, TOOLS, [(j, i) for i, j in pairs], both_orders=True)
    np.testing.assert_allclose(ab, ba[:, [2, 1, 0]], atol=1e-6)
    assert score_pairs(tiny_checkpoint, TOOLS, []).shape == (0, 3)
    with pytest.raises(ValueError, match="id2label"):
        check_label_order({0: "no_dependency", 1: "a_depends_on_b", 2: "b_depends_on_a"}, "ckpt")


def test_build_and_eval_flows_end_to_end(tiny_checkpoint, tmp_path, prefect_harness):
    from flows.build_graph import GraphConfig, build_graph
    from flows.eval_retrieval import EvalConfig, eval_retrieval
    from tasks.toolsets import write_toolset_dir
    from warehouse.build import connect

    folder = write_toolset_dir(TOYSET, tmp_path / "toy")
    target = tmp_path / "wh" / "tgr.duckdb"
    cfg = GraphConfig(toolsets=[str(folder)], warehouse=str(target), discriminator=str(tiny_checkpoint),
                      pruning="none", batch_size=4)
    out = build_graph(cfg)
    summary = out["datasets"]["toy"]
    assert summary["scored_pairs"] == 4 and summary["manual_edges"] == 3
    con = connect(target)
    kinds = {k for (k,) in con.execute("SELECT DISTINCT kind FROM tool_embeddings").fetchall()}
    assert kinds == {"base", "tgr_manual", "tgr_discriminator"}
    n_disc = con.execute("SELECT count(*) FROM edges WHERE source = 'discriminator'").fetchone()[0]
    assert n_disc == summary["discriminator_edges"]
    # Every scored pair whose argmax is a dependency class became exactly one discriminator edge.
    assert n_disc == con.execute("SELECT count(*) FROM scored_pairs WHERE predicted_class <> 1").fetchone()[0]
    con.close()

    result = eval_retrieval(EvalConfig(warehouse=str(target), out_dir=str(tmp_path / "eval")))
    methods = {r["method"] for r in result["rows"]}
    assert methods == {"BM25", "TF-IDF", "embedding", "embedding+TGR-d", "embedding+TGR-m"}
    assert all(v == 1.0 for v in result["sql_agreement"]["toy"].values())
    # 5 tools and k = 10: every method finds every gold tool.
    assert all(r["recall"] == 1.0 and r["pass_rate"] == 1.0 for r in result["rows"] if r["k"] == 10)
    assert (tmp_path / "eval" / "retrieval.png").stat().st_size > 0
    assert "| embedding+TGR-m |" in (tmp_path / "eval" / "retrieval.md").read_text()
    stored = connect(target).execute("SELECT count(*) FROM retrieval_metrics").fetchone()[0]
    assert stored == len(result["rows"]) == 10


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
    # The GetUserToken -> token edges are parameter-compatible, so no pruning loses them.
    pruning = out["datasets"]["apibank"]["pruning"]
    assert pruning["known_edges_in_groups"] == 26 and pruning["known_edges_kept"] == 26
    assert pruning["pairs_kept"] < pruning["pairs_in_groups"]
    style = con.execute("SELECT embed_style FROM datasets").fetchone()[0]
    assert style == "description"  # API-Bank is embedded from descriptions, as in the paper
    prereq = con.execute("SELECT list(prerequisite) FROM prerequisites_of('apibank', 'manual', 'AddAgenda')")
    assert prereq.fetchone()[0] == ["GetUserToken"]


def test_same_ranking_accepts_only_tie_swaps():
    from flows.eval_retrieval import same_ranking

    scores = {"a": 0.9, "b": 0.5, "c": 0.5, "d": 0.1}
    assert same_ranking(["a", "c", "b"], scores, [0.9, 0.5, 0.5])  # b and c tie
    assert not same_ranking(["a", "d", "b"], scores, [0.9, 0.5, 0.5])
    assert not same_ranking(["a", "b"], scores, [0.9, 0.5, 0.5])
