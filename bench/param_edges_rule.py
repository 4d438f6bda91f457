"""The name rule at parameter level against a tool set's gold ``param_edges.jsonl`` (issue 20).

The rows build-graph writes to ``parameter_edges`` with source 'schema' (``schema_edges`` then
``schema_parameter_edges``), scored against the 'manual' rows: a hit is the same (consumer,
consumer parameter, producer). Recall is split by whether the gold output and parameter share a
normalised name. Whole tool set, every group (no split), no encoder or model: seconds.

    .venv/bin/python -m bench.param_edges_rule --toolset nestools
"""
from __future__ import annotations

import argparse
import json

from schemas.name_rule import normalise_param_name
from tasks.graph.schema_rule import schema_edges, schema_parameter_edges
from tasks.toolsets.readers import load_toolset_spec


def rule_vs_gold(spec: str, max_producers: int | None = 2) -> dict:
    toolset = load_toolset_spec(spec)
    gold = {(e.dependent, e.consumer_param, e.prerequisite): e for e in toolset.parameter_edges}
    found = {(e.dependent, e.consumer_param, e.prerequisite)
             for e in schema_parameter_edges(toolset.tools, schema_edges(toolset.tools, max_producers=max_producers))}
    hits = found & gold.keys()
    same = {k for k, e in gold.items() if e.producer_output is not None
            and normalise_param_name(e.producer_output) == normalise_param_name(e.consumer_param)}
    p = len(hits) / len(found) if found else 0.0
    r = len(hits) / len(gold) if gold else 0.0
    return {"toolset": toolset.name, "gold": len(gold), "rule": len(found), "hits": len(hits),
            "precision": round(p, 3), "recall": round(r, 3), "f1": round(2 * p * r / (p + r), 3) if p + r else 0.0,
            "gold_same_name": len(same), "recall_same_name": round(len(hits & same) / len(same), 3) if same else None,
            "gold_other_name": len(gold) - len(same),
            "recall_other_name": round(len(hits - same) / (len(gold) - len(same)), 3) if len(gold) > len(same) else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toolset", default="nestools")
    parser.add_argument("--max-producers", type=int, default=2, help="0: no output name is too common")
    args = parser.parse_args()
    print(json.dumps(rule_vs_gold(args.toolset, args.max_producers or None), indent=1))


if __name__ == "__main__":
    main()
