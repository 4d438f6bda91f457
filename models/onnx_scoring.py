"""The discriminator's forward pass run by ONNX Runtime in fp32 (``scoring_model(model, "onnx")``): the same
arithmetic as torch's fp32 in another engine, faster on CPUs (1.4-1.65x torch fp32 on 2 cores, every decision the
same, probabilities within 1e-6: bench/RESULTS.md, "Pair scoring speed"), so build-graph scores with it on a CPU.

The model is exported once per set of weights (``torch.onnx.export``; a padded example, so the graph keeps the
attention mask) into ``$TGR_CACHE_DIR/onnx`` (``models.onnx_export``: keyed by its weights as they are in memory).
"""
from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from models.onnx_export import cached_export, padded_example

# what the exporter is told; part of the cache key, so a change here exports a new file
EXPORT_SETTINGS = "sequence classifier logits by named inputs, fp32, opset 17, dynamic batch and length"


class _Logits(torch.nn.Module):
    """The classifier's logits from its inputs given by position, each passed to ``forward`` by name."""

    def __init__(self, model: torch.nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.names, inputs))).logits


def _export(model: torch.nn.Module, target: Path) -> None:
    import inspect

    ids, mask = padded_example()
    example = {"input_ids": ids, "attention_mask": mask,
               "token_type_ids": torch.tensor([[0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 1, 1]])}
    takes = inspect.signature(model.forward).parameters
    names = [n for n in example if n in takes]  # DistilBERT, RoBERTa-style models: no token types
    axes = {n: {0: "batch", 1: "length"} for n in names} | {"logits": {0: "batch"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about Python control flow on shapes: fixed per call
        torch.onnx.export(_Logits(model.eval(), names), tuple(example[n] for n in names), str(target),
                          input_names=names, output_names=["logits"], dynamic_axes=axes, opset_version=17,
                          dynamo=False)


def onnx_model_path(model: torch.nn.Module, folder: Path | None = None) -> Path:
    """The ONNX file of ``model`` in ``folder`` (default ``$TGR_CACHE_DIR/onnx``), exported on first use."""
    return cached_export(model, "classifier", EXPORT_SETTINGS, _export, folder)


class OnnxPairClassifier:
    """What ``predict_proba`` asks of a model (``model(**batch).logits``, ``config``, ``parameters()``,
    ``eval()``), answered by an ONNX Runtime session on the CPU with torch's thread count."""

    scoring_precision = "onnx"

    def __init__(self, model: torch.nn.Module, folder: Path | None = None, path: Path | None = None) -> None:
        """``path``: another ONNX file of this model to run (bench/bench_scoring.py's int8 copy of the export);
        None: the export in ``folder`` (``onnx_model_path``)."""
        import onnxruntime as ort

        if next(model.parameters()).device.type != "cpu":
            raise ValueError("onnx scoring (ONNX Runtime's CPU engine) runs on CPU only; use fp32 or bf16 on a GPU")
        self.config = model.config
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # shared cores: no busy waiting
        self.session = ort.InferenceSession(str(path or onnx_model_path(model, folder)), options,
                                            providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self.session.get_inputs()}

    def eval(self) -> "OnnxPairClassifier":
        return self

    def parameters(self):
        yield torch.empty(0)  # on the CPU: where predict_proba puts the batches

    def __call__(self, **batch: torch.Tensor) -> SimpleNamespace:
        feed = {k: v.cpu().numpy().astype(np.int64) for k, v in batch.items() if k in self._inputs}
        return SimpleNamespace(logits=torch.from_numpy(self.session.run(["logits"], feed)[0]))
