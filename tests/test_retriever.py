"""The dependency retriever (issue 20 item 2): its texts, its examples from TDI v2 shards and tool sets, the
in-batch contrastive loss, the training loop's best-checkpoint rule, the retrieval rule's share budget, and the
train-retriever flow end to end on a tiny encoder; build-graph's --retrieval-encoder."""
from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from models.encoder_path import SENTENCE_BERT_CONFIG, default_max_length  # noqa: E402
from schemas.dependency_text import parameter_query, parameter_queries, producer_text, tool_query  # noqa: E402
from schemas.toolset import DependencyEdge, ParameterEdge, Tool, ToolSet  # noqa: E402
from tasks.graph.candidates import retrieval_recall, retrieve_producers  # noqa: E402
from tasks.training.retriever import (RETRIEVER_FILE, InBatchContrastiveLoss, RetrieverArguments,  # noqa: E402
                                      RetrieverExample, tdi_retriever_examples, toolset_retriever_examples,
                                      train_retriever)
from tests.test_param_scorer import TOOLS, TOYSET, _write_shard, doc  # noqa: E402


def make_tiny_encoder(folder):
    """A 2-layer, hidden-32 BERT encoder (no head) with the packaged MiniLM tokenizer."""
    from transformers import BertConfig, BertModel

    from models.discriminator import load_tokenizer

    tokenizer = load_tokenizer("offline-minilm")
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=512)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    return make_tiny_encoder(tmp_path_factory.mktemp("tiny-encoder"))


# ---------------------------------------------------------------------------------------------
# Texts and examples


def test_queries_show_the_input_and_its_tool_and_dropout_keeps_only_the_meaning():
    d = doc("list_orders", [("user_id", "whose orders"), ("limit", "")])
    assert parameter_queries(d) == ["user id: whose orders (input of list orders)", "limit (input of list orders)"]
    assert parameter_query(d, d["input_params"][0], show_name=False) == "whose orders (input of list orders)"
    assert parameter_query(d, d["input_params"][1], show_name=False) == "limit (input of list orders)"  # no meaning to show
    assert parameter_queries(doc("ping")) == [tool_query(doc("ping"))] == ["ping: The ping API."]
    assert producer_text(TOOLS[0].doc) == "get user: The get_user API.; returns user id: the user's id"


def test_toolset_examples_are_gold_edges_with_a_same_group_negative_that_is_no_prerequisite():
    no_inputs = Tool("report", "shop", doc("report"))
    ts = ToolSet("toy", TOOLS + [no_inputs], TOYSET.edges + [DependencyEdge("shop", "report", "list_orders")], [],
                 TOYSET.parameter_edges)
    examples = toolset_retriever_examples(ts, {"shop"}, seed=1, name_dropout=0.0)
    by_query = {e.query: e for e in examples}
    assert set(by_query) == {"user id: whose orders (input of list orders)",
                             "customer: the user who opens it (input of open account)",
                             "report: The report API."}  # a consumer without inputs asks with its name
    assert by_query["report: The report API."].positive == producer_text(TOOLS[1].doc)
    shop_docs = {producer_text(t.doc) for t in ts.tools if t.group == "shop"}
    for e in examples:
        assert e.negative in shop_docs and e.negative != e.positive and e.group == "toy/shop"
    # the negative of list_orders' input is neither its prerequisite (get_user) nor itself
    assert by_query["user id: whose orders (input of list orders)"].negative not in {
        producer_text(TOOLS[0].doc), producer_text(TOOLS[1].doc)}
    dropped = toolset_retriever_examples(ts, {"shop"}, seed=1, name_dropout=1.0)
    assert "whose orders (input of list orders)" in {e.query for e in dropped}


def test_output_dropout_hides_both_producers_outputs_and_draws_nothing_else_differently():
    ts = ToolSet("toy", TOOLS, TOYSET.edges, [], TOYSET.parameter_edges)
    plain = toolset_retriever_examples(ts, {"shop"}, seed=3)
    assert toolset_retriever_examples(ts, {"shop"}, seed=3, output_dropout=0.0) == plain
    hidden = toolset_retriever_examples(ts, {"shop"}, seed=3, output_dropout=1.0)
    without = {producer_text(t.doc): producer_text({k: v for k, v in t.doc.items() if k != "output_params"})
               for t in TOOLS}
    assert len(hidden) == len(plain)
    for p, h in zip(plain, hidden):  # the same queries, producers and negatives, shown by name and description
        assert (h.query, h.key, h.group) == (p.query, p.key, p.group)
        assert h.positive == without[p.positive] and "returns" not in h.positive and "returns" in p.positive
        assert h.negative == (without[p.negative] if p.negative else None)
    some = toolset_retriever_examples(ts, {"shop"}, seed=3, output_dropout=0.5)
    assert [(e.query, e.key) for e in some] == [(e.query, e.key) for e in plain]
    assert {e.positive for e in some} <= {e.positive for e in plain} | {e.positive for e in hidden}


def test_tdi_examples_keep_one_per_flow_and_draw_negatives_from_the_package(tmp_path):
    mk = lambda d: json.dumps(d)  # noqa: E731
    producer = doc("make_dir", [], [("tmp_dir", "the new folder")])
    consumer = doc("list_files", [("path", "the folder to look into")])
    other = doc("read_text", [("path", "a file")], [("text", "its content")])
    base = {"label_name": "x", "split": "train", "origin": "mined", "producer_output": "tmp_dir"}
    rows = [
        base | {"pair_id": "1", "doc_a": mk(consumer), "doc_b": mk(producer), "label": 0, "tool_a_id": "c",
                "tool_b_id": "p", "consumer_param": "path", "source_a": "pkg.io.list_files", "source_b": "pkg.fs.make_dir"},
        base | {"pair_id": "2", "doc_a": mk(producer), "doc_b": mk(consumer), "label": 2, "tool_a_id": "p",
                "tool_b_id": "c", "consumer_param": "path", "source_a": "pkg.fs.make_dir", "source_b": "pkg.io.list_files"},
        base | {"pair_id": "3", "doc_a": mk(other), "doc_b": mk(producer), "label": 1, "tool_a_id": "o",
                "tool_b_id": "p", "consumer_param": None, "producer_output": None, "source_a": "pkg.io.read_text",
                "source_b": "pkg.fs.make_dir"},
    ]
    _write_shard(tmp_path / "tdi" / "shards" / "train-00000-of-00001.parquet", rows)
    (e,) = tdi_retriever_examples(tmp_path / "tdi", "train", name_dropout=0.0)
    assert e.query == "path: the folder to look into (input of list files)"
    assert e.positive == producer_text(producer) and e.key == "p" and e.group == "tdi/pkg"
    assert e.negative == producer_text(other)  # the only pkg tool that neither is the consumer nor feeds it
    with pytest.raises(FileNotFoundError, match="no validation shards"):
        tdi_retriever_examples(tmp_path / "tdi", "validation")


# ---------------------------------------------------------------------------------------------
# Loss and training


def test_a_negative_is_drawn_as_random_choice_over_the_ids_left_would_draw_it():
    """The hard-negative draw skips the excluded ids without listing the rest: it must give what
    ``rng.choice`` over the ids left gives, call for call, so the examples of a seed stay the same."""
    import random

    from tasks.training.retriever import _choice_excluding

    maker = random.Random(7)
    ours, theirs = random.Random(3), random.Random(3)
    for _ in range(2000):
        ids = sorted({f"t{maker.randrange(40)}" for _ in range(maker.randrange(1, 12))})
        excluded = ({f"t{maker.randrange(40)}" for _ in range(maker.randrange(0, 6))}  # some outside ids
                    | set(maker.sample(ids, k=maker.randrange(0, len(ids) + 1))))  # up to all of them
        left = [t for t in ids if t not in excluded]
        expected = theirs.choice(left) if left else None
        assert _choice_excluding(ours, ids, excluded) == expected
    assert ours.random() == theirs.random()  # the two streams are still in step


def test_contrastive_loss_by_hand_and_a_shared_producer_is_no_negative():
    q = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [0.6, 0.8]]), dim=1)
    d = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.8, 0.6]]), dim=1)  # 2 pos + 1 neg
    loss = InBatchContrastiveLoss(scale=1.0)
    logits = (q @ d.T).numpy()
    want = np.mean([-logits[i, i] + math.log(np.exp(logits[i]).sum()) for i in range(2)])
    assert float(loss(q, d, ["a", "b"])) == pytest.approx(want, abs=1e-6)
    # the same producer for both queries: the other's positive column is masked out of each row
    masked = np.mean([-logits[i, i] + math.log(np.exp(logits[i, [i, 2]]).sum()) for i in range(2)])
    assert float(loss(q, d, ["a", "a"])) == pytest.approx(masked, abs=1e-6)


def _examples(n=24):
    return [RetrieverExample(f"input {i} of tool {i}", f"producer {i}", f"producer {i + 1}", "g", str(i)) for i in range(n)]


def test_training_keeps_the_untrained_encoder_when_validation_never_improves(tiny_encoder, tmp_path):
    calls = []

    def validate(encoder):
        calls.append(encoder.encode(["a probe"]).shape)
        return 1.0 - 0.1 * len(calls)  # worse every time

    args = RetrieverArguments(str(tiny_encoder), batch_size=8, max_steps=6, evals=3, max_length=16)
    result = train_retriever(_examples(), args, tmp_path / "run", validate)
    assert len(calls) == 4 and calls[0] == (1, 32)  # step 0 plus 3 evaluations
    assert result.best_step == 0 and result.best_score == result.untrained_score == pytest.approx(0.9)
    assert [h["step"] for h in result.history] == [0, 2, 4, 6]
    meta = json.loads((result.best_dir / RETRIEVER_FILE).read_text())
    assert meta["best_step"] == 0 and meta["history"] == result.history and meta["n_train"] == 24
    assert json.loads((result.best_dir / SENTENCE_BERT_CONFIG).read_text()) == {"max_seq_length": 16}
    assert default_max_length(str(result.best_dir)) == 16  # build-graph encodes at the trained length


def test_training_breaks_a_tie_by_the_scores_second_number_and_a_full_tie_keeps_the_earlier(tiny_encoder, tmp_path):
    args = RetrieverArguments(str(tiny_encoder), batch_size=8, max_steps=6, evals=3, max_length=16)
    scores = iter([(0.8, 0.5), (0.8, 0.6), (0.8, 0.6), (0.7, 0.9)])  # steps 0, 2, 4, 6
    result = train_retriever(_examples(), args, tmp_path / "run", lambda encoder: next(scores))
    assert (result.best_step, result.best_score, result.untrained_score) == (2, 0.8, 0.8)
    assert result.history == [{"step": 0, "validation": 0.8, "tie_break": [0.5]},
                              {"step": 2, "validation": 0.8, "tie_break": [0.6]},
                              {"step": 4, "validation": 0.8, "tie_break": [0.6]},
                              {"step": 6, "validation": 0.7, "tie_break": [0.9]}]
    meta = json.loads((result.best_dir / RETRIEVER_FILE).read_text())
    assert meta["best_step"] == 2 and meta["validation"] == 0.8 and meta["history"] == result.history


def test_training_saves_the_best_step_and_its_weights_differ_from_the_start(tiny_encoder, tmp_path):
    from transformers import AutoModel

    scores = iter([0.1, 0.5, 0.3])
    args = RetrieverArguments(str(tiny_encoder), batch_size=8, max_steps=4, evals=2, max_length=16,
                              learning_rate=1e-3)
    result = train_retriever(_examples(), args, tmp_path / "run", lambda encoder: next(scores))
    assert (result.best_step, result.best_score, result.untrained_score) == (2, 0.5, 0.1)
    start = AutoModel.from_pretrained(tiny_encoder).state_dict()
    best = AutoModel.from_pretrained(result.best_dir).state_dict()
    assert any(not torch.equal(start[k], best[k]) for k in start)


def test_bf16_training_autocasts_the_encoding_and_saves_fp32_weights_the_config_decides_it(tiny_encoder, tmp_path,
                                                                                          monkeypatch):
    from transformers import AutoModel

    from tasks.training import precision, retriever
    from tasks.training.retriever_config import RetrieverConfig

    seen = []
    real_embed = retriever._embed

    def embed(model, tokenizer, texts, max_length):
        seen.append(torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu"))
        return real_embed(model, tokenizer, texts, max_length)

    monkeypatch.setattr(retriever, "_embed", embed)
    trained = {}
    for bf16 in (True, False):
        seen.clear()
        args = RetrieverArguments(str(tiny_encoder), batch_size=8, max_steps=2, evals=1, max_length=16,
                                  learning_rate=1e-3, bf16=bf16)
        scores = iter([0.0, 1.0])  # the trained step is the best: its weights are saved
        result = train_retriever(_examples(), args, tmp_path / f"run{bf16}", lambda encoder: next(scores))
        assert result.best_step == 2
        assert set(seen[-4:]) == {torch.bfloat16 if bf16 else False}  # the training batches' encodings
        trained[bf16] = AutoModel.from_pretrained(result.best_dir).state_dict()
        assert {v.dtype for v in trained[bf16].values() if v.is_floating_point()} == {torch.float32}
    assert any(not torch.equal(trained[True][k], trained[False][k]) for k in trained[True])

    monkeypatch.setattr(precision, "cpu_bf16_unit", lambda: None)
    monkeypatch.setattr(precision.torch.cuda, "is_available", lambda: True)  # CUDA there: the retriever stays on CPU
    assert RetrieverConfig(tdi=None).arguments().bf16 is False
    assert RetrieverConfig(tdi=None, train_precision="bf16").reranker_arguments().bf16 is True
    monkeypatch.setattr(precision, "cpu_bf16_unit", lambda: "avx512_bf16")
    assert RetrieverConfig(tdi=None).arguments().bf16 is True
    assert RetrieverConfig(tdi=None, train_precision="fp32").arguments().bf16 is False
    with pytest.raises(ValueError, match="--train-precision 'fp16'"):
        RetrieverConfig(tdi=None, train_precision="fp16")


def test_reranker_pooling_passes_from_the_config_and_refuses_unknown_values():
    from tasks.training.retriever_config import RetrieverConfig

    assert RetrieverConfig(tdi=None).reranker_arguments().pooling == "auto"
    assert RetrieverConfig(tdi=None, reranker_pooling="cls").reranker_arguments().pooling == "cls"
    with pytest.raises(ValueError, match="--reranker-pooling 'max': choose auto, mean, cls"):
        RetrieverConfig(tdi=None, reranker_pooling="max")


def test_memo_encode_encodes_each_distinct_text_once_and_keeps_the_order(tiny_encoder):
    from models.sentence_encoder import EncoderConfig, MemoEncode, SentenceEncoder

    encoder = SentenceEncoder(EncoderConfig(str(tiny_encoder), max_length=16))
    asked: list[list[str]] = []

    def counting(texts):
        asked.append(list(texts))
        return encoder.encode(texts)

    memo = MemoEncode(counting)
    texts = ["get the weather", "book a room", "get the weather", "a much longer text about a city and its hotels"]
    first = memo(texts)
    assert asked == [["get the weather", "book a room", "a much longer text about a city and its hotels"]]
    again = memo(["book a room", "a new one", "get the weather"])
    assert asked[1:] == [["a new one"]]  # only the unseen text is encoded
    fresh = encoder.encode(texts)
    assert first.shape == fresh.shape and np.allclose(first, fresh, atol=1e-5)
    assert np.allclose(again, encoder.encode(["book a room", "a new one", "get the weather"]), atol=1e-5)
    assert memo([]).shape == (0, encoder.dim)
    with pytest.raises(TypeError):
        memo("one string")


def test_arguments_refuse_bad_values():
    for bad in ({"batch_size": 0}, {"max_length": 0}, {"num_layers": 0}, {"epochs": 0}, {"warmup_ratio": 1.0}):
        with pytest.raises(ValueError):
            RetrieverArguments(**bad)


# ---------------------------------------------------------------------------------------------
# The retrieval rule's share budget and recall table


def test_share_keeps_the_best_scored_pairs_of_each_group_up_to_its_budget():
    tools = [Tool(f"t{i}", "g", doc(f"t{i}", [("x", "")])) for i in range(5)]  # 20 ordered pairs
    producers = np.eye(5, dtype=np.float32)
    queries = np.array([[0.0, 0.9, 0.1, 0, 0], [0.95, 0.0, 0, 0.05, 0], [0.5, 0.5, 0, 0, 0], [0, 0, 0.2, 0, 0.8],
                        [0.1, 0.0, 0, 0.99, 0]], dtype=np.float32)
    every = retrieve_producers(tools, producers, queries, list(range(5)), k=2)
    assert len(every) == 10
    capped = retrieve_producers(tools, producers, queries, list(range(5)), k=2, share=0.1)  # 2 of 20
    assert capped == {(0, 1), (3, 4)} <= every  # cosines 0.95 and 0.99 (normalised), the two best
    with pytest.raises(ValueError, match="share"):
        retrieve_producers(tools, producers, queries, list(range(5)), k=2, share=0.0)
    # ranked by another score: (2, 0) first, (1, 0) second; the pairs it leaves out keep their cosine (< 1)
    asked = []

    def rank(pairs):
        asked.append(set(pairs))
        return {(2, 0): 3.0, (1, 0): 2.0}

    assert retrieve_producers(tools, producers, queries, list(range(5)), k=2, share=0.1, rank=rank) == {(2, 0), (1, 0)}
    assert asked == [every]  # it ranks the top-k pairs, once
    assert retrieve_producers(tools, producers, queries, list(range(5)), k=2, rank=rank) == every  # no cap: unused


def test_share_is_one_budget_for_the_set_spent_on_the_best_pairs_whatever_their_group():
    """Two groups of 3 tools (12 ordered pairs), a share of 2/12: both pairs go to the group whose pairs score
    highest, where a budget per group (1 each) would spend one on the other group's weak pair."""
    tools = [Tool(f"a{i}", "dense", doc(f"a{i}", [("x", "")])) for i in range(3)] + \
        [Tool(f"b{i}", "sparse", doc(f"b{i}", [("x", "")])) for i in range(3)]
    producers = np.eye(6, dtype=np.float32)
    queries = np.array([[0, 0.9, 0.44, 0, 0, 0], [0.92, 0, 0.39, 0, 0, 0], [0.5, 0.5, 0, 0, 0, 0],
                        [0, 0, 0, 0, 0.5, 0.5], [0, 0, 0, 0.5, 0, 0.5], [0, 0, 0, 0.5, 0.5, 0]], dtype=np.float32)
    kept = retrieve_producers(tools, producers, queries, list(range(6)), k=1, share=2 / 12)
    assert kept == {(1, 0), (0, 1)}  # cosines 0.90 and 0.92 of the dense group; the sparse group's best is 0.71
    assert len(retrieve_producers(tools, producers, queries, list(range(6)), k=2, share=1 / 12)) == 1


def test_head_ranking_scores_a_pair_by_its_best_input_and_build_graph_ranks_so_where_it_can(tmp_path):
    from flows.build_graph import GraphConfig, partial_budget, retrieval_head, retrieval_ranking
    from tasks.graph.candidates import head_ranking, retrieval_candidates
    from tasks.training.param_head import FEATURES, ParamHead

    coef = [0.0] * len(FEATURES)
    coef[FEATURES.index("exact")] = 10.0  # a head that follows the exact name rule
    head = ParamHead(coef, -5.0, [0.0] * len(FEATURES), [1.0] * len(FEATURES), 0.5)
    shop = TOYSET.only_groups({"shop"}).tools  # get_user, list_orders, open_account, ping
    ranked = head_ranking(shop, _by_words, head)({(0, 1), (0, 2), (3, 0)})
    assert ranked[(0, 1)] == pytest.approx(1 / (1 + math.exp(-5)))  # list_orders.user_id <- get_user: exact
    assert ranked[(0, 2)] == pytest.approx(1 / (1 + math.exp(5)))  # customer: by meaning only, no name match
    assert (3, 0) in ranked and len(ranked) == 3
    # a cap of 1 of the group's 12 ordered pairs keeps the exact match, whatever the cosines say
    assert retrieval_candidates(shop, _by_words, k=3, share=1 / 12, head=head) == {(0, 1)}
    folder = tmp_path / "retriever"
    folder.mkdir()
    head.save(folder)
    capped = dict(toolsets=("apibank",), retrieval_encoder=str(folder), retrieval_share=0.05)
    for rank in ("auto", "head"):  # auto, the default: the head, since the encoder's folder has one
        cfg = GraphConfig(**capped, retrieval_rank=rank)
        got = retrieval_head(cfg)
        assert got is not None and got.coef == coef and retrieval_ranking(cfg) == "head"
    assert GraphConfig(**capped).retrieval_rank == "auto"
    # the budget bounds the retrieval rule's pairs only: a union of rules says so, the rule alone does not
    assert "caps the retrieval rule's pairs only" in partial_budget(GraphConfig(**capped))  # the default union
    assert partial_budget(GraphConfig(**capped, pruning="retrieval")) is None
    assert partial_budget(GraphConfig(**(capped | {"retrieval_share": None}))) is None
    assert retrieval_head(GraphConfig(**capped, retrieval_rank="cosine")) is None  # asked for the cosine
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "config.json").write_text("{}")
    for cosine in ({"retrieval_encoder": str(tmp_path / "plain")},  # no head there: auto ranks by cosine
                   {"retrieval_share": None}, {"retrieval_encoder": None}):  # no budget, or no trained encoder
        assert retrieval_head(GraphConfig(**(capped | cosine))) is None
        assert retrieval_ranking(GraphConfig(**(capped | cosine))) == "cosine"
    with pytest.raises(ValueError, match="--retrieval-rank 'best': one of auto, cosine, head"):
        GraphConfig(**capped, retrieval_rank="best")
    for bad in ({"retrieval_share": None}, {"retrieval_encoder": None}):
        with pytest.raises(ValueError, match="--retrieval-rank head: only with"):
            GraphConfig(**(capped | bad), retrieval_rank="head")
    with pytest.raises(ValueError, match="no param_head.json"):
        GraphConfig(**(capped | {"retrieval_encoder": str(tmp_path / "plain")}), retrieval_rank="head",
                    warehouse=str(tmp_path / "w.duckdb")).check_inputs()


def test_retrieval_recall_counts_gold_kept_in_its_own_direction():
    vocab = {"get user": 0, "list orders": 1, "open account": 2, "ping": 3}

    def encode(texts):  # a query points at the producer its gold says; producers at themselves
        out = np.zeros((len(texts), 4), dtype=np.float32)
        for n, t in enumerate(texts):
            if t.startswith("user id") or t.startswith("customer"):
                out[n, 0] = 1.0
            else:
                out[n, next((v for name, v in vocab.items() if t.startswith(name)), 3)] = 1.0
        return out

    shop = TOYSET.only_groups({"shop"})
    assert [t.tool_id for t in shop.tools] == ["get_user", "list_orders", "open_account", "ping"]
    assert len(shop.edges) == 2 and len(shop.parameter_edges) == 2 and shop.queries == []
    (row,) = retrieval_recall(shop, encode, [(1, None)], strategies=("retrieval",))
    assert (row["recall"], row["kept"], row["gold_edges"]) == (1.0, 2, 2)
    assert row["ordered_pairs"] == 12 and row["share_cap"] is None


def test_validation_score_pools_the_gold_edges_of_all_sets():
    from tasks.graph.retriever_run import pooled_recall

    def row(kept, gold, strategy="retrieval", k=3, share_cap=None):
        return {"strategy": strategy, "k": k, "share_cap": share_cap, "kept": kept, "gold_edges": gold,
                "recall": kept / gold if gold else None}

    # a big set gains 15 edges while a small one loses 2: averaged per set that is a loss (0.700 -> 0.675)
    before = {"big": [row(270, 300)], "small": [row(10, 20)]}
    after = {"big": [row(285, 300)], "small": [row(8, 20)]}
    assert pooled_recall(before) == pytest.approx(280 / 320) and pooled_recall(after) == pytest.approx(293 / 320)
    tilted = {"big": [row(271, 300)], "small": [row(9, 20)]}  # +1 edge of 300, -1 of 20: the same count kept
    assert pooled_recall(tilted) == pytest.approx(pooled_recall(before))
    # other strategies, other k, a share cap and a set without gold edges are not read
    noise = [row(0, 50, strategy="params+retrieval"), row(0, 50, k=1), row(0, 50, share_cap=0.05), row(0, 0)]
    assert pooled_recall({"big": before["big"] + noise, "small": before["small"]}) == pytest.approx(280 / 320)
    assert pooled_recall({}) == 0.0


def test_validation_score_breaks_a_tie_at_k_by_the_recall_curve():
    from tasks.graph.retriever_run import validation_score
    from tasks.training.retriever_config import VALIDATION_K, VALIDATION_TIE_KS

    def table(kept_at):  # one set of 100 gold edges, kept_at(k) of them kept at k
        return {"s": [{"strategy": "retrieval", "k": k, "share_cap": None, "kept": kept_at(k), "gold_edges": 100,
                       "recall": kept_at(k) / 100} for k in sorted({VALIDATION_K, *VALIDATION_TIE_KS})]}

    untrained = table(lambda k: min(100, 60 + 10 * k))  # recall@1 0.70, @3 0.90
    trained = table(lambda k: 90 if k <= VALIDATION_K else min(100, 60 + 10 * k))  # the same at 3, better below it
    assert validation_score(untrained)[0] == validation_score(trained)[0] == pytest.approx(0.9)
    assert validation_score(trained) > validation_score(untrained)  # so the trained checkpoint is kept
    assert validation_score(trained)[1] == pytest.approx(
        sum(90 if k <= VALIDATION_K else min(100, 60 + 10 * k) for k in VALIDATION_TIE_KS) / 100 / len(VALIDATION_TIE_KS))
    # recall at k outranks the curve: a better curve with one edge fewer at k loses
    worse_at_k = table(lambda k: 89 if k == VALIDATION_K else 100)
    assert validation_score(worse_at_k)[1] > validation_score(trained)[1]
    assert validation_score(worse_at_k) < validation_score(trained)


# ---------------------------------------------------------------------------------------------
# The flow, end to end on a tiny encoder, and build-graph using what it trained


def _toolset_folder(root, name, groups=6):
    """A tool-set folder of ``groups`` copies of the toy shop group (tools renamed per group)."""
    folder = root / name
    folder.mkdir(parents=True)
    tools, edges, params = [], [], []
    for g in range(groups):
        for t in TOOLS[:4]:
            tools.append({"tool_id": f"{t.tool_id}@{g}", "group": f"g{g}", "doc": t.doc})
        edges += [{"group": f"g{g}", "dependent": f"{e.dependent}@{g}", "prerequisite": f"{e.prerequisite}@{g}"}
                  for e in TOYSET.edges if e.group == "shop"]
        params += [{"consumer": f"{e.dependent}@{g}", "producer": f"{e.prerequisite}@{g}",
                    "consumer_param": e.consumer_param} for e in TOYSET.parameter_edges if e.dependent != "clothes"]
    for file, rows in (("tools.jsonl", tools), ("edges.jsonl", edges), ("param_edges.jsonl", params)):
        (folder / file).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_flow_trains_reports_held_out_recall_and_build_graph_uses_the_retriever(tiny_encoder, tmp_path,
                                                                                  prefect_harness):
    from flows.build_graph import GraphConfig
    from flows.train_retriever import RetrieverConfig, train_retriever_flow

    train_set = _toolset_folder(tmp_path, "shopset")
    heldout = _toolset_folder(tmp_path, "other", groups=1)
    cfg = RetrieverConfig(tdi=None, toolsets=(str(train_set),), heldout=(str(heldout),), output=str(tmp_path / "run"),
                          base_model=str(tiny_encoder), max_steps=2, batch_size=4, evals=1, max_length=24,
                          split_fractions=(0.5, 0.25, 0.25), reranker=True, reranker_layers=2, reranker_max_steps=1)
    metrics = train_retriever_flow(cfg)
    assert metrics["parameter_reranker"]["trained"]["steps"] == 1  # trained after the retriever, saved inside it
    assert (tmp_path / "run" / "best" / "param_reranker" / "param_head.json").is_file()
    assert metrics["examples"] == {"shopset": 6}  # 3 train groups x 2 parameter edges
    assert set(metrics["test"]["trained"]) == {"shopset", "other"}
    row = metrics["test"]["trained"]["other"][0]
    assert row["gold_edges"] == 2 and row["ordered_pairs"] == 12 and 0.0 <= row["recall"] <= 1.0
    head = metrics["parameter_head"]  # fitted on the validation groups, measured on the test group and set
    assert {name: m["gold"] for name, m in head["test"].items()} == {"shopset": 2, "other": 2}
    # 6 groups split 3 / 2 / 1: two validation groups, 2 gold inputs each, fitted as given and with outputs dropped
    assert head["head"]["n_gold"] == 2 * 2 * 2 and "outputs removed" in head["head"]["fitted_on"]
    best = tmp_path / "run" / "best"
    assert (best / "param_head.json").is_file() and (best / "config.json").is_file() and "| other | retrieval | 1 |" in (tmp_path / "run" / "report.md").read_text()
    # measure-only with the checkpoint: the same trained figures, nothing trained
    again = train_retriever_flow(RetrieverConfig(tdi=None, toolsets=(str(train_set),), heldout=(str(heldout),),
                                                 output=str(tmp_path / "measure"), base_model=str(tiny_encoder),
                                                 max_length=24, split_fractions=(0.5, 0.25, 0.25),
                                                 checkpoint=str(best)))
    assert again["test"]["trained"] == metrics["test"]["trained"]
    with pytest.raises(ValueError, match="no shards"):
        train_retriever_flow(RetrieverConfig(tdi=str(tmp_path), toolsets=(str(train_set),), heldout=()))
    assert GraphConfig(toolsets=("apibank",), retrieval_encoder=str(best), retrieval_share=0.05).retrieval_share == 0.05
    with pytest.raises(ValueError, match="no config.json"):
        GraphConfig(toolsets=(str(train_set),), retrieval_encoder=str(tmp_path),
                    warehouse=str(tmp_path / "w.duckdb")).check_inputs()
    with pytest.raises(ValueError, match="--retrieval-share"):
        GraphConfig(toolsets=("apibank",), retrieval_share=1.5)


def test_command_line_refuses_bad_values_and_missing_inputs_before_any_work(tmp_path, capsys):
    from flows.train_retriever import PROG, parse_args
    from tasks.common.cli import checking_inputs

    parse = checking_inputs(parse_args, PROG)  # what the command line runs before Prefect starts
    for argv, says in ((["--batch-size", "0", "--tdi", "none"], "--batch-size 0: must be at least 1"),
                       (["--output-dropout", "1.5", "--tdi", "none"], "--output-dropout 1.5: must lie in [0, 1]"),
                       (["--train-precision", "fp16", "--tdi", "none"], "--train-precision 'fp16': one of auto"),
                       (["--tdi", str(tmp_path)], "no shards/ folder"),
                       (["--tdi", "none", "--heldout", str(tmp_path / "nope")], "not a folder")):
        with pytest.raises(SystemExit) as exit_:  # a usage error before any work
            parse(argv)
        assert exit_.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "artifacts").exists()


def test_build_graph_prunes_with_the_retrieval_encoder_and_share(tiny_encoder, tmp_path, prefect_harness):
    """--retrieval-encoder and --retrieval-share reach the retrieval rule: the pairs kept are the ones that
    encoder and budget give (the discriminator's lineage records both: flows/build_graph.py)."""
    from flows.build_graph import GraphConfig, build_graph
    from models.sentence_encoder import EncoderConfig, SentenceEncoder
    from tasks.graph.candidates import retrieval_candidates
    from tasks.graph.pruning import prune_candidates
    from tasks.toolsets.readers import write_toolset_dir
    from tests.test_graph_flow import MEANING_EDGE, MEANING_TOOLS
    from warehouse.build import connect, rows_of

    folder = write_toolset_dir(ToolSet("meaning", MEANING_TOOLS, [MEANING_EDGE]), tmp_path / "meaning")
    target = tmp_path / "tgr.duckdb"
    out = build_graph(GraphConfig(toolsets=[str(folder)], warehouse=str(target), discriminator=None,
                                  pruning="retrieval", retrieval_k=3, retrieval_share=0.1,
                                  retrieval_encoder=str(tiny_encoder), progress=False, transitions=False))
    tiny = SentenceEncoder(EncoderConfig(str(tiny_encoder)))
    expected = prune_candidates(MEANING_TOOLS, strategy="retrieval", known_edges=[MEANING_EDGE],
                                retrieved=retrieval_candidates(MEANING_TOOLS, tiny.encode, 3, 0.1))
    default = prune_candidates(MEANING_TOOLS, strategy="retrieval", known_edges=[MEANING_EDGE],
                               retrieved=retrieval_candidates(MEANING_TOOLS, SentenceEncoder().encode, 3))
    summary = out["datasets"]["meaning"]["pruning"]
    assert summary == expected.as_row("meaning") and summary["ordered_pairs_kept"] == 2  # floor(0.1 x 20)
    assert default.ordered_pairs_kept > 2  # without the budget the rule keeps more
    stored = rows_of(connect(target), "SELECT ordered_pairs_kept FROM candidate_pruning")
    assert stored == [{"ordered_pairs_kept": 2}]


# ---------------------------------------------------------------------------------------------
# The parameter head over the retriever


def _by_words(texts):
    """A fake encoder: one axis per word that matters, so every cosine is known by hand."""
    axes = ("user", "orders", "account", "city", "limit")
    out = np.zeros((len(texts), len(axes) + 1), dtype=np.float32)
    for n, t in enumerate(texts):
        for a, word in enumerate(axes):
            out[n, a] += t.lower().count(word)
        out[n, -1] = 0.0 if out[n].any() else 1.0  # a text with none of the words: its own axis
    return out


def test_unit_features_by_hand():
    from tasks.training.param_head import FEATURES, unit_features

    shop = TOYSET.only_groups({"shop"}).tools  # get_user, list_orders, open_account, ping
    units, x = unit_features(shop, _by_words)
    assert len(units) == len(x) == 4 * 3  # 4 inputs (email, user_id, limit, customer) x 3 other tools
    f = {u: dict(zip(FEATURES, row)) for u, row in zip(units, x)}
    user_id = f[(0, 1, "user_id")]  # get_user -> list_orders.user_id
    assert user_id["inverse_rank"] == 1.0 and user_id["margin"] > 0 and user_id["best_input"] == 1.0
    assert (user_id["exact"], user_id["partial"], user_id["token_overlap"], user_id["type_match"]) == (1, 0, 1, 1)
    limit = f[(0, 1, "limit")]  # the consumer's other input: not its closest to get_user
    assert limit["best_input"] == 0.0 and limit["exact"] == 0 and limit["token_overlap"] == 0
    assert limit["cosine"] < user_id["cosine"]
    customer = f[(0, 2, "customer")]  # meaning without the name: "the user who opens it"
    assert customer["inverse_rank"] == 1.0 and customer["exact"] == 0
    # for get_user, the group's inputs by cosine: customer (0.707: user, account), user_id (0.447: user, orders x2)
    assert customer["inverse_column_rank"] == 1.0 and user_id["inverse_column_rank"] == 0.5
    assert customer["cosine"] == pytest.approx(2 ** -0.5) and user_id["cosine"] == pytest.approx(5 ** -0.5)
    only = unit_features(shop, _by_words, pairs={(0, 1)})[0]
    assert sorted(only) == [(0, 1, "limit"), (0, 1, "user_id")]  # only the ordered pairs asked for
    assert all(f[u]["producer_takes_it"] == f[u]["producer_takes_it_partly"] == 0 for u in f)  # no input shared


def test_unit_features_say_when_the_producer_takes_the_value_itself():
    from tasks.training.param_head import FEATURES, unit_features

    trip = [Tool("search_flights", "trip", doc("search_flights", [("destination", "where to")], [("flights", "")])),
            Tool("book_hotel", "trip", doc("book_hotel", [("destination", "the city"), ("user", "who books")])),
            Tool("find_user", "trip", doc("find_user", [("user_name", "the user's name")]))]
    units, x = unit_features(trip, _by_words)
    f = {u: dict(zip(FEATURES, row)) for u, row in zip(units, x)}
    # both take the caller's destination: a sibling, not its maker, whatever the name rule says
    assert f[(0, 1, "destination")]["producer_takes_it"] == 1 and f[(1, 0, "destination")]["producer_takes_it"] == 1
    assert f[(0, 1, "destination")]["producer_takes_it_partly"] == 0
    # find_user takes user_name: user is that, less specifically (the partial rule, either way round)
    assert (f[(2, 1, "user")]["producer_takes_it"], f[(2, 1, "user")]["producer_takes_it_partly"]) == (0, 1)
    assert f[(1, 2, "user_name")]["producer_takes_it_partly"] == 1  # book_hotel takes user
    assert f[(0, 1, "user")]["producer_takes_it"] == f[(0, 1, "user")]["producer_takes_it_partly"] == 0


def test_maker_rank_and_margin_leave_out_the_producers_that_take_the_value_themselves():
    from tasks.training.param_head import FEATURES, HEAD_FEATURES, unit_features

    vectors = {"check token": [0.9, 0.1, 0.0], "get user token": [0.8, 0.3, 0.0], "register user": [0.6, 0.8, 0.0],
               "token: ": [1.0, 0.0, 0.0]}

    def encode(texts):  # the token input is closest to check_token, then get_user_token, then register_user
        return np.array([next((v for k, v in vectors.items() if t.startswith(k)), [0.0, 0.0, 1.0]) for t in texts],
                        dtype=np.float32)

    auth = [Tool("delete_alarm", "auth", doc("delete_alarm", [("token", "the user's token")])),
            Tool("check_token", "auth", doc("check_token", [("token", "the token")], [("username", "")])),
            Tool("get_user_token", "auth", doc("get_user_token", [("username", "")], [("token", "")])),
            Tool("register_user", "auth", doc("register_user", [("email", "")], [("token", "")]))]
    units, x = unit_features(auth, encode)
    f = {u: dict(zip(FEATURES, row)) for u, row in zip(units, x)}
    unit = lambda v: np.asarray(v) / np.linalg.norm(v)  # noqa: E731
    cos = {name: float(unit(vectors[name]) @ unit(vectors["token: "])) for name in ("check token", "get user token", "register user")}
    get, check, register = f[(2, 0, "token")], f[(1, 0, "token")], f[(3, 0, "token")]
    assert get["inverse_rank"] == pytest.approx(1 / 2) and get["maker_inverse_rank"] == 1.0  # check_token is a sibling
    assert get["margin"] == pytest.approx(cos["get user token"] - cos["check token"], abs=1e-6)
    assert get["maker_margin"] == pytest.approx(cos["get user token"] - cos["register user"], abs=1e-6)
    assert register["maker_inverse_rank"] == pytest.approx(1 / 2)
    # the sibling itself: ranked where it would stand among the makers, its margin over the best of them
    assert check["producer_takes_it"] == 1 and check["maker_inverse_rank"] == 1.0
    assert check["maker_margin"] == pytest.approx(cos["check token"] - cos["get user token"], abs=1e-6)
    lone = auth[:3]  # without register_user, get_user_token is the only maker left: margin against -1
    units, x = unit_features(lone, encode)
    assert dict(zip(FEATURES, x[units.index((2, 0, "token"))]))["maker_margin"] == pytest.approx(cos["get user token"] + 1, abs=1e-6)
    # a new head reads the makers' rank and margin in place of the plain ones
    assert {"maker_inverse_rank", "maker_margin"} <= set(HEAD_FEATURES) and not {"inverse_rank", "margin"} & set(HEAD_FEATURES)


def test_lexical_columns_weigh_the_input_words_a_producer_offers_by_their_idf(caplog):
    import logging

    from tasks.training.param_head import FEATURES, HEAD_FEATURES, lexical_words, unit_features

    assert lexical_words("The URL of the blogPost") == {"url", "blog", "post"}
    vectors = {"get user token": [0.9, 0.3, 0.0], "register user": [0.6, 0.8, 0.0], "check token": [0.8, 0.1, 0.0]}

    def encode(texts):  # the token input: get_user_token closest, then check_token, then register_user
        return np.array([next((v for k, v in vectors.items() if t.startswith(k)), [1.0, 0.0, 0.0]) for t in texts],
                        dtype=np.float32)

    auth = [Tool("add_agenda", "auth", doc("add_agenda", [("token", "the user's token"), ("topic", "what about")])),
            Tool("get_user_token", "auth", doc("get_user_token", [("password", "")], [("token", "the user's token")])),
            Tool("register_user", "auth", doc("register_user", [("email", "")], [("token", "the user's token")])),
            Tool("check_token", "auth", doc("check_token", [("token", "the token")], [("username", "")]))]
    with caplog.at_level(logging.INFO, logger="tasks.common.progress"):
        units, x = unit_features(auth, encode, progress_every_s=1e-6)
    # a long pass says its progress (here: always): 5 inputs against the group's 4 tools
    assert "parameter head: 20/20 input-producer pairs (100%)" in caplog.text
    f = {u: dict(zip(FEATURES, row)) for u, row in zip(units, x)}
    # producer words (names, outputs): token in 3 of the 4 tools, user in 2 -> IDF ln(5/4), ln(5/3)
    token, user = math.log(5 / 4), math.log(5 / 3)
    get, register, check = f[(1, 0, "token")], f[(2, 0, "token")], f[(3, 0, "token")]
    assert get["lexical_overlap"] == register["lexical_overlap"] == pytest.approx(1.0)  # "token", "user" both
    assert check["lexical_overlap"] == pytest.approx(token / (token + user), abs=1e-6)  # "token" only
    # a tie among the makers is broken by the cosine; check_token takes the token itself: no rival, ranked third
    assert (get["lexical_maker_inverse_rank"], register["lexical_maker_inverse_rank"]) == (1.0, 0.5)
    assert check["producer_takes_it"] == 1 and check["lexical_maker_inverse_rank"] == pytest.approx(1 / 3)
    assert get["lexical_maker_margin"] == register["lexical_maker_margin"] == pytest.approx(0.0)
    assert check["lexical_maker_margin"] == pytest.approx(check["lexical_overlap"] - 1.0, abs=1e-6)
    # words no producer offers still count in the input's weight: "topic", "what" -> nothing found
    assert all(f[(p, 0, "topic")]["lexical_overlap"] == 0.0 for p in (1, 2, 3))
    lexical = {"lexical_overlap", "lexical_maker_inverse_rank", "lexical_maker_margin"}
    assert set(FEATURES[-4:-1]) == lexical <= set(HEAD_FEATURES)
    # the last column says whether the input is optional: none of these is
    assert FEATURES[-1] == "input_optional" in HEAD_FEATURES and not any(row["input_optional"] for row in f.values())
    chosen = [auth[0], Tool("set_topic", "auth", doc("set_topic", [("token", "(optional) the user's token")]))]
    units, x = unit_features([*auth[1:2], *chosen], encode)
    assert {u[1:]: row[-1] for u, row in zip(units, x)} == {(0, "password"): 0.0, (1, "token"): 0.0,
                                                           (1, "topic"): 0.0, (2, "token"): 1.0}


def test_value_columns_read_the_input_without_the_tool_that_asks():
    from schemas.dependency_text import value_query
    from tasks.training.param_head import FEATURES, HEAD_FEATURES, unit_features

    assert value_query({"name": "user_id", "description": "the user"}) == "user id: the user"
    # two consumers ask for the same value; the producer's text leans toward one of them (account)
    shop = [Tool("get_user", "shop", doc("get_user", [("email", "")], [("user_id", "")], "look up a user account")),
            Tool("list_orders", "shop", doc("list_orders", [("user_id", "the user")])),
            Tool("open_account", "shop", doc("open_account", [("user_id", "the user")]))]
    units, x = unit_features(shop, _by_words)
    f = {u: dict(zip(FEATURES, row)) for u, row in zip(units, x)}
    orders, account = f[(0, 1, "user_id")], f[(0, 2, "user_id")]
    assert account["cosine"] > orders["cosine"]  # "(input of open account)" shares the producer's topic
    assert account["value_cosine"] == pytest.approx(orders["value_cosine"])  # "user id: the user" either way
    assert orders["value_cosine"] == pytest.approx(3 / math.sqrt(10), abs=1e-6)  # (user 2) against (user 3, account 1)
    # open_account takes user_id itself: a sibling, so get_user is the only maker of the value for list_orders
    assert orders["value_maker_inverse_rank"] == 1.0 and orders["value_maker_margin"] == pytest.approx(orders["value_cosine"] + 1)
    assert f[(2, 1, "user_id")]["producer_takes_it"] == 1
    assert {"value_cosine", "value_maker_inverse_rank", "value_maker_margin"} <= set(HEAD_FEATURES)


def test_head_fits_chooses_its_cut_on_held_out_groups_and_round_trips(tmp_path):
    from tasks.training.param_head import FEATURES, ParamHead, best_cut, fit_param_head

    p, y = np.array([0.9, 0.8, 0.7, 0.2]), np.array([True, False, True, False])
    assert best_cut(p, y) == (0.7, pytest.approx(0.8))  # top 3: TP 2 -> F1 4/5
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, len(FEATURES)))
    gold = x[:, 0] + 0.5 * x[:, 6] > 1.2
    head = fit_param_head(x, gold, [f"g{i % 8}" for i in range(400)], "toy")
    assert head.cut_f1 > 0.8 and head.n_gold == int(gold.sum()) and head.fitted_on == "toy"
    pred = head.predict(x) >= head.threshold
    assert (pred == gold).mean() > 0.9
    head.save(tmp_path)
    assert np.allclose(ParamHead.load(tmp_path).predict(x), head.predict(x))
    data = json.loads((tmp_path / "param_head.json").read_text())
    for bad in ({"features": [*FEATURES[:-1], "ghost"]}, {"features": ["cosine"]}):  # unknown; not one per weight
        (tmp_path / "param_head.json").write_text(json.dumps(data | bad))
        with pytest.raises(ValueError, match="features"):
            ParamHead.load(tmp_path)
    # a head fitted on the first features only (an older checkpoint) reads its own columns of today's rows
    older = fit_param_head(x[:, :11], gold, [f"g{i % 8}" for i in range(400)])
    older.features = FEATURES[:11]
    older.save(tmp_path)
    assert "columns" not in json.loads((tmp_path / "param_head.json").read_text())
    assert np.allclose(ParamHead.load(tmp_path).predict(x), older.predict(x[:, :11]))
    with pytest.raises(ValueError, match="gold and non-gold"):
        fit_param_head(x, np.zeros(400, dtype=bool), ["g"] * 400)


def test_output_dropout_copy_removes_outputs_of_a_seeded_share_and_nothing_else():
    from tasks.training.param_head import FEATURES, unit_features, without_outputs

    assert all("output_params" not in t.doc for t in without_outputs(TOYSET, 1.0).tools)
    assert without_outputs(TOYSET, 0.0).tools == TOYSET.tools
    some = without_outputs(TOYSET, 0.5, seed=3)
    assert some.tools == without_outputs(TOYSET, 0.5, seed=3).tools and some.edges == TOYSET.edges
    kept = [t.tool_id for t in some.tools if "output_params" in t.doc]
    assert 0 < len(kept) < len(TOOLS)
    for t, before in zip(some.tools, TOOLS):
        assert {k: v for k, v in t.doc.items() if k != "output_params"} == \
               {k: v for k, v in before.doc.items() if k != "output_params"}
    shop = without_outputs(TOYSET.only_groups({"shop"}), 1.0)
    _, x = unit_features(shop.tools, _by_words)
    assert (x[:, FEATURES.index("declares_outputs")] == 0).all()


def test_build_graph_scores_parameters_with_a_retriever_head(tiny_encoder, tmp_path):
    import shutil

    from tasks.graph.param_scoring import param_threshold, score_parameters
    from tasks.training.param_head import FEATURES, ParamHead

    folder = tmp_path / "retriever"
    shutil.copytree(tiny_encoder, folder)
    coef = [0.0] * len(FEATURES)
    coef[FEATURES.index("exact")] = 10.0  # a head that follows the exact name rule
    ParamHead(coef, -5.0, [0.0] * len(FEATURES), [1.0] * len(FEATURES), 0.5).save(folder)
    shop = TOYSET.only_groups({"shop"}).tools
    scores = score_parameters(folder, shop, [(0, 1), (0, 2)])
    assert {(s.producer, s.consumer, s.param) for s in scores} == {
        (0, 1, "user_id"), (0, 1, "limit"), (1, 0, "email"), (0, 2, "customer"), (2, 0, "email")}
    kept = {(s.producer, s.consumer, s.param) for s in scores if s.prob >= param_threshold(folder)}
    assert kept == {(0, 1, "user_id")}
    # a producer that returns nothing feeds no input: its units are not scored
    quiet = [dataclasses.replace(shop[0], returns_nothing=True), *shop[1:]]
    assert {(s.producer, s.consumer, s.param) for s in score_parameters(folder, quiet, [(0, 1), (0, 2)])} == {
        (1, 0, "email"), (2, 0, "email")}


def test_build_graph_scores_parameters_through_the_embedding_cache(tiny_encoder, tmp_path, prefect_harness,
                                                                    monkeypatch):
    """The parameter level reads the retriever's vectors through the build's embedding cache, as pruning does: the
    texts pruning encoded are not encoded again (at 10^4 tools that was minutes in silence), a rebuild encodes no
    text at all, and the parameter edges are the ones the retriever's own encoder gives."""
    import shutil

    from flows.build_graph import GraphConfig, build_graph
    from models.sentence_encoder import SentenceEncoder
    from tasks.graph.param_scoring import param_threshold, score_parameters
    from tasks.toolsets.readers import load_benchmark
    from tasks.training.param_head import FEATURES, ParamHead
    from warehouse.build import connect, rows_of

    folder = tmp_path / "retriever"
    shutil.copytree(tiny_encoder, folder)
    coef = [0.0] * len(FEATURES)
    coef[FEATURES.index("exact")] = 10.0  # a head that follows the exact name rule
    ParamHead(coef, -5.0, [0.0] * len(FEATURES), [1.0] * len(FEATURES), 0.5).save(folder)
    tool_set = _toolset_folder(tmp_path, "shopset", groups=2)
    asked: list[int] = []
    real_encode = SentenceEncoder.encode

    def counting(self, texts, *args, **kwargs):
        asked.append(len(texts))
        return real_encode(self, texts, *args, **kwargs)

    monkeypatch.setattr(SentenceEncoder, "encode", counting)
    stored = []
    for run in range(2):
        asked.clear()
        target = tmp_path / f"tgr{run}.duckdb"
        build_graph(GraphConfig(toolsets=(str(tool_set),), warehouse=str(target), discriminator=None,
                                param_discriminator=str(folder), retrieval_encoder=str(folder), pruning="retrieval",
                                retrieval_k=3, embedding_cache=str(tmp_path / "cache"), transitions=False,
                                progress=False, schema_edges=False))
        con = connect(target)
        stored.append(rows_of(con, "SELECT dependent, prerequisite, consumer_param, probability FROM parameter_edges "
                                   "WHERE source = 'discriminator' ORDER BY ALL"))
        con.close()
        if run == 0:
            assert sum(asked) > 0
    assert asked == []  # the rebuild: every text of both levels from the cache
    assert stored[0] == stored[1] and stored[0]
    tools = load_benchmark(str(tool_set), None).tools
    from tasks.graph.pruning import same_group_pairs

    direct = {(tools[s.consumer].tool_id, tools[s.producer].tool_id, s.param)
              for s in score_parameters(folder, tools, same_group_pairs(tools)) if s.prob >= param_threshold(folder)}
    assert {(r["dependent"], r["prerequisite"], r["consumer_param"]) for r in stored[0]} <= direct


def test_the_checkpoint_bench_fits_the_head_on_every_validated_step_and_names_the_one_kept(tiny_encoder, tmp_path):
    from bench.retriever_checkpoints import checkpoints
    from tasks.training.retriever_config import RetrieverConfig

    cfg = RetrieverConfig(tdi=None, toolsets=(str(_toolset_folder(tmp_path, "shopset")),), heldout=(),
                          output=str(tmp_path / "run"), base_model=str(tiny_encoder), max_steps=2, batch_size=4,
                          evals=2, max_length=24, split_fractions=(0.5, 0.25, 0.25))
    got = checkpoints(cfg, tmp_path / "bench")
    assert [r["step"] for r in got["rows"]] == [0, 1, 2]
    for r in got["rows"]:
        assert set(r["head_f1"]) == {"shopset"} and 0.0 <= r["head_f1"]["shopset"] <= 1.0
        assert set(r["head_beyond_rule"]["shopset"]) >= {"recall", "precision", "n_gold"}
        assert 0.0 <= r["recall_at_k"] <= 1.0 and 0.0 <= r["curve"] <= 1.0
    best = max((r["recall_at_k"], r["curve"], -r["step"]) for r in got["rows"])  # a full tie: the earlier
    assert got["kept"] == -best[2]
