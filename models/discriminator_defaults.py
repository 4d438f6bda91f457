"""The dependency discriminator's defaults that a command line needs without loading torch
(``models/discriminator.py`` uses and re-exports them)."""
from __future__ import annotations

DEFAULT_MAX_LENGTH = 96  # evidence + signature lines of both docs and the start of their descriptions
# training loops' precision (tasks/training/precision.py ``train_in_bf16``): auto is bf16 mixed precision where it
# gains (CUDA, CPUs with AMX tiles or AVX512-BF16), fp32 elsewhere
TRAIN_PRECISIONS = ("auto", "fp32", "bf16")
# how a new discriminator (models/discriminator.py ``load_model``) or parameter reranker pools its tokens: auto
# pools as the encoder was trained (the mean for all-MiniLM-L6-v2), mean or cls ([CLS] through its own head) say so
POOLINGS = ("auto", "mean", "cls")
POOLED = {"mean": "the mean of the pair's tokens", "cls": "[CLS] through the model's own head"}  # what each classifies


def check_train_precision(precision: str, what: str = "--train-precision") -> None:
    """Refuse a precision that is not one of ``TRAIN_PRECISIONS`` (every config and loop that takes one)."""
    if precision not in TRAIN_PRECISIONS:
        raise ValueError(f"{what} {precision!r}: one of {', '.join(TRAIN_PRECISIONS)}")


def check_pooling(pooling: str, what: str = "--pooling") -> None:
    """Refuse a pooling that is not one of ``POOLINGS`` (the discriminator's and the reranker's configs and loaders)."""
    if pooling not in POOLINGS:
        raise ValueError(f"{what} {pooling!r}: choose {', '.join(POOLINGS)}")
