"""Parameter-level scoring speed: the retriever's parameter head (bi-encoder + logistic head) against the
cross-encoder parameter scorer on the same candidate pairs (bench/RESULTS.md, "Dependency retriever").

    python -m bench.bench_param_head --retriever artifacts/retriever/dependency-retriever/best \\
        [--cross-encoder artifacts/discriminator/<run>/param/best] [--toolset nestools] [--groups 10] [--rounds 2]

Pairs: every same-group pair of ``--groups`` seeded groups of the tool set (both orders scored, as
build-graph does). Each scorer runs the whole ``score_parameters`` call (model load, encoding or pair passes,
features, head) ``--rounds`` times, round-robin; the median is reported, so quote the ratio.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

TARGET = 200.0  # issue 20: pairs/s on 2 CPU cores, both orders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retriever", type=Path, required=True, help="train-retriever <run>/best (param_head.json)")
    parser.add_argument("--cross-encoder", type=Path, help="train-discriminator --param-level checkpoint")
    parser.add_argument("--toolset", default="nestools")
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import torch

    from tasks.graph.param_scoring import score_parameters
    from tasks.graph.pruning import same_group_pairs
    from tasks.toolsets.readers import load_toolset_spec

    toolset = load_toolset_spec(args.toolset)
    groups = sorted({t.group for t in toolset.tools})
    chosen = set(random.Random(args.seed).sample(groups, min(args.groups, len(groups))))
    tools = toolset.only_groups(chosen).tools
    pairs = same_group_pairs(tools)
    scorers = {"retriever head": args.retriever} | ({"cross-encoder": args.cross_encoder} if args.cross_encoder else {})
    times: dict[str, list[float]] = {name: [] for name in scorers}
    units: dict[str, int] = {}
    for _ in range(args.rounds):
        for name, folder in scorers.items():
            started = time.perf_counter()
            scores = score_parameters(folder, tools, pairs)
            times[name].append(time.perf_counter() - started)
            units[name] = len(scores)
    rows = {name: {"seconds": statistics.median(t), "pairs_per_s": len(pairs) / statistics.median(t),
                   "units": units[name]} for name, t in times.items()}
    report = {"toolset": args.toolset, "groups": len(chosen), "tools": len(tools), "pairs": len(pairs),
              "torch_threads": torch.get_num_threads(), "rounds": args.rounds, "scorers": rows,
              "target_pairs_per_s": TARGET}
    if "cross-encoder" in rows:
        report["speedup"] = rows["cross-encoder"]["seconds"] / rows["retriever head"]["seconds"]
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
