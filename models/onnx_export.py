"""A model in memory exported to ONNX once per set of weights, for ONNX Runtime's CPU engine: the discriminator's
classifier (``models.onnx_scoring``) and the sentence encoders (``models.sentence_encoder``, engine ``onnx``).

The file lives in ``$TGR_CACHE_DIR/onnx`` (or a given folder), named by a hash of the model's config and every weight
and buffer as they are in memory, the export's settings and the torch and onnxruntime versions: a retrained or
changed model gets a new file, and an unchanged one is exported once. It is written to a temporary name and
renamed, so a kill leaves no half-written model.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch


def onnx_cache_dir() -> Path:
    """``$TGR_CACHE_DIR/onnx``: every exported or quantized ONNX file (the int8 encoders' too)."""
    from models.embedded_llm.fetch import cache_dir

    return cache_dir() / "onnx"


def padded_example() -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) of two rows, one padded, with ids any vocabulary holds: an export traced on an
    all-ones mask may drop the attention mask from its graph."""
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    return torch.tensor([[1, 5, 2, 6, 0, 0], [1, 5, 6, 2, 7, 2]]) * mask, mask


def weights_key(model: torch.nn.Module) -> str:
    """sha256 of the model's config and every weight and buffer as they are in memory (a model changed after it was
    loaded, or a head initialised at random, is never taken for the checkpoint it came from)."""
    digest = hashlib.sha256(model.config.to_json_string().encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def cached_export(model: torch.nn.Module, kind: str, settings: str, export: Callable[[torch.nn.Module, Path], None],
                  folder: Path | None = None) -> Path:
    """The ONNX file of ``model`` written by ``export(model, target)``, exported on first use; ``kind`` names the
    file (``<key>-<kind>.onnx``), ``settings`` says what the exporter is told (part of the key)."""
    import onnxruntime

    key = hashlib.sha256("\0".join([weights_key(model), settings, f"torch {torch.__version__}",
                                    f"onnxruntime {onnxruntime.__version__}"]).encode()).hexdigest()
    out = (folder or onnx_cache_dir()) / f"{key[:16]}-{kind}.onnx"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".build-") as tmp:
        built = Path(tmp) / "model.onnx"
        export(model, built)
        os.replace(built, out)  # the only write a reader can see: whole or absent
    return out
