"""Call-order precondition edges in the graph (issue 22): made from the training runs only, stored with source
'call_order' and kind 'precondition', a TGR embedding over a data graph plus them, scored by eval-retrieval on
the test queries only."""
from __future__ import annotations

import json

import numpy as np
import pytest

from schemas.toolset import DependencyEdge, Query, Tool, ToolSet
from tasks.graph.call_order_edges import call_order_edges, with_call_order
from tasks.toolsets.call_order import ACCEPTED, DATA_EDGE, REASONS
from tasks.toolsets.trajectories import Trajectory, split_of
from tests.test_graph_flow import TOOLS, doc

# tools whose names share nothing: no name rule fires between them, only the call order can join them
ORDER_TOOLS = [
    Tool("verify_identity", "support", doc("VerifyIdentity", ["username"], ["verified"], "Check who the caller is.")),
    Tool("close_account", "support", doc("CloseAccount", ["reason"], ["status"], "Close an account for good.")),
    Tool("open_ticket", "support", doc("OpenTicket", ["subject"], ["ticket_id"], "Open a support ticket.")),
    Tool("escalate", "support", doc("Escalate", ["priority"], ["outcome"], "Hand a case to a manager.")),
    Tool("audit_log", "support", doc("AuditLog", ["entry"], ["logged"], "Write an entry to the audit log.")),
    Tool("notify_team", "support", doc("NotifyTeam", ["message"], ["sent"], "Send a message to the team.")),
]


def run(run_id: str, tools: list[str]) -> Trajectory:
    return Trajectory(run_id, tuple(tools), "runs.jsonl", 1, "user")


def test_edges_come_from_the_training_runs_only_and_every_pair_ends_with_one_reason():
    runs = ([run(f"t{n}", ["verify_identity", "close_account"]) for n in range(3)]
            + [run(f"x{n}", ["open_ticket", "escalate"]) for n in range(3)]  # test runs only
            + [run(f"v{n}", ["open_ticket", "escalate"]) for n in range(2)]  # validation runs only
            + [run(f"a{n}", ["audit_log", "notify_team"]) for n in range(3)])
    splits = {r.key: "test" if r.run_id.startswith("x") else "validation" if r.run_id.startswith("v") else "train"
              for r in runs}
    # the gold edges of the tool set play no part: the graph it joins is a predicted one
    gold = [DependencyEdge("support", "close_account", "verify_identity", kind="data")]
    toolset = ToolSet("s", ORDER_TOOLS, gold)
    data = [DependencyEdge("support", "notify_team", "audit_log", "schema", "data")]  # this build's data edge
    made = call_order_edges(toolset, runs, splits, data, 2, 0.9, 0.5, 5)
    assert [(e.edge.dependent, e.edge.prerequisite, e.edge.kind, e.edge.source, e.edge.group) for e in made.edges] == [
        ("close_account", "verify_identity", "precondition", "call_order", "support")]
    assert made.edges[0].prob == 1.0 and made.edges[0].candidate.support == 3
    counts = made.counts()
    assert counts["train_runs"] == 6 and counts["runs_not_train"] == 5
    # ordered pairs of the training runs: 2 per joined pair; nothing of the test / validation runs
    decided = {(d.order.a, d.order.b): d.reason for d in made.report.decisions}
    assert not {("open_ticket", "escalate"), ("escalate", "open_ticket")} & set(decided)
    assert decided[("audit_log", "notify_team")] == DATA_EDGE
    assert counts["pairs"] == 4 == counts["accepted"] + sum(counts["rejected"].values())
    assert set(counts["rejected"]) == set(REASONS)
    # the same runs all in train: the test pair would be an edge, so the split (not the rule) dropped it
    everything = call_order_edges(toolset, runs, {r.key: "train" for r in runs}, data, 2, 0.9, 0.5, 5)
    assert {(e.edge.prerequisite, e.edge.dependent) for e in everything.edges} == {
        ("verify_identity", "close_account"), ("open_ticket", "escalate")}
    assert [e.dependent for e in with_call_order(data, made.edges)] == ["notify_team", "close_account"]


def test_thresholds_reach_the_rule():
    runs = [run(f"t{n}", ["verify_identity", "close_account"]) for n in range(2)]
    splits = {r.key: "train" for r in runs}
    toolset = ToolSet("s", ORDER_TOOLS)
    assert len(call_order_edges(toolset, runs, splits, [], 2, 0.9, 0.5, 5).edges) == 1
    stricter = call_order_edges(toolset, runs, splits, [], 3, 0.9, 0.5, 5)
    assert stricter.edges == [] and stricter.counts()["rejected"]["low support"] == 2


def write_set(folder, splits_wanted: dict[str, list[str]]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """A tool set folder (TOOLS with their schema edges, ORDER_TOOLS) whose queries.jsonl carries gold call
    orders: by the seeded split of each query (the split build-graph will give it), train and validation
    queries call verify_identity then close_account, test queries open_ticket then escalate."""
    from tasks.toolsets.readers import write_toolset_dir

    queries, split, order = [], {}, {}
    for n in range(60):
        qid = f"q{n:02d}"
        split[qid] = split_of(Trajectory(qid, (), "queries.jsonl", 0, "gold", True, qid), 0)
        order[qid] = splits_wanted[split[qid]]
        queries.append(Query(qid, f"please help with case {n}", tuple(order[qid])))
    write_toolset_dir(ToolSet("orders", TOOLS + ORDER_TOOLS, [], queries), folder)
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"query_id": q.query_id, "text": q.text, "gold_tools": list(q.gold_tools),
                    "gold_nodes_in_order": order[q.query_id]}) + "\n" for q in queries), encoding="utf-8")
    return split, order


@pytest.mark.slow
def test_build_graph_writes_train_only_precondition_edges_and_eval_scores_them_on_test_queries(tmp_path,
                                                                                               prefect_harness):
    from flows.build_graph import build_graph, parse_args
    from flows.eval_retrieval import EvalConfig, eval_retrieval
    from tasks.retrieval.gcn import gcn_propagate
    from warehouse.build import connect, rows_of

    folder = tmp_path / "orders"
    first, later = ["verify_identity", "close_account"], ["open_ticket", "escalate"]
    split, _ = write_set(folder, {"train": first, "validation": first, "test": later})
    n_test = sum(s == "test" for s in split.values())
    assert n_test >= 2 and sum(s == "train" for s in split.values()) >= 2  # the seeded split gives both
    target = tmp_path / "wh" / "tgr.duckdb"
    out = build_graph(parse_args(["--toolset", str(folder), "--warehouse", str(target), "--no-discriminator"]))
    summary = out["datasets"]["orders"]["call_order"]
    assert summary["edges"] == summary["accepted"] == 1
    assert summary["pairs"] == summary["accepted"] + sum(summary["rejected"].values())
    assert summary["embeddings"] == ["tgr_schema_call_order"]

    con = connect(target)
    rows = rows_of(con, "SELECT dependent, prerequisite, kind, prob, tool_group FROM edges WHERE source = 'call_order'")
    # open_ticket -> escalate is in every test run and in no training run: no edge
    assert rows == [{"dependent": "close_account", "prerequisite": "verify_identity", "kind": "precondition",
                     "prob": 1.0, "tool_group": "support"}]
    (params,) = con.execute("SELECT params_json FROM edge_lineage WHERE source = 'call_order'").fetchone()
    params = json.loads(params)
    assert params["min_support"] == 2 and params["value_passing_judged_by"] == ["name rule", "schema"]
    assert params["train_runs"] == sum(s == "train" for s in split.values())
    # the embedding is Eq. 3 over the schema edges and the precondition edge together
    ids = [t for (t,) in con.execute("SELECT tool_id FROM tools ORDER BY tool_id").fetchall()]
    index = {t: i for i, t in enumerate(ids)}

    def embedding(kind):
        return np.array([e for (e,) in con.execute("SELECT embedding FROM tool_embeddings WHERE kind = ? "
                                                    "ORDER BY tool_id", [kind]).fetchall()], dtype=np.float32)

    union = [(index[d], index[p]) for d, p in con.execute(
        "SELECT dependent, prerequisite FROM edges WHERE source IN ('schema', 'call_order')").fetchall()]
    assert len(union) > 1
    np.testing.assert_allclose(embedding("tgr_schema_call_order"), gcn_propagate(embedding("base"), union, "both"),
                               atol=1e-6)
    con.close()

    result = eval_retrieval(EvalConfig(warehouse=str(target), out_dir=str(tmp_path / "eval"), rerank=False,
                                       paper_encoder=None, sql_check=False))
    ordered = [r for r in result["rows"] if r["method"] == "embedding+TGR-s+order"]
    assert ordered and {r["query_split"] for r in ordered} == {"test"} and {r["n_queries"] for r in ordered} == {n_test}
    data_only = {r["query_split"]: r["n_queries"] for r in result["rows"] if r["method"] == "embedding+TGR-s"}
    assert data_only == {"all": 60, "test": n_test}  # the data graph beside it, on the same test queries
    # the same graph with its weight chosen on the validation queries, scored on the test queries only
    val = [r for r in result["rows"] if r["method"] == "embedding+TGR-s+order(val)"]
    assert val and {r["query_split"] for r in val} == {"test"} and {r["n_queries"] for r in val} == {n_test}
    chosen = result["fusion"]["orders"]["embedding+TGR-s+order(val)"]
    assert chosen["chosen_on"] == "validation queries" and chosen["weight"] in chosen["grid"]
    assert {r["graph_weight"] for r in val} == {chosen["weight"]}


def test_precondition_edges_earn_their_weight_over_the_data_graph_not_over_the_embedding():
    """``+order(val)`` fuses the data graph's scores (w = 0: "+TGR, data edges only") with the data + precondition
    graph's, so precondition edges that hurt on validation leave exactly the data graph's ranking."""
    from types import SimpleNamespace

    from flows.eval_retrieval import validated_rankings
    from tasks.retrieval.fusion import DEFAULT_WEIGHTS
    from tasks.retrieval.inputs import EvalInputs

    n = 12
    eye = np.eye(n, dtype=np.float32)
    gold_of = [9 + q % 3 for q in range(9)]  # gold tools sort last, so a tie never lifts them into the top 5
    decoy = {g: g - 9 for g in set(gold_of)}  # the tool the plain embedding confuses each gold tool with
    data = eye.copy()
    for g, d in decoy.items():  # the data graph tells each gold tool from its decoy
        data[g], data[d] = eye[d], eye[g]
    queries = np.stack([eye[decoy[g]] for g in gold_of])
    ids = [f"t{i:02d}" for i in range(n)]
    inputs = EvalInputs("orders", ids, ids, {"base": eye, "tgr_schema": data, "tgr_schema_call_order": eye},
                        [f"q{q}" for q in range(9)], [""] * 9, queries, [{ids[g]} for g in gold_of])
    split = {f"q{q}": "validation" if q < 3 else "test" for q in range(9)}
    cfg = SimpleNamespace(graph_weights=DEFAULT_WEIGHTS)
    result = validated_rankings.fn(inputs, split, cfg, 5)["embedding+TGR-s+order(val)"]
    assert result.weight == 0.0  # the precondition graph only hurts: the data graph alone
    assert [r[0] for r in result.rankings] == gold_of  # ... and its ranking, which the plain embedding never gives
    # no data graph (a set the schema rule finds nothing on): the precondition graph is weighed against the embedding
    del inputs.embeddings["tgr_schema"]
    plain = validated_rankings.fn(inputs, split, cfg, 5)["embedding+TGR-s+order(val)"]
    assert [r[0] for r in plain.rankings] == [decoy[g] for g in gold_of]
