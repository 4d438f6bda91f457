"""How much parameter-level data a TDI dataset carries (schema version 2), and how much of it the name
rule cannot find: shares of the dependent pairs (label 0 rows) with ``consumer_param`` / ``producer_output``.

    .venv/bin/python -m bench.param_columns artifacts/tdi/<dataset>
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from schemas.name_rule import normalise_param_name, partial_match
from schemas.parameters import output_param_names
from schemas.tdi import LABEL_A_DEPENDS_ON_B


def parameter_shares(dataset: Path) -> dict:
    """Over the label 0 rows (one per dependent pair; label 2 rows are their swaps), per origin and in all:
    ``consumer_param`` set; ``producer_output`` set; of those with a consumer_param, the share whose
    normalised name equals none of the producer doc's output names (declared, else name-derived),
    and the share that not even a partial match (``schemas.name_rule.partial_match``) joins."""
    table = pq.read_table(dataset / "shards", columns=["doc_b", "label", "origin", "consumer_param", "producer_output"])
    counts: dict[str, Counter] = {}
    for row in table.to_pylist():
        if row["label"] != LABEL_A_DEPENDS_ON_B:
            continue
        for key in (row["origin"], "all"):
            c = counts.setdefault(key, Counter())
            c["dependent_pairs"] += 1
            c["producer_output"] += row["producer_output"] is not None
            param = row["consumer_param"]
            if param is None:
                continue
            c["consumer_param"] += 1
            outputs = output_param_names(json.loads(row["doc_b"]))
            if normalise_param_name(param) not in {normalise_param_name(o) for o in outputs}:
                c["name_differs"] += 1
                c["no_partial_match"] += not any(partial_match(o, param) for o in outputs)
    out = {}
    for key, c in counts.items():
        n, k = c["dependent_pairs"], c["consumer_param"]
        out[key] = {"dependent_pairs": n, "consumer_param_set": round(k / n, 4) if n else None,
                    "producer_output_set": round(c["producer_output"] / n, 4) if n else None,
                    "name_differs_of_param_set": round(c["name_differs"] / k, 4) if k else None,
                    "no_partial_match_of_param_set": round(c["no_partial_match"] / k, 4) if k else None,
                    "counts": dict(c)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", type=Path, help="a TDI dataset folder (with shards/)")
    print(json.dumps(parameter_shares(p.parse_args().dataset), indent=2))


if __name__ == "__main__":
    main()
