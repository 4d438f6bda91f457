"""The discriminator pooled as its encoder was trained (models/mean_pooled_bert.py): chosen from the encoder's
sentence-transformers pooling config, padding-free, saved and loaded like any checkpoint, in this project and in
plain transformers (trust_remote_code), and every older [CLS] checkpoint still loads as it was."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from models.discriminator import (add_kind_head, class_logits, load_discriminator, load_model, load_tokenizer,  # noqa: E402
                                  model_pooling, trained_pooling)
from models.encoder_path import resolve_model_name_or_path  # noqa: E402
from models.mean_pooled_bert import MEAN_POOLED_BERT, MeanPooledBertForSequenceClassification  # noqa: E402
from schemas.tdi import ID2LABEL  # noqa: E402
from tests.test_discriminator import make_tiny_model  # noqa: E402
from tests.test_retriever import make_tiny_encoder  # noqa: E402


def sentence_encoder(folder: Path, **modes) -> Path:
    """A tiny BERT encoder with sentence-transformers' pooling record (mean tokens unless ``modes`` say)."""
    make_tiny_encoder(folder)
    pooling = {"word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
               "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False, **modes}
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return folder


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    return sentence_encoder(tmp_path_factory.mktemp("sentence-encoder"))


def _pairs(tokenizer, firsts, seconds):
    return tokenizer(list(firsts), list(seconds), padding=True, return_tensors="pt")


def test_the_pooling_an_encoder_was_trained_with_is_read_from_its_sentence_transformers_record(tmp_path, encoder):
    assert trained_pooling(str(encoder)) == "mean"
    assert trained_pooling(resolve_model_name_or_path("offline-minilm")) == "mean"  # the packaged all-MiniLM-L6-v2
    assert trained_pooling(str(make_tiny_encoder(tmp_path / "plain"))) == "cls"  # no record: BERT's own head
    assert trained_pooling(str(sentence_encoder(tmp_path / "cls", pooling_mode_cls_token=True,
                                                pooling_mode_mean_tokens=False))) == "cls"
    assert trained_pooling(str(sentence_encoder(tmp_path / "both", pooling_mode_max_tokens=True))) == "cls"
    assert trained_pooling(str(tmp_path / "nothing-here")) == "cls"


def test_auto_builds_a_mean_pooled_classifier_on_a_sentence_encoder_and_cls_keeps_berts_head(encoder):
    model = load_model(str(encoder))
    assert isinstance(model, MeanPooledBertForSequenceClassification) and model_pooling(model) == "mean"
    assert model.config.model_type == MEAN_POOLED_BERT and model.config.id2label == ID2LABEL
    assert load_model(str(encoder), num_layers=1).config.num_hidden_layers == 1
    cls = load_model(str(encoder), pooling="cls")
    assert type(cls).__name__ == "BertForSequenceClassification" and model_pooling(cls) == "cls"
    # the encoder's weights are the ones loaded: the same embeddings under both heads
    assert torch.equal(model.bert.embeddings.word_embeddings.weight, cls.bert.embeddings.word_embeddings.weight)


def test_padding_is_no_token_a_pair_scores_the_same_alone_and_in_a_batch(encoder):
    model, tokenizer = load_model(str(encoder)).eval(), load_tokenizer(str(encoder))
    firsts, seconds = ["get_user(name) -> user_id", "a much longer doc with many more words in it than the first"], ["x", "y z w"]
    with torch.no_grad():
        batch = model(**_pairs(tokenizer, firsts, seconds)).logits
        alone = [model(**_pairs(tokenizer, [a], [b])).logits[0] for a, b in zip(firsts, seconds)]
    assert torch.allclose(batch[0], alone[0], atol=1e-5) and torch.allclose(batch[1], alone[1], atol=1e-5)


def test_a_mean_pooled_checkpoint_loads_back_here_and_in_plain_transformers(tmp_path, encoder):
    model, tokenizer = load_model(str(encoder)).eval(), load_tokenizer(str(encoder))
    torch.nn.init.normal_(model.classifier.weight)  # a head that says something
    ckpt = tmp_path / "best"
    model.save_pretrained(ckpt)
    tokenizer.save_pretrained(ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    assert config["model_type"] == MEAN_POOLED_BERT and (ckpt / "mean_pooled_bert.py").is_file()
    enc = _pairs(tokenizer, ["get_token() -> token"], ["send(token)"])
    with torch.no_grad():
        want = model(**enc).logits
        again, _ = load_discriminator(ckpt)
        assert isinstance(again, MeanPooledBertForSequenceClassification)
        assert torch.allclose(again.eval()(**enc).logits, want, atol=1e-6)
    # load_model on a checkpoint keeps its pooling whatever is asked
    assert isinstance(load_model(str(ckpt), pooling="cls"), MeanPooledBertForSequenceClassification)
    # elsewhere: transformers alone, from the file saved beside the weights (no import of this project)
    script = ("import json, sys, torch\n"
              "from transformers import AutoModelForSequenceClassification, AutoTokenizer\n"
              "m = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], trust_remote_code=True).eval()\n"
              "t = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
              "assert 'models' not in sys.modules\n"
              "with torch.no_grad():\n"
              "    print('logits', json.dumps(m(**t(['get_token() -> token'], ['send(token)'], return_tensors='pt')).logits.tolist()))\n")
    out = subprocess.run([sys.executable, "-c", script, str(ckpt)], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "hf-modules")},
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    said = [line.split(" ", 1)[1] for line in out.stdout.splitlines() if line.startswith("logits ")]
    assert len(said) == 1, out.stdout[-2000:]
    assert torch.allclose(torch.tensor(json.loads(said[0])), want, atol=1e-5)


def test_the_kind_head_widens_a_mean_pooled_classifier_without_changing_its_three_classes(encoder):
    model, tokenizer = load_model(str(encoder)).eval(), load_tokenizer(str(encoder))
    enc = _pairs(tokenizer, ["check(account)"], ["pay(account)"])
    with torch.no_grad():
        three = model(**enc).logits.softmax(-1)
        five = add_kind_head(model).eval()(**enc).logits
    assert five.shape[-1] == 5 and isinstance(model, MeanPooledBertForSequenceClassification)
    assert torch.allclose(class_logits(five).softmax(-1), three, atol=1e-5)


def test_an_older_cls_checkpoint_still_loads_as_it_was(tmp_path):
    ckpt = make_tiny_model(tmp_path / "old")  # BertForSequenceClassification with this project's labels
    model, _ = load_discriminator(ckpt)
    assert type(model).__name__ == "BertForSequenceClassification" and model_pooling(model) == "cls"
    assert model_pooling(load_model(str(ckpt), pooling="mean")) == "cls"  # a checkpoint keeps its own


def test_mean_pooling_refuses_an_encoder_that_is_not_bert_and_an_unknown_pooling(tmp_path, encoder):
    from transformers import DistilBertConfig, DistilBertModel

    folder = tmp_path / "distil"
    DistilBertModel(DistilBertConfig(vocab_size=100, dim=32, n_layers=1, n_heads=2, hidden_dim=64)).save_pretrained(folder)
    assert trained_pooling(str(folder)) == "cls"
    with pytest.raises(ValueError, match="--pooling mean is built for BERT-family encoders"):
        load_model(str(folder), pooling="mean")
    with pytest.raises(ValueError, match="pooling 'max'"):
        load_model(str(encoder), pooling="max")


def test_a_mean_pooled_classifier_scores_pairs_at_every_scoring_precision(encoder):
    from models.discriminator import predict_proba

    model, tokenizer = load_model(str(encoder)).eval(), load_tokenizer(str(encoder))
    docs_a = ["get_user_token(username: str) -> token: str. Logs in.", "clock() -> time: str. Tells the time."]
    docs_b = ["delete_account(token: str) -> status: str. Deletes.", "send_email(to: str) -> status: str. Sends."]
    fp32 = predict_proba(model, tokenizer, docs_a, docs_b, max_length=64, symmetric=True)
    assert fp32.shape == (2, 3) and torch.allclose(fp32.sum(-1), torch.ones(2), atol=1e-5)
    for precision, tolerance in (("bf16", 0.05), ("int8", 0.05), ("onnx", 1e-5)):  # the same weights, other arithmetic
        other = predict_proba(model, tokenizer, docs_a, docs_b, max_length=64, symmetric=True, precision=precision)
        assert torch.allclose(other, fp32, atol=tolerance), precision


def test_resuming_a_run_folder_of_the_other_pooling_is_refused_with_the_flag_to_pass(tmp_path, encoder):
    from tasks.training.examples import PairExample
    from tasks.training.trainer import StageArguments, train_classifier

    old = tmp_path / "pretrain" / "checkpoint-4"  # a run started with [CLS] before --pooling existed
    load_model(str(encoder), pooling="cls").save_pretrained(old)
    pair = PairExample("get_token() -> token", "send(token)", 0, "tdi")
    with pytest.raises(ValueError, match="trained pooling by cls, this model pools by mean: resume with --pooling cls"):
        train_classifier(load_model(str(encoder)), load_tokenizer(str(encoder)), [pair], [], StageArguments(),
                         tmp_path / "pretrain", resume=True, stage="pretrain")
