"""int8 sentence encoders (models/encoder_int8.py): the ``:int8`` suffix, the exported and quantized graphs, their
cache, and that their vectors stay close to the fp32 ones."""
from __future__ import annotations

import numpy as np
import pytest

from models.encoder_path import default_max_length, resolve_model_name_or_path, split_precision
from tests.test_retriever import make_tiny_encoder

TEXTS = ["get the weather for a city", "name: book_meeting\ndescription: books a meeting room for a date",
         "convert an amount from one currency to another", "x"]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TGR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "onnx"


def test_the_suffix_names_a_precision_and_nothing_else():
    assert split_precision("paraphrase-minilm-l3:int8") == ("paraphrase-minilm-l3", "int8")
    assert split_precision("/models/my:retriever:int8") == ("/models/my:retriever", "int8")
    assert split_precision("/models/my:retriever") == ("/models/my:retriever", None)  # not a precision: a path
    assert split_precision(":int8") == (":int8", None)
    assert split_precision(None) == (None, None)
    assert default_max_length("paraphrase-minilm-l3:int8") == default_max_length("paraphrase-minilm-l3") == 128
    with pytest.raises(ValueError, match="int8 inference-only"):
        resolve_model_name_or_path("offline-minilm:int8")  # nothing trains on a quantized graph


def test_int8_identity_differs_from_fp32_in_the_embedding_cache(tmp_path):
    from tasks.common.embedding_cache import encoder_identity

    folder = make_tiny_encoder(tmp_path / "enc")
    assert encoder_identity(f"{folder}:int8") == f"{encoder_identity(str(folder))}:int8"
    assert encoder_identity("paraphrase-minilm-l3:int8") != encoder_identity("paraphrase-minilm-l3")


def test_exported_graph_pools_as_the_torch_encoder(tmp_path):
    from models.encoder_int8 import export_pooled_onnx
    from models.sentence_encoder import EncoderConfig, SentenceEncoder, _OnnxBackend

    folder = make_tiny_encoder(tmp_path / "enc")
    torch_encoder = SentenceEncoder(EncoderConfig(str(folder), batch_size=3))
    expected = torch_encoder.encode(TEXTS)
    exported = export_pooled_onnx(str(folder), tmp_path / "fp32.onnx")
    torch_encoder.backend = _OnnxBackend(exported, torch_encoder.config)  # same tokenizer, the ONNX graph
    got = torch_encoder.encode(TEXTS)
    np.testing.assert_allclose(got, expected, atol=1e-5)  # fp32 export: the same vectors, any batch length


def test_int8_encoder_is_built_once_and_stays_close_to_fp32(private_cache):
    from models.sentence_encoder import EncoderConfig, SentenceEncoder

    fp32 = SentenceEncoder(EncoderConfig("paraphrase-minilm-l3", batch_size=2)).encode(TEXTS)
    int8 = SentenceEncoder(EncoderConfig("paraphrase-minilm-l3:int8", batch_size=2))
    vectors = int8.encode(TEXTS)
    built = sorted(private_cache.glob("*-int8.onnx"))
    assert len(built) == 1 and not list(private_cache.glob(".build-*"))  # no temporary left
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosines = (vectors * fp32).sum(axis=1)
    assert cosines.min() > 0.97, cosines
    # and the quantized graph is no copy of the fp32 one: its file is a third of the size or less
    from models.encoder_path import paraphrase_l3_onnx_path

    assert built[0].stat().st_size < paraphrase_l3_onnx_path().stat().st_size / 3
    mtime = built[0].stat().st_mtime_ns
    again = SentenceEncoder(EncoderConfig("paraphrase-minilm-l3:int8", batch_size=2))
    assert built[0].stat().st_mtime_ns == mtime and sorted(private_cache.glob("*-int8.onnx")) == built
    np.testing.assert_allclose(again.encode(TEXTS), vectors, atol=1e-6)  # same batches: the same vectors
    # activations are quantized per batch (dynamic), so other batch-mates move a vector a little, not far
    other = SentenceEncoder(EncoderConfig("paraphrase-minilm-l3:int8", batch_size=4)).encode(TEXTS)
    assert np.abs(other - vectors).max() > 0 and (other * vectors).sum(axis=1).min() > 0.98


def test_int8_of_a_local_folder_is_rebuilt_when_its_weights_change(tmp_path, private_cache):
    import os

    from models.sentence_encoder import EncoderConfig, SentenceEncoder

    folder = make_tiny_encoder(tmp_path / "enc")
    first = SentenceEncoder(EncoderConfig(f"{folder}:int8")).encode(TEXTS)
    assert first.shape == (len(TEXTS), 32)
    weights = folder / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # "retrained"
    SentenceEncoder(EncoderConfig(f"{folder}:int8"))
    assert len(list(private_cache.glob("*-int8.onnx"))) == 2


def test_onnx_engine_gives_the_torch_vectors_from_a_file_exported_once_per_set_of_weights(tmp_path, private_cache):
    """EncoderConfig.engine onnx (auto's choice on a CPU, build-graph's default): a transformers encoder's fp32
    export in ONNX Runtime, the same vectors on padded batches; one export per set of weights."""
    from models.sentence_encoder import EncoderConfig, SentenceEncoder, _OnnxBackend, _TorchBackend

    folder = make_tiny_encoder(tmp_path / "enc")
    expected = SentenceEncoder(EncoderConfig(str(folder), batch_size=3)).encode(TEXTS)  # torch, the default
    onnx = SentenceEncoder(EncoderConfig(str(folder), batch_size=3, engine="onnx"))
    auto = SentenceEncoder(EncoderConfig(str(folder), batch_size=3, engine="auto"))
    assert isinstance(onnx.backend, _OnnxBackend) and isinstance(auto.backend, _OnnxBackend)  # auto on a CPU: onnx
    np.testing.assert_allclose(onnx.encode(TEXTS), expected, atol=1e-5)
    np.testing.assert_allclose(auto.encode(TEXTS), expected, atol=1e-5)
    built = sorted(private_cache.glob("*-encoder.onnx"))
    assert len(built) == 1 and not list(private_cache.glob(".build-*"))  # exported once, nothing half-written
    assert isinstance(SentenceEncoder(EncoderConfig(str(folder), engine="torch")).backend, _TorchBackend)
    # whatever the batch size, ONNX Runtime runs ONNX_MAX_BATCH texts at most (its memory grows with the batch)
    from models.sentence_encoder import ONNX_MAX_BATCH

    many = [f"{t} {n}" for n in range(3) for t in TEXTS * 4]
    wide = SentenceEncoder(EncoderConfig(str(folder), batch_size=64, engine="onnx"))
    sizes, run = [], wide.backend.run
    wide.backend.run = lambda ids, *rest, **kw: sizes.append(len(ids)) or run(ids, *rest, **kw)
    np.testing.assert_allclose(wide.encode(many), SentenceEncoder(EncoderConfig(str(folder))).encode(many), atol=1e-5)
    assert sizes == [ONNX_MAX_BATCH, ONNX_MAX_BATCH, len(many) - 2 * ONNX_MAX_BATCH] and len(many) > 2 * ONNX_MAX_BATCH
    with pytest.raises(ValueError, match="encoder engine 'gpu': one of auto, torch, onnx"):
        SentenceEncoder(EncoderConfig(str(folder), engine="gpu"))
    with pytest.raises(ValueError, match="runs on CPU only"):
        SentenceEncoder(EncoderConfig(str(folder), engine="onnx", device="meta"))


def test_auto_engine_encodes_with_torch_where_the_export_fails(tmp_path, private_cache, monkeypatch):
    import models.encoder_int8 as encoder_int8
    from models.sentence_encoder import EncoderConfig, SentenceEncoder, _TorchBackend

    folder = make_tiny_encoder(tmp_path / "enc")
    expected = SentenceEncoder(EncoderConfig(str(folder))).encode(TEXTS)

    def refuse(*_args, **_kwargs):
        raise RuntimeError("no exporter for this model")

    monkeypatch.setattr(encoder_int8, "export_pooled", refuse)
    with pytest.warns(UserWarning, match="ONNX export failed .*no exporter for this model.*encoding with torch"):
        auto = SentenceEncoder(EncoderConfig(str(folder), engine="auto"))
    assert isinstance(auto.backend, _TorchBackend)
    np.testing.assert_array_equal(auto.encode(TEXTS), expected)
    with pytest.raises(RuntimeError, match="no exporter"):  # asked for by name: the error, not another engine
        SentenceEncoder(EncoderConfig(str(folder), engine="onnx"))
