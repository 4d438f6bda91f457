"""Discriminator pieces on CPU: Eq. 2 loss, a training smoke run, pair labels, splits, metrics."""
from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from models.discriminator import category_averaged_loss, encode_pairs, load_model, load_tokenizer, plain_loss  # noqa: E402
from schemas.tdi import ID2LABEL, LABEL2ID, swap_label  # noqa: E402
from schemas.toolset import DependencyEdge, Tool, ToolSet  # noqa: E402
from tasks.training import (  # noqa: E402
    LoopConfig,
    PairExample,
    TokenizedPairs,
    bucket_batches,
    build_pairs,
    classification_metrics,
    evaluate,
    grouped_split,
    label_counts,
    train_classifier,
)


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


# ---------------------------------------------------------------------------------------------
# Tokenization, batching, metrics


def test_pair_truncation_keeps_both_documents():
    tokenizer = load_tokenizer("offline-minilm")
    long_a, long_b = "alpha " * 400, "omega " * 400
    ids = encode_pairs(tokenizer, [long_a], [long_b], max_length=64)["input_ids"][0]
    text = tokenizer.decode(ids)
    assert len(ids) == 64 and "alpha" in text and "omega" in text
    assert ids.count(tokenizer.sep_token_id) == 2 and ids[0] == tokenizer.cls_token_id


def test_bucket_batches_cover_every_index_once_and_sort_within_chunks():
    lengths = [(i * 37) % 101 for i in range(250)]
    batches = bucket_batches(lengths, batch_size=8, seed=5)
    assert sorted(i for b in batches for i in b) == list(range(250))
    assert batches == bucket_batches(lengths, batch_size=8, seed=5)
    assert all(lengths[b[j]] <= lengths[b[j + 1]] for b in batches for j in range(len(b) - 1))


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
    data = TokenizedPairs(tokenizer, pairs, 64)
    _, before = evaluate(model, data, 16, "category_averaged")
    cfg = LoopConfig(epochs=30, batch_size=4, learning_rate=1e-2, warmup_ratio=0.0, max_length=64, seed=0,
                     select_metric="macro.f1", progress=False)
    result = train_classifier(model, tokenizer, pairs, pairs, cfg, tmp_path / "run", loss_name="category_averaged")
    _, after = evaluate(model, data, 16, "category_averaged")
    assert after < before * 0.7, (before, after)
    assert result.history[-1]["valid_loss"] == pytest.approx(after, rel=1e-4)
    assert (tmp_path / "run" / "best" / "config.json").exists()
    assert (tmp_path / "run" / "last" / "training_state.pt").exists()
