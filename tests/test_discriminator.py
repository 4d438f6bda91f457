"""Discriminator pieces on CPU: Eq. 2 loss, a training smoke run, pair labels, splits, metrics."""
from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json  # noqa: E402

import numpy as np  # noqa: E402

from models.discriminator import (  # noqa: E402
    CategoryAveragedLoss,
    category_averaged_loss,
    decide,
    doc_text,
    pair_texts,
    encode_pairs,
    load_model,
    load_tokenizer,
    plain_loss,
    predict_proba,
)
from schemas.docs import canonical_doc_json  # noqa: E402
from schemas.tdi import ID2LABEL, KIND_HEAD_ID2LABEL, LABEL2ID, swap_label  # noqa: E402
from schemas.toolset import DependencyEdge, Tool, ToolSet  # noqa: E402
from schemas.name_rule import common_output_names, name_derived_output, partial_feeds, partial_match, schema_rule_label  # noqa: E402
from tasks.training.examples import (  # noqa: E402
    PairExample,
    build_pairs,
    grouped_split,
    held_out_pairs,
    label_counts,
    natural_none_ratio,
    none_weights,
    sample_none,
    swap_partners,
    symmetrize,
    training_pairs,
    with_both_orders,
)
from tasks.training.metrics import (  # noqa: E402
    at_prior,
    beyond_rule_metrics,
    choose_threshold,
    classification_metrics,
    direction_accuracy,
    evaluate_probs,
    evaluate_with_rules,
    recall_by_kind,
    format_comparison,
    rule_labels,
    schema_rule_metrics,
)
from tasks.training.strict_json import write_json  # noqa: E402
from tasks.training.trainer import StageArguments, WeightAverage, predict_examples, train_classifier  # noqa: E402


def make_tiny_model(folder: Path) -> Path:
    """A 2-layer, hidden-32 BERT with a fresh 3-label head and the packaged MiniLM tokenizer."""
    from transformers import BertConfig, BertForSequenceClassification

    tokenizer = load_tokenizer("offline-minilm")
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512, num_labels=3,
                        id2label=dict(ID2LABEL), label2id=dict(LABEL2ID))
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))


def _doc(name: str, inputs=(), outputs=()) -> dict:
    param = lambda n: {"name": n, "type": "str", "description": f"the {n}"}  # noqa: E731
    return {"name": name, "description": f"{name} tool", "input_params": [param(p) for p in inputs],
            "output_params": [param(p) for p in outputs]}


def toy_toolset() -> ToolSet:
    tools = [
        Tool("Login", "auth", _doc("Login", ["user", "password"], ["token"])),
        Tool("UpdateEmail", "auth", _doc("UpdateEmail", ["token", "email"], ["status"])),
        Tool("Validate", "auth", _doc("Validate", ["user", "password"], ["ok"])),
        Tool("Weather", "misc", _doc("Weather", ["city"], ["forecast"])),
        Tool("Clock", "misc", _doc("Clock", [], ["time"])),
    ]
    edges = [DependencyEdge("auth", "UpdateEmail", "Login"), DependencyEdge("auth", "Login", "Validate")]
    return ToolSet("toy", tools, edges)


# ---------------------------------------------------------------------------------------------
# Eq. 2


def test_category_averaged_loss_matches_hand_computation():
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 3.0], [0.5, 0.0, 0.0]])
    labels = torch.tensor([0, 1, 1, 1, 0])

    def nll(row, k):  # -log softmax by hand
        return -(row[k] - math.log(sum(math.exp(v) for v in row)))

    rows = logits.tolist()
    class0 = (nll(rows[0], 0) + nll(rows[4], 0)) / 2
    class1 = (nll(rows[1], 1) + nll(rows[2], 1) + nll(rows[3], 1)) / 3
    expected = class0 + class1  # class 2 is absent from the batch and adds nothing
    assert category_averaged_loss(logits, labels).item() == pytest.approx(expected, rel=1e-6)
    # it differs from the plain mean CE (Eq. 1) whenever classes are imbalanced
    assert plain_loss(logits, labels).item() == pytest.approx((2 * class0 + 3 * class1) / 5, rel=1e-6)


def test_category_averaged_loss_weights_a_rare_class_like_a_common_one():
    logits = torch.zeros(10, 3, requires_grad=True)
    labels = torch.tensor([1] * 9 + [0])
    category_averaged_loss(logits, labels).backward()
    rare, common = logits.grad[9, 0].abs().item(), logits.grad[0, 1].abs().item()
    assert rare == pytest.approx(9 * common, rel=1e-5)  # one rare item carries its whole class


# ---------------------------------------------------------------------------------------------
# Pairs and labels


def test_build_pairs_labels_every_ordered_pair_inside_groups():
    pairs = build_pairs(toy_toolset())
    labels = {(p.tool_a, p.tool_b): p.label for p in pairs}
    assert len(pairs) == 3 * 2 + 2 * 1  # ordered pairs within "auth" (3 tools) and "misc" (2 tools)
    assert ("Login", "Weather") not in labels  # pairs across groups are never built
    assert labels[("UpdateEmail", "Login")] == LABEL2ID["a_depends_on_b"]
    assert labels[("Login", "UpdateEmail")] == LABEL2ID["b_depends_on_a"]
    assert labels[("Login", "Validate")] == 0 and labels[("Validate", "Login")] == 2
    assert labels[("UpdateEmail", "Validate")] == 1 and labels[("Weather", "Clock")] == 1
    assert {p.group for p in pairs} == {"toy/auth", "toy/misc"}


def test_swapping_a_and_b_maps_class_0_to_2_and_keeps_1():
    pairs = build_pairs(toy_toolset())
    by_tools = {(p.tool_a, p.tool_b): p for p in pairs}
    for (a, b), pair in by_tools.items():
        swapped = by_tools[(b, a)]
        assert swapped.label == swap_label(pair.label)
        assert (swapped.doc_a, swapped.doc_b) == (pair.doc_b, pair.doc_a)
    assert {swap_label(0), swap_label(1), swap_label(2)} == {2, 1, 0} and swap_label(0) == 2


def test_none_subsampling_keeps_all_dependency_pairs_and_is_seeded():
    pairs = build_pairs(toy_toolset(), max_none=2, seed=3)
    assert label_counts(pairs) == {"a_depends_on_b": 2, "no_dependency": 2, "b_depends_on_a": 2}
    assert pairs == build_pairs(toy_toolset(), max_none=2, seed=3)


def test_grouped_split_never_splits_a_group():
    examples = [PairExample("a", "b", i % 3, f"set/{g}", f"t{i}", f"u{i}") for g in range(10) for i in range(10)]
    train, valid, note = grouped_split(examples, 0.2, seed=1)
    assert {e.group for e in train}.isdisjoint({e.group for e in valid})
    assert len(valid) == 20 and len(train) == 80 and "2 of 10 groups" in note


def test_grouped_split_with_one_group_holds_out_tools():
    tools = [f"t{i}" for i in range(20)]
    examples = [PairExample("a", "b", 1, "only/one", a, b) for a in tools for b in tools if a != b]
    train, valid, note = grouped_split(examples, 0.2, seed=0)
    held = {t for e in valid for t in (e.tool_a, e.tool_b)} - {t for e in train for t in (e.tool_a, e.tool_b)}
    assert held and all(e.tool_a in held or e.tool_b in held for e in valid)
    assert 0.1 < len(valid) / len(examples) < 0.3 and "split by tool" in note



def test_grouped_split_holds_out_part_of_every_data_set():
    # a data set of one group beside one of many (TMDB beside UltraTool): before, the one-group set was never held out
    many = [PairExample("a", "b", i % 3, f"many/{g}", f"m{g}_{i}", f"n{g}_{i}") for g in range(10) for i in range(10)]
    tools = [f"t{i}" for i in range(20)]
    one = [PairExample("a", "b", 1, "one/only", a, b) for a in tools for b in tools if a != b]
    examples = [e for pair in zip(many, one) for e in pair] + one[len(many):]
    train, valid, note = grouped_split(examples, 0.2, seed=1)
    assert sorted(map(id, train + valid)) == sorted(map(id, examples))  # every pair on exactly one side
    assert [e for e in examples if e in train] == train  # the input's order on each side
    for name in ("many", "one"):
        part = [e for e in valid if e.group.startswith(name + "/")]
        share = len(part) / sum(e.group.startswith(name + "/") for e in examples)
        assert 0.1 < share < 0.3, (name, share)
    assert {e.group for e in train if e.group.startswith("many/")}.isdisjoint({e.group for e in valid})
    held = {t for e in valid if e.group == "one/only" for t in (e.tool_a, e.tool_b)} - \
        {t for e in train for t in (e.tool_a, e.tool_b)}
    assert held and all(e.tool_a in held or e.tool_b in held for e in valid if e.group == "one/only")
    assert note.startswith("many: grouped by tool set: 2 of 10 groups") and "one: one group only: split by tool" in note
    # a data set's own split does not depend on the sets beside it
    alone = grouped_split(many, 0.2, seed=1)[1]
    assert [e for e in valid if e.group.startswith("many/")] == alone


def test_held_out_pairs_reads_every_pair_of_the_held_out_units():
    # the held-out report: the units grouped_split holds out of the none-sampled pairs, with every none pair they hold
    def pairs_of(name: str, group_of) -> list[PairExample]:
        tools = [f"{name}{i}" for i in range(20)]
        return [PairExample("a", "b", 0 if (i + 1) % 20 == j else 2 if (j + 1) % 20 == i else 1, f"{name}/{group_of(i)}",
                            a, b) for i, a in enumerate(tools) for j, b in enumerate(tools) if i != j and
                group_of(i) == group_of(j)]
    every = pairs_of("many", lambda i: i // 4) + pairs_of("one", lambda i: "only")
    sampled = [e for data_set in ("many", "one") for e in sample_none([e for e in every if e.data_set == data_set], 30, 7)]
    assert len(sampled) < len(every)
    valid = grouped_split(sampled, 0.2, seed=1)[1]
    report = held_out_pairs(sampled, every, 0.2, seed=1)
    assert set(map(id, valid)) < set(map(id, report))  # the sample's held-out pairs, and more none pairs
    assert [e for e in every if e in report] == report  # the pool's order
    groups = {e.group for e in valid if e.data_set == "many"}
    tools = {t for e in valid if e.data_set == "one" for t in (e.tool_a, e.tool_b)} - \
        {t for e in sampled if e.data_set == "one" and e not in valid for t in (e.tool_a, e.tool_b)}
    assert groups and tools
    unit = lambda e: e.group in groups or e.data_set == "one" and (e.tool_a in tools or e.tool_b in tools)  # noqa: E731
    assert report == [e for e in every if unit(e)]
    # a cap on each data set's none pairs, the dependency pairs all kept
    capped = held_out_pairs(sampled, every, 0.2, seed=1, max_none=5)
    for data_set in ("many", "one"):
        part = [e for e in capped if e.data_set == data_set]
        assert sum(e.label == 1 for e in part) == 5
        assert [e for e in part if e.label != 1] == [e for e in report if e.data_set == data_set and e.label != 1]
    # the other side: every pair outside the held-out units, none pairs capped per set, the units never shared
    train = training_pairs(sampled, every, 0.2, seed=1, max_none=10)
    assert not set(map(id, train)) & set(map(id, report))
    assert [e for e in train if e.label != 1] == [e for e in every if not unit(e) and e.label != 1]
    for data_set in ("many", "one"):
        assert sum(e.label == 1 and e.data_set == data_set for e in train) == 10
    assert set(map(id, training_pairs(sampled, every, 0.2, seed=1))) | set(map(id, report)) == set(map(id, every))


# ---------------------------------------------------------------------------------------------
# Tokenization, batching, metrics


def test_pair_truncation_keeps_both_documents():
    tokenizer = load_tokenizer("offline-minilm")
    long_a, long_b = "alpha " * 400, "omega " * 400
    ids = encode_pairs(tokenizer, [long_a], [long_b], max_length=64)["input_ids"][0]
    text = tokenizer.decode(ids)
    assert len(ids) == 64 and "alpha" in text and "omega" in text
    assert ids.count(tokenizer.sep_token_id) == 2 and ids[0] == tokenizer.cls_token_id


def test_doc_text_puts_the_signature_first_and_derives_missing_outputs():
    doc = _doc("GetUserToken", ["username", "password"], ["token"])
    text = doc_text(canonical_doc_json(doc))
    assert text.startswith("GetUserToken(username: str, password: str) -> token: str. GetUserToken tool")
    no_outputs = doc_text({"name": "get_user_token", "description": "d", "input_params": [], "output_params": []})
    assert no_outputs.startswith("get_user_token() -> user_token. d")
    assert doc_text("free text, not JSON") == "free text, not JSON"


def test_pair_texts_lead_with_the_parameter_match_evidence_and_swap_exactly():
    login, mail = _doc("GetUserToken", ["user"], ["token"]), _doc("SendMail", ["token", "to"], ["status"])
    a, b = pair_texts(mail, login)
    assert a.startswith("takes token from the other tool. SendMail(token: str, to: str)")
    assert b == doc_text(login)  # login takes nothing from mail
    assert pair_texts(login, mail) == (b, a)
    weather = _doc("Weather", ["city"], ["forecast"])
    assert pair_texts(mail, weather) == (doc_text(mail), doc_text(weather))  # no shared name, no hint
    # a name too common in the pair's group is no evidence: no hint (schemas.name_rule.common_output_names)
    assert pair_texts(mail, login, ignore=frozenset({"token"})) == (doc_text(mail), doc_text(login))
    producers = [_doc(f"Issuer{k}", [], ["token"]) for k in range(3)] + [mail]
    assert common_output_names(producers) == {"token"} and common_output_names(producers, 3) == frozenset()
    assert common_output_names(producers, None) == frozenset()


def test_pair_texts_give_partial_name_matches_as_a_weaker_hint():
    # outputs derived from the name (no declared outputs): get_user_token -> user_token, which `token` takes
    login = {**_doc("get_user_token", ["user"]), "description": "d"}
    mail = _doc("SendMail", ["token", "to"], ["status"])
    a, b = pair_texts(mail, login)
    assert a.startswith("may take token from the other tool's user_token. SendMail(")
    assert b == doc_text(login) and pair_texts(login, mail) == (b, a)
    # exact and partial evidence side by side; an exactly matched input is not repeated as partial
    both = _doc("Both", ["user_token", "token"], [])
    assert pair_texts(both, login)[0].startswith("takes usertoken from the other tool. may take token from")
    assert pair_texts(mail, login, ignore=frozenset({"usertoken"})) == (doc_text(mail), doc_text(login))


def test_an_input_that_many_tools_partly_match_gives_no_partial_hint():
    from schemas.name_rule import common_partial_inputs

    counters = [_doc(f"Stats{k}", [], [f"{w}_count"]) for k, w in enumerate(("char", "review", "view"))]
    reader = _doc("Paginate", ["count", "user_token"], ["page"])
    issuer = _doc("Issuer", [], ["token"])
    group = counters + [reader, issuer]
    # three producers partly match `count` (char_count, review_count, view_count): it names none of them;
    # no output partly matches `user_token` (a partial match runs from the more specific output)
    assert common_partial_inputs(group) == {"count"}
    assert common_partial_inputs(group, 3) == frozenset() and common_partial_inputs(group, None) == frozenset()
    assert partial_feeds(counters[0], reader) == [("count", "char_count")]
    assert partial_feeds(counters[0], reader, ignore_inputs={"count"}) == []
    a, _ = pair_texts(reader, counters[0])
    assert a.startswith("may take count from the other tool's char_count.")
    assert pair_texts(reader, counters[0], ignore_inputs=frozenset({"count"})) == (doc_text(reader), doc_text(counters[0]))


def test_pair_texts_give_an_output_word_the_other_tool_names_as_the_weakest_hint():
    # no parameters at all (UltraTool, TMDB): SearchMovie -> movie, which GetMovieCredit's text uses
    search = {"name": "SearchMovie", "description": "Search for movies by title.", "input_params": [], "output_params": []}
    credit = {"name": "GetMovieCredit", "description": "The cast and crew of a movie.", "input_params": [],
              "output_params": []}
    weather = {"name": "GetWeather", "description": "Today's forecast.", "input_params": [], "output_params": []}
    a, b = pair_texts(credit, search)
    assert a == "mentions movie, which the other tool returns. " + doc_text(credit)
    assert b == doc_text(search)  # "credit" is not in SearchMovie's text: no hint the other way
    assert pair_texts(search, credit) == (b, a)  # the hint moves with its doc
    assert pair_texts(credit, weather) == (doc_text(credit), doc_text(weather))
    assert pair_texts(credit, search, ignore=frozenset({"movie"})) == (doc_text(credit), doc_text(search))
    # declared parameters say what flows: no mention hint when either tool declares any
    param = {"name": "credit_type", "type": "str", "description": "cast or crew"}
    credit_with_inputs = {**credit, "input_params": [param]}
    assert pair_texts(credit_with_inputs, search) == (doc_text(credit_with_inputs), doc_text(search))
    search_with_outputs = {**search, "output_params": [{**param, "name": "movie_id"}]}
    assert pair_texts(credit, search_with_outputs) == (doc_text(credit), doc_text(search_with_outputs))
    # a stronger hint wins: a parameter match is not repeated as a mention
    login, mail = _doc("GetUserToken", ["user"], ["token"]), _doc("SendMail", ["token", "to"], ["status"])
    mail["description"] = "Send a mail with the user token."
    assert pair_texts(mail, login)[0].startswith("takes token from the other tool. SendMail(")


def test_hint_dropout_shows_a_seeded_share_of_training_pairs_without_the_hint(tiny_model_dir):
    from tasks.training.trainer import hint_mask, tokenized_dataset

    login, mail = _doc("GetUserToken", ["user"], ["token"]), _doc("SendMail", ["token", "to"], ["status"])
    assert pair_texts(mail, login, hints=False) == (doc_text(mail), doc_text(login))
    assert pair_texts(mail, login, hints=True)[0].startswith("takes token from the other tool.")
    mask = hint_mask(2000, 0.3, seed=7)
    assert mask == hint_mask(2000, 0.3, seed=7) and mask != hint_mask(2000, 0.3, seed=8)
    assert 0.27 < 1 - sum(mask) / len(mask) < 0.33
    assert all(hint_mask(50, 0.0, 0)) and not any(hint_mask(50, 1.0, 0))
    with pytest.raises(ValueError, match="hint_dropout"):
        hint_mask(10, 1.5, 0)
    # a dropped pair is tokenized from the docs alone: shorter by exactly the hint's word pieces
    tokenizer = load_tokenizer(str(tiny_model_dir))
    pair = PairExample(canonical_doc_json(mail), canonical_doc_json(login), 0, "g")
    ds = tokenized_dataset(tokenizer, [pair, pair], 256, hints=[True, False])
    hint = tokenizer("takes token from the other tool.", add_special_tokens=False)["input_ids"]
    assert len(ds[0]["input_ids"]) - len(ds[1]["input_ids"]) == len(hint)
    assert ds[1]["input_ids"] == encode_pairs(tokenizer, [mail], [login], 256, hints=[False])["input_ids"][0]


@pytest.mark.parametrize("output, input_name, expected", [
    ("user_token", "token", True),          # the input names the output less specifically
    ("movie", "movie_id", True),            # a reference to the output
    ("members", "member_name", True),       # plural output, singular reference
    ("member", "members", True),
    ("token", "token", False),              # exact: feeds, not partial
    ("check_in_date", "date", False),       # too vague to point at a producer
    ("movie", "movie_rating", False),       # not a reference suffix
    ("user", "username", False),            # one word: no boundary to match on
])
def test_partial_match_known_cases(output, input_name, expected):
    from schemas.name_rule import name_words

    assert partial_match(output, input_name) is expected
    # a match needs a shared singular word (the parameter head skips pairs that share none)
    assert not expected or not name_words(output).isdisjoint(name_words(input_name))


def test_partial_rule_counts_partial_names_and_the_exact_rule_does_not():
    login = {"name": "GetUserToken", "description": "d", "input_params": [], "output_params": []}
    mail = _doc("SendMail", ["token"], [])
    assert partial_feeds(login, mail) == [("token", "user_token")]
    assert schema_rule_label(mail, login) == 1 and schema_rule_label(mail, login, partial=True) == 0
    assert schema_rule_label(login, mail, partial=True) == 2


def test_classification_metrics_on_a_known_confusion():
    y_true = [0, 0, 1, 1, 1, 1, 2, 2]
    y_pred = [0, 1, 1, 1, 0, 1, 0, 2]  # one 0 missed, one 1 called 0, one 2 called 0 (wrong direction)
    m = classification_metrics(y_true, y_pred)
    assert m["confusion_matrix"] == [[1, 1, 0], [1, 3, 0], [1, 0, 1]]
    # dependency (micro over classes 0 and 2): TP = 2 of 4 predicted as 0/2 and 4 labelled 0/2
    assert m["dependency"]["precision"] == pytest.approx(0.5) and m["dependency"]["recall"] == pytest.approx(0.5)
    assert m["per_class"]["a_depends_on_b"]["precision"] == pytest.approx(1 / 3)
    assert m["per_class"]["no_dependency"]["recall"] == pytest.approx(0.75)
    assert m["macro"]["f1"] == pytest.approx((0.4 + 0.75 + 2 / 3) / 3)


# ---------------------------------------------------------------------------------------------
# Training moves the loss


def test_class_balanced_training_moves_the_loss_down(tiny_model_dir, tmp_path):
    tokenizer, model = load_tokenizer(str(tiny_model_dir)), load_model(str(tiny_model_dir))
    pairs = build_pairs(toy_toolset())  # imbalanced: 2/4/2 -> Eq. 2 treats classes alike
    labels = torch.tensor([p.label for p in pairs])
    loss = CategoryAveragedLoss()

    def current_loss() -> float:
        probs = predict_examples(model, tokenizer, pairs, 64, 16, symmetric=False)
        return float(loss(torch.tensor(np.log(probs)), labels))

    before = current_loss()
    args = StageArguments(epochs=45, batch_size=8, learning_rate=1e-2, warmup_ratio=0.0, max_length=64, seed=0,
                          select_metric="loss", evals_per_epoch=1, progress=False)
    result = train_classifier(model, tokenizer, pairs, pairs, args, tmp_path / "run", loss_name="category_averaged")
    model = load_model(str(result.best_dir))
    after = current_loss()
    assert after < before * 0.7, (before, after)
    assert (tmp_path / "run" / "best" / "config.json").exists()
    assert result.evaluations and all("eval_dependency_f1_calibrated" in h for h in result.evaluations)
    assert result.best_score == min(h["eval_loss"] for h in result.evaluations)
    assert result.best_score == pytest.approx(after, rel=1e-3)  # the kept model is the best evaluated one


def test_the_weight_average_is_the_warmed_up_moving_average_and_swaps_back():
    layer = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        layer.weight.fill_(1.0)
    average = WeightAverage(layer, decay=0.5)
    expected = 1.0
    for t, w in enumerate([3.0, 5.0, -1.0], start=1):
        with torch.no_grad():
            layer.weight.fill_(w)
        average.update(layer)
        d = min(0.5, (1 + t) / (10 + t))  # 0.18, 0.25, 0.31: warmed up, below the decay
        expected = d * expected + (1 - d) * w
    assert float(average.shadow["weight"]) == pytest.approx(expected)
    average.swap(layer)
    assert float(layer.weight.detach()) == pytest.approx(expected) and float(average.shadow["weight"]) == -1.0
    average.swap(layer)
    assert float(layer.weight.detach()) == -1.0
    with pytest.raises(ValueError, match="decay"):
        WeightAverage(layer, decay=1.0)


def test_a_weight_average_keeps_the_training_steps_and_is_what_validation_saw_and_saved(tiny_model_dir, tmp_path):
    tokenizer = load_tokenizer(str(tiny_model_dir))
    pairs = build_pairs(toy_toolset())
    runs = {}
    for name, decay in (("plain", None), ("averaged", 0.8)):
        args = StageArguments(epochs=6, batch_size=4, learning_rate=1e-2, warmup_ratio=0.0, max_length=64, seed=0,
                              select_metric="loss", evals_per_epoch=1, progress=False, ema_decay=decay)
        runs[name] = train_classifier(load_model(str(tiny_model_dir)), tokenizer, pairs, pairs, args,
                                      tmp_path / name, loss_name="category_averaged")
    plain, averaged = runs["plain"], runs["averaged"]
    # training moved the live weights alike: the average is only validated and saved, never trained on
    assert averaged.step_losses == plain.step_losses and len(plain.step_losses) > 1
    weights = {n: load_model(str(r.best_dir)).state_dict() for n, r in runs.items()}
    assert any(not torch.equal(weights["plain"][k], weights["averaged"][k]) for k in weights["plain"])
    # the kept checkpoint is the one validation scored
    model = load_model(str(averaged.best_dir))
    probs = predict_examples(model, tokenizer, pairs, 64, 16, symmetric=False)
    labels = torch.tensor([p.label for p in pairs])
    assert averaged.best_score == pytest.approx(float(CategoryAveragedLoss()(torch.tensor(np.log(probs)), labels)),
                                                rel=1e-3)


# ---------------------------------------------------------------------------------------------
# Direction, calibration, the parameter-match rule


def test_with_both_orders_adds_only_missing_swaps():
    a, b, c = "A", "B", "C"
    pairs = [PairExample(a, b, 0, "g", "a", "b"), PairExample(b, a, 2, "g", "b", "a"), PairExample(a, c, 1, "g", "a", "c")]
    both = with_both_orders(pairs)
    assert len(both) == 4 and both[:3] == pairs
    assert both[3] == PairExample(c, a, 1, "g", "c", "a")
    assert with_both_orders(both) == both
    assert swap_partners(both).tolist() == [1, 0, 3, 2]


def test_symmetrize_averages_a_pair_with_its_label_swapped_twin():
    probs = np.array([[0.6, 0.3, 0.1], [0.2, 0.3, 0.5], [0.1, 0.8, 0.1]])
    out = symmetrize(probs, np.array([1, 0, -1]))
    assert out[0] == pytest.approx([0.55, 0.3, 0.15]) and out[1] == pytest.approx([0.15, 0.3, 0.55])
    assert out[2] == pytest.approx(probs[2])  # no twin: unchanged


def test_symmetric_prediction_gives_mirrored_probabilities(tiny_model_dir):
    tokenizer, model = load_tokenizer(str(tiny_model_dir)), load_model(str(tiny_model_dir))
    a, b = canonical_doc_json(_doc("Login", ["user"], ["token"])), canonical_doc_json(_doc("Mail", ["token"], []))
    forward = predict_proba(model, tokenizer, [a], [b], 64, symmetric=True).numpy()[0]
    backward = predict_proba(model, tokenizer, [b], [a], 64, symmetric=True).numpy()[0]
    assert forward == pytest.approx(backward[[2, 1, 0]], abs=1e-6)


def test_symmetric_scoring_scores_each_unordered_pair_once(tiny_model_dir, monkeypatch):
    import models.discriminator as disc

    tokenizer, model = load_tokenizer(str(tiny_model_dir)), load_model(str(tiny_model_dir), kind_head=True)
    login, mail, clock = (canonical_doc_json(_doc(n, i, o)) for n, i, o in
                          (("Login", ["user"], ["token"]), ("Mail", ["token"], []), ("Clock", [], ["time"])))
    docs_a, docs_b = [login, mail, clock, login, mail], [mail, login, login, mail, clock]  # both orders, a repeat
    alone = [predict_proba(model, tokenizer, [a], [b], 64, symmetric=True, with_kind=True) for a, b in zip(docs_a, docs_b)]
    encoded = []
    encode = disc.encode_pairs
    monkeypatch.setattr(disc, "encode_pairs", lambda tok, a, b, *args, **kw: encoded.append(len(a)) or
                        encode(tok, a, b, *args, **kw))
    scored = predict_proba(model, tokenizer, docs_a, docs_b, 64, symmetric=True, with_kind=True)
    assert encoded == [3, 3]  # Login/Mail, Clock/Login, Mail/Clock: each order once
    assert torch.allclose(scored.probs, torch.cat([s.probs for s in alone]), atol=1e-6)
    assert torch.allclose(scored.p_precondition, torch.cat([s.p_precondition for s in alone]), atol=1e-6)
    assert torch.equal(scored.probs[1], scored.probs[0][[2, 1, 0]]) and torch.equal(scored.probs[3], scored.probs[0])
    assert disc.unordered_pairs(docs_a, docs_b)[0] == [0, 2, 4]


def test_decide_uses_the_dependency_mass_and_the_larger_direction():
    probs = np.array([[0.3, 0.4, 0.3], [0.35, 0.4, 0.25], [0.1, 0.8, 0.1], [0.05, 0.5, 0.45]])
    assert decide(probs).tolist() == [1, 1, 1, 1]
    assert decide(probs, 0.55).tolist() == [0, 0, 1, 1]  # row 3 has mass 0.5 < 0.55
    assert decide(probs, 0.5).tolist() == [0, 0, 1, 2]


def test_choose_threshold_maximises_dependency_f1_on_known_scores():
    # p(dep) = p0 + p2 descending: 0.9 (right), 0.8 (wrong direction), 0.7 (right), 0.4 (none), 0.2 (right)
    y = [0, 2, 2, 1, 0]
    probs = np.array([[0.8, 0.1, 0.1], [0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.2, 0.6, 0.2], [0.15, 0.8, 0.05]])
    best = choose_threshold(y, probs, "max_f1")
    # top 3: TP 2 of 3 predicted, 4 true -> F1 4/7; top 5: TP 3 of 5 -> F1 0.667
    assert best["threshold"] == pytest.approx(0.2) and best["f1"] == pytest.approx(2 / 3)
    strict = choose_threshold(y, probs, "precision", target_precision=0.99)
    assert strict["threshold"] == pytest.approx(0.9) and strict["precision"] == 1.0 and strict["recall"] == 0.25
    none = choose_threshold([1, 1], probs[:2], "max_f1")
    assert none["threshold"] == 1.0 and "no dependency pairs" in none["note"]
    with pytest.raises(ValueError, match="unknown calibration criterion"):
        choose_threshold(y, probs, "recall")


def test_weighted_calibration_counts_false_positives_at_the_real_class_prior():
    # two right dependencies at 0.9 and 0.6, one none pair at 0.7, one none pair at 0.2
    y = [0, 1, 0, 1]
    probs = np.array([[0.9, 0.1, 0.0], [0.7, 0.3, 0.0], [0.6, 0.4, 0.0], [0.2, 0.8, 0.0]])
    assert choose_threshold(y, probs)["threshold"] == pytest.approx(0.6)  # F1 0.8 beats 2/3 at the 0.9 cut
    # at 10 none pairs per real one, letting the 0.7 pair through costs 10 false positives
    heavy = choose_threshold(y, probs, weights=np.array([1, 10, 1, 10]))
    assert heavy["threshold"] == pytest.approx(0.9) and heavy["precision"] == 1.0 and heavy["weighted"] is True


def test_figures_at_the_prior_count_each_none_pair_as_its_weight_and_agree_with_decide_unweighted():
    # two right dependencies at 0.9 and 0.6, one none pair at 0.7, one none pair at 0.2; the cut 0.6
    y = [0, 1, 0, 1]
    probs = np.array([[0.9, 0.1, 0.0], [0.7, 0.3, 0.0], [0.6, 0.4, 0.0], [0.2, 0.8, 0.0]])
    plain = at_prior(y, probs, 0.6, np.ones(4), 1.0)
    decided = evaluate_probs(y, probs, 0.6)["calibrated"]["dependency"]
    assert [plain[k] for k in ("precision", "recall", "f1")] == pytest.approx([decided[k] for k in ("precision", "recall", "f1")])
    heavy = at_prior(y, probs, 0.6, np.array([1, 10, 1, 10]), 10.0)  # the none pair let through counts 10 times
    assert heavy["precision"] == pytest.approx(2 / 12) and heavy["recall"] == 1.0 and heavy["none_per_dependency"] == 10.0
    assert at_prior(y, probs, 0.95, np.ones(4), 1.0)["recall"] == 0.0  # nothing called: no division by zero


def test_natural_none_ratio_and_weights_restore_the_prior_of_a_subsampled_set():
    toolset = toy_toolset()  # auth: 3 tools (6 ordered pairs, 2 edges -> 4 dependency pairs), misc: 2 tools
    assert natural_none_ratio(toolset) == pytest.approx((6 + 2 - 4) / 4)
    pairs = build_pairs(toolset, max_none=2, seed=0)  # 4 dependency pairs, 2 none pairs kept
    w = none_weights(pairs, ratio=3.0)
    assert all(w[i] == 1.0 for i, p in enumerate(pairs) if p.label != 1)
    assert sum(w[i] for i, p in enumerate(pairs) if p.label == 1) == pytest.approx(3.0 * 4)


def test_direction_accuracy_ignores_the_none_probability():
    probs = np.array([[0.1, 0.85, 0.05], [0.3, 0.1, 0.6], [0.4, 0.2, 0.4], [0.2, 0.7, 0.1]])
    assert direction_accuracy([0, 0, 2, 1], probs) == {"n": 3, "accuracy": pytest.approx(1 / 3)}


def test_schema_rule_reads_declared_and_name_derived_outputs():
    assert name_derived_output("GetUserToken") == "user_token" and name_derived_output("get") is None
    login, mail = _doc("GetUserToken", ["user"], ["token"]), _doc("SendMail", ["token", "to"], ["status"])
    assert schema_rule_label(mail, login) == 0 and schema_rule_label(login, mail) == 2
    undeclared = {"name": "get_user_token", "description": "d", "input_params": [], "output_params": []}
    consumer = _doc("DeleteAccount", ["user_token"], [])
    assert schema_rule_label(consumer, undeclared) == 0 and schema_rule_label(consumer, undeclared, derive=False) == 1
    pairs = [PairExample(canonical_doc_json(mail), canonical_doc_json(login), 0, "g"),
             PairExample(canonical_doc_json(login), canonical_doc_json(mail), 2, "g")]
    assert schema_rule_metrics(pairs)["dependency"]["f1"] == 1.0


def test_beyond_rule_metrics_count_what_neither_rule_finds():
    y = [0, 2, 0, 0, 2, 1, 1, 1, 0]
    exact = [0, 1, 1, 2, 1, 1, 1, 0, 1]  # finds pair 0; fires the wrong way on pair 3; a false edge on pair 7
    partial = [0, 2, 1, 1, 1, 1, 1, 1, 1]  # finds pair 1
    pred = [0, 2, 0, 1, 0, 0, 2, 0, 0]
    b = beyond_rule_metrics(y, pred, exact, partial)
    # gold dependencies neither rule finds: pairs 2, 3, 4, 8; the model gets 2 and 8 (4 has the wrong direction)
    assert (b["n_gold"], b["true_positives"], b["recall"], b["n_gold_rule_wrong_way"]) == (4, 2, 0.5, 1)
    # pairs neither rule fires on: 2, 4, 5, 6, 8; dependency predictions there: 2, 4, 5, 6, 8; right: 2 and 8
    assert (b["n_rule_silent"], b["n_predicted"], b["correct_predicted"]) == (5, 5, 2)
    assert b["precision"] == pytest.approx(0.4)
    # nothing beyond the rules, nothing predicted there: undefined, not 0
    none = beyond_rule_metrics([0, 1], [0, 1], [0, 1], [1, 1])
    assert none["recall"] is None and none["precision"] is None and none["n_gold"] == 0 and none["n_rule_silent"] == 1
    with pytest.raises(ValueError, match="beyond_rule_metrics"):
        beyond_rule_metrics([0, 1], [0], [0, 1], [1, 1])


def test_evaluate_with_rules_reports_beyond_rule_recall_per_decision():
    login, mail = _doc("GetUserToken", ["user"], ["token"]), _doc("SendMail", ["token", "to"], ["status"])
    create, delete = _doc("CreateUser", ["name"], ["user_token"]), _doc("DeleteUser", ["token"], [])
    tmp, write = _doc("MakeTempDir", [], ["tmp_dir"]), _doc("WriteFile", ["path", "text"], [])
    weather = _doc("GetWeather", ["city"], ["forecast"])
    pairs = [PairExample(canonical_doc_json(a), canonical_doc_json(b), label, "g")
             for a, b, label in ((mail, login, 0), (delete, create, 0), (write, tmp, 0), (mail, weather, 1))]
    assert rule_labels(pairs) == [0, 1, 1, 1] and rule_labels(pairs, partial=True) == [0, 0, 1, 1]
    probs = np.array([[0.9, 0.1, 0.0], [0.2, 0.8, 0.0], [0.6, 0.4, 0.0], [0.55, 0.45, 0.0]])
    out = evaluate_with_rules(pairs, probs, threshold=0.58)
    assert out["schema_rule"]["dependency"]["recall"] == pytest.approx(1 / 3)
    assert out["schema_rule_partial"]["dependency"]["recall"] == pytest.approx(2 / 3)
    argmax, calibrated = out["argmax"]["beyond_rule"], out["calibrated"]["beyond_rule"]
    # one gold pair beyond both rules (tmp_dir -> path); argmax finds it and adds a false edge (GetWeather)
    assert (argmax["n_gold"], argmax["recall"], argmax["n_rule_silent"], argmax["precision"]) == (1, 1.0, 2, 0.5)
    # the 0.58 cut keeps the true edge and drops the false one
    assert (calibrated["recall"], calibrated["n_predicted"], calibrated["precision"]) == (1.0, 1, 1.0)
    strict = evaluate_with_rules(pairs, probs, threshold=0.65)["calibrated"]["beyond_rule"]
    assert strict["recall"] == 0.0 and strict["precision"] is None
    table = format_comparison({"model": out["argmax"], "rule": out["schema_rule"]}, "t")
    lines = table.splitlines()
    assert "beyond-rule R" in lines[1]
    assert lines[2].split()[-2:] == ["1.000", "0.500"] and lines[3].split()[-2:] == ["-", "-"]
    assert "the 1 gold dependencies neither name rule" in lines[-1]


def test_recall_by_kind_splits_gold_dependencies_by_kind():
    login, mail = _doc("GetUserToken", ["user"], ["token"]), _doc("SendMail", ["token", "to"], ["status"])
    check, pay = _doc("CheckBalance", ["account"], ["ok"]), _doc("Transfer", ["account", "amount"], ["receipt"])
    weather = _doc("GetWeather", ["city"], ["forecast"])
    pairs = [PairExample(canonical_doc_json(a), canonical_doc_json(b), label, "g", kind=kind)
             for a, b, label, kind in ((mail, login, 0, "data"), (login, mail, 2, "data"),
                                       (pay, check, 0, "precondition"), (check, pay, 2, "precondition"),
                                       (mail, weather, 1, None))]
    # the model finds both data rows and one precondition row; the name rule finds only the data rows
    probs = np.array([[0.9, 0.1, 0.0], [0.1, 0.1, 0.8], [0.7, 0.3, 0.0], [0.1, 0.8, 0.1], [0.1, 0.9, 0.0]])
    out = evaluate_with_rules(pairs, probs, threshold=None)
    assert out["argmax"]["by_kind"] == {"data": {"n_gold": 2, "true_positives": 2, "recall": 1.0},
                                        "precondition": {"n_gold": 2, "true_positives": 1, "recall": 0.5}}
    assert out["schema_rule"]["by_kind"]["precondition"]["recall"] == 0.0
    assert out["schema_rule"]["by_kind"]["data"]["recall"] == 1.0
    # tool-set pairs carry no kind: left out, not counted as data
    assert recall_by_kind([PairExample("{}", "{}", 0, "g")], [0]) == {}
    table = format_comparison({"model": out["argmax"], "rule": out["schema_rule"]}, "t").splitlines()
    assert table[1].split()[-4:] == ["R", "data", "R", "precondition"]
    assert table[2].split()[-2:] == ["1.000", "0.500"] and table[3].split()[-2:] == ["1.000", "0.000"]


def test_metrics_json_is_strict(tmp_path):
    path = write_json(tmp_path / "m.json", {"loss": float("nan"), "x": np.float32(0.5), "p": tmp_path, "l": [float("inf")]})
    assert json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-strict constant {c}")) == \
        {"loss": None, "x": 0.5, "p": str(tmp_path), "l": [None]}


def test_load_model_can_keep_only_the_first_layers(tiny_model_dir, tmp_path):
    full, cut = load_model(str(tiny_model_dir)), load_model(str(tiny_model_dir), num_layers=1)
    assert full.config.num_hidden_layers == 2 and cut.config.num_hidden_layers == 1
    assert len(cut.bert.encoder.layer) == 1
    assert torch.equal(cut.bert.encoder.layer[0].attention.self.query.weight, full.bert.encoder.layer[0].attention.self.query.weight)
    cut.save_pretrained(tmp_path / "cut")  # a saved cut model reloads with its own depth
    assert load_model(str(tmp_path / "cut")).config.num_hidden_layers == 1
    assert load_model(str(tmp_path / "cut"), num_layers=3).config.num_hidden_layers == 1  # never grows


# ---------------------------------------------------------------------------------------------
# The kind head: five outputs whose sums over kind are the three classes


def test_a_widened_checkpoint_keeps_its_three_class_probabilities_and_starts_undecided_on_kind(tiny_model_dir):
    from models.discriminator import has_kind_head

    tokenizer = load_tokenizer(str(tiny_model_dir))
    three, five = load_model(str(tiny_model_dir)), load_model(str(tiny_model_dir), kind_head=True)
    assert not has_kind_head(three) and has_kind_head(five)
    assert {int(k): v for k, v in five.config.id2label.items()} == KIND_HEAD_ID2LABEL
    docs_a = [canonical_doc_json(_doc("SendMail", ["token"], ["status"])), canonical_doc_json(_doc("GetWeather", ["city"]))]
    docs_b = [canonical_doc_json(_doc("GetUserToken", ["user"], ["token"])), canonical_doc_json(_doc("Clock", [], ["time"]))]
    before = predict_proba(three, tokenizer, docs_a, docs_b, max_length=64)
    scored = predict_proba(five, tokenizer, docs_a, docs_b, max_length=64, with_kind=True)
    assert torch.allclose(scored.probs, before, atol=1e-6)
    assert torch.allclose(scored.p_precondition, torch.full((2,), 0.5), atol=1e-6)
    assert predict_proba(three, tokenizer, docs_a, docs_b, max_length=64, with_kind=True).p_precondition is None
    # symmetric scoring averages the kind of both orders too
    sym = predict_proba(five, tokenizer, docs_a, docs_b, max_length=64, symmetric=True, with_kind=True)
    back = predict_proba(five, tokenizer, docs_b, docs_a, max_length=64, with_kind=True)
    assert torch.allclose(sym.p_precondition, (scored.p_precondition + back.p_precondition) / 2, atol=1e-6)


def test_class_logits_sum_each_dependency_class_over_its_two_kinds():
    from models.discriminator import class_logits, kind_logit, p_precondition

    logits = torch.tensor([[0.3, -1.0, 0.2, 1.5, -0.4], [2.0, 0.1, -0.3, -1.0, 0.7]])
    p = logits.softmax(-1)
    three = class_logits(logits).softmax(-1)
    assert torch.allclose(three, torch.stack([p[:, 0] + p[:, 3], p[:, 1], p[:, 2] + p[:, 4]], -1), atol=1e-6)
    assert torch.allclose(p_precondition(logits), (p[:, 3] + p[:, 4]) / (p[:, 0] + p[:, 2] + p[:, 3] + p[:, 4]), atol=1e-6)
    # the kind logit of the pair's own direction: a->b compares outputs 3 and 0, b->a outputs 4 and 2
    z = kind_logit(logits, torch.tensor([0, 2]))
    assert torch.allclose(z, torch.tensor([1.5 - 0.3, 0.7 - (-0.3)]))
    assert torch.equal(class_logits(logits[:, :3]), logits[:, :3])  # a 3-class model: as it is


def test_the_kind_loss_weighs_each_pair_as_the_class_loss_does_and_ignores_pairs_of_unknown_kind():
    from models.discriminator import PreconditionKindLoss, kind_code

    assert [kind_code(0, "data"), kind_code(2, "precondition"), kind_code(1, None), kind_code(0, None)] == [0, 1, -1, -1]
    loss = PreconditionKindLoss()
    logits = torch.tensor([[0.0, 0.0, 0.0, 2.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 3.0],
                           [0.0, 5.0, 0.0, 0.0, 0.0]], requires_grad=True)
    labels, kinds = torch.tensor([0, 0, 0, 1]), torch.tensor([1, 0, 0, -1])
    # kind logits of the three known rows: 2.0 (precondition), -1.0 (data), 0.0 (data); the none row is left out
    bce = lambda z, y: float(F.binary_cross_entropy_with_logits(torch.tensor(z), torch.tensor(y)))  # noqa: E731
    expected = (bce(2.0, 1.0) + bce(-1.0, 0.0) + bce(0.0, 0.0)) / 4  # summed, over the batch of 4
    value = loss(logits, labels, kinds)
    assert float(value.detach()) == pytest.approx(expected, rel=1e-6)
    value.backward()
    assert logits.grad[3].abs().sum() == 0 and logits.grad[0].abs().sum() > 0
    none_known = loss(logits, labels, torch.tensor([-1, -1, -1, -1]))
    assert float(none_known.detach()) == 0.0 and none_known.requires_grad


def test_training_teaches_the_kind_head_which_dependencies_are_preconditions(tiny_model_dir, tmp_path):
    tokenizer = load_tokenizer(str(tiny_model_dir))
    model = load_model(str(tiny_model_dir), kind_head=True)
    pairs = []
    for i in range(6):  # data: a token passes; precondition: a check must run first, nothing passes
        token, mail = _doc(f"GetToken{i}", ["user"], [f"token{i}"]), _doc(f"SendMail{i}", [f"token{i}"], ["status"])
        check, pay = _doc(f"CheckAccount{i}", ["account"], ["verified"]), _doc(f"Transfer{i}", ["amount"], ["receipt"])
        for consumer, producer, kind in ((mail, token, "data"), (pay, check, "precondition")):
            a, b = canonical_doc_json(consumer), canonical_doc_json(producer)
            pairs += [PairExample(a, b, 0, "g", kind=kind), PairExample(b, a, 2, "g", kind=kind)]
    args = StageArguments(epochs=30, batch_size=8, learning_rate=1e-2, warmup_ratio=0.0, max_length=64, seed=0,
                          select_metric="loss", progress=False)
    result = train_classifier(model, tokenizer, pairs, pairs, args, tmp_path / "run", loss_name="ce")
    trained = load_model(str(result.best_dir))
    _, kind = predict_examples(trained, tokenizer, pairs, 64, 16, symmetric=False, with_kind=True)
    is_pre = np.array([e.kind == "precondition" for e in pairs])
    assert kind[is_pre].min() > 0.5 > kind[~is_pre].max(), (kind[is_pre], kind[~is_pre])


def test_kind_metrics_count_an_edge_for_a_kind_only_when_found_and_called_that_kind():
    from tasks.training.metrics import choose_kind_cut, format_kind_table, kind_metrics, predicted_kinds

    data, pre = _doc("SendMail", ["token"], ["status"]), _doc("Transfer", ["amount"], ["receipt"])
    j = canonical_doc_json
    pairs = [PairExample(j(data), j(pre), 0, "g", kind="data"), PairExample(j(data), j(pre), 2, "g", kind="data"),
             PairExample(j(pre), j(data), 0, "g", kind="precondition"), PairExample(j(pre), j(data), 0, "g", kind="precondition"),
             PairExample(j(pre), j(pre), 1, "g"), PairExample(j(pre), j(data), 0, "g")]  # the last: kind unknown
    y_pred = [0, 0, 0, 1, 2, 0]  # row 2 wrong way, row 4 missed, row 5 a false positive, row 6 left out
    kinds = predicted_kinds(np.array([0.1, 0.9, 0.8, 0.9, 0.7, 0.9]), 0.5)
    assert kinds == ["data", "precondition", "precondition", "precondition", "precondition", "precondition"]
    m = kind_metrics(pairs, y_pred, kinds)
    assert m["data"] == {"n_gold": 2, "n_predicted": 1, "true_positives": 1, "precision": 1.0, "recall": 0.5,
                         "f1": pytest.approx(2 / 3)}
    # preconditions: predicted on rows 2 (wrong way), 3 (right), 5 (a none pair): 1 of 3, 1 of 2 gold
    assert m["precondition"]["precision"] == pytest.approx(1 / 3) and m["precondition"]["recall"] == 0.5
    assert m["kind_accuracy"] == 1.0 and m["n_found"] == 2
    assert kind_metrics([PairExample("{}", "{}", 0, "g")], [0], ["data"]) is None  # no kind known anywhere
    # the kind cut: the highest macro F1 of the two kinds over the dependent pairs of known kind. Ranked
    # 0.8 pre, 0.6 data, 0.45 pre, 0.1 data: cuts 0.8 and 0.45 tie at macro F1 (2/3 + 0.8) / 2; the higher is kept
    cut = choose_kind_cut(pairs, np.array([0.1, 0.6, 0.8, 0.45, 0.7, 0.99]))
    assert cut["kind_threshold"] == 0.8 and cut["kind_macro_f1"] == pytest.approx((2 / 3 + 0.8) / 2)
    assert cut["n_kind_pairs"] == 4 and cut["precondition_f1"] == pytest.approx(2 / 3)
    assert choose_kind_cut(pairs, np.array([0.1, 0.3, 0.8, 0.45, 0.7, 0.99]))["kind_threshold"] == 0.45  # separable
    assert choose_kind_cut(pairs[:2], np.array([0.1, 0.6]))["kind_threshold"] == 0.5  # one kind: no choice
    # a head that ranks preconditions no better than chance among many data pairs: every dependency stays data
    # (the precondition F1 alone would call them all preconditions: 2 of 10 right beats none)
    many = [PairExample(j(data), j(pre), 0, "g", kind="precondition" if i < 2 else "data") for i in range(10)]
    flat = choose_kind_cut(many, np.array([0.1, 0.1, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3]))
    assert flat["kind_threshold"] > 0.3 and flat["precondition_f1"] == 0.0 and flat["data_f1"] == pytest.approx(16 / 18)
    table = format_kind_table({"model": {"kinds": m}, "rule": {"kinds": None}}, "t").splitlines()
    assert len(table) == 3 and table[2].split()[1:4] == ["1.000", "0.500", "0.667"]


def test_tool_set_pairs_carry_the_kind_of_their_edge():
    tools = [Tool("Login", "g", _doc("Login", [], ["token"])), Tool("Mail", "g", _doc("Mail", ["token"])),
             Tool("Check", "g", _doc("Check")), Tool("Pay", "g", _doc("Pay"))]
    toolset = ToolSet("t", tools, [DependencyEdge("g", "Mail", "Login", kind="data"),
                                   DependencyEdge("g", "Pay", "Check", kind="precondition"), DependencyEdge("g", "Pay", "Login")])
    kinds = {(p.tool_a, p.tool_b): p.kind for p in build_pairs(toolset)}
    assert kinds[("Mail", "Login")] == kinds[("Login", "Mail")] == "data"
    assert kinds[("Pay", "Check")] == kinds[("Check", "Pay")] == "precondition"
    assert kinds[("Pay", "Login")] is None and kinds[("Mail", "Check")] is None  # kind not known; no dependency


def test_training_batches_are_drawn_at_random_unless_length_grouped_is_asked_for(tmp_path):
    """Length grouping puts a pair beside its swap (both are in the data, and exactly as long): pretraining on
    TDI pairs fell to the class prior with it (bench/RESULTS.md, 'Pretraining that falls to the prior')."""
    from tasks.training.trainer import training_arguments

    plain = training_arguments(StageArguments(), tmp_path, n_train=64, has_valid=False)
    grouped = training_arguments(StageArguments(length_grouped=True), tmp_path, n_train=64, has_valid=False)
    assert plain.train_sampling_strategy == "random" and grouped.train_sampling_strategy == "group_by_length"


def test_training_precision_auto_is_bf16_on_cuda_and_on_cpus_with_bf16_units(tmp_path, monkeypatch):
    from tasks.training import precision, trainer

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 amx_bf16 amx_tile\n")
    assert precision.cpu_bf16_unit(str(info)) == "amx_bf16"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16\n")  # bf16 instructions, no tiles
    assert precision.cpu_bf16_unit(str(info)) == "avx512_bf16"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16x\n")  # a flag is a whole word
    assert precision.cpu_bf16_unit(str(info)) is None
    assert precision.cpu_bf16_unit(str(tmp_path / "absent")) is None  # not Linux: fp32
    monkeypatch.setattr(precision.torch.cuda, "is_available", lambda: False)
    for unit, auto in (("amx_bf16", True), ("avx512_bf16", True), (None, False)):
        monkeypatch.setattr(precision, "cpu_bf16_unit", lambda unit=unit: unit)
        assert precision.train_in_bf16("auto") is auto
        assert precision.train_in_bf16("auto", cuda=False) is auto  # a CPU loop (the retriever's) on any machine
        assert precision.train_in_bf16("fp32") is False and precision.train_in_bf16("bf16") is True
    monkeypatch.setattr(precision.torch.cuda, "is_available", lambda: True)
    assert precision.train_in_bf16("auto") is True
    assert precision.train_in_bf16("auto", cuda=False) is False  # CUDA there, the loop on a CPU without bf16 units
    with pytest.raises(ValueError, match="fp16"):
        precision.train_in_bf16("fp16")
    monkeypatch.setattr(trainer.torch.cuda, "is_available", lambda: False)
    for bf16 in (True, False):  # the stage's choice reaches the Trainer
        assert trainer.training_arguments(trainer.StageArguments(bf16=bf16), tmp_path, 64, False).bf16 is bf16
    assert trainer.training_arguments(trainer.StageArguments(), tmp_path, 64, False).bf16 is False  # unset: CUDA only
