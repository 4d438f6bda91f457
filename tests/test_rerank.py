"""ToolRerank's list algorithms on hand-made rankings, the seeded split, and the trained pipeline on a
small synthetic library."""
from __future__ import annotations

import numpy as np
import pytest

from tasks.retrieval.rerank.algorithms import adaptive_truncation, groups_of, multi_tool_rerank, single_tool_rerank
from tasks.retrieval.rerank.classifier import QueryTypeClassifier, is_single_tool
from tasks.retrieval.rerank.experiment import DEPTH, run_toolrerank
from tasks.retrieval.rerank.hierarchy import tool_parents
from tasks.retrieval.rerank.library import Library
from tasks.retrieval.rerank.pair_model import PairModel
from tasks.retrieval.rerank.query import RerankParams, ToolReranker, rerank
from tasks.retrieval.rerank.split import seeded_split
from tasks.retrieval.rerank.tables import markdown_tables

# ---------------------------------------------------------------- adaptive truncation
RANKING = ["s1", "u1", "s2", "u2", "s3", "u3"]  # s* seen tools, u* unseen
SEEN = {"s1", "s2", "s3"}


def test_truncation_keeps_seen_to_m_s_and_unseen_to_m_u():
    # ranks: s1 1, u1 2, s2 3 (seen, > m_s = 2: cut), u2 4 (unseen, <= m_u = 4), s3 5 cut, u3 6 (> m_u) cut
    assert adaptive_truncation(RANKING, SEEN, 2, 4) == ["s1", "u1", "u2"]
    # a predicate works the same as a collection
    assert adaptive_truncation(RANKING, lambda c: c.startswith("s"), 2, 4) == ["s1", "u1", "u2"]
    # m_s > m_u (Table 5's (50, 10) corner): seen to rank 4, unseen to rank 2
    assert adaptive_truncation(RANKING, SEEN, 4, 2) == ["s1", "u1", "s2"]
    # m_s = m_u is a fixed cut; cut-offs beyond the list keep everything
    assert adaptive_truncation(RANKING, SEEN, 3, 3) == RANKING[:3]
    assert adaptive_truncation(RANKING, SEEN, 10, 50) == RANKING
    # all seen: exactly the top m_s; all unseen: exactly the top m_u
    assert adaptive_truncation(RANKING, set(RANKING), 2, 5) == RANKING[:2]
    assert adaptive_truncation(RANKING, set(), 2, 5) == RANKING[:5]
    assert adaptive_truncation([], SEEN, 1, 1) == []
    with pytest.raises(ValueError, match="positive"):
        adaptive_truncation(RANKING, SEEN, 0, 5)


# ---------------------------------------------------------------- Alg. 1 (single-tool queries)
TOOL = {"a1": "A", "a2": "A", "a3": "A", "b1": "B", "b2": "B", "c1": "C"}
SCORE = {"a1": 0.9, "b1": 0.8, "a2": 0.5, "c1": 0.4, "b2": 0.3, "a3": 0.7}
R = ["a1", "b1", "a2", "c1", "b2"]  # sorted by SCORE


def test_single_tool_concentrates_on_the_tools_above_tau_s():
    # only a1 is above 0.85: X = {A}; A's APIs lead, the rest keep R's order
    assert single_tool_rerank(R, SCORE, TOOL, 0.85) == ["a1", "a2", "b1", "c1", "b2"]
    # a1 and b1 above 0.7: X = {A, B}; C's API falls behind all of them
    assert single_tool_rerank(R, SCORE, TOOL, 0.7) == ["a1", "b1", "a2", "b2", "c1"]
    # nothing above tau_s: X = {tool(r_1)} still
    assert single_tool_rerank(R, SCORE, TOOL, 0.95) == ["a1", "a2", "b1", "c1", "b2"]
    # everything above: R unchanged
    assert single_tool_rerank(R, SCORE, TOOL, 0.1) == R
    assert single_tool_rerank([], SCORE, TOOL, 0.5) == []


def test_single_tool_extended_list_adds_library_apis_and_rescores():
    # A's API a3 (score 0.7) was not in R (cut by truncation): the extension brings it into F1,
    # which is sorted by score again; F2 is untouched.
    library = {"A": ["a1", "a2", "a3"], "B": ["b1", "b2"], "C": ["c1"]}
    out = single_tool_rerank(R, SCORE, TOOL, 0.85, extend=lambda x: [a for t in sorted(x) for a in library[t]])
    assert out == ["a1", "a3", "a2", "b1", "c1", "b2"]
    # an extension that only lists APIs already present changes nothing
    assert single_tool_rerank(R, SCORE, TOOL, 0.85, extend=lambda x: ["a1", "a2"]) == ["a1", "a2", "b1", "c1", "b2"]


# ---------------------------------------------------------------- Alg. 2 (multi-tool queries)
MT_TOOL = {"x1": "X", "x2": "X", "x3": "X", "x4": "X", "y1": "Y", "z1": "Z", "w1": "W"}
MT_SCORE = {"x1": 0.9, "x2": 0.8, "x3": 0.7, "y1": 0.6, "x4": 0.5, "z1": 0.4}
MT_R = ["x1", "x2", "x3", "y1", "x4", "z1"]


def sim_matrix(items, pairs):
    s = np.eye(len(items))
    for a, b, v in pairs:
        i, j = items.index(a), items.index(b)
        s[i, j] = s[j, i] = v
    return s


def test_multi_tool_keeps_at_most_n_per_group():
    sim = sim_matrix(MT_R, [("y1", "z1", 0.95)])  # y1 and z1 are near-duplicates across tools
    # groups {x1..x4} (same tool) and {y1, z1} (cosine 0.95 > 0.9): two of each lead
    assert multi_tool_rerank(MT_R, MT_SCORE, MT_TOOL, sim, 0.9, 2) == ["x1", "x2", "y1", "z1", "x3", "x4"]
    # n = 1: one per group leads
    assert multi_tool_rerank(MT_R, MT_SCORE, MT_TOOL, sim, 0.9, 1) == ["x1", "y1", "x2", "x3", "x4", "z1"]
    # tau_m above their cosine: y1 and z1 are groups of their own, both lead
    assert multi_tool_rerank(MT_R, MT_SCORE, MT_TOOL, sim, 0.96, 1) == ["x1", "y1", "z1", "x2", "x3", "x4"]
    # n at least the group size: R unchanged
    assert multi_tool_rerank(MT_R, MT_SCORE, MT_TOOL, sim, 0.9, 4) == MT_R
    with pytest.raises(ValueError, match="positive"):
        multi_tool_rerank(MT_R, MT_SCORE, MT_TOOL, sim, 0.9, 0)


def test_multi_tool_groups_are_connected_components():
    items = ["y1", "z1", "w1", "x1"]
    # y1~z1 and z1~w1 above tau_m: one group through z1 although y1 and w1 are not similar
    sim = sim_matrix(items, [("y1", "z1", 0.8), ("z1", "w1", 0.8), ("y1", "w1", 0.1)])
    labels = groups_of(items, MT_TOOL, sim, 0.7)
    assert labels[0] == labels[1] == labels[2] != labels[3]
    # kept: the n best of a group by score, not its first members in R
    score = {"y1": 0.2, "z1": 0.5, "w1": 0.9, "x1": 0.1}
    assert multi_tool_rerank(items, score, MT_TOOL, sim, 0.7, 1) == ["w1", "x1", "y1", "z1"]
    with pytest.raises(ValueError, match="sim"):
        groups_of(items, MT_TOOL, np.eye(3), 0.7)


# ---------------------------------------------------------------- hierarchy and the one-query pipeline
def test_tool_parents_per_data_set():
    assert tool_parents("toolbench_stable", ["OTT details::Search", "suivi-colis::All"]) == ["OTT details", "suivi-colis"]
    assert tool_parents("tmdb", ["a", "b", "c"], descriptions=["[Movie Discover] x", "[Perso Images] y", "no prefix"]) \
        == ["Movie", "Person", "c"]
    assert tool_parents("ultratool", ["a", "b"], groups=["Travel", "Finance"]) == ["Travel", "Finance"]
    assert tool_parents("apibank", ["AddAgenda", "GetUserToken"]) == ["AddAgenda", "GetUserToken"]
    assert is_single_tool({0, 1}, ["A", "A", "B"]) and not is_single_tool({0, 2}, ["A", "A", "B"])


def toy_library():
    #          0       1       2       3       4       5
    ids = ["A::a1", "A::a2", "A::a3", "B::b1", "B::b2", "C::c1"]
    rng = np.random.default_rng(0)
    return Library("toolbench_toy", ids, ids, tool_parents("toolbench", ids), ["g"] * 6,
                   rng.normal(size=(6, 8)).astype(np.float32))


def test_rerank_variants_on_a_hand_made_ranking():
    lib = toy_library()
    score = np.array([0.9, 0.5, 0.7, 0.8, 0.3, 0.4])
    candidates = [0, 3, 1, 5, 4]  # a1 b1 a2 c1 b2; a3 (index 2) is not a candidate
    p = RerankParams(m=3, m_s=1, m_u=4, tau_s=0.85, tau_m=0.99, n=1)
    # rerank: top m = 3 sorted by score, the rest of the candidates follow in first-stage order
    assert rerank(candidates, "rerank", p, score, lib, {"A", "B", "C"}, single=True) == [0, 3, 1, 5, 4]
    # truncation with A seen, B and C unseen: a1 (rank 1) kept, b1, c1 kept to rank 4, a2 cut (seen, rank 3);
    # sorted: a1 .9, b1 .8, c1 .4; a2 and b2 follow
    assert rerank(candidates, "truncation", p, score, lib, {"A"}, single=True) == [0, 3, 5, 1, 4]
    # hierarchy, single-tool, A unseen: X = {A}, the extension brings a3 (0.7) in: a1, a3, a2, then b1
    assert rerank(candidates, "hierarchy", p, score, lib, set(), single=True)[:4] == [0, 2, 1, 3]
    # ... A seen: no extension
    assert rerank(candidates, "hierarchy", p, score, lib, {"A"}, single=True) == [0, 1, 3, 5, 4]
    # hierarchy, multi-tool, n = 1: one per tool leads (a1, b1), then a2
    assert rerank(candidates, "hierarchy", p, score, lib, {"A"}, single=False) == [0, 3, 1, 5, 4]
    assert rerank(candidates, "both", p, score, lib, {"A"}, single=False, depth=3) == [0, 3, 5]
    # both with Alg. 2 off: a multi-tool query keeps the truncated list in score order (a1 .9, b1 .8, c1 .4),
    # a single-tool query is reranked by Alg. 1 exactly as in "both"
    assert rerank(candidates, "both_alg1", p, score, lib, {"A"}, single=False) == [0, 3, 5, 1, 4]
    assert rerank(candidates, "both_alg1", p, score, lib, {"A"}, single=False) == \
        rerank(candidates, "truncation", p, score, lib, {"A"}, single=False)
    for seen in (set(), {"A"}):
        assert rerank(candidates, "both_alg1", p, score, lib, seen, single=True) == \
            rerank(candidates, "both", p, score, lib, seen, single=True)
    with pytest.raises(ValueError, match="variant"):
        rerank(candidates, "shuffle", p, score, lib, set(), single=True)


# ---------------------------------------------------------------- split
def test_seeded_split_holds_out_tools():
    rng = np.random.default_rng(1)
    tools = [f"t{i}" for i in range(40)]
    gold = [set(rng.choice(tools, size=rng.integers(1, 3), replace=False).tolist()) for _ in range(300)]
    a, b = seeded_split(gold, seed=3), seeded_split(gold, seed=3)
    assert (a.train, a.val, a.test) == (b.train, b.val, b.test)
    assert seeded_split(gold, seed=4).train != a.train
    assert sorted(a.train + a.val + a.test) == list(range(300))
    assert not (a.held_out_val & a.held_out_test) and len(a.held_out_val) == len(a.held_out_test) == 6
    held = a.held_out_val | a.held_out_test
    assert all(not (gold[q] & held) for q in a.train)  # held-out tools never train
    # a query touching a test-held-out tool is a test query (test wins over validation)
    assert all(q in a.test for q in range(300) if gold[q] & a.held_out_test)
    assert all(q in a.val for q in range(300) if gold[q] & a.held_out_val and not gold[q] & a.held_out_test)
    assert a.seen_tools == {t for q in a.train for t in gold[q]} and not (a.seen_tools & held)


# ---------------------------------------------------------------- trained pipeline, synthetic library
@pytest.fixture(scope="module")
def synthetic():
    """60 APIs in 15 tools of 4 APIs (tool = topic direction + API noise); queries: 1 or 2 tools, text
    names the API words."""
    rng = np.random.default_rng(0)
    dim, n_tools, per_tool = 16, 15, 4
    topics = rng.normal(size=(n_tools, dim))
    ids, texts, emb = [], [], []
    for t in range(n_tools):
        for a in range(per_tool):
            ids.append(f"tool{t}::api{t}x{a}")
            texts.append(f"tool{t} word{t}a{a} common")
            emb.append(topics[t] + 0.5 * rng.normal(size=dim))
    lib = Library("toolbench_synth", ids, texts, tool_parents("toolbench", ids), [f"g{t % 3}" for t in range(n_tools)
                                                                                   for _ in range(per_tool)],
                  np.array(emb, dtype=np.float32))
    q_texts, q_emb, golds = [], [], []
    for _ in range(240):
        tools = rng.choice(n_tools, size=1 if rng.random() < 0.6 else 2, replace=False)
        gold = {int(t) * per_tool + int(a) for t in tools for a in rng.choice(per_tool, size=2, replace=False)}
        q_texts.append(" ".join(f"word{g // per_tool}a{g % per_tool}" for g in sorted(gold)))
        q_emb.append(np.mean([emb[g] for g in gold], axis=0) + 0.8 * rng.normal(size=dim))
        golds.append(gold)
    q_emb = np.array(q_emb, dtype=np.float32)
    scores = l2_rows(q_emb) @ lib.embeddings.T
    dense = [list(np.argsort(-row, kind="stable")) for row in scores]
    return lib, q_texts, q_emb, golds, {"embedding": dense}


def l2_rows(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_run_toolrerank_on_a_synthetic_library(synthetic):
    lib, q_texts, q_emb, golds, stages = synthetic
    assert len(lib.tool_ids) >= DEPTH
    logs = []
    result = run_toolrerank(lib, q_texts, q_emb, golds, stages, seed=0, log=logs.append)
    rows = {(r["variant"], r["subset"], r["k"]): r for r in result.rows}
    # the pair model sees the API words in the query text: reranking beats the dense first stage
    assert rows[("both", "all", 5)]["recall"] > rows[("first", "all", 5)]["recall"]
    assert rows[("rerank", "all", 5)]["ndcg"] > rows[("first", "all", 5)]["ndcg"]
    assert {"single", "multi", "seen", "unseen"} <= {r["subset"] for r in result.rows}
    p = result.params["embedding"]
    assert p["m"] in (10, 30, 50) and 0.6 <= p["tau_s"] <= 0.9 and p["n"] in (2, 3, 4)
    assert result.classifier_test_accuracy is not None and result.split["train"] > 0
    text = markdown_tables(result)
    assert "both (ToolRerank)" in text and "Alg. 2 off" in text and "tau_s" in text and any("chosen on validation" in m for m in logs)


def test_tool_reranker_scores_only_candidates_and_matches_full_scoring(synthetic):
    lib, q_texts, q_emb, golds, stages = synthetic
    split = seeded_split([{lib.parents[g] for g in gold} for gold in golds], seed=0)
    model = PairModel(lib, c=0.1)
    qs, ds, ys = [], [], []
    for q in split.train:
        for d in sorted(golds[q]) + [d for d in stages["embedding"][q][:10] if d not in golds[q]]:
            qs.append(q), ds.append(d), ys.append(int(d in golds[q]))
    feats = np.vstack([model.features(q_texts[q], q_emb[q], [d]) for q, d in zip(qs, ds)])
    model.fit(feats, np.array(ys))
    classifier = QueryTypeClassifier().fit(q_emb[split.train], [is_single_tool(golds[q], lib.parents) for q in split.train])
    params = RerankParams(m=30, m_s=10, m_u=30, tau_s=0.7, tau_m=0.9, n=2)
    reranker = ToolReranker(lib, model, classifier, split.seen_tools, params)
    everything = np.arange(len(lib.tool_ids))
    for q in split.test[:20]:
        cands = stages["embedding"][q][:DEPTH]
        full = model.score(q_texts[q], q_emb[q], everything)
        single = bool(classifier.predict(q_emb[q])[0])
        for variant in ("rerank", "truncation", "hierarchy", "both"):
            assert reranker.rerank_query(q_texts[q], q_emb[q], cands, variant) == \
                rerank(cands, variant, params, full, lib, split.seen_tools, single)
    probs = model.score(q_texts[0], q_emb[0], everything)
    assert probs.shape == (60,) and (probs >= 0).all() and (probs <= 1).all()


def test_pair_model_features_by_hand():
    ids = ["A::get_weather", "A::get_forecast", "B::send_mail"]
    lib = Library("toolbench_x", ids, ["weather now", "forecast later", "mail send"], tool_parents("toolbench", ids),
                  ["g1", "g1", "g2"], np.eye(3, 4, dtype=np.float32))
    model = PairModel(lib)
    f = model.scalar_features("weather in Paris", np.array([1, 0, 0, 0], dtype=np.float32), [0, 1, 2])
    np.testing.assert_allclose(f[:, 0], [1, 0, 0], atol=1e-6)  # cos(q, d)
    np.testing.assert_allclose(f[:, 1], [2 ** -0.5, 2 ** -0.5, 0], atol=1e-6)  # cos(q, tool centroid)
    np.testing.assert_allclose(f[:, 2], [2 ** -0.5, 2 ** -0.5, 0], atol=1e-6)  # cos(q, group centroid)
    assert f[0, 3] > 0 and f[1, 3] == f[2, 3] == 0  # BM25 and TF-IDF see 'weather' in doc 0 only
    assert f[0, 4] > 0 and f[1, 4] == f[2, 4] == 0
    np.testing.assert_allclose(f[:, 5], [0.5, 0, 0])  # {get, weather}: half of the API name in the query
    np.testing.assert_allclose(f[:, 6], [0, 0, 0])  # tool names 'A', 'B' not in the query
    assert model.features("weather", np.ones(4), [2]).shape == (1, 7)
    assert model.with_c(0.1, product=True).features("weather", np.ones(4), [2]).shape == (1, 11)
    with pytest.raises(RuntimeError, match="fit"):
        model.score("weather", np.ones(4), [0])


def test_pair_model_probabilities_are_calibrated(synthetic):
    """Strong regularisation squeezes logistic probabilities towards the base rate; Platt scaling
    spreads them again without changing the order."""
    lib, q_texts, q_emb, golds, stages = synthetic
    split = seeded_split([{lib.parents[g] for g in gold} for gold in golds], seed=0)
    from tasks.retrieval.rerank.pair_model import pair_training_set

    base, feats, labels = pair_training_set(lib, q_texts, q_emb, golds, split,
                                            [[stages["embedding"][q]] for q in range(len(golds))])
    model = base.with_c(0.0001).fit(feats, labels)
    q = split.test[0]
    probs = model.score(q_texts[q], q_emb[q], range(60))
    raw = model.model.predict_proba(model.features(q_texts[q], q_emb[q], range(60)))[:, 1]
    assert probs.max() > 0.6 and raw.max() - raw.min() < probs.max() - probs.min()
    # monotone in the raw probability (ties where the calibrated one saturates)
    by_raw = probs[np.argsort(-raw, kind="stable")]
    assert (np.diff(by_raw) <= 1e-12).all()


def test_too_few_queries_is_an_error():
    from tasks.retrieval.rerank.experiment import TooFewQueries

    lib = toy_library()
    with pytest.raises(TooFewQueries):
        run_toolrerank(lib, ["q"], np.ones((1, 8), dtype=np.float32), [{0}], {"embedding": [list(range(6))]})
