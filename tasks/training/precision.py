"""Which arithmetic a training loop runs in (``--train-precision`` of train-discriminator and train-retriever).
bf16 mixed precision autocasts the forward pass; the weights, the optimizer and the saved checkpoints stay fp32."""
from __future__ import annotations

import torch

from models.discriminator_defaults import check_train_precision


def cpu_has_amx(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """The CPU multiplies bf16 matrices in AMX tiles (Sapphire Rapids and later): there bf16 autocast makes a
    training step about 1.4x as fast (bench/RESULTS.md); elsewhere it is not known to gain. Read from the kernel's
    flags (Linux; elsewhere False)."""
    try:
        with open(cpuinfo) as f:
            return any(line.startswith("flags") and " amx_bf16" in line for line in f)
    except OSError:
        return False


def train_in_bf16(precision: str, cuda: bool | None = None) -> bool:
    """Whether a training loop runs bf16 mixed precision: ``auto`` where it gains, on CUDA and on CPUs with AMX
    tiles. ``cuda``: whether the loop runs on CUDA (None: whenever CUDA is there, as the ``Trainer`` places it;
    the retriever's and the reranker's loops run on the CPU, so they pass False)."""
    check_train_precision(precision, "training precision")
    if precision == "auto":
        return (torch.cuda.is_available() if cuda is None else cuda) or cpu_has_amx()
    return precision == "bf16"


def cpu_autocast(bf16: bool):
    """The context a CPU training loop runs its forward pass in (a no-op when ``bf16`` is False)."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)
