"""The parameter reranker (tasks/training/param_reranker.py): which units are its candidates, its texts, training
from the retriever's weights, the stacked head, scoring in build-graph, and train-retriever --reranker."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tasks.training.param_head import FEATURES, ParamHead  # noqa: E402
from tasks.training.param_reranker import (RERANKER_DIR, STACK_FEATURES, ListwiseLoss, ParamReranker,  # noqa: E402
                                           PointwiseLoss, RerankerArguments, RerankerExamples, candidate_mask,
                                           candidate_units, fit_stacked_head, reranker_examples, train_param_reranker,
                                           unit_texts)
from tests.test_param_scorer import TOYSET  # noqa: E402
from tests.test_retriever import _by_words, _toolset_folder, make_tiny_encoder  # noqa: E402


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    return make_tiny_encoder(tmp_path_factory.mktemp("tiny-encoder"))


def _row(**values):
    row = np.zeros(len(FEATURES), dtype=np.float32)
    for name, v in values.items():
        row[FEATURES.index(name)] = v
    return row


def test_candidates_are_the_top_k_producers_of_an_input_or_a_name_match():
    x = np.stack([_row(inverse_rank=1.0), _row(inverse_rank=1 / 3), _row(inverse_rank=1 / 4),
                  _row(inverse_rank=0.1, exact=1.0), _row(inverse_rank=0.1, partial=1.0), _row(inverse_rank=0.1)])
    assert candidate_mask(x, 3).tolist() == [True, True, False, True, True, False]
    assert candidate_mask(x, 1).tolist() == [True, False, False, True, True, False]
    shop = TOYSET.only_groups({"shop"}).tools  # get_user, list_orders, open_account, ping
    units, x = candidate_units(shop, _by_words, k=1)
    # top-1 per input by the word encoder: user_id and customer find get_user first; the other producers of
    # user_id and customer (cosine 0.5 of get_user's) are dropped; email and limit tie at 0 with every producer
    assert set(units) == {(0, 1, "user_id"), (0, 2, "customer"), (1, 0, "email"), (2, 0, "email"), (3, 0, "email"),
                          (0, 1, "limit"), (2, 1, "limit"), (3, 1, "limit")} and len(x) == len(units)
    assert len(candidate_units(shop, _by_words, 2)[0]) == 4 * 3  # every producer is among the top 2


def test_texts_show_the_input_and_the_producer_and_dropout_keeps_the_meaning():
    shop = TOYSET.only_groups({"shop"}).tools
    (a,), (b,) = unit_texts(shop, [(0, 2, "customer")])
    assert a.startswith("param: customer (str): the user who opens it; input of open_account")
    assert b.startswith("producer: get_user: The get_user API.; returns user_id (str): the user's id")
    (a,), (b,) = unit_texts(shop, [(0, 2, "customer")], [True])
    assert "customer" not in a and "user who opens it" in a and "user_id" not in b and "the user's id" in b


def test_arguments_refuse_bad_values():
    for bad in ({"layers": 0}, {"epochs": 0}, {"candidate_k": 0}, {"name_dropout": 1.5}, {"learning_rate": 0},
                {"loss": "pairwise"}, {"none_inputs_per_positive": -1}, {"pooling": "max"}):
        with pytest.raises(ValueError, match="reranker"):
            RerankerArguments(**bad)


def _lists_examples() -> RerankerExamples:
    """Candidate units of three consumer inputs: (c1, a) with gold unit 1 among 4, (c1, b) with none among 3,
    (c2, x) with none among 2; tools are not read by the losses."""
    units = [(0, 1, "a"), (2, 1, "a"), (3, 1, "a"), (4, 1, "a"), (0, 1, "b"), (2, 1, "b"), (3, 1, "b"), (0, 5, "x"), (1, 5, "x")]
    gold = np.array([False, True, False, False, False, False, False, False, False])
    return RerankerExamples([], units, gold)


def test_listwise_lists_are_one_input_each_gold_first_with_fresh_negatives_and_none_inputs():
    import random

    ex = _lists_examples()
    loss = ListwiseLoss(ex, RerankerArguments(negatives_per_positive=2, batch_size=6, none_inputs_per_positive=1.0))
    assert loss.inputs_per_step == 2 and loss.steps_per_epoch() == 1  # 1 gold input + 1 input without gold
    rng = random.Random(0)
    epochs = [[units for batch in loss.epoch(rng) for units in batch] for _ in range(6)]
    for lists in epochs:
        assert len(lists) == 2 and all(len({ex.units[i][1:] for i in units}) == 1 for units in lists)  # one input a list
        gold_list = next(units for units in lists if ex.gold[units[0]])
        assert gold_list[0] == 1 and len(gold_list) == 3 and not ex.gold[gold_list[1:]].any()  # gold + 2 negatives
        none_list = next(units for units in lists if not ex.gold[units[0]])
        assert not ex.gold[none_list].any() and len(none_list) <= 3
    assert len({tuple(sorted(u for units in lists for u in units)) for lists in epochs}) > 1  # drawn afresh
    # the loss: a softmax over the list and a "none" slot at logit 0; the gold's slot, or "none", is the target
    logits = torch.tensor([2.0, 0.5, -1.0, 1.0, 0.0])
    got = loss(logits, [[1, 0, 2], [4, 5]], ex.gold)
    want = (-torch.log_softmax(torch.tensor([2.0, 0.5, -1.0, 0.0]), 0)[0]
            - torch.log_softmax(torch.tensor([1.0, 0.0, 0.0]), 0)[2]) / 2
    assert torch.isclose(got, want)
    pointwise = PointwiseLoss(ex, RerankerArguments(negatives_per_positive=2, batch_size=2))
    assert pointwise.steps_per_epoch() == 2 and all(len(units) == 1 for b in pointwise.epoch(rng) for units in b)


def _train(tiny_encoder, tmp_path, steps=3, loss="listwise", pooling="auto"):
    examples = reranker_examples([(TOYSET, {"shop", "sky"})], _by_words, k=3)
    folder = tmp_path / "retriever" / RERANKER_DIR
    done = train_param_reranker(examples, tiny_encoder, RerankerArguments(layers=2, max_steps=steps, batch_size=4,
                                                                          max_length=32, loss=loss, pooling=pooling),
                                folder)
    return examples, folder, done


@pytest.mark.parametrize("loss", ["listwise", "pointwise"])
def test_training_from_the_encoder_saves_a_changed_cross_encoder_whole(tiny_encoder, tmp_path, loss):
    from transformers import AutoModel, AutoModelForSequenceClassification

    examples, folder, done = _train(tiny_encoder, tmp_path, loss=loss)
    assert done["steps"] == 3 and done["positives"] == int(examples.gold.sum()) == 3  # the toy's 3 parameter edges
    assert done["arguments"]["loss"] == loss and done["units_seen"] > 0
    assert (folder / "config.json").is_file() and not list(folder.parent.glob(".*tmp*"))
    start = AutoModel.from_pretrained(tiny_encoder).state_dict()
    trained = AutoModelForSequenceClassification.from_pretrained(folder).bert.state_dict()
    assert any(not torch.equal(start[k], trained[k]) for k in start if k in trained)
    no_gold = reranker_examples([(TOYSET, {"sky"})], _by_words, k=1)
    no_gold = type(no_gold)(no_gold.tools, no_gold.units, np.zeros(len(no_gold.units), dtype=bool))
    with pytest.raises(ValueError, match="needs gold and non-gold"):
        train_param_reranker(no_gold, tiny_encoder, RerankerArguments(max_steps=1), tmp_path / "x")


@pytest.mark.parametrize("pooling", ["auto", "cls"])
def test_the_reranker_pools_as_its_retriever_was_trained_and_keeps_its_pooling_when_loaded(tiny_encoder, tmp_path,
                                                                                            pooling, caplog):
    """auto: a BERT-family retriever is a bi-encoder trained on the mean of its tokens, so the cross-encoder
    classifies the mean of the pair's tokens; cls keeps BERT's pooler over [CLS] (rerankers saved before load
    as they were). Loaded back, a reranker scores as it was trained, and a unit scores the same alone and
    batched with longer ones (the mean leaves padding out). A long pass says its progress (here: always)."""
    import json
    import logging

    from tasks.training.param_reranker import _load, reranker_logits

    examples, folder, done = _train(tiny_encoder, tmp_path, steps=2, pooling=pooling)
    want = "mean" if pooling == "auto" else "cls"
    assert done["pooling"] == want and done["arguments"]["pooling"] == pooling
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == ("tgr_mean_pooled_bert" if want == "mean" else "bert")
    assert (folder / "mean_pooled_bert.py").is_file() == (want == "mean")  # its code travels beside the weights
    model, tokenizer = _load(folder)
    assert type(model).__name__ == ("MeanPooledBertForSequenceClassification" if want == "mean"
                                    else "BertForSequenceClassification") and model.config.num_labels == 1
    texts = unit_texts(examples.tools, examples.units)
    short = min(range(len(examples.units)), key=lambda i: len(texts[0][i]) + len(texts[1][i]))
    alone = reranker_logits(model, tokenizer, ([texts[0][short]], [texts[1][short]]), max_length=32)
    with caplog.at_level(logging.INFO, logger="tasks.common.progress"):
        batched = reranker_logits(model, tokenizer, texts, max_length=32, batch_size=len(examples.units),
                                  progress_every_s=1e-6)
    n = len(examples.units)
    assert f"parameter reranker: {n}/{n} pairs (100%)" in caplog.text
    assert len(set(np.round(batched, 6))) > 1  # the units score apart
    if want == "mean":
        assert np.isclose(alone[0], batched[short], atol=1e-5)


def test_mean_pooling_refuses_a_retriever_that_is_not_bert(tmp_path):
    from transformers import DistilBertConfig, DistilBertModel

    from tasks.training.param_reranker import _from_retriever

    folder = tmp_path / "distil"
    DistilBertModel(DistilBertConfig(vocab_size=100, dim=32, n_layers=1, n_heads=2, hidden_dim=64)).save_pretrained(folder)
    assert _from_retriever(folder, None, "auto")[1] == "cls"  # auto pools by the mean for BERT only
    with pytest.raises(ValueError, match="--reranker-pooling mean is built for BERT-family encoders"):
        _from_retriever(folder, None, "mean")


def test_stacked_head_and_scoring_in_build_graph(tiny_encoder, tmp_path):
    import shutil

    from tasks.graph.param_scoring import param_threshold, score_parameters

    _, folder, _ = _train(tiny_encoder, tmp_path, steps=2)
    many = _toolset_folder(tmp_path, "shopset", groups=4)
    from tasks.toolsets.readers import load_toolset_spec

    fitted = load_toolset_spec(str(many), tmp_path)
    head = fit_stacked_head([fitted], _by_words, folder, k=3, max_length=32)
    assert head.features == STACK_FEATURES and head.candidate_k == 3 and head.n_gold == 4 * 2 * 2  # + outputs-dropped copy
    head.save(folder)
    with pytest.raises(ValueError, match="features"):
        ParamHead.load(folder)  # the stacked head is not the plain head
    shutil.copytree(tiny_encoder, folder.parent, dirs_exist_ok=True)
    ParamHead([0.0] * len(FEATURES), 0.0, [0.0] * len(FEATURES), [1.0] * len(FEATURES), 0.5).save(folder.parent)
    assert ParamReranker.present(folder.parent) and param_threshold(folder.parent) == head.threshold
    shop = TOYSET.only_groups({"shop"}).tools
    scores = score_parameters(folder.parent, shop, [(0, 1), (0, 2), (1, 2)])
    reranker = ParamReranker(folder)
    # the units scored are the candidates among both orders of the pairs, with the stacked head's p
    from models.sentence_encoder import EncoderConfig, SentenceEncoder

    encode = SentenceEncoder(EncoderConfig(str(folder.parent))).encode
    ordered = {(0, 1), (1, 0), (0, 2), (2, 0), (1, 2), (2, 1)}
    want_units, want_p = reranker.score(shop, encode, ordered)
    assert {(s.producer, s.consumer, s.param): round(s.prob, 5) for s in scores} == \
           {u: round(float(p), 5) for u, p in zip(want_units, want_p)}
    assert set(want_units) == set(candidate_units(shop, encode, 3, ordered)[0]) and want_units


def test_flow_trains_the_reranker_on_a_given_retriever_and_reports_it(tiny_encoder, tmp_path, prefect_harness):
    from flows.train_retriever import RetrieverConfig, train_retriever_flow

    train_set = _toolset_folder(tmp_path, "shopset")
    heldout = _toolset_folder(tmp_path, "other", groups=1)
    retriever = tmp_path / "retriever"
    import shutil

    shutil.copytree(tiny_encoder, retriever)
    metrics = train_retriever_flow(RetrieverConfig(
        tdi=None, toolsets=(str(train_set),), heldout=(str(heldout),), output=str(tmp_path / "run"),
        base_model=str(tiny_encoder), max_length=24, split_fractions=(0.5, 0.25, 0.25), checkpoint=str(retriever),
        reranker=True, reranker_layers=2, reranker_max_steps=2, reranker_k=3))
    rr = metrics["parameter_reranker"]
    assert rr["trained"]["steps"] == 2 and rr["trained"]["positives"] == 3 * 2  # 3 train groups x 2 edges
    assert set(rr["test"]) == {"shopset", "other"} and {m["gold"] for m in rr["test"].values()} == {2}
    assert ParamReranker.present(tmp_path / "run" / "best") and not ParamReranker.present(retriever)
    assert "| other | reranker + head |" in (tmp_path / "run" / "report.md").read_text()
    assert rr["trained"]["pooling"] == rr["pooling"] == "mean"  # a BERT retriever: the mean of the pair's tokens
    assert "Parameter reranker (classifies the mean of the pair's tokens;" in (tmp_path / "run" / "report.md").read_text()
    # measured again from the trained folder, nothing trained: the same figures
    again = train_retriever_flow(RetrieverConfig(
        tdi=None, toolsets=(str(train_set),), heldout=(str(heldout),), output=str(tmp_path / "again"),
        base_model=str(tiny_encoder), max_length=24, split_fractions=(0.5, 0.25, 0.25),
        checkpoint=str(tmp_path / "run" / "best")))
    assert again["parameter_reranker"]["test"] == rr["test"]
