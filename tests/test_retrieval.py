"""GCN step, ranking, lexical baselines and metrics against hand-computed numbers."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

from tasks.retrieval import (
    BM25,
    TfIdf,
    adjacency_matrix,
    cosine_top_k,
    embed_text,
    evaluate_rankings,
    gcn_propagate,
    ndcg_at_k,
    normalized_adjacency,
    pass_rate_at_k,
    recall_at_k,
    tokenize,
    top_k_from_scores,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def test_gcn_three_node_path_by_hand():
    # Path 0 - 1 - 2 (edges 0->1 and 1->2, made symmetric). A + I:
    #   [[1,1,0],[1,1,1],[0,1,1]], degrees d = (2, 3, 2).
    # D^-1/2 (A+I) D^-1/2 entry (i,j) = 1/sqrt(d_i d_j):
    #   [[1/2, 1/sqrt6, 0], [1/sqrt6, 1/3, 1/sqrt6], [0, 1/sqrt6, 1/2]]
    # X = [[1,0],[0,1],[1,1]]:
    #   row 0 = 1/2*(1,0) + 1/sqrt6*(0,1)                 = (0.5, 0.408248)
    #   row 1 = 1/sqrt6*(1,0) + 1/3*(0,1) + 1/sqrt6*(1,1) = (2/sqrt6, 1/3 + 1/sqrt6) = (0.816497, 0.741582)
    #   row 2 = 1/sqrt6*(0,1) + 1/2*(1,1)                 = (0.5, 0.908248)
    x = np.array([[1, 0], [0, 1], [1, 1]], dtype=np.float32)
    s6 = math.sqrt(6)
    expected = np.array([[0.5, 1 / s6], [2 / s6, 1 / 3 + 1 / s6], [0.5, 0.5 + 1 / s6]])
    np.testing.assert_allclose(gcn_propagate(x, [(0, 1), (1, 2)]), expected, rtol=1e-6)
    norm = normalized_adjacency(adjacency_matrix(3, [(0, 1), (1, 2)]))
    np.testing.assert_allclose(norm, [[0.5, 1 / s6, 0], [1 / s6, 1 / 3, 1 / s6], [0, 1 / s6, 0.5]], rtol=1e-12)


def test_gcn_directed_variant_and_isolated_node_by_hand():
    # Edge 0 -> 1 kept one way: A + I = [[1,1,0],[0,1,0],[0,0,1]], row degrees (2, 1, 1).
    # Entries 1/sqrt(d_i d_j): (0,0)=1/2, (0,1)=1/sqrt2, (1,1)=1, (2,2)=1.
    x = np.array([[1, 0], [0, 1], [3, 4]], dtype=np.float32)
    out = gcn_propagate(x, [(0, 1)], direction="dependent_to_prerequisite")
    np.testing.assert_allclose(out, [[0.5, 1 / math.sqrt(2)], [0, 1], [3, 4]], rtol=1e-6)
    # No edges: D = I, the step is the identity.
    np.testing.assert_allclose(gcn_propagate(x, []), x)
    # A duplicated edge and its reverse give the same symmetric graph as the edge once.
    np.testing.assert_allclose(gcn_propagate(x, [(0, 1), (1, 0), (0, 1)]), gcn_propagate(x, [(0, 1)]))


def test_top_k_orders_by_score_and_breaks_ties_by_index():
    scores = np.array([[0.2, 0.9, 0.9, 0.1], [0.0, 0.0, 0.5, 0.7]])
    assert top_k_from_scores(scores, 3).tolist() == [[1, 2, 0], [3, 2, 0]]
    tools = np.array([[1, 0], [0, 1], [1, 1]], dtype=np.float32)
    # query (1, 0.1): cosines 0.995, 0.0995, 0.778
    assert cosine_top_k(np.array([1, 0.1]), tools, 2).tolist() == [[0, 2]]


def test_metrics_by_hand():
    ranked = ["a", "b", "c", "d", "e", "f"]
    gold = {"b", "e", "z"}
    assert recall_at_k(ranked, gold, 5) == pytest.approx(2 / 3)
    assert recall_at_k(ranked, gold, 1) == 0.0
    # DCG@5 = 1/log2(3) + 1/log2(6) = 0.630930 + 0.386853; IDCG@5 (3 gold) = 1 + 0.630930 + 0.5
    assert ndcg_at_k(ranked, gold, 5) == pytest.approx((0.630930 + 0.386853) / 2.130930, rel=1e-5)
    assert pass_rate_at_k(ranked, gold, 5) == 0.0
    gold2 = {"a", "c"}
    # DCG@5 = 1 + 1/log2(4) = 1.5; IDCG = 1 + 1/log2(3) = 1.630930
    assert ndcg_at_k(ranked, gold2, 5) == pytest.approx(1.5 / 1.630930, rel=1e-5)
    assert pass_rate_at_k(ranked, gold2, 2) == 0.0 and pass_rate_at_k(ranked, gold2, 3) == 1.0
    # Ideal ranking scores 1; a gold set larger than k is capped in the ideal DCG.
    assert ndcg_at_k(["x", "y"], {"x", "y", "w"}, 2) == pytest.approx(1.0)
    means = evaluate_rankings([ranked, ranked], [gold, gold2], ks=(5,))
    assert means["recall@5"] == pytest.approx((2 / 3 + 1) / 2)
    assert means["pass_rate@5"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="gold"):
        recall_at_k(ranked, set(), 5)
    with pytest.raises(ValueError, match="rankings"):
        evaluate_rankings([ranked], [gold, gold2])


def test_tokenize_splits_api_names():
    assert tokenize("GetUserToken(user_id) returns HTTP200") == ["get", "user", "token", "user", "id", "returns", "http200"]


def test_bm25_by_hand():
    docs = ["login user", "update email", "login"]
    # df(login) = 2 of N = 3: idf = ln(1 + (3 - 2 + 0.5) / (2 + 0.5)) = ln(1.6)
    # avgdl = 5/3. doc 0 (len 2): K = 1.5 * (0.25 + 0.75 * 2 / (5/3)) = 1.725, score = idf * 2.5 / 2.725
    # doc 2 (len 1): K = 1.5 * (0.25 + 0.75 * 0.6) = 1.05, score = idf * 2.5 / 2.05
    idf = math.log(1.6)
    np.testing.assert_allclose(BM25(docs).scores("Login please"), [idf * 2.5 / 2.725, 0.0, idf * 2.5 / 2.05])


def test_tfidf_matches_scikit_learn():
    sklearn_text = pytest.importorskip("sklearn.feature_extraction.text", reason="scikit-learn not installed")
    docs = ["Login the user with a password", "Update the user's email", "Query the weather for a city",
            "Delete the user account", "weather weather forecast"]
    queries = ["change my email", "what is the weather in Paris", "remove user account"]
    ours = TfIdf(docs)
    ref = sklearn_text.TfidfVectorizer(tokenizer=tokenize, lowercase=False, token_pattern=None)
    matrix = ref.fit_transform(docs)
    for q in queries:
        expected = (matrix @ ref.transform([q]).T).toarray().ravel()
        np.testing.assert_allclose(ours.scores(q), expected, atol=1e-12)


def test_embed_text_styles():
    doc = {"name": "GetUserToken", "description": "Get the user token.",
           "input_params": [{"name": "username", "type": "str", "description": "User name."}],
           "output_params": [{"name": "token", "type": "str", "description": ""}]}
    assert embed_text(doc, "description") == "Get the user token."
    text = embed_text(doc, "structured")
    assert text.splitlines() == ["name: GetUserToken", "description: Get the user token.",
                                 "input parameters: username (str): User name.", "output parameters: token (str)"]
    with pytest.raises(ValueError, match="embed style"):
        embed_text(doc, "names")


@pytest.fixture(scope="module")
def encoder():
    from models.sentence_encoder import EncoderConfig, SentenceEncoder

    try:
        return SentenceEncoder(EncoderConfig(batch_size=2))
    except ModuleNotFoundError as exc:
        pytest.skip(f"packaged MiniLM missing: {exc}")


def test_sentence_encoder_unit_vectors_batch_invariant_and_semantic(encoder):
    texts = ["Log the user in with a password", "Sign in a user account", "Forecast tomorrow's weather in Paris",
             "What is the weather like?", "x"]
    emb = encoder.encode(texts)
    assert emb.shape == (5, 384) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, rtol=1e-5)
    # Batching and padding must not change a text's vector.
    alone = np.stack([encoder.encode([t])[0] for t in texts])
    np.testing.assert_allclose(emb, alone, atol=1e-5)
    sims = emb @ emb.T
    assert sims[0, 1] > sims[0, 2] and sims[2, 3] > sims[2, 1]
    with pytest.raises(TypeError):
        encoder.encode("one string")
