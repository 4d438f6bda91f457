"""Prefect flow ``train-discriminator``: pretrain (Eq. 1) on TDI shards, finetune (Eq. 2), test.

    python -m flows.train_discriminator --pretrain-data auto --finetune ultratool,tmdb \
        --test apibank --base-model offline-minilm --output artifacts/discriminator/minilm

Writes ``<output>/best`` (save_pretrained model + tokenizer + README.md model card +
metrics.json), ``<output>/metrics.json``, ``<output>/confusion_matrix_test.png``,
``<output>/training_curves.png``, and per-stage ``last`` checkpoints for ``--resume``.
See docs/discriminator.md.
"""
from __future__ import annotations

import argparse
import json
import platform
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from models.discriminator import load_model, load_tokenizer
from schemas.toolset import ToolSet
from tasks.toolsets import BENCHMARKS, load_benchmark, read_toolset_dir
from tasks.training import (
    LoopConfig,
    PairExample,
    TokenizedPairs,
    TrainResult,
    build_pairs,
    evaluate,
    format_metrics_table,
    grouped_split,
    label_counts,
    load_tdi_examples,
    pick_device,
    plot_confusion,
    plot_training_curves,
    seed_everything,
    train_classifier,
    write_json,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BENCHMARKS = REPO_ROOT.parent / "shared" / "data" / "benchmarks"


@dataclass
class TrainDiscriminatorConfig:
    output: Path = Path("artifacts/discriminator/default")
    # "auto": newest artifacts/tdi/*/shards if any, else skip pretraining (logged);
    # "none": skip; a folder: required, missing shards are an error.
    pretrain_data: str = "auto"
    finetune: tuple[str, ...] = ("ultratool", "tmdb")  # benchmark names or tool set folders
    test: tuple[str, ...] = ("apibank",)
    benchmarks_root: Path = DEFAULT_BENCHMARKS
    base_model: str = "offline-minilm"
    max_length: int = 256
    batch_size: int | None = None  # None: 32 on CPU, 128 on CUDA (bf16)
    pretrain_epochs: int = 1
    pretrain_learning_rate: float = 5e-5
    pretrain_max_pairs: int | None = None  # cap TDI train pairs (seeded sample) to bound CPU time
    finetune_epochs: int = 3
    finetune_learning_rate: float = 3e-5
    finetune_max_none: int | None = None  # None: every "no dependency" pair (imbalanced like real use)
    test_max_none: int | None = 500  # paper's API-Bank test: all dependency pairs + 500 none
    valid_fraction: float = 0.2
    select_metric: str = "dependency.f1"  # finetune checkpoint choice; pretraining uses macro.f1
    max_steps_per_epoch: int | None = None
    seed: int = 42
    resume: bool = False
    progress: bool = True


# ---------------------------------------------------------------------------------------------
# Tasks


def _load_toolset(spec: str, benchmarks_root: Path) -> ToolSet:
    if spec in BENCHMARKS:
        return load_benchmark(spec, benchmarks_root)
    folder = Path(spec)
    if folder.is_dir():
        return read_toolset_dir(folder)
    raise ValueError(f"{spec!r} is neither a benchmark ({', '.join(BENCHMARKS)}) nor a tool set folder")


def resolve_pretrain_data(spec: str, artifacts: Path = Path("artifacts/tdi")) -> Path | None:
    """The TDI dataset folder to pretrain on, or None to skip (see the config comment)."""
    if spec == "none":
        return None
    if spec == "auto":
        found = sorted((p.parent for p in artifacts.glob("*/shards") if any(p.glob("*.parquet"))),
                       key=lambda p: p.stat().st_mtime)
        return found[-1] if found else None
    folder = Path(spec)
    if not any((folder / "shards").glob("*.parquet")):
        raise FileNotFoundError(f"--pretrain-data {folder}: no shards/*.parquet there; run make build-tdi "
                                "or pass --pretrain-data none to skip pretraining")
    return folder


@task(cache_policy=NO_CACHE)
def load_pretraining_pairs(folder: Path, max_pairs: int | None, seed: int) -> tuple[list[PairExample], list[PairExample]]:
    import random

    train, valid = load_tdi_examples(folder)
    if max_pairs is not None and len(train) > max_pairs:
        train = random.Random(seed).sample(train, max_pairs)
    return train, valid


@task(cache_policy=NO_CACHE)
def build_toolset_pairs(specs: tuple[str, ...], benchmarks_root: Path, max_none: int | None, seed: int) -> list[PairExample]:
    pairs: list[PairExample] = []
    for spec in specs:
        pairs += build_pairs(_load_toolset(spec, benchmarks_root), max_none=max_none, seed=seed)
    return pairs


@task(cache_policy=NO_CACHE)
def train_stage(stage: str, init_model: str, train: list[PairExample], valid: list[PairExample], loop: LoopConfig,
                out_dir: Path, loss_name: str, resume: bool, best_dir: Path | None = None) -> TrainResult:
    tokenizer = load_tokenizer(init_model)
    model = load_model(init_model)
    return train_classifier(model, tokenizer, train, valid, loop, out_dir, loss_name=loss_name, resume=resume,
                            stage=stage, best_dir=best_dir)


@task(cache_policy=NO_CACHE)
def evaluate_checkpoint(checkpoint: Path, examples: list[PairExample], max_length: int, batch_size: int) -> dict[str, Any]:
    model, tokenizer = load_model(str(checkpoint)).to(pick_device()), load_tokenizer(str(checkpoint))
    metrics, loss = evaluate(model, TokenizedPairs(tokenizer, examples, max_length), batch_size, "ce")
    return {**metrics, "loss": loss}


def model_card(cfg: TrainDiscriminatorConfig, summary: dict[str, Any]) -> str:
    test, valid = summary["test"], summary["finetune"]["best_valid"]
    rows = "\n".join(
        f"| {name} | {m['precision']:.3f} | {m['recall']:.3f} | {m['f1']:.3f} |"
        for name, m in [("test dependency (micro over 0/2)", test["dependency"]), ("test macro (3 classes)", test["macro"]),
                        ("validation dependency", valid["dependency"]), ("paper Table 3, test", {"precision": 0.893, "recall": 0.760, "f1": 0.817})]
    )
    return f"""---
library_name: transformers
pipeline_tag: text-classification
tags: [tool-retrieval, tool-dependency, tgr]
---
# TGR dependency discriminator ({summary['run']})

A 3-class sequence-pair classifier: input `[CLS] doc_a [SEP] doc_b [SEP]` where each doc is a tool's
API document as canonical JSON; labels `0 a_depends_on_b`, `1 no_dependency`, `2 b_depends_on_a`.

```python
from transformers import pipeline
clf = pipeline("text-classification", model="{cfg.output / 'best'}")
clf({{"text": doc_a_json, "text_pair": doc_b_json}}, top_k=None)
```

## Data
- base model: `{cfg.base_model}`
- pretraining (plain CE, Eq. 1): {summary['pretrain']['data'] or 'skipped (no TDI shards)'}; pairs {summary['pretrain'].get('counts')}
- finetuning (category-averaged CE, Eq. 2): {', '.join(cfg.finetune)}; train {summary['finetune']['train_counts']}, validation {summary['finetune']['valid_counts']} ({summary['finetune']['split']})
- test: {', '.join(cfg.test)}; {summary['test_counts']}
- best checkpoint: finetune epoch {summary['finetune']['best_epoch']} by validation `{cfg.select_metric}`

## Metrics
| set | P | R | F1 |
|---|---|---|---|
{rows}

Confusion matrix (test, rows true, columns predicted): `{test['confusion_matrix']}`

## Config
```json
{json.dumps(summary['config'], indent=2, default=str)}
```
Device: {summary['device']}.
"""


# ---------------------------------------------------------------------------------------------
# Flow


@flow(name="train-discriminator", log_prints=True)
def train_discriminator(cfg: TrainDiscriminatorConfig = TrainDiscriminatorConfig()) -> dict[str, Any]:
    logger = get_run_logger()
    seed_everything(cfg.seed)
    device = pick_device()
    batch_size = cfg.batch_size or (128 if device.type == "cuda" else 32)
    out = Path(cfg.output)
    out.mkdir(parents=True, exist_ok=True)
    logger.info("device %s (bf16 autocast: %s), batch size %d", device, device.type == "cuda", batch_size)

    def loop(epochs: int, lr: float, select: str) -> LoopConfig:
        return LoopConfig(epochs=epochs, batch_size=batch_size, eval_batch_size=batch_size * 4, learning_rate=lr,
                          max_length=cfg.max_length, seed=cfg.seed, max_steps_per_epoch=cfg.max_steps_per_epoch,
                          select_metric=select, progress=cfg.progress)

    # Stage 1: pretraining on TDI shards (balanced, plain CE)
    summary: dict[str, Any] = {"run": out.name, "config": asdict(cfg), "device": str(device),
                               "pretrain": {"data": None}}
    init_model, stages = cfg.base_model, {}
    tdi = resolve_pretrain_data(cfg.pretrain_data)
    if tdi is None:
        logger.warning("pretraining skipped: %s", "--pretrain-data none" if cfg.pretrain_data == "none"
                       else "no artifacts/tdi/*/shards found (run make build-tdi to pretrain on TDI)")
    else:
        pre_train, pre_valid = load_pretraining_pairs(tdi, cfg.pretrain_max_pairs, cfg.seed)
        logger.info("pretraining on %s: train %s, validation %s", tdi, label_counts(pre_train), label_counts(pre_valid))
        result = train_stage("pretrain", cfg.base_model, pre_train, pre_valid,
                             loop(cfg.pretrain_epochs, cfg.pretrain_learning_rate, "macro.f1"),
                             out / "pretrain", "ce", cfg.resume)
        stages["pretrain"] = result
        init_model = str(result.best_dir)
        summary["pretrain"] = {"data": str(tdi), "counts": {"train": label_counts(pre_train), "validation": label_counts(pre_valid)},
                               "best_epoch": result.best_epoch, "history": result.history}

    # Stage 2: finetuning on real tool sets (imbalanced, Eq. 2), grouped 80/20 split
    ft_pairs = build_toolset_pairs(cfg.finetune, cfg.benchmarks_root, cfg.finetune_max_none, cfg.seed)
    ft_train, ft_valid, split_note = grouped_split(ft_pairs, cfg.valid_fraction, cfg.seed)
    logger.info("finetuning: train %s, validation %s; %s", label_counts(ft_train), label_counts(ft_valid), split_note)
    result = train_stage("finetune", init_model, ft_train, ft_valid,
                         loop(cfg.finetune_epochs, cfg.finetune_learning_rate, cfg.select_metric),
                         out / "finetune", "category_averaged", cfg.resume, best_dir=out / "best")
    stages["finetune"] = result
    best_valid = next(h["valid"] for h in result.history if h["epoch"] == result.best_epoch)
    summary["finetune"] = {"train_counts": label_counts(ft_train), "valid_counts": label_counts(ft_valid),
                           "split": split_note, "best_epoch": result.best_epoch, "best_valid": best_valid,
                           "history": result.history}

    # Stage 3: test set with the best finetuned checkpoint
    test_pairs = build_toolset_pairs(cfg.test, cfg.benchmarks_root, cfg.test_max_none, cfg.seed)
    test_metrics = evaluate_checkpoint(result.best_dir, test_pairs, cfg.max_length, batch_size * 4)
    summary["test"], summary["test_counts"] = test_metrics, label_counts(test_pairs)

    print(format_metrics_table(best_valid, f"validation ({', '.join(cfg.finetune)}), best epoch {result.best_epoch}"))
    print(format_metrics_table(test_metrics, f"test ({', '.join(cfg.test)})"))
    print(f"paper Table 3, test: P 0.893 R 0.760 F1 0.817")
    write_json(out / "metrics.json", summary)
    write_json(out / "best" / "metrics.json", summary)
    (out / "best" / "README.md").write_text(model_card(cfg, summary))
    plot_confusion(test_metrics["confusion_matrix"], out / "confusion_matrix_test.png", f"test: {', '.join(cfg.test)}")
    plot_training_curves(stages, out / "training_curves.png")
    logger.info("checkpoint: %s", out / "best")
    return {"best_dir": str(out / "best"), "metrics_path": str(out / "metrics.json"),
            "test": test_metrics, "validation": best_valid}


# ---------------------------------------------------------------------------------------------
# CLI


def _parse_args(argv: list[str] | None = None) -> TrainDiscriminatorConfig:
    defaults = TrainDiscriminatorConfig()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in fields(TrainDiscriminatorConfig):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        if isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
        elif isinstance(default, tuple):
            parser.add_argument(flag, default=",".join(default), help="comma separated")
        else:
            kind = {"int | None": int, "float": float, "int": int, "Path": Path}.get(str(f.type), str)
            parser.add_argument(flag, type=kind, default=default, help=f"default: {default}")
    args = vars(parser.parse_args(argv))
    for f in fields(TrainDiscriminatorConfig):
        if isinstance(getattr(defaults, f.name), tuple):
            args[f.name] = tuple(s for s in args[f.name].split(",") if s)
    return TrainDiscriminatorConfig(**args)


if __name__ == "__main__":
    train_discriminator(_parse_args())
