"""How often a discriminator finds the mined precondition pairs of a TDI's validation split, split by where the
order comes from: stated in code (support 1 at mine-tdi's default: a state guard, an error message, a fitted
check, a docstring or state used before it is set, tasks/mining/state.py; read by hand 43 of 50, 30 of 30, 21 of
21 and 47 of 50 right) or call order (support >= 2; about 30% right). The data pairs
of the same split and both name rules are beside them. Recall counts the direction (a row's label 0 or 2).

    .venv/bin/python -m bench.precondition_recall_stated                        # the default run's checkpoint
    .venv/bin/python -m bench.precondition_recall_stated --checkpoint artifacts/discriminator/minilm/best \\
        --tdi artifacts/tdi/tdi-mined
    .venv/bin/python -m bench.precondition_recall_stated --method-docs receiver   # the rows as a catalog shows them

``--method-docs receiver`` shows each method as a tool with its receiver as an input (``Queue.get`` ->
``get(queue: Queue)``, tasks/training/doc_views.py): no tool catalog names a class, so what a checkpoint trained on
the mined names finds in this view is what does not rest on the class in the name.

Only meaningful on a mined TDI built with the default ``--min-order-support 2``: there a precondition row of
support 1 is one stated in code (a pair stated and also seen twice as call order counts as call order).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from models.discriminator import decide, load_calibration, load_discriminator, trained_max_length
from schemas.tdi import LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A
from tasks.training.doc_views import METHOD_DOCS, shown_as, trained_method_docs
from tasks.training.examples import PairExample
from tasks.training.metrics import rule_labels
from tasks.training.trainer import predict_examples


def validation_rows(tdi: Path) -> list[dict]:
    cols = ["doc_a", "doc_b", "label", "split", "kind", "support"]
    rows = []
    for file in sorted((tdi / "shards").glob("*.parquet")):
        rows += [r for r in pq.read_table(file, columns=cols).to_pylist() if r["split"] == "validation"]
    return rows


def group_of(row: dict) -> str | None:
    if row["label"] not in (LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A):
        return None
    if row["kind"] == "precondition":
        return "precondition, stated in code (support 1)" if row["support"] == 1 else "precondition, call order (support >= 2)"
    return "data"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default="artifacts/discriminator/minilm/best")
    p.add_argument("--tdi", default="artifacts/tdi/tdi-mined")
    p.add_argument("--max-data", type=int, default=600, help="score this many data rows (seeded sample), not all")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--method-docs", choices=METHOD_DOCS, default=None,
                   help="how methods' docs are shown (tasks/training/doc_views.py); default: as the checkpoint was "
                        "trained (its calibration.json)")
    a = p.parse_args()
    rows = [r for r in validation_rows(Path(a.tdi)) if group_of(r) is not None]
    data = [r for r in rows if group_of(r) == "data"]
    keep = set(np.random.default_rng(a.seed).choice(len(data), min(a.max_data, len(data)), replace=False).tolist())
    rows = [r for r in rows if group_of(r) != "data"] + [r for i, r in enumerate(data) if i in keep]
    model, tokenizer = load_discriminator(a.checkpoint)
    calibration = load_calibration(a.checkpoint) or {}  # scored as the training run scored its validation pairs
    threshold = calibration.get("threshold")
    method_docs = a.method_docs or trained_method_docs(calibration)
    examples = shown_as([PairExample(r["doc_a"], r["doc_b"], r["label"], "tdi") for r in rows], method_docs)
    probs = predict_examples(model, tokenizer, examples, trained_max_length(calibration) or 256, 64,
                             calibration.get("symmetric", True))
    predictions = {"discriminator, calibrated": decide(probs, threshold), "discriminator, argmax": decide(probs),
                   "name rule, exact": np.asarray(rule_labels(examples)),
                   "name rule, exact or partial": np.asarray(rule_labels(examples, partial=True))}
    groups = sorted({group_of(r) for r in rows})
    table = {}
    for name, pred in predictions.items():
        table[name] = {}
        for g in groups:
            idx = [i for i, r in enumerate(rows) if group_of(r) == g]
            table[name][g] = {"rows": len(idx), "recall": round(float(np.mean([pred[i] == rows[i]["label"] for i in idx])), 3)}
    print(json.dumps({"checkpoint": a.checkpoint, "tdi": a.tdi, "threshold": threshold, "method_docs": method_docs,
                      "recall": table}, indent=2))
    print("\n| validation rows | " + " | ".join(groups) + " |\n|---|" + "---|" * len(groups))
    print(f"| rows | " + " | ".join(str(table[next(iter(table))][g]["rows"]) for g in groups) + " |")
    for name in predictions:
        print(f"| {name} | " + " | ".join(f"{table[name][g]['recall']:.3f}" for g in groups) + " |")


if __name__ == "__main__":
    main()
