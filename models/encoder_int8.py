"""int8 sentence encoders for large catalogs: an ONNX graph with its weights quantized to int8 per output channel
(onnxruntime's dynamic quantization), built once per source model and kept in ``$TGR_CACHE_DIR/onnx``.

Asked for with a ``:int8`` suffix on any encoder name (``paraphrase-minilm-l3:int8``, ``offline-minilm:int8``, a
hub id or a folder): the packaged paraphrase-MiniLM-L3-v2 ONNX file is quantized as it is; a transformers model is
first exported to ONNX with the mean pooling inside (the same pooling as ``sentence_encoder.mean_pool``; rows are
L2-normalised by the ONNX backend). Why per channel: per-tensor int8 (torch's ``quantize_dynamic``) moved MiniLM's
vectors to cosine 0.83 of fp32 at worst; per channel keeps them at 0.98-0.99 (bench/RESULTS.md, "int8 encoders").

Activations are quantized per batch (dynamic quantization), so a text's vector moves a little with its batch-mates
(cosine 0.98+ between batchings; the same batches give the same vectors).

Needs the ``onnx`` package (the exporter and the quantizer read and write ONNX protobufs), a dependency of this
project. The built file is written to a temporary name and renamed, so a kill leaves no half-written model.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from models.onnx_export import onnx_cache_dir, padded_example

# Files whose size and mtime identify a local model's weights (a retrained folder gets a new int8 file).
_WEIGHT_FILES = ("config.json", "model.safetensors", "pytorch_model.bin", "model.onnx")
# What the quantizer is told; part of the cache key, so a change here builds a new file.
QUANT_SETTINGS = "QInt8 weights, per channel, dynamic activations"


def _stamp(path: Path) -> str:
    stat = path.stat()
    return f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


def int8_model_path(base: str, folder: Path | None = None) -> Path:
    """The int8 ONNX file of encoder ``base`` (an ONNX encoder name, offline-minilm, a hub id or a folder),
    built on first use; ``folder`` defaults to ``$TGR_CACHE_DIR/onnx``."""
    import onnxruntime

    from models.encoder_path import ONNX_ENCODERS, paraphrase_l3_onnx_path, resolve_model_name_or_path

    if base in ONNX_ENCODERS:
        source_onnx: Path | None = paraphrase_l3_onnx_path()
        identity = _stamp(source_onnx)
        source_model = None
    else:
        source_onnx = None
        source_model = resolve_model_name_or_path(base)
        local = Path(source_model)
        identity = (" ".join(_stamp(local / f) for f in _WEIGHT_FILES if (local / f).is_file())
                    if local.is_dir() else source_model)  # a hub id: its name (the hub's cache holds one revision)
    key = hashlib.sha256(f"{identity}\0{QUANT_SETTINGS}\0onnxruntime {onnxruntime.__version__}".encode()).hexdigest()
    out = (folder or onnx_cache_dir()) / f"{key[:16]}-int8.onnx"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".build-") as tmp:
        fp32 = source_onnx or export_pooled_onnx(source_model, Path(tmp) / "fp32.onnx")
        quantized = Path(tmp) / "int8.onnx"
        quantize_int8(fp32, quantized)
        os.replace(quantized, out)  # the only write a reader can see: whole or absent
    return out


def quantize_int8(source: Path, target: Path) -> None:
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    # onnxruntime logs a "consider pre-processing" warning on every call; what it suggests (shape inference
    # for static quantization) does not apply to dynamic quantization
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True)
    finally:
        root.setLevel(level)


def export_pooled_onnx(model_name_or_path: str, target: Path) -> Path:
    """A transformers encoder as ONNX with inputs input_ids, attention_mask, token_type_ids (batch and length
    dynamic) and one output ``sentence_embedding`` (batch, hidden): the masked mean of the token states."""
    from transformers import AutoModel

    export_pooled(AutoModel.from_pretrained(model_name_or_path).eval(), target)
    return target


# what ``export_pooled`` tells the exporter (part of ``models.onnx_export``'s cache key)
POOLED_EXPORT_SETTINGS = "masked mean of the token states, fp32, opset 17, dynamic batch and tokens"


def export_pooled(model, target: Path) -> None:
    """``export_pooled_onnx`` for a model already loaded (``model.eval()`` is called)."""
    import warnings

    import torch

    from models.mean_pooled_bert import masked_mean

    class MeanPooled(torch.nn.Module):
        def __init__(self, encoder: torch.nn.Module) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                  token_type_ids=token_type_ids).last_hidden_state
            return masked_mean(hidden, attention_mask)

    ids, mask = padded_example()
    axes = {0: "batch", 1: "tokens"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about Python control flow on shapes: fixed per call
        torch.onnx.export(MeanPooled(model.eval()), (ids, mask, torch.zeros_like(ids)), str(target),
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["sentence_embedding"],
                          dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes,
                                        "sentence_embedding": {0: "batch"}},
                          opset_version=17, dynamo=False)
