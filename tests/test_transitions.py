"""ToolNet by hand: trajectories (format, rejections, split), Eq. 5, Eqs. 6-8, the rule evaluator,
the update stream and its versioned rows, and the retrieval helpers built on the graph."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tasks.retrieval.gcn import gcn_propagate, gcn_propagate_weighted, weighted_adjacency
from tasks.retrieval.ranking import expand_with_successors
from tasks.toolsets.trajectories import (
    END,
    START,
    Trajectory,
    TrajectoryFormatError,
    gold_trajectories,
    read_trajectories,
    split_of,
    stream_order,
)
from tasks.toolnet.transitions import (
    StreamRun,
    agent_picks,
    build_toolnet,
    choose_alpha_beta,
    dynamic_weights,
    f_score,
    graph_from_edges,
    hit_rates,
    rank_next,
    replay,
    rule_scores,
    run_stream,
    static_graph,
)

TOOLS = ["a", "b", "c", "d"]  # d is never called in training


def idx(graph, name):
    return graph.index()[name]


# ---------------------------------------------------------------- Eq. 5
def test_static_graph_by_hand():
    g = static_graph(TOOLS, [["a", "b", "c"], ["a", "b"], ["a", "c"], ["b", "b"]])
    i = g.index()
    # a is called 3 times: twice before b, once before c
    assert g.counts[i["a"], i["b"]] == 2 and g.counts[i["a"], i["c"]] == 1
    assert g.weights[i["a"], i["b"]] == pytest.approx(2 / 3) and g.weights[i["a"], i["c"]] == pytest.approx(1 / 3)
    # b: 4 calls -> c once, <end> twice, b (self-loop, seen in ["b", "b"]) once
    assert [g.weights[i["b"], i[t]] for t in ("c", END, "b")] == pytest.approx([0.25, 0.5, 0.25])
    # c always ends a run; its self-loop is offered with weight 0 (Eq. 5 never saw it)
    assert g.weights[i["c"], i[END]] == 1.0 and g.mask[i["c"], i["c"]] and g.weights[i["c"], i["c"]] == 0.0
    # start: equal weights on every tool (the paper), the counts remember the first calls
    assert g.weights[i[START], :4] == pytest.approx([0.25] * 4)
    assert list(g.counts[i[START], :4]) == [3, 1, 0, 0]
    # d was never called: 0/0, so its two offered successors (itself, <end>) share the row
    assert g.weights[i["d"], i["d"]] == g.weights[i["d"], i[END]] == 0.5
    # every row but <end>'s sums to 1; <end> has no successors; nothing leads into <start>
    assert g.weights[:5].sum(axis=1) == pytest.approx([1.0] * 5)
    assert not g.mask[i[END]].any() and not g.mask[:, i[START]].any()
    assert list(g.popularity) == [3, 4, 2, 0]


def test_graph_round_trips_through_edge_rows():
    g = static_graph(TOOLS, [["a", "b", "c"], ["b", "a"]])
    nodes = g.nodes
    rows = [(nodes[i], nodes[j], g.weights[i, j], g.counts[i, j]) for i, j in np.argwhere(g.mask)]
    back = graph_from_edges(TOOLS, rows)
    assert (back.mask == g.mask).all() and (back.counts == g.counts).all()
    np.testing.assert_array_equal(back.weights, g.weights)


# ---------------------------------------------------------------- Eqs. 6-8
def test_f_score_is_eq_8():
    assert list(f_score(np.array([0.0, 2.0, -2.0]), 0.5)) == pytest.approx([1.0, 2.0, np.exp(-1.0)])


def test_dynamic_weights_by_hand():
    g = static_graph(["a", "b", "c"], [["a", "b"], ["a", "c"]])
    i = g.index()
    s = np.array([0.0, 2.0, -2.0])  # b helped, c was noise
    w = dynamic_weights(g, s, alpha=0.5, beta=0.5)
    # a's successors besides its self-loop: b, c, <end>: f = 2, e^-1, 1 (the self-loop keeps its 0)
    f = np.array([2.0, np.exp(-1.0), 1.0])
    expected = 0.5 * np.array([0.5, 0.5, 0.0]) + 0.5 * f / f.sum()
    assert [w[i["a"], i[t]] for t in ("b", "c", END)] == pytest.approx(expected)
    assert w[i["a"], i["a"]] == 0.0
    # the literal reading re-weights the self-loop too: a's own score would then pull a onto itself
    literal = dynamic_weights(g, np.array([10.0, 0.0, 0.0]), alpha=0.5, beta=0.5, reweight_self_loops=True)
    assert literal[i["a"], i["a"]] > literal[i["a"], i["b"]]
    assert literal[:4].sum(axis=1) == pytest.approx([1.0] * 4)
    assert w[i["a"], i["b"]] > w[i["a"], i["c"]]
    assert w[:4].sum(axis=1) == pytest.approx([1.0] * 4)  # still a distribution per row
    # beta = 1 is the static graph; edges outside the edge set stay 0
    np.testing.assert_array_equal(dynamic_weights(g, s, 0.5, 1.0), g.weights)
    assert (w[~g.mask] == 0).all()


def test_rule_evaluator_one_score_per_tool():
    assert rule_scores(["a", "x", "a"], ["a", "b"]) == {"a": 2, "x": -2}
    assert rule_scores(["x"], [], magnitude=3) == {"x": -3}


def test_rank_next_falls_back_to_popularity_then_index():
    assert list(rank_next(np.array([0.0, 0.5, 0.0, 0.5]), np.array([1, 0, 5, 3]))) == [3, 1, 2, 0]


def test_a_broken_tool_loses_weight_to_its_fallback():
    """ToolNet Fig. 4 with the rule evaluator: after 50 good runs, B breaks (the gold runs use the
    fallback C). The agent keeps calling B (scored -2) until B's accumulated score has fallen below
    C's; then C's weight from A overtakes B's and the agent calls C (+2)."""
    g = static_graph(["A", "B", "C"], [["A", "B"]] * 8 + [["A", "C"]] * 2)
    i = g.index()
    healthy = [StreamRun(f"h{n}", ("A", "B"), ("A", "B")) for n in range(50)]
    broken = [StreamRun(f"x{n}", ("A", "C"), ("A", "C")) for n in range(80)]
    res = run_stream(g, healthy + broken, alpha=0.5, beta=0.3, record=True)
    weights = [w.copy() for w in replay(g, res.versions, len(healthy + broken) + 1)]  # w^(0) .. w^(130)
    ab, ac = (np.array([w[i["A"], i[t]] for w in weights]) for t in ("B", "C"))
    assert ab[50] > ab[1] > ac[50]  # B's weight grew while it helped
    crossing = int(np.argmax(ac > ab))
    assert 100 < crossing < 130  # after 50 bad runs undid 50 good ones, B's score went negative
    assert ab[-1] < ab[50] and ac[-1] > ac[50]
    b_after = [d for n, run, t, d, acc in res.scores if t == "B" and n > 50]
    c_after = [d for n, run, t, d, acc in res.scores if t == "C"]
    assert b_after and set(b_after) == {-2} and c_after and set(c_after) == {2}
    np.testing.assert_allclose(weights[-1], res.final)
    # with Eq. 7 read literally, A's growing score makes A -> A its best edge and the agent loops on A
    loop = run_stream(g, healthy + broken, alpha=0.5, beta=0.3, reweight_self_loops=True)
    assert loop.final[i["A"], i["A"]] > max(loop.final[i["A"], i["B"]], loop.final[i["A"], i["C"]])


def test_stream_measures_before_it_updates_and_versions_replay_exactly():
    g = static_graph(TOOLS, [["a", "b"], ["a", "c"], ["b", "c"]])
    stream = [StreamRun("r1", ("a", "c"), ("a", "c")), StreamRun("r2", ("a", "b", "c"), ("a", "b", "c")),
              StreamRun("r3", None, (), called=("d",))]
    res = run_stream(g, stream, alpha=1.0, beta=0.5, record=True)
    # r1's a -> c is measured on the static graph, where b and c tie at 1/2: b (lower index) is first
    assert res.hits[1][0] is False and res.hits[3][0] is True
    assert len(res.hits[1]) == 3  # r1 one step, r2 two, r3 failed: none
    # iteration n stores only what changed, and replaying the rows gives every intermediate graph
    assert {n for n, *_ in res.versions} == {1, 2, 3}
    *_, last = replay(g, res.versions, 4)
    np.testing.assert_array_equal(last, res.final)
    # the failed run's tool was scored negative
    assert [(n, t, d) for n, _, t, d, _ in res.scores if n == 3] == [(3, "d", -2)]
    static = run_stream(g, stream, alpha=1.0, beta=1.0, record=True)
    np.testing.assert_array_equal(static.final, g.weights)
    # the static graph (beta 1) never moves its weights but still records every evaluator score
    assert static.versions == [] and {n for n, *_ in static.scores} == {1, 2, 3}
    assert [(n, t, d) for n, _, t, d, _ in static.scores if n == 3] == [(3, "d", -2)]


def test_given_scores_replace_the_rule_evaluator():
    g = static_graph(TOOLS, [["a", "b"]])
    res = run_stream(g, [StreamRun("r", ("a", "b"), ("a", "b"), called=("a", "b"), scores=(("b", -3),))],
                     0.5, 0.5, record=True)
    assert [(t, d) for _, _, t, d, _ in res.scores] == [("b", -3)]


def test_agent_follows_weights_times_query_similarity():
    g = static_graph(TOOLS, [["a", "b"], ["a", "c"]])
    sim = np.array([0.0, -0.5, 0.9, 0.0])  # the task text is about c
    # from <start> (equal weights) the most similar tool; from a, c beats b on similarity
    assert agent_picks(g.weights, g, ["a", "b"], sim, g.index()) == ["c", "c"]
    assert agent_picks(g.weights, g, ["a", "b"], None, g.index()) == ["a", "b"]  # ties: popularity, index


def test_alpha_beta_sweep_includes_the_static_graph_and_chooses_a_dynamic_setting():
    g = static_graph(TOOLS, [["a", "b"], ["a", "c"]])
    val = [StreamRun(f"v{n}", ("a", "c"), ("a", "c")) for n in range(5)]
    alpha, beta, sweep = choose_alpha_beta(g, val, alphas=(0.5, 1.0), betas=(0.3, 0.7))
    assert beta < 1.0 and (alpha, beta) in {(s["alpha"], s["beta"]) for s in sweep}
    assert [s for s in sweep if s["beta"] == 1.0] == [sweep[2]]  # the static reference, once
    rates, n = hit_rates([(np.array([0.0, 1.0, 0.0, 0.0]), 1), (np.zeros(4), 0)], np.array([0, 0, 0, 1]))
    assert (rates, n) == ({1: 0.5, 3: 1.0}, 2)


# ---------------------------------------------------------------- trajectories: format, rejections, split
def write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


KNOWN = {"a", "b", "c", "O'Brien\"; DROP TABLE edges; --"}


def test_user_file_accepts_runs_and_records_rejections_by_line(tmp_path):
    f = write(tmp_path / "runs.jsonl", [
        json.dumps({"run_id": "r1", "tools": ["a", "b"], "success": True}),
        json.dumps({"tools": ["a", "zzz", "x'); DELETE FROM edges; --"]}),
        json.dumps({"run_id": "r3", "tools": []}),
        "",
        json.dumps({"run_id": 4, "tools": ["O'Brien\"; DROP TABLE edges; --", "c"], "success": False,
                    "scores": {"c": -3}}),
        json.dumps({"run_id": "r5", "tools": ["<end>"]}),
        json.dumps({"run_id": "r6", "tools": ["a"], "scores": {"b": 1}}),
    ])
    got = read_trajectories(f, KNOWN)
    assert [(r.run_id, r.tools, r.success, r.line) for r in got.runs] == [
        ("r1", ("a", "b"), True, 1), ("4", ("O'Brien\"; DROP TABLE edges; --", "c"), False, 5)]
    assert got.runs[1].scores == (("c", -3),)
    reasons = {r.line: (r.run_id, r.reason) for r in got.rejections}
    assert reasons[2] == ("line-2", "unknown tool ids ['zzz', \"x'); DELETE FROM edges; --\"]")
    assert reasons[3] == ("r3", "empty run (no tools)")
    assert "reserved" in reasons[6][1] and "did not call" in reasons[7][1]
    assert str(got.rejections[0]).startswith(f"{f}:2: run 'line-2' rejected")


@pytest.mark.parametrize("line, message", [
    ("not json at all", r"runs.jsonl:2: not valid JSON"),
    ('["a", "b"]', r"runs.jsonl:2: expected a JSON object"),
    ('{"run": ["a"]}', r"runs.jsonl:2: missing field 'tools'"),
    ('{"tools": "a,b"}', r"runs.jsonl:2: field 'tools' must be a list"),
    ('{"tools": ["a", null]}', r"runs.jsonl:2: field 'tools' must be a string or an integer"),
    ('{"tools": ["a"], "success": "yes"}', r"runs.jsonl:2: field 'success' must be true or false"),
    ('{"run_id": "r1", "tools": ["a"]}', r"runs.jsonl:2: duplicate run_id 'r1' \(first on line 1\)"),
    ('{"tools": ["a"], "scores": {"a": 5}}', r"runs.jsonl:2: score of 'a' must be an integer in \[-3, 3\]"),
])
def test_user_file_format_errors_name_file_and_line(tmp_path, line, message):
    f = write(tmp_path / "runs.jsonl", [json.dumps({"run_id": "r1", "tools": ["a"]}), line])
    with pytest.raises(TrajectoryFormatError, match=message):
        read_trajectories(f, KNOWN)


def test_a_file_without_usable_runs_is_an_error(tmp_path):
    f = write(tmp_path / "runs.jsonl", [json.dumps({"tools": ["nope"]}), json.dumps({"tools": []})])
    with pytest.raises(TrajectoryFormatError, match=r"no usable run \(2 rejected\).*runs.jsonl:1"):
        read_trajectories(f, KNOWN)
    with pytest.raises(FileNotFoundError, match="trajectories file not found"):
        read_trajectories(tmp_path / "missing.jsonl", KNOWN)


def run(run_id, source="user"):
    return Trajectory(run_id, ("a",), "runs.jsonl", 1, source)


def test_split_is_seeded_stable_and_near_the_fractions():
    runs = [run(f"r{n}") for n in range(2000)]
    splits = [split_of(r, 0) for r in runs]
    share = {s: splits.count(s) / len(runs) for s in ("train", "validation", "test")}
    assert share["train"] == pytest.approx(0.6, abs=0.04) and share["test"] == pytest.approx(0.2, abs=0.04)
    assert splits[:100] == [split_of(r, 0) for r in runs[:100]]  # adding runs moves none
    assert splits != [split_of(r, 1) for r in runs]  # another seed, another split
    assert split_of(run("x"), 0, (0, 0, 1)) == "test"
    with pytest.raises(ValueError, match="summing to 1"):
        split_of(run("x"), 0, (0.5, 0.5, 0.5))
    order = stream_order(runs[:50], 3)
    assert order == stream_order(list(reversed(runs[:50])), 3) and order != runs[:50]


def test_build_toolnet_uses_training_runs_only():
    runs = [Trajectory(f"q{n}", ("a", "b") if n % 2 else ("a", "c"), "q.jsonl", n, "gold", query_id=f"q{n}")
            for n in range(60)]
    built = build_toolnet(TOOLS, runs, {}, seed=0, fractions=(0.6, 0.2, 0.2))
    train = [r for r in runs if built.splits[r.key] == "train"]
    assert built.graph.counts[built.graph.index()[START]].sum() == len(train)
    assert [r.key for r in built.stream] == [r.key for r in stream_order(
        [r for r in runs if built.splits[r.key] == "test"], 0)]
    assert built.chosen_on.startswith("validation") and 0 <= built.beta < 1
    fixed = build_toolnet(TOOLS, runs, {}, 0, (0.6, 0.2, 0.2), alpha=0.2, beta=0.8)
    assert (fixed.alpha, fixed.beta, fixed.sweep) == (0.2, 0.8, [])


@pytest.mark.parametrize("name, field, n_runs", [
    ("apibank", "gold_calls_in_order", 311), ("ultratool", "gold_nodes_in_order", 3527),
    ("tmdb", "gold_nodes_in_order", 100)])
def test_gold_call_orders_of_the_real_benchmarks(shared_data, name, field, n_runs):
    from tasks.toolsets.readers import load_benchmark

    folder = shared_data / "benchmarks" / name
    toolset = load_benchmark(name, shared_data / "benchmarks")
    got = gold_trajectories(folder / "queries.jsonl", {t.tool_id for t in toolset.tools})
    assert len(got.runs) == n_runs and got.rejections == []
    first = json.loads((folder / "queries.jsonl").read_text().splitlines()[0])
    assert got.runs[0].tools == tuple(str(t) for t in first[field])
    assert got.runs[0].run_id == got.runs[0].query_id == str(first["qid"])
    # with an unknown tool the run is rejected by line, not dropped silently
    fewer = gold_trajectories(folder / "queries.jsonl", {t.tool_id for t in toolset.tools} - {got.runs[0].tools[0]})
    assert fewer.rejections[0].line == 1 and "unknown tool ids" in fewer.rejections[0].reason


# ---------------------------------------------------------------- retrieval helpers
def test_weighted_gcn_by_hand():
    x = np.eye(3, dtype=np.float32)
    # unit weights: the same as the 0/1 graph
    np.testing.assert_allclose(gcn_propagate_weighted(x, [(1, 0, 1.0), (2, 1, 1.0)]),
                               gcn_propagate(x, [(1, 0), (2, 1)]), rtol=1e-6)
    # both directions add up; a self loop is ignored (+I supplies it)
    a = weighted_adjacency(3, [(1, 0, 0.25), (0, 1, 0.5), (2, 2, 0.9)])
    np.testing.assert_allclose(a, [[0, 0.75, 0], [0.75, 0, 0], [0, 0, 0]])
    out = gcn_propagate_weighted(x, [(1, 0, 0.5)])  # degree 1.5 for tools 0 and 1
    np.testing.assert_allclose(out[0], [1 / 1.5, 0.5 / 1.5, 0], rtol=1e-6)


def test_expand_with_successors_by_hand():
    succ = {0: [5, 1], 1: [0], 2: [6]}
    assert expand_with_successors([0, 1, 2, 3], succ, top=2) == [0, 5, 1, 2, 3]
    assert expand_with_successors([0, 1, 2, 3], succ, top=3, per_tool=2) == [0, 5, 1, 2, 6, 3]
    assert expand_with_successors([0, 1], succ, top=0) == [0, 1]


def test_successor_lists_skip_self_end_and_zero_weights():
    from tasks.toolnet.transitions import successor_lists

    g = static_graph(TOOLS, [["a", "b"], ["a", "c"], ["a", "c"], ["a", "a"]])
    assert successor_lists(g) == {0: [2, 1], 1: [], 2: [], 3: []}
