"""Fusion that never hurts (tasks/retrieval/fusion.py): the graph weight w of (1 - w) cos(q, x) + w cos(q, x')
chosen by seeded k-fold cross-validation, and the '(cv)' rows eval-retrieval writes."""
from __future__ import annotations

import numpy as np
import pytest

from tasks.retrieval.fusion import (DEFAULT_WEIGHTS, check_weights, choose_on_validation, choose_weight, cross_validate,
                                    within_one_se,
                                    fold_assignment, fused_scores)
from tasks.retrieval.metrics import evaluate_rankings
from tasks.retrieval.ranking import top_k_from_scores

N_QUERIES, N_TOOLS = 40, 12


def toy(graph_gold: float, base_gold: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[set[int]]]:
    """Query q's gold tool is q % N_TOOLS; every other tool scores about 0.45 under both embeddings, the gold
    tool ``base_gold`` under the plain one and ``graph_gold`` under the propagated one."""
    rng = np.random.default_rng(seed)
    base = 0.45 + rng.uniform(-0.01, 0.01, (N_QUERIES, N_TOOLS))
    graph = 0.45 + rng.uniform(-0.01, 0.01, (N_QUERIES, N_TOOLS))
    golds = [{q % N_TOOLS} for q in range(N_QUERIES)]
    for q, (g,) in enumerate(golds):
        base[q, g], graph[q, g] = base_gold, graph_gold
    return base, graph, golds


def recall_5(rankings, golds) -> float:
    return evaluate_rankings(rankings, golds, (5,))["recall@5"]


def test_the_graph_that_hurts_gets_weight_zero():
    # plain: gold first (0.5 against ~0.45); propagated: gold last, so any w >= 0.1 pushes it out of the top 5
    base, graph, golds = toy(graph_gold=-1.0, base_gold=0.5)
    assert recall_5([r.tolist() for r in top_k_from_scores(graph, 5)], golds) == 0.0  # today's +TGR (w = 1)
    result = cross_validate(base, graph, golds, folds=5, seed=0, depth=10)
    assert result.fold_weights == [0.0] * 5 and result.weight == 0.0
    assert recall_5(result.rankings, golds) == 1.0 == recall_5([r.tolist() for r in top_k_from_scores(base, 5)], golds)
    assert result.grid_recall[0] == 1.0 and max(result.grid_recall[1:]) == 0.0


def test_the_graph_that_helps_gets_a_positive_weight():
    # plain: gold last; propagated: gold first; fused, the gold tool leads from w = 0.5 on
    base, graph, golds = toy(graph_gold=1.0, base_gold=0.0)
    assert recall_5([r.tolist() for r in top_k_from_scores(base, 5)], golds) == 0.0
    result = cross_validate(base, graph, golds, folds=4, seed=1, depth=10)
    assert all(w > 0 for w in result.fold_weights) and result.weight > 0
    assert result.fold_weights == [0.5] * 4  # the smallest w of the grid that does as well as any
    assert recall_5(result.rankings, golds) == 1.0
    assert all(len(r) == 10 for r in result.rankings)


def test_each_query_is_ranked_with_the_weight_chosen_without_it():
    # half the queries gain from the graph, half lose: folds may choose differently; every ranking must be
    # the fused top-k at its own fold's w, and that w the best on the other folds' queries
    hurt_base, hurt_graph, golds = toy(graph_gold=-1.0, base_gold=0.5, seed=2)
    help_base, help_graph, _ = toy(graph_gold=1.0, base_gold=0.3, seed=3)
    half = np.arange(N_QUERIES) % 2 == 0
    base = np.where(half[:, None], help_base, hurt_base)
    graph = np.where(half[:, None], help_graph, hurt_graph)
    result = cross_validate(base, graph, golds, folds=5, seed=7, depth=8)
    tops = {w: top_k_from_scores(fused_scores(base, graph, w), 8) for w in DEFAULT_WEIGHTS}
    for q, ranking in enumerate(result.rankings):
        assert ranking == tops[result.fold_weights[result.folds[q]]][q].tolist()
    per_query = {w: np.array([len(set(tops[w][q][:5].tolist()) & golds[q]) for q in range(N_QUERIES)])
                 for w in DEFAULT_WEIGHTS}
    for f, chosen in enumerate(result.fold_weights):
        train = result.folds != f
        # the one-standard-error rule on the other folds: the chosen w trails the best by at most the standard error
        # of the per-query difference, and every smaller w trails it by more
        best = max(DEFAULT_WEIGHTS, key=lambda w: (per_query[w][train].mean(), -w))
        def trails(w):  # noqa: E306
            gap = per_query[best][train] - per_query[w][train]
            return gap.mean() - gap.std(ddof=1) / np.sqrt(train.sum())
        assert trails(chosen) <= 1e-12 and chosen <= best
        assert all(trails(w) > 1e-12 for w in DEFAULT_WEIGHTS if w < chosen)


def test_a_graph_of_training_runs_gets_the_weight_its_validation_queries_choose():
    # the graph helps the first half of the queries and hurts the second: whichever half validates decides w,
    # and every query (test ones included) is ranked with that one w; the test queries never choose it
    hurt_base, hurt_graph, golds = toy(graph_gold=-1.0, base_gold=0.5, seed=2)
    help_base, help_graph, _ = toy(graph_gold=1.0, base_gold=0.3, seed=3)
    first = np.arange(N_QUERIES) < N_QUERIES // 2
    base = np.where(first[:, None], help_base, hurt_base)
    graph = np.where(first[:, None], help_graph, hurt_graph)
    helped, hurt = list(range(0, 10)), list(range(N_QUERIES // 2, N_QUERIES // 2 + 10))
    on_helped = choose_on_validation(base, graph, golds, helped, depth=10)
    on_hurt = choose_on_validation(base, graph, golds, hurt, depth=10)
    assert on_helped.weight > 0 and on_hurt.weight == 0.0 and on_helped.fold_weights == on_hurt.fold_weights == []
    expected = top_k_from_scores(fused_scores(base, graph, on_helped.weight), 10)
    assert on_helped.rankings == [r.tolist() for r in expected]
    assert on_hurt.rankings == [r.tolist() for r in top_k_from_scores(base, 10)]
    with pytest.raises(ValueError, match="no validation queries"):
        choose_on_validation(base, graph, golds, [])


def test_folds_are_disjoint_cover_every_query_and_follow_the_seed():
    a = fold_assignment(53, 5, seed=11)
    assert sorted(set(a.tolist())) == [0, 1, 2, 3, 4]
    sizes = np.bincount(a)
    assert sizes.sum() == 53 and sizes.max() - sizes.min() <= 1  # each query in exactly one fold
    assert np.array_equal(a, fold_assignment(53, 5, seed=11))
    assert not np.array_equal(a, fold_assignment(53, 5, seed=12))
    with pytest.raises(ValueError, match="folds"):
        fold_assignment(3, 5, seed=0)
    with pytest.raises(ValueError, match="folds"):
        fold_assignment(10, 1, seed=0)
    # more folds than queries: one query per fold (leave-one-out)
    base, graph, golds = toy(graph_gold=1.0, base_gold=0.0)
    small = cross_validate(base[:3], graph[:3], golds[:3], folds=5)
    assert sorted(small.folds.tolist()) == [0, 1, 2] and len(small.fold_weights) == 3


def test_ties_go_to_the_smaller_weight_and_the_grid_is_checked():
    recall = np.array([[1.0, 0.0], [1.0, 0.0], [0.5, 0.0]])  # (weights, queries)
    ndcg = np.array([[0.8, 0.0], [0.9, 0.0], [1.0, 0.0]])
    assert choose_weight((0.0, 0.5, 1.0), recall, ndcg, np.array([0, 1])) == 0.5  # same recall, better NDCG
    assert choose_weight((0.0, 0.5, 1.0), recall, recall, np.array([0, 1])) == 0.0  # all equal: the smaller w
    for bad in [(0.0, 0.5), (0.5, 1.0), (0.0, 1.0, 1.0), (0.0, 1.5, 1.0), (-0.1, 0.0, 1.0)]:
        with pytest.raises(ValueError, match="graph weights"):
            check_weights(bad)


def test_eval_retrieval_writes_the_fused_rows_with_their_weight(tmp_path, prefect_harness):
    from flows.build_graph import build_graph, parse_args
    from flows.eval_retrieval import EvalConfig, eval_retrieval
    from tasks.retrieval.inputs import load_inputs
    from tasks.retrieval.ranking import cosine_scores
    from tasks.toolsets.readers import write_toolset_dir
    from tests.test_graph_flow import TOYSET
    from warehouse.build import connect, rows_of

    folder = write_toolset_dir(TOYSET, tmp_path / "toy")
    target = tmp_path / "wh" / "tgr.duckdb"
    build_graph(parse_args(["--toolset", str(folder), "--warehouse", str(target), "--no-discriminator"]))
    cfg = EvalConfig(warehouse=str(target), out_dir=str(tmp_path / "eval"), rerank=False, paper_encoder=None,
                     graph_weights=(0.0, 0.5, 1.0), cv_folds=2, cv_seed=3)
    result = eval_retrieval(cfg)
    con = connect(target)
    stored = rows_of(con, "SELECT method, k, recall, ndcg, graph_weight, graph_weight_folds FROM retrieval_metrics "
                          "WHERE dataset = 'toy' ORDER BY method, k")
    con.close()
    by = {(r["method"], r["k"]): r for r in stored}
    assert {m for m, _ in by} == {"BM25", "TF-IDF", "embedding", "embedding+TGR-m", "embedding+TGR-s",
                                  "embedding+TGR-m(cv)", "embedding+TGR-s(cv)"}
    assert by[("embedding", 5)]["graph_weight"] == 0.0 and by[("embedding+TGR-m", 5)]["graph_weight"] == 1.0
    assert by[("BM25", 5)]["graph_weight"] is None
    # the stored cv row is what cross_validate gives on the warehouse's own embeddings with the config's folds
    inputs = load_inputs.fn(str(target), "toy")
    index = {t: i for i, t in enumerate(inputs.tool_ids)}
    golds = [{index[t] for t in g} for g in inputs.golds]
    base = cosine_scores(inputs.query_embeddings, inputs.embeddings["base"])
    for method, kind in (("embedding+TGR-m(cv)", "tgr_manual"), ("embedding+TGR-s(cv)", "tgr_schema")):
        expected = cross_validate(base, cosine_scores(inputs.query_embeddings, inputs.embeddings[kind]), golds,
                                  (0.0, 0.5, 1.0), 2, 3, 10)
        m = evaluate_rankings([[inputs.tool_ids[i] for i in r] for r in expected.rankings], inputs.golds, (5, 10))
        for k in (5, 10):
            row = by[(method, k)]
            assert row["recall"] == pytest.approx(m[f"recall@{k}"]) and row["ndcg"] == pytest.approx(m[f"ndcg@{k}"])
            assert row["graph_weight"] == expected.weight and row["graph_weight_folds"] == expected.fold_weights
        assert result["fusion"]["toy"][method]["fold_weights"] == expected.fold_weights
        con = connect(target)
        assert con.execute("SELECT graph_weight FROM retrieval_table WHERE dataset = 'toy' AND method = ?",
                           [method]).fetchone() == (expected.weight,)
        con.close()
    md = (tmp_path / "eval" / "retrieval.md").read_text()
    assert "| method | R@5 | R@10 | N@5 | N@10 | P@5 | P@10 | w |" in md
    w = by[("embedding+TGR-m(cv)", 5)]
    folds = "/".join(f"{x:g}" for x in w["graph_weight_folds"])
    assert f"| {w['graph_weight']:g} (folds {folds}) |" in md and "| embedding+TGR-m | " in md


def test_one_standard_error_rule_keeps_the_smaller_weight_unless_the_gain_is_consistent():
    w = (0.0, 0.5, 1.0)
    rows = np.arange(15)
    noise = np.zeros((3, 15))
    noise[2, 0] = 1.0  # w = 1 wins one query of 15 and loses none: within noise of w = 0
    assert choose_weight(w, noise, noise, rows) == 1.0 and within_one_se(w, noise, rows, 1.0) == 0.0
    steady = np.zeros((3, 15))
    steady[1, :] = 0.5
    steady[2, :] = 0.5
    steady[2, 0] = 0.0  # w = 0.5 wins on every query (best), so w = 0 is consistently worse: 0.5 stays
    assert within_one_se(w, steady, rows, choose_weight(w, steady, steady, rows)) == 0.5
    one = np.array([[0.0], [0.0], [1.0]])
    assert within_one_se(w, one, np.array([0]), 1.0) == 1.0  # one validation query: no spread to measure


def test_precondition_edges_earn_their_weight_over_the_data_graph():
    """``data``: the graph without its precondition edges. The data graph helps (gold first) and the graph with
    its precondition edges hurts (gold last): the second stage gives them weight 0, so every query is ranked as
    the data graph's own cross-validated fusion ranks it; with precondition edges that help, they take weight."""
    base, data, golds = toy(graph_gold=1.0, base_gold=0.0)
    _, hurting, _ = toy(graph_gold=-1.0, base_gold=0.0, seed=4)
    alone = cross_validate(base, data, golds, folds=4, seed=1, depth=10)
    both = cross_validate(base, hurting, golds, folds=4, seed=1, depth=10, data=data)
    assert both.fold_weights == [0.0] * 4 and both.weight == 0.0
    assert both.rankings == alone.rankings and recall_5(both.rankings, golds) == 1.0
    assert recall_5(cross_validate(base, hurting, golds, folds=4, seed=1, depth=10).rankings, golds) < 1.0
    # over a data graph that does nothing, a graph whose precondition edges help takes weight
    _, flat, _ = toy(graph_gold=0.45, base_gold=0.0, seed=5)
    helped = cross_validate(base, data, golds, folds=4, seed=1, depth=10, data=flat)
    assert all(w > 0 for w in helped.fold_weights) and recall_5(helped.rankings, golds) == 1.0


def test_eval_retrieval_weighs_the_discriminators_precondition_edges_over_its_data_graph():
    """eval-retrieval's ``embedding+TGR-d(cv)``, where build-graph wrote ``tgr_discriminator_data`` too: the data
    graph tells each gold tool from the decoy the plain embedding confuses it with, the precondition edges undo
    that; the row ranks as the data graph's own (cv) row, and without the data graph as the whole graph alone."""
    from types import SimpleNamespace

    from flows.eval_retrieval import fused_rankings
    from tasks.retrieval.inputs import EvalInputs

    n, n_queries = 12, 9
    eye = np.eye(n, dtype=np.float32)
    gold_of = [9 + q % 3 for q in range(n_queries)]  # gold tools sort last: a tie never lifts them into the top 5
    decoy = {g: g - 9 for g in set(gold_of)}
    data = eye.copy()
    for g, d in decoy.items():
        data[g], data[d] = eye[d], eye[g]
    ids = [f"t{i:02d}" for i in range(n)]
    inputs = EvalInputs("kinds", ids, ids, {"base": eye, "tgr_discriminator": eye, "tgr_discriminator_data": data},
                        [f"q{q}" for q in range(n_queries)], [""] * n_queries,
                        np.stack([eye[decoy[g]] for g in gold_of]), [{ids[g]} for g in gold_of])
    cfg = SimpleNamespace(graph_weights=DEFAULT_WEIGHTS, cv_folds=3, cv_seed=0)
    out = fused_rankings.fn(inputs, cfg, 5)
    both, alone = out["embedding+TGR-d(cv)"], out["embedding+TGR-d(data)(cv)"]
    golds = inputs.gold_indices()
    assert both.rankings == alone.rankings and recall_5(both.rankings, golds) == 1.0
    assert both.fold_weights == [0.0] * 3 and all(w > 0 for w in alone.fold_weights)
    del inputs.embeddings["tgr_discriminator_data"]  # no data graph: the whole graph against the embedding
    plain = fused_rankings.fn(inputs, cfg, 5)["embedding+TGR-d(cv)"]
    assert recall_5(plain.rankings, golds) == 0.0
