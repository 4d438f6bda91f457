"""GCN step, ranking, lexical baselines and metrics against hand-computed numbers."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

from tasks.retrieval.gcn import adjacency_matrix, gcn_propagate, normalized_adjacency
from tasks.retrieval.lexical import BM25, TfIdf, tokenize
from tasks.retrieval.metrics import evaluate_rankings, ndcg_at_k, pass_rate_at_k, recall_at_k
from tasks.retrieval.ranking import cosine_top_k, top_k_from_scores
from tasks.retrieval.tool_text import embed_text

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
    from sklearn.feature_extraction.text import TfidfVectorizer

    docs = ["Login the user with a password", "Update the user's email", "Query the weather for a city",
            "Delete the user account", "weather weather forecast"]
    queries = ["change my email", "what is the weather in Paris", "remove user account"]
    ours = TfIdf(docs)
    ref = TfidfVectorizer(tokenizer=tokenize, lowercase=False, token_pattern=None)
    matrix = ref.fit_transform(docs)
    for q in queries:
        expected = (matrix @ ref.transform([q]).T).toarray().ravel()
        np.testing.assert_allclose(ours.scores(q), expected, atol=1e-12)
    np.testing.assert_allclose(ours.scores_many(queries), np.stack([ours.scores(q) for q in queries]), atol=1e-12)
    # camelCase names are split before lower-casing (tokenize), as for BM25.
    assert TfIdf(["GetUserToken", "weather"]).scores("user token")[0] > 0


def test_tfidf_by_hand():
    # N = 3 documents; smooth idf = ln((1 + N) / (1 + df)) + 1: df(login) = 2 -> ln(4/3) + 1,
    # df(user) = df(email) = 1 -> ln 2 + 1. Doc 0 "login user": (ln(4/3)+1, ln2+1) / norm.
    # Query "login": unit vector on 'login', so its score with doc 0 is (ln(4/3)+1) / norm(doc 0),
    # with doc 2 ("login" alone) exactly 1 and with doc 1 0.
    docs = ["login user", "update email", "login"]
    a, b = math.log(4 / 3) + 1, math.log(2) + 1
    np.testing.assert_allclose(TfIdf(docs).scores("Login please"), [a / math.hypot(a, b), 0.0, 1.0], atol=1e-12)


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


def test_sentence_encoder_matches_sentence_transformers(encoder):
    """The hand-written mean pooling gives the library's vectors on the packaged all-MiniLM-L6-v2."""
    st = pytest.importorskip("sentence_transformers", reason="sentence-transformers not installed")
    from models.encoder_path import offline_default_path

    texts = ["Log the user in with a password", "Forecast tomorrow's weather in Paris", "x"]
    ref = st.SentenceTransformer(str(offline_default_path()), device="cpu").encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(encoder.encode(texts), ref, atol=1e-5)


@pytest.fixture(scope="module")
def l3_encoder():
    from models.sentence_encoder import EncoderConfig, SentenceEncoder

    try:
        return SentenceEncoder(EncoderConfig("paraphrase-minilm-l3", batch_size=2))
    except ModuleNotFoundError as exc:
        pytest.skip(f"paraphrase-MiniLM-L3-v2 ONNX package or onnxruntime missing: {exc}")


L3_TEXTS = ["Log the user in with a password", "Sign in a user account", "Forecast tomorrow's weather in Paris",
            "What is the weather like?", "Delete the meeting from my calendar", "Remove an appointment", "x"]


def test_paraphrase_l3_graph_mean_pools_token_states(l3_encoder):
    """The ONNX graph's pooled output is the mean of the non-padding token states (mean pooling, as the
    sentence-transformers model paraphrase-MiniLM-L3-v2 is defined), not normalised; padding changes nothing."""
    backend = l3_encoder.backend
    assert backend.token_output is not None and l3_encoder.dim == 384 and l3_encoder.max_length == 128
    batch = l3_encoder.tokenizer(L3_TEXTS, padding=True, return_tensors="np")
    mask = batch["attention_mask"]
    assert (mask == 0).any()  # the batch has padding
    tokens, pooled = backend.run(batch["input_ids"], mask, outputs=[backend.token_output, backend.pooled_output])
    by_hand = (tokens * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    np.testing.assert_allclose(pooled, by_hand, atol=1e-5)
    # The graph does not normalise (no Normalize module in this model): norms of about 3-8, not 1.
    assert np.all(np.linalg.norm(pooled, axis=1) > 1.5)
    # Padding is masked out: each text alone (no padding) pools to the same vector.
    for i, text in enumerate(L3_TEXTS):
        one = l3_encoder.tokenizer([text], return_tensors="np")
        (alone,) = backend.run(one["input_ids"], one["attention_mask"])
        np.testing.assert_allclose(alone[0], pooled[i], atol=1e-4)
    # The encoder returns the pooled vectors L2-normalised (cosine retrieval).
    emb = l3_encoder.encode(L3_TEXTS)
    assert emb.dtype == np.float32 and emb.shape == (len(L3_TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(emb, pooled / np.linalg.norm(pooled, axis=1, keepdims=True), atol=1e-5)


def test_paraphrase_l3_is_a_paraphrase_model_with_the_borrowed_tokenizer(l3_encoder, encoder):
    """With the all-MiniLM-L6-v2 tokenizer the L3 model puts paraphrases together, and its similarity
    structure agrees with the L6 model's (a wrong vocabulary would give unrelated similarities)."""
    emb = l3_encoder.encode(L3_TEXTS)
    sims = emb @ emb.T
    for a, b, other in ((0, 1, 2), (2, 3, 0), (4, 5, 2)):
        assert sims[a, b] > sims[a, other] + 0.2
    # Spearman correlation of the pairwise similarities, L3 vs L6: 0.71 measured; with token ids
    # scrambled (a vocabulary that does not fit) it is about 0.
    texts = L3_TEXTS[:-1] + ["Book a flight to Tokyo", "Reserve plane tickets", "Translate this sentence to French"]
    a, b = l3_encoder.encode(texts), encoder.encode(texts)
    upper = np.triu_indices(len(texts), 1)
    rank = lambda v: np.argsort(np.argsort(v))  # noqa: E731
    assert np.corrcoef(rank((a @ a.T)[upper]), rank((b @ b.T)[upper]))[0, 1] > 0.5
    # Truncation at the model's 128 tokens, batching and order do not change a text's vector.
    long = " ".join(["weather"] * 400)
    out = l3_encoder.encode([long, L3_TEXTS[0]])
    np.testing.assert_allclose(out[1], emb[0], atol=1e-5)
    assert np.isfinite(out).all()


def test_encoder_names_and_lengths():
    from models.encoder_path import (
        PARAPHRASE_L3,
        PARAPHRASE_L3_HUB_ID,
        default_max_length,
        resolve_model_name_or_path,
    )

    assert default_max_length(None) == 256 and default_max_length(PARAPHRASE_L3) == 128
    assert default_max_length(PARAPHRASE_L3_HUB_ID) == 128 and default_max_length("bert-base-uncased") == 256
    # The hub id goes to transformers unchanged (online path); the ONNX name is no transformers model.
    assert resolve_model_name_or_path(PARAPHRASE_L3_HUB_ID) == PARAPHRASE_L3_HUB_ID
    with pytest.raises(ValueError, match="ONNX"):
        resolve_model_name_or_path(PARAPHRASE_L3)
