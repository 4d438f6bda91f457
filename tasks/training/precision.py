"""Which arithmetic a training loop runs in (``--train-precision`` of train-discriminator and train-retriever).
bf16 mixed precision autocasts the forward pass; the weights, the optimizer and the saved checkpoints stay fp32."""
from __future__ import annotations

import torch

from models.discriminator_defaults import check_train_precision


# kernel flags of the CPU units that multiply bf16 matrices natively: AMX tiles (Intel Sapphire Rapids and later),
# AVX512-BF16 (Intel Cooper Lake, AMD Zen 4 and later). Without either, oneDNN emulates bf16 and gains nothing known.
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")


def cpu_bf16_unit(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The first of ``BF16_CPU_FLAGS`` the CPU has, read from the kernel's flags (Linux; elsewhere None). There bf16
    autocast makes a pair-stage training step 1.4x (AMX) to 1.55x (AVX512-BF16) as fast (bench/RESULTS.md)."""
    try:
        with open(cpuinfo) as f:
            flags = next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        return None
    return next((flag for flag in BF16_CPU_FLAGS if flag in flags), None)


def train_in_bf16(precision: str, cuda: bool | None = None) -> bool:
    """Whether a training loop runs bf16 mixed precision: ``auto`` where it gains, on CUDA and on CPUs with bf16
    matrix units (``cpu_bf16_unit``). ``cuda``: whether the loop runs on CUDA (None: whenever CUDA is there, as the
    ``Trainer`` places it; the retriever's and the reranker's loops run on the CPU, so they pass False)."""
    check_train_precision(precision, "training precision")
    if precision == "auto":
        return (torch.cuda.is_available() if cuda is None else cuda) or cpu_bf16_unit() is not None
    return precision == "bf16"


def cpu_autocast(bf16: bool):
    """The context a CPU training loop runs its forward pass in (a no-op when ``bf16`` is False)."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)
