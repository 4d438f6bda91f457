"""How mined docs are shown in training (tasks/training/doc_views.py): --method-docs (a method as a tool whose receiver
is an input) and --parameter-dropout (docs without parameters)."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from schemas.docs import canonical_doc_json, doc_id
from schemas.tdi import ID2LABEL, TDI_PAIR_SCHEMA
from tasks.training.examples import PairExample
from tasks.training.doc_views import (drop_parameters, method_doc_view, receiver_as_input, receiver_name, shown_as,
                                      without_parameters)

CHECK = {"name": "Account.is_verified", "description": "Whether the account is verified.", "input_params": [],
         "output_params": [{"name": "verified", "type": "bool", "description": ""}]}
TRANSFER = {"name": "Account.transfer", "description": "Send money.", "output_params": [],
            "input_params": [{"name": "amount", "type": "float", "description": "how much"}]}
CLOCK = {"name": "now", "description": "The time.", "input_params": [], "output_params": []}
CHECK_JSON = canonical_doc_json(CHECK)


@pytest.mark.parametrize("cls, name", [("XMLWriter", "xml_writer"), ("DiGraph", "di_graph"), ("_spbase", "spbase"),
                                       ("HTTPServer", "http_server"), ("Queue", "queue"), ("_", "_")])
def test_a_receiver_is_named_after_its_class(cls, name):
    assert receiver_name(cls) == name


def test_a_method_becomes_a_tool_whose_first_input_is_its_receiver():
    shown = json.loads(receiver_as_input(canonical_doc_json(TRANSFER)))
    assert shown["name"] == "transfer"
    assert shown["input_params"] == [{"description": "", "name": "account", "type": "Account"}, TRANSFER["input_params"][0]]
    assert shown["description"] == TRANSFER["description"] and shown["output_params"] == []
    # the same text form as every other doc, and shown once is shown for good
    assert receiver_as_input(canonical_doc_json(TRANSFER)) == canonical_doc_json(shown) == receiver_as_input(canonical_doc_json(shown))


def test_two_methods_of_one_class_then_share_an_input_as_catalog_tools_do():
    check, transfer = (json.loads(receiver_as_input(canonical_doc_json(d))) for d in (CHECK, TRANSFER))
    assert {p["name"] for p in check["input_params"]} & {p["name"] for p in transfer["input_params"]} == {"account"}


def test_functions_text_and_a_receiver_already_an_input_are_left_alone():
    assert receiver_as_input(canonical_doc_json(CLOCK)) == canonical_doc_json(CLOCK)
    assert receiver_as_input("free text, not a doc") == "free text, not a doc"
    assert receiver_as_input('["a list"]') == '["a list"]'
    nested = {**CLOCK, "name": "a.b.c"}  # not Class.method
    assert receiver_as_input(canonical_doc_json(nested)) == canonical_doc_json(nested)
    takes_it = {**TRANSFER, "input_params": [{"name": "account", "type": "Account", "description": "the payer"}]}
    assert json.loads(receiver_as_input(canonical_doc_json(takes_it)))["input_params"] == takes_it["input_params"]


def test_the_view_is_chosen_by_name_and_keeps_labels_kinds_and_groups():
    pair = PairExample(canonical_doc_json(TRANSFER), canonical_doc_json(CHECK), 0, "tdi", "t1", "t2", "precondition")
    assert shown_as([pair], "qualified") == [pair]
    [shown] = shown_as([pair], "receiver")
    assert (shown.label, shown.group, shown.tool_a, shown.tool_b, shown.kind) == (0, "tdi", "t1", "t2", "precondition")
    assert json.loads(shown.doc_a)["name"] == "transfer" and json.loads(shown.doc_b)["name"] == "is_verified"
    with pytest.raises(ValueError, match="qualified, receiver"):
        method_doc_view(pair.doc_a, "flat")


def test_a_doc_without_parameters_keeps_its_name_and_description():
    bare = json.loads(without_parameters(canonical_doc_json(TRANSFER)))
    assert bare == {**TRANSFER, "input_params": [], "output_params": []}
    assert without_parameters(canonical_doc_json(CLOCK)) == canonical_doc_json(CLOCK)  # had none
    assert without_parameters("free text") == "free text"


def test_parameter_dropout_strips_a_seeded_share_of_pairs_on_both_sides():
    pairs = [PairExample(canonical_doc_json({**TRANSFER, "name": f"t{i}"}), canonical_doc_json(CHECK), i % 3, "tdi",
                         kind="data" if i % 3 != 1 else None) for i in range(400)]
    shown = drop_parameters(pairs, 0.3, seed=5)
    bare = [not json.loads(e.doc_a)["input_params"] for e in shown]
    assert all(not json.loads(e.doc_b)["output_params"] for e, b in zip(shown, bare) if b)  # both docs or neither
    assert all(e.doc_b == CHECK_JSON for e, b in zip(shown, bare) if not b)
    assert 90 <= sum(bare) <= 150  # about 120
    assert [(e.label, e.kind, json.loads(e.doc_a)["name"]) for e in shown] == \
        [(e.label, e.kind, json.loads(e.doc_a)["name"]) for e in pairs]
    assert shown == drop_parameters(pairs, 0.3, seed=5) != drop_parameters(pairs, 0.3, seed=6)
    assert drop_parameters(pairs, 0.0, seed=5) == pairs
    assert all(not json.loads(e.doc_a)["input_params"] for e in drop_parameters(pairs, 1.0, seed=5))
    with pytest.raises(ValueError, match="must lie in"):
        drop_parameters(pairs, 1.5, seed=5)


def test_pretraining_pairs_are_shown_as_the_run_says(tmp_path):
    from flows.train_discriminator import TrainDiscriminatorConfig, load_pretraining_pairs

    rows = []
    for split in ("train", "validation"):
        for a, b, label in ((TRANSFER, CHECK, 0), (CHECK, TRANSFER, 2), (TRANSFER, CLOCK, 1)):
            ja, jb = canonical_doc_json(a), canonical_doc_json(b)
            rows.append({"pair_id": doc_id(ja + jb + split), "doc_a": ja, "doc_b": jb, "tool_a_id": doc_id(ja),
                         "tool_b_id": doc_id(jb), "label": label, "label_name": ID2LABEL[label], "split": split,
                         "origin": "mined", "source_a": "m", "source_b": "m",
                         "kind": None if label == 1 else "precondition"})
    (tmp_path / "shards").mkdir()
    for split in ("train", "validation"):
        pq.write_table(pa.Table.from_pylist([r for r in rows if r["split"] == split], schema=TDI_PAIR_SCHEMA),
                       tmp_path / "shards" / f"{split}-00000.parquet")
    names = {}
    for view in ("qualified", "receiver"):
        train, valid = load_pretraining_pairs.fn(tmp_path, None, None, 0, method_docs=view)
        names[view] = sorted({json.loads(d)["name"] for e in train + valid for d in (e.doc_a, e.doc_b)})
        assert sorted(e.label for e in train) == [0, 1, 1, 2]  # the none pair gains its swap either way
    assert names == {"qualified": ["Account.is_verified", "Account.transfer", "now"],
                     "receiver": ["is_verified", "now", "transfer"]}
    # parameter dropout reaches the training pairs only: validation is measured on the docs as they are
    train, valid = load_pretraining_pairs.fn(tmp_path, None, None, 0, parameter_dropout=1.0)
    assert all(not json.loads(d)["input_params"] for e in train for d in (e.doc_a, e.doc_b))
    assert any(json.loads(d)["input_params"] for e in valid for d in (e.doc_a, e.doc_b))
    assert TrainDiscriminatorConfig().method_docs == "qualified" and TrainDiscriminatorConfig().parameter_dropout == 0.0
    with pytest.raises(ValueError, match="--method-docs 'flat'"):
        TrainDiscriminatorConfig(method_docs="flat")
    with pytest.raises(ValueError, match="--parameter-dropout 1.2: must lie in"):
        TrainDiscriminatorConfig(parameter_dropout=1.2)
