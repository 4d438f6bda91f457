"""GTool on CPU (tasks/gtool/links.py, tasks/gtool/selection.py, flows/gtool.py): the masking split, a tiny
graph whose masked edge is recovered, bad graphs, the metrics, and predicted edges in a warehouse."""
from __future__ import annotations

import duckdb
import numpy as np
import pytest

from models.graph_encoder import GraphEncoder
from tasks.gtool.links import (GTOOL, GraphInputError, LinkConfig, LinkPredictor, best_threshold, common_neighbours,
                         complete_graph, edge_matrix, f1_at, mask_split, recover_masked, tool_graph, unit_rows)
from tasks.gtool.selection import (Request, SelectConfig, SelectionData, evaluate_selection, ned, order_tools,
                                  plan_links, plan_scores, request_subgraphs, set_f1)
from tests.test_warehouse import BUILT, DIM, tiny_dataset
from warehouse.build import WarehouseError, build_warehouse, connect, replace_rows

FAST = LinkConfig(hidden=16, layers=2, heads=2, steps=150, eval_every=10)


def edge_set(a: np.ndarray) -> set[tuple[int, int]]:
    return {tuple(e) for e in np.asarray(a).tolist()}


def paired_graph(pairs: int = 8, seed: int = 0):
    """Tools c0..c{k-1} (consumers) and p0..p{k-1} (producers); c_i depends on p_i. Each pair shares a
    random topic vector; dimension 0 says consumer (+2) or producer (-2), so the text tells which
    tools belong together and the training edges tell which way the dependency points."""
    rng = np.random.default_rng(seed)
    topic = rng.normal(size=(pairs, 15))
    ids = [f"c{i}" for i in range(pairs)] + [f"p{i}" for i in range(pairs)]
    x = np.zeros((2 * pairs, 16), dtype=np.float32)
    x[:pairs, 1:] = topic + 0.05 * rng.normal(size=topic.shape)
    x[pairs:, 1:] = topic + 0.05 * rng.normal(size=topic.shape)
    x[:pairs, 0], x[pairs:, 0] = 2.0, -2.0
    return tool_graph("paired", ids, x, [(f"c{i}", f"p{i}") for i in range(pairs)])


# ---------------------------------------------------------------- masking split
@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5, 0.7, 0.9])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mask_split_is_a_disjoint_seeded_partition(rate, seed):
    edges = np.array([(i, (i * 7 + 3) % 40) for i in range(40) if i != (i * 7 + 3) % 40])
    split = mask_split(edges, rate, 0.2, seed)
    train, val, test = edge_set(split.train), edge_set(split.val), edge_set(split.test)
    assert not train & val and not train & test and not val & test
    assert train | val | test == edge_set(edges)
    assert len(test) == round(rate * len(edges)) and train and val
    assert edge_set(split.observed) == train | val
    again = mask_split(edges, rate, 0.2, seed)
    assert edge_set(again.test) == test and edge_set(again.val) == val


def test_training_never_sees_a_masked_or_validation_edge(monkeypatch):
    """Every graph the encoder passes messages over while training, and every positive the link
    head is trained on, is a training edge; validation and test edges are never either."""
    graph = paired_graph()
    split = mask_split(graph.edges, 0.3, 0.2, seed=0)
    messages, positives, n_neg = set(), set(), []
    forward, logits, negatives = GraphEncoder.forward, LinkPredictor._logits, LinkPredictor._negatives

    def spy_forward(self, x, dep_pre):
        messages.update(edge_set(dep_pre.numpy()))
        return forward(self, x, dep_pre)

    def spy_negatives(self, *args):
        neg = negatives(self, *args)
        n_neg.append(len(neg))
        return neg

    def spy_logits(self, h, pairs):
        if self.head.training:  # a training step: positives first, then the sampled non-edges
            positives.update(edge_set(pairs[: len(pairs) - n_neg[-1]]))
        return logits(self, h, pairs)

    monkeypatch.setattr(GraphEncoder, "forward", spy_forward)
    monkeypatch.setattr(LinkPredictor, "_negatives", spy_negatives)
    monkeypatch.setattr(LinkPredictor, "_logits", spy_logits)
    model = LinkPredictor(graph, FAST).fit(split.train, split.val)
    train = edge_set(split.train)
    assert edge_set(model.trained_on) == train
    assert messages and messages <= train
    assert positives and positives <= train
    assert len(model.history) > 1  # validation edges were scored (model selection), with training messages only


# ---------------------------------------------------------------- recovery
def test_a_masked_edge_of_a_tiny_graph_is_recovered():
    """One of twelve dependencies hidden: GTool ranks it above every other candidate pair, its own
    reverse included (the text alone cannot tell the direction: embedding similarity ties them)."""
    graph = paired_graph(pairs=12)
    split = mask_split(graph.edges, 1 / 12, 0.3, seed=0)
    assert len(split.test) == 1
    rows = {r["method"]: r for r in recover_masked(graph, split, FAST, methods=[GTOOL, "embedding similarity"])}
    assert rows[GTOOL]["auc"] == pytest.approx(1.0)
    assert rows[GTOOL]["ap"] == pytest.approx(1.0)
    assert rows["embedding similarity"]["auc"] < 1.0

    model = LinkPredictor(graph, FAST).fit(split.train, split.val)
    (dep, pre), = split.test.tolist()
    candidates = np.argwhere(~edge_matrix(graph.n, split.observed) & ~np.eye(graph.n, dtype=bool))
    scores = model.scores(split.observed, candidates)
    best = candidates[int(np.argmax(scores))].tolist()
    assert best == [dep, pre]


def test_complete_graph_adds_the_missing_pair_and_only_new_pairs_above_its_threshold():
    graph = paired_graph(pairs=12)
    keep = [e for e in graph.edges.tolist() if e != [0, 12]]  # c0 -> p0 missing from the graph
    partial = tool_graph("partial", graph.tool_ids, graph.x, [(graph.tool_ids[d], graph.tool_ids[p]) for d, p in keep])
    done = complete_graph(partial, FAST, "manual", val_share=0.3, same_group=False, max_ratio=1.0)
    pairs = {(d, p) for d, p, _ in done.predicted}
    assert pairs == {(0, 12)}  # seeded: the missing dependency, in its direction, and nothing else
    assert all(prob >= done.threshold for _, _, prob in done.predicted)
    assert not pairs & edge_set(partial.edges) and not {(p, d) for d, p in pairs} & edge_set(partial.edges)


# ---------------------------------------------------------------- bad input
X3 = np.eye(3, 4, dtype=np.float32)


@pytest.mark.parametrize("ids, x, edges, message", [
    (["a", "b", "c"], X3, [], "no edges"),
    (["a"], X3[:1], [], "1 tool"),
    (["a", "b", "c"], X3, [("a", "a"), ("a", "b")], "self-loops on \\['a'\\]"),
    (["a", "b", "c"], X3, [("a", "zz")], "unknown tool.*zz"),
    (["a", "b", "a"], X3, [("a", "b")], "tool ids repeat: \\['a'\\]"),
    (["a", "b", "c"], np.where(np.eye(3, 4) > 0, np.nan, 0).astype(np.float32), [("a", "b")], "NaN"),
    (["a", "b", "c"], X3[:2], [("a", "b")], "shape"),
])
def test_bad_graphs_raise_a_clear_error_before_torch(ids, x, edges, message):
    with pytest.raises(GraphInputError, match=message):
        tool_graph("bad", ids, x, edges)


def test_too_few_edges_to_mask_or_complete_are_clear_errors():
    one = tool_graph("one", ["a", "b", "c"], X3, [("a", "b")])
    with pytest.raises(GraphInputError, match="at least two"):
        mask_split(one.edges, 0.5)
    with pytest.raises(GraphInputError, match="strictly between 0 and 1"):
        mask_split(np.array([[0, 1], [1, 2]]), 1.0)
    with pytest.raises(GraphInputError, match="one: 1 manual edge"):
        complete_graph(one, FAST, "manual")
    with pytest.raises(GraphInputError, match="no training edges"):
        LinkPredictor(one, FAST).fit(np.zeros((0, 2), dtype=np.int64))


# ---------------------------------------------------------------- metrics
def test_threshold_f1_and_common_neighbours_by_hand():
    pos, neg = np.array([0.9, 0.6, 0.2]), np.array([0.8, 0.1, 0.1])
    # cut 0.6: tp 2, fp 1 -> F1 = 4 / (3 + 3) = 0.667; cut 0.9: 2 / 4 = 0.5; cut 0.2: 6 / 7 = 0.857
    threshold, f1 = best_threshold(pos, neg)
    assert threshold == pytest.approx(0.2) and f1 == pytest.approx(6 / 7)
    assert f1_at(pos, neg, 0.6) == pytest.approx(4 / 6)
    # path 0 - 1 - 2 and 0 - 3 - 2: nodes 0 and 2 share two neighbours, 1 and 3 share two, 0 and 1 none
    observed = np.array([[0, 1], [1, 2], [3, 0], [2, 3]])
    assert common_neighbours(4, observed, np.array([[0, 2], [1, 3], [0, 1]])).tolist() == [2, 2, 0]


def test_node_and_link_f1_and_ned_by_hand():
    gold, pred = ["a", "b", "c"], ["a", "c", "d"]
    # nodes {a,b,c} vs {a,c,d}: 2 shared -> 4/6; links {ab, bc} vs {ac, cd}: none; NED: 2 edits / 3
    assert plan_scores(pred, gold) == pytest.approx({"n_f1": 2 / 3, "l_f1": 0.0, "ned": 2 / 3})
    assert plan_scores(["a", "b"], gold) == pytest.approx({"n_f1": 0.8, "l_f1": 2 / 3, "ned": 1 / 3})
    assert plan_links(["x"]) == set() and set_f1(set(), {"a"}) == 0.0 and set_f1({"a"}, set()) == 0.0
    # a single-tool plan against a single-tool gold: node F1 1, link F1 0 (GNN4TaskPlan: empty side -> 0)
    assert plan_scores(["a"], ["a"]) == {"n_f1": 1.0, "l_f1": 0.0, "ned": 0.0}
    assert ned("kitten", "sitting") == pytest.approx(3 / 7) and ned([], []) == 0.0


def test_order_follows_transitions_and_dependencies():
    before = np.zeros((3, 3))
    before[2, 0] = 1.0  # tool 2 is called before tool 0
    before[0, 1] = 0.5  # tool 0 is tool 1's prerequisite
    assert order_tools([1, 0, 2], before) == [2, 0, 1]
    assert order_tools([1, 0], np.zeros((3, 3)), {0: 0.2, 1: 0.9}) == [1, 0]  # no evidence: by score


def test_request_subgraph_adds_neighbours_of_the_candidates():
    x = np.eye(4, dtype=np.float32)
    neighbours = [np.array([3]), np.array([]), np.array([]), np.array([0])]
    req = Request("q", np.array([1.0, 0.2, 0, 0], dtype=np.float32), (0, 3), "test")
    sg = request_subgraphs(unit_rows(x), [req], neighbours, candidates=1, per_tool=2)
    assert sg.nodes[0][sg.valid[0]].tolist() == [0, 3] and sg.coverage[0] == 1.0
    plain = request_subgraphs(unit_rows(x), [req], None, candidates=1, per_tool=2)
    assert plain.valid.sum() == 1 and plain.coverage[0] == 0.5


def test_selection_runs_end_to_end_on_a_tiny_set():
    """A trained selector and the top-k baselines on 12 tools with gold chains p_i -> c_i."""
    graph = paired_graph(pairs=6)
    rng = np.random.default_rng(0)
    reqs = []
    for n in range(60):
        i = n % 6
        q = graph.x[i] + graph.x[6 + i] + 0.1 * rng.normal(size=graph.x.shape[1])
        reqs.append(Request(f"q{n}", q.astype(np.float32), (6 + i, i), ["train", "train", "validation", "test"][n % 4]))
    trans = np.zeros((12, 12))
    trans[np.arange(6, 12), np.arange(6)] = 1.0
    data = SelectionData("tiny", list(graph.tool_ids), graph.x, reqs, trans)
    cfg = SelectConfig(candidates=2, neighbours=1, steps=60, eval_every=20, link=FAST)
    rows = evaluate_selection(data, {"graph": graph.edges}, cfg, graph.edges, {"top-k": graph.x})
    by = {r["method"]: r for r in rows}
    assert set(by) == {"graph", "top-k"}
    assert all(0 <= r["n_f1"] <= 1 and 0 <= r["l_f1"] <= 1 for r in rows)
    assert by["graph"]["coverage"] == 1.0 and by["graph"]["n_f1"] >= 0.9


# ---------------------------------------------------------------- warehouse
def predicted_rows(dataset: str, edges: list[tuple[str, str, float]]) -> dict[str, list[dict]]:
    return {"edges": [{"dataset": dataset, "tool_group": "g1", "dependent": d, "prerequisite": p, "prob": prob,
                       "predicted_class": 0, "source": "predicted", "p_direction": prob} for d, p, prob in edges],
            "edge_lineage": [{"dataset": dataset, "source": "predicted", "producer": "test", "built_at": BUILT,
                              "threshold": 0.5}],
            "tool_embeddings": [{"dataset": dataset, "tool_id": t, "kind": "tgr_completed", "embedding": [0.5] * DIM}
                                for t in "abcdef"]}


DROP = {"edges": {"dataset": ["tiny"], "source": ["predicted"]},
        "edge_lineage": {"dataset": ["tiny"], "source": ["predicted"]},
        "tool_embeddings": {"dataset": ["tiny"], "kind": ["tgr_completed"]}}


def test_predicted_edges_round_trip_through_the_warehouse(tmp_path):
    path = tmp_path / "wh" / "tgr.duckdb"
    build_warehouse(path, [tiny_dataset(), tiny_dataset("other")], DIM)
    con = connect(path)
    before = con.execute("SELECT count(*) FROM edges").fetchone()[0]
    con.close()
    out = replace_rows(path, predicted_rows("tiny", [("e", "a", 0.9), ("b", "d", 0.7)]), DROP)
    assert out["added"] == {"edges": 2, "edge_lineage": 1, "tool_embeddings": 6}
    # a rerun replaces the predicted rows instead of adding to them; other datasets are untouched
    replace_rows(path, predicted_rows("tiny", [("e", "a", 0.95)]), DROP)
    con = connect(path)
    try:
        assert con.execute("SELECT count(*) FROM edges").fetchone()[0] == before + 1
        assert con.execute("SELECT dependent, prerequisite, prob FROM edges WHERE source = 'predicted'").fetchall() == [
            ("e", "a", 0.95)]
        assert con.execute("SELECT count(*) FROM tool_embeddings WHERE kind = 'tgr_completed'").fetchone()[0] == 6
        assert con.execute("SELECT count(*) FROM edges WHERE dataset = 'other'").fetchone()[0] == before // 2
        # the marts read predicted edges like any other source
        assert con.execute("SELECT prerequisite_name FROM edge_list WHERE source = 'predicted'").fetchall() == [("A",)]
    finally:
        con.close()


def test_bad_predicted_rows_leave_the_warehouse_untouched(tmp_path):
    path = tmp_path / "tgr.duckdb"
    build_warehouse(path, [tiny_dataset()], DIM)
    data = path.read_bytes()
    with pytest.raises((WarehouseError, duckdb.Error), match="zz|unknown|tool"):
        replace_rows(path, predicted_rows("tiny", [("e", "zz", 0.9)]), DROP)
    with pytest.raises(WarehouseError, match="not columns of edges"):
        replace_rows(path, {}, {"edges": {"nope": ["x"]}})
    with pytest.raises(WarehouseError, match="probability"):
        replace_rows(path, {"edges": [{"dataset": "tiny", "probability": 1}]}, {})
    assert path.read_bytes() == data
    with pytest.raises(FileNotFoundError, match="make graph"):
        replace_rows(tmp_path / "none.duckdb", {}, {})


# ---------------------------------------------------------------- the flow
@pytest.mark.slow
def test_flow_writes_predicted_edges_and_records_a_skip(tmp_path, prefect_harness):
    """The whole flow on a tiny warehouse: one dataset with a usable gold graph, one whose gold graph
    has a single edge (a recorded skip, not a crash), predicted edges and tgr_completed embeddings
    written back, the report and plot in the out folder."""
    from flows.gtool import GToolConfig, gtool

    path = tmp_path / "tgr.duckdb"
    lonely = tiny_dataset("lonely")
    lonely.rows["edges"] = [e for e in lonely.rows["edges"] if (e["dependent"], e["prerequisite"]) == ("a", "b")]
    build_warehouse(path, [tiny_dataset(), lonely], DIM)
    cfg = GToolConfig(warehouse=str(path), out_dir=str(tmp_path / "out"), robustness_datasets=("tiny", "lonely"),
                      mask_rates=("0.5",), seeds=1, selection_datasets=(), steps=20, hidden=8, layers=1)
    result = gtool(cfg)
    assert any(s.startswith("robustness lonely") and "at least two" in s for s in result["skips"])
    assert any(s.startswith("completion lonely") for s in result["skips"])
    assert {r["dataset"] for r in result["robustness"]} == {"tiny (manual)"}
    assert set(result["completion"]) == {"tiny"}
    assert (tmp_path / "out" / "robustness.png").stat().st_size > 0
    assert "## Skipped" in (tmp_path / "out" / "gtool.md").read_text()
    con = connect(path)
    try:
        n_pred = con.execute("SELECT count(*) FROM edges WHERE source = 'predicted'").fetchone()[0]
        assert n_pred == result["completion"]["tiny"]["predicted"]
        assert con.execute("SELECT count(*) FROM tool_embeddings WHERE kind = 'tgr_completed'").fetchone()[0] == 6
        assert con.execute("SELECT count(*) FROM edge_lineage WHERE source = 'predicted'").fetchone()[0] == 1
    finally:
        con.close()


def test_command_line_round_trips_and_refuses_bad_rates(capsys):
    from flows.gtool import GToolConfig, parse_args
    from tasks.common.cli import to_argv

    cfg = GToolConfig(mask_rates=("0.2", "0.4"), seeds=2, negatives="mixed", completion_datasets=("tmdb",))
    assert parse_args(to_argv(cfg)) == cfg and cfg.rates == [0.2, 0.4]
    with pytest.raises(SystemExit):
        parse_args(["--mask-rates", "0.5,1.5"])
    assert "strictly between 0 and 1" in capsys.readouterr().err
