"""Which of the retriever's validated checkpoints the parameter level should keep (bench/RESULTS.md, "The
retriever's checkpoint at a tie"). Trains the retriever as train-discriminator's parameter level does (its
``RetrieverConfig`` defaults there: 44 steps, validated at 0, 22 and 44), keeps every validated checkpoint, and per
checkpoint prints the validation score (pooled recall@3 and the recall curve that breaks its ties), the parameter
head's F1 and beyond-rule recall at precision on the test domains when the head is fitted on that checkpoint, and
which step the run keeps. About 6.5 minutes per seed on 2 cores.

    .venv/bin/python -m bench.retriever_checkpoints --tdi artifacts/tdi/tdi-mined --seeds 42,1,2,3
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from models.sentence_encoder import EncoderConfig, MemoEncode, SentenceEncoder
from tasks.graph.retriever_run import (parameter_head, split_toolsets, training_examples, validation_score,
                                       validation_table)
from tasks.training import retriever
from tasks.training.retriever_config import VALIDATION_K, RetrieverConfig


def checkpoints(cfg: RetrieverConfig, folder: Path) -> dict:
    """One run: per validated step its validation score and its head's test figures, and the step kept."""
    sets = split_toolsets.fn(cfg)
    examples, _ = training_examples.fn(cfg, sets)
    args = cfg.arguments()
    rows = []

    def validate(encoder) -> tuple[float, float]:
        score = validation_score(validation_table(sets.validation, encoder.encode))
        saved = folder / f"validation{len(rows)}"  # its step: the run's history, in the same order
        retriever._save(encoder.backend.model, encoder.tokenizer, saved, {"max_length": args.max_length})
        rows.append({"recall_at_k": score[0], "curve": score[1], "folder": saved})
        return score

    result = retriever.train_retriever(examples, args, folder / "run", validate)
    for row, validated in zip(rows, result.history, strict=True):
        saved = row.pop("folder")
        head = parameter_head.fn(sets, MemoEncode(SentenceEncoder(EncoderConfig(str(saved))).encode), saved) or {}
        test = head.get("test") or {}
        row |= {"step": validated["step"], "head_f1": {name: m["model"]["f1"] for name, m in test.items()},
                "head_beyond_rule": {name: m["beyond_rule"] for name, m in test.items()}}
    return {"kept": result.best_step, "rows": rows}


def _at(beyond: dict) -> str:
    """Beyond-rule recall at its precision (``-`` where a set has no such gold, or the head calls none)."""
    show = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    return f"{show(beyond['recall'])} @ {show(beyond['precision'])}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tdi", default="artifacts/tdi/tdi-mined", help="mined TDI folder (as train-discriminator's)")
    p.add_argument("--seeds", default="42", help="comma-separated seeds")
    p.add_argument("--max-steps", type=int, default=44, help="retriever steps (train-discriminator's default)")
    p.add_argument("--evals", type=int, default=2, help="validations over the run")
    p.add_argument("--benchmarks-root", default="../shared/data/benchmarks")
    a = p.parse_args()
    out = {}
    for seed in (int(s) for s in a.seeds.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            cfg = RetrieverConfig(tdi=a.tdi, toolsets=("nestools", "ultratool"), heldout=(),
                                  benchmarks_root=a.benchmarks_root, output=tmp, max_steps=a.max_steps,
                                  evals=a.evals, seed=seed)
            out[seed] = got = checkpoints(cfg, Path(tmp))
        print(f"seed {seed}: kept step {got['kept']}")
        for row in got["rows"]:
            print(f"  step {row['step']:3d}: recall@{VALIDATION_K} {row['recall_at_k']:.4f}, curve {row['curve']:.4f}, "
                  f"head F1 {', '.join(f'{n} {f:.3f}' for n, f in row['head_f1'].items())}; beyond-rule R @ P "
                  f"{', '.join(f'{n} {_at(b)}' for n, b in row['head_beyond_rule'].items())}", flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
