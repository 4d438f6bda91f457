"""Tool-level edges from the retriever's parameter head (bench/RESULTS.md, "Dependency retriever"): on every
same-group pair of a tool set, the tool edge is the max over the consumer's inputs (build-graph
``--param-discriminator <retriever>``); precision, recall and F1 against the gold edges (direction counted),
beside the exact-name schema rule. ``<name>-inputs-only``: the set with every ``output_params`` removed.

    python -m bench.param_head_tool_edges --retriever artifacts/retriever/dependency-retriever/best \\
        --sets apibank,apibank-inputs-only
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench.inputs_only_eval import without_outputs

BENCHMARKS = Path("../shared/data/benchmarks")


def prf(predicted: set, gold: set) -> dict:
    tp = len(predicted & gold)
    p = tp / len(predicted) if predicted else 0.0
    r = tp / len(gold) if gold else 0.0
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0, "predicted": len(predicted),
            "true_positives": tp, "gold": len(gold)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retriever", type=Path, required=True)
    parser.add_argument("--sets", default="apibank,apibank-inputs-only")
    args = parser.parse_args()

    from schemas.name_rule import DEFAULT_MAX_PRODUCERS
    from tasks.graph.param_scoring import param_threshold, param_tool_edges, score_parameters
    from tasks.graph.pruning import same_group_pairs
    from tasks.graph.schema_rule import schema_edges
    from tasks.toolsets.readers import load_toolset_spec

    tmp = tempfile.TemporaryDirectory()
    out = {}
    for spec in args.sets.split(","):
        source = spec
        if spec.endswith("-inputs-only"):
            source = str(without_outputs(spec.removesuffix("-inputs-only"), BENCHMARKS, Path(tmp.name)))
        ts = load_toolset_spec(source, BENCHMARKS)
        tools, pairs = ts.tools, same_group_pairs(ts.tools)
        cut = param_threshold(args.retriever)
        edges = param_tool_edges(tools, pairs, score_parameters(args.retriever, tools, pairs), cut)
        gold = {(e.dependent, e.prerequisite) for e in ts.edges}
        head = {(e.predicted.edge.dependent, e.predicted.edge.prerequisite) for e in edges}
        rule = {(e.edge.dependent, e.edge.prerequisite) for e in schema_edges(tools, None, DEFAULT_MAX_PRODUCERS)}
        out[spec] = {"pairs": len(pairs), "head": prf(head, gold), "schema_rule": prf(rule, gold),
                     "head_or_rule": prf(head | rule, gold),
                     "beyond_rule_recall": (len((head & gold) - rule) / len(gold - rule)) if gold - rule else None,
                     "beyond_rule_gold": len(gold - rule)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
