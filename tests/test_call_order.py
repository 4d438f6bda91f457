"""Call-order statistics, precondition candidates, the warehouse view call_order_pairs, and the
kind-labelled dev set (tasks/toolsets/call_order.py, tasks/toolsets/kind_devset.py, docs/preconditions.md)."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from schemas.toolset import DependencyEdge, Tool, ToolSet
from tasks.toolsets.call_order import (
    ACCEPTED,
    DATA_EDGE,
    GENERIC_FIRST_STEP,
    INCONSISTENT,
    LOW_SUPPORT,
    NAME_RULE,
    order_statistics,
    precedence_breadth,
    precondition_candidates,
)
from tasks.toolsets.kind_devset import DATA, NONE, PRECONDITION, KindDevSet, KindItem, build_kind_devset, kind_scores
from tasks.toolsets.trajectories import Trajectory, split_of


def run(run_id: str, *tools: str, success: bool = True) -> Trajectory:
    return Trajectory(run_id, tools, "runs.jsonl", 1, "user", success)


def doc(name: str, inputs=(), outputs=()) -> dict:
    return {"name": name, "description": name,
            "input_params": [{"name": n, "type": "str", "description": n} for n in inputs],
            "output_params": [{"name": n, "type": "str", "description": n} for n in outputs]}


def test_order_counts_by_first_occurrence_by_hand():
    runs = [run("r1", "a", "b", "a", "c"), run("r2", "b", "a"), run("r3", "a", "c"), run("r4", "c", "a", "b"),
            run("r5", "b", "a", success=False)]
    stats = order_statistics(runs)
    assert (stats.n_runs, stats.n_skipped) == (4, 1)
    ab = stats.get("a", "b")
    # a first in r1 (a@0 < b@1) and r4 (c, a, b); b first in r2; adjacent a->b in r1 and r4
    assert (ab.a_before_b, ab.b_before_a, ab.both, ab.adjacent) == (2, 1, 3, 2)
    ba = stats.get("b", "a")
    assert (ba.a_before_b, ba.b_before_a, ba.both, ba.adjacent) == (1, 2, 3, 2)  # b->a adjacent in r1 (b, a) and r2
    ac = stats.get("a", "c")
    # order by first occurrences: r1 a@0 c@3, r3 a first, r4 c first; adjacency by any occurrence: the
    # repeated a of r1 directly precedes c (a, b, a, c), and r3 is (a, c)
    assert (ac.a_before_b, ac.both, ac.adjacent) == (2, 3, 2)
    assert stats.get("c", "a").adjacent == 1  # r4
    assert stats.get("b", "c").both == 2 and stats.get("b", "c").a_before_b == 1
    assert stats.tool_runs == {"a": 4, "b": 3, "c": 3}
    assert order_statistics(runs, successful_only=False).get("b", "a").a_before_b == 2  # the failed run counts
    assert ("a", "a") not in stats.pairs  # a repeated tool is no pair with itself


def login_toolset() -> ToolSet:
    tools = [Tool("Login", "g", doc("Login", ["user"], ["session"])),
             Tool("Check", "g", doc("Check", ["user"], ["state"])),
             Tool("Pay", "g", doc("Pay", ["amount", "session"])),
             Tool("Ship", "g", doc("Ship", ["address"])),
             Tool("Note", "g", doc("Note", ["text"]))]
    return ToolSet("shop", tools)


def test_candidate_rule_reasons_and_counts_add_up():
    runs = [run(f"r{i}", "Login", "Check", "Pay", "Ship") for i in range(3)]
    runs += [run("s1", "Ship", "Note"), run("s2", "Note", "Ship")]
    stats = order_statistics(runs)
    ts = login_toolset()
    ts.edges = [DependencyEdge("g", "Ship", "Check", "manual")]
    report = precondition_candidates(stats, ts, min_support=2, min_consistency=0.9, generic_min_tools=10)
    by_pair = {(d.order.a, d.order.b): d.reason for d in report.decisions}
    assert len(report.decisions) == len(stats.pairs) == 12 + 2  # every ordered pair decided once
    assert sum(report.counts().values()) == len(stats.pairs)
    assert by_pair["Login", "Pay"] == NAME_RULE  # Login's session feeds Pay's session
    assert by_pair["Pay", "Login"] == INCONSISTENT
    assert by_pair["Check", "Ship"] == DATA_EDGE  # an edge of the tool set, whatever its direction
    assert by_pair["Ship", "Note"] == INCONSISTENT  # one run each way: 0.5
    assert by_pair["Login", "Check"] == ACCEPTED
    accepted = {(c.producer, c.consumer) for c in report.candidates}
    assert accepted == {("Login", "Check"), ("Login", "Ship"), ("Check", "Pay"), ("Pay", "Ship")}
    cand = next(c for c in report.candidates if c.producer == "Login" and c.consumer == "Check")
    assert (cand.support, cand.consistency, cand.adjacent) == (3, 1.0, 3)
    assert cand.dependency_edge("g") == DependencyEdge("g", "Check", "Login", "call_order", "precondition")
    # support: with three runs needed, the 2-run pairs fail first on support, not order
    strict = precondition_candidates(stats, ts, min_support=4, generic_min_tools=10)
    assert strict.candidates == [] and strict.counts()[LOW_SUPPORT] == len(stats.pairs)
    # no edges given: the Check/Ship pair is judged by names (none fire) and accepted
    loose = precondition_candidates(stats, replace(ts, edges=[]), generic_min_tools=10)
    assert ("Check", "Ship") in {(c.producer, c.consumer) for c in loose.candidates}


def test_a_tool_before_most_others_is_a_generic_first_step_by_its_statistics():
    # "Hub" precedes every tool in every run (a router); "Auth" precedes two tools only
    tools = [f"t{i}" for i in range(8)]
    runs = [run(f"h{i}", "Hub", t) for i, t in enumerate(tools) for _ in range(2)]
    runs += [run(f"a{i}", "Auth", t) for i, t in enumerate(tools[:2]) for _ in range(2)]
    ts = ToolSet("x", [Tool(t, "g", doc(t, ["in_" + t])) for t in [*tools, "Hub", "Auth"]])
    stats = order_statistics(runs)
    breadth = precedence_breadth(stats)
    assert breadth["Hub"] == (8, 8 / 9) and breadth["Auth"] == (2, 2 / 9)
    report = precondition_candidates(stats, ts)
    reasons = {(d.order.a, d.order.b): d.reason for d in report.decisions}
    assert all(reasons["Hub", t] == GENERIC_FIRST_STEP for t in tools)
    assert report.generic_steps == {"Hub": 8 / 9}
    assert {(c.producer, c.consumer) for c in report.candidates} == {("Auth", "t0"), ("Auth", "t1")}
    # the same order with a renamed router is caught the same way (the statistic, not the name)
    renamed = [replace(r, tools=tuple("Zed" if t == "Hub" else t for t in r.tools)) for r in runs]
    ts2 = ToolSet("x", [Tool("Zed" if t.tool_id == "Hub" else t.tool_id, "g", t.doc) for t in ts.tools])
    assert precondition_candidates(order_statistics(renamed), ts2).generic_steps == {"Zed": 8 / 9}
    # a floor on the count: a 3-tool set's login before both others is no router
    small = order_statistics([run("s", "Login", "Check", "Pay")] * 1 + [run("s2", "Login", "Check", "Pay")])
    assert precondition_candidates(small, login_toolset()).generic_steps == {}


def test_bad_arguments_and_unknown_tools_are_refused():
    stats = order_statistics([run("r", "Login", "Nope")])
    with pytest.raises(ValueError, match="tools the tool set does not have: \\['Nope'\\]"):
        precondition_candidates(stats, login_toolset())
    with pytest.raises(ValueError, match="min_consistency"):
        precondition_candidates(stats, login_toolset(), min_consistency=0.5)
    with pytest.raises(ValueError, match="min_support"):
        precondition_candidates(stats, login_toolset(), min_support=0)


def test_warehouse_view_agrees_with_the_python_statistics(tmp_path):
    from tests.test_warehouse import DIM, tiny_dataset
    from warehouse.build import build_warehouse, connect

    seqs = [("a", "b", "a", "c"), ("b", "a"), ("a", "c"), ("c", "a", "b"), ("d", "e", "d"), ("b", "a")]
    runs = [run(f"r{i}", *s) for i, s in enumerate(seqs)] + [run("fail", "e", "a", success=False)]
    split = {r.run_id: split_of(r, seed=3) for r in runs}
    assert len(set(split.values())) > 1  # the per-split rows are compared too
    tables = tiny_dataset()
    tables.rows["trajectories"] = [
        {"dataset": "tiny", "origin": r.origin, "run_id": r.run_id, "line": i + 1, "source": "user",
         "query_id": None, "success": r.success, "split": split[r.run_id], "tools": list(r.tools),
         "given_scores": None, "stream_iteration": None} for i, r in enumerate(runs)]
    path = tmp_path / "wh" / "tgr.duckdb"
    build_warehouse(path, [tables], DIM)
    rows = connect(path).execute(
        "SELECT split, tool_a, tool_b, a_before_b, b_before_a, n_both, n_adjacent, consistency "
        "FROM call_order_pairs WHERE dataset = 'tiny'").fetchall()

    def python_rows(label, subset):
        return {(label, p.a, p.b, p.a_before_b, p.b_before_a, p.both, p.adjacent, p.consistency)
                for p in order_statistics(subset).pairs.values()}

    expected = python_rows("*", runs)
    for s in set(split.values()):
        expected |= python_rows(s, [r for r in runs if split[r.run_id] == s])
    assert set(rows) == expected and len(rows) == len(expected)
    assert ("*", "e", "a") not in {r[:3] for r in rows}  # only in the failed run


def write_fake_bank(folder, with_edges=True):
    """A tiny API-Bank layout: Token feeds Add and Del (recorded reuse); Check always before Del with no
    value passed; Hub precedes every tool (a router); Add/Note once each way; Lone never with Add."""
    tools = {"Token": (["user"], ["token"]), "Add": (["token", "text"], ["status"]),
             "Del": (["token", "item"], ["status"]), "Check": (["item"], ["exists"]),
             "Note": (["text"], ["status"]), "Lone": (["x"], ["y"]), "Hub": (["keywords"], ["best"])}
    folder.mkdir()
    (folder / "tools.jsonl").write_text("".join(json.dumps(
        {"name": n, "description": f"tool {n}", "input_parameters": {i: {"type": "str", "description": i} for i in ins},
         "output_parameters": {o: {"type": "str", "description": o} for o in outs}, "group": "g"}) + "\n"
        for n, (ins, outs) in tools.items()))
    orders = [["Token", "Add"], ["Token", "Add"], ["Check", "Token", "Del"], ["Check", "Token", "Del"],
              ["Add", "Note"], ["Note", "Add"], ["Lone", "Note"],
              *[["Hub", t] for t in ("Token", "Add", "Del", "Check", "Note") for _ in range(2)]]
    (folder / "queries.jsonl").write_text("".join(json.dumps(
        {"qid": f"q{i}", "query": "x", "gold_tools": sorted(set(o)), "gold_calls_in_order": o}) + "\n"
        for i, o in enumerate(orders)))
    if with_edges:
        (folder / "dependency_edges.jsonl").write_text(
            json.dumps({"producer": "Token", "consumer": "Add", "count": 2, "params": ["token"]}) + "\n"
            + json.dumps({"producer": "Token", "consumer": "Del", "count": 2, "params": ["token"]}) + "\n"
            + json.dumps({"producer": "Token", "consumer": "Ghost", "params": []}) + "\n")
    return folder


def test_devset_labels_a_fake_api_bank_folder(tmp_path):
    folder = write_fake_bank(tmp_path / "fakebank")
    dev = build_kind_devset(folder, min_support=2, none_per_labelled=1.0, seed=5, generic_min_tools=4)
    labelled = {(i.producer, i.consumer): i.kind for i in dev.items if i.kind != NONE}
    assert labelled == {("Token", "Add"): DATA, ("Token", "Del"): DATA,
                        ("Check", "Token"): PRECONDITION, ("Check", "Del"): PRECONDITION}
    assert dev.rejected_edges and "unknown tool ['Ghost']" in dev.rejected_edges[0]
    reasons = {(a, b): r for a, b, r in dev.unlabelled}
    assert all(reasons["Hub", t] == GENERIC_FIRST_STEP for t in ("Token", "Add", "Del", "Check", "Note"))
    assert reasons["Add", "Note"] == INCONSISTENT and reasons["Lone", "Note"] == LOW_SUPPORT
    # every co-occurring ordered pair is an item or unlabelled with a reason
    assert sum(dev.accounting().values()) == len(dev.stats.pairs)
    nones = [(i.producer, i.consumer) for i in dev.items if i.kind == NONE]
    assert len(nones) == 4 and all((a, b) not in dev.stats.pairs for a, b in nones)
    assert dev.none_pool == 20  # 21 pairs of the 7 tools, 11 of them co-occur: 10 pairs, both ways
    again = build_kind_devset(folder, min_support=2, none_per_labelled=1.0, seed=5, generic_min_tools=4)
    assert again.items == dev.items  # deterministic
    # precondition labels from some dialogues only; data labels stay (they come from the edge file)
    half = build_kind_devset(folder, keep_run=lambda r: r.run_id != "q2", min_support=2, generic_min_tools=4)
    assert half.counts()[PRECONDITION] == 0 and half.counts()[DATA] == 2
    with pytest.raises(FileNotFoundError, match="dependency_edges.jsonl not found"):
        build_kind_devset(write_fake_bank(tmp_path / "noedges", with_edges=False))


def test_kind_scores_by_hand():
    items = [KindItem("A", "B", DATA, 3, 1.0), KindItem("A", "C", DATA, 2, 1.0),
             KindItem("P", "Q", PRECONDITION, 2, 1.0), KindItem("X", "Y", NONE, 0, None),
             KindItem("Y", "Z", NONE, 0, None)]
    dev = KindDevSet("t", items, [], order_statistics([]), [])
    predicted = [("A", "B", DATA), ("P", "Q", DATA), ("X", "Y", PRECONDITION), ("M", "N", DATA)]
    scores, outside = kind_scores(predicted, dev)
    assert outside == 1
    d, p, n = scores[DATA], scores[PRECONDITION], scores[NONE]
    assert (d.true_positive, d.predicted, d.gold) == (1, 2, 2) and (d.precision, d.recall, d.f1) == (0.5, 0.5, 0.5)
    assert (p.true_positive, p.predicted, p.gold, p.f1) == (0, 1, 1, 0.0)
    # A->C and Y->Z are named by no edge: predicted none; one of them is none
    assert (n.true_positive, n.predicted, n.gold) == (1, 2, 2) and n.precision == 0.5
    with pytest.raises(ValueError, match="predicted both"):
        kind_scores([("A", "B", DATA), ("A", "B", PRECONDITION)], dev)
    with pytest.raises(ValueError, match="unknown kind 'flow'"):
        kind_scores([("A", "B", "flow")], dev)


def test_api_bank_devset_on_the_shared_data(shared_data):
    folder = shared_data / "benchmarks" / "apibank"
    dev = build_kind_devset(folder)
    counts = dev.counts()
    lines = [json.loads(x) for x in (folder / "dependency_edges.jsonl").read_text().splitlines() if x.strip()]
    assert counts[DATA] == len({(x["producer"], x["consumer"]) for x in lines})
    assert sum(dev.accounting().values()) == len(dev.stats.pairs)
    assert counts[PRECONDITION] > 0 and counts[NONE] == round(2 * (counts[DATA] + counts[PRECONDITION]))
    # ToolSearcher, API-Bank's discovery step, is found generic by its statistics and labels nothing
    assert all(i.producer != "ToolSearcher" for i in dev.items if i.kind == PRECONDITION)
    assert any(a == "ToolSearcher" and r == GENERIC_FIRST_STEP for a, _, r in dev.unlabelled)
    for item in dev.items:
        if item.kind == PRECONDITION:
            order = dev.stats.get(item.producer, item.consumer)
            assert order.consistency == 1.0 and order.both >= 2
