"""The best candidate recall any ranking could reach if a share cap were split evenly by group, as build-graph's
``--retrieval-share`` was until 2026-11-29: at most floor(share * n * (n - 1)) ordered pairs of a group of n tools
(at least 1), so a group whose gold edges outnumber that budget loses the rest whatever the ranking. (Now the
budget is the set's, spent on the best pairs whatever their group: its ceiling is min(1, budget / gold edges).)
Counts the gold edges within groups of each set's held-out split (train-retriever's: for NesTools the 29 held-out
domains; sets not in ``--toolsets`` whole).

    .venv/bin/python -m bench.candidate_share_ceiling
    .venv/bin/python -m bench.candidate_share_ceiling --toolsets nestools --heldout apibank --shares 0.03,0.05,0.1

No model, no encoder: seconds.
"""
from __future__ import annotations

import argparse
import math
from collections import Counter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--toolsets", default="nestools", help="split by group as train-retriever splits them")
    ap.add_argument("--heldout", default="", help="comma separated sets measured whole")
    ap.add_argument("--shares", default="0.03,0.05,0.1")
    ap.add_argument("--benchmarks-root", default="../shared/data/benchmarks")
    args = ap.parse_args()

    from tasks.graph.retriever_run import split_toolsets
    from tasks.training.retriever_config import RetrieverConfig

    sets = split_toolsets.fn(RetrieverConfig(toolsets=tuple(s for s in args.toolsets.split(",") if s),
                                             heldout=tuple(s for s in args.heldout.split(",") if s),
                                             benchmarks_root=args.benchmarks_root))
    print("| set | groups | ordered pairs | gold edges within groups | share cap | best recall reachable |")
    print("|---|---|---|---|---|---|")
    for ts in sets.test:
        members = Counter(t.group for t in ts.tools)
        group_of = {t.tool_id: t.group for t in ts.tools}
        gold = Counter(group_of[e.dependent] for e in ts.edges
                       if e.dependent in group_of and group_of[e.dependent] == group_of.get(e.prerequisite))
        total = sum(gold.values())
        pairs = sum(n * (n - 1) for n in members.values())
        for share in (float(s) for s in args.shares.split(",")):
            kept = sum(min(g, max(1, math.floor(share * members[grp] * (members[grp] - 1)))) for grp, g in gold.items())
            print(f"| {ts.name} | {len(members)} | {pairs} | {total} | {share:g} | {kept / total:.3f} |" if total else
                  f"| {ts.name} | {len(members)} | {pairs} | 0 | {share:g} | - |")


if __name__ == "__main__":
    main()
