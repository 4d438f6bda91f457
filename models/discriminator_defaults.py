"""The dependency discriminator's defaults that a command line needs without loading torch
(``models/discriminator.py`` uses and re-exports them)."""
from __future__ import annotations

DEFAULT_MAX_LENGTH = 96  # evidence + signature lines of both docs and the start of their descriptions
# training stages' precision (tasks/training/trainer.py ``train_in_bf16``): auto is bf16 mixed precision on CUDA and
# on CPUs with AMX tiles, fp32 elsewhere
TRAIN_PRECISIONS = ("auto", "fp32", "bf16")
