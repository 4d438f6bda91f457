"""Why a graph helps retrieval on one benchmark and not another: do its edges join tools used together?

For every edge source in the warehouse: how many edges join two tools that share some query's gold
set (co-gold), and how many join two endpoints of the same service (``Service::endpoint`` ids).
Then the diagnostic upper bound: TGR smoothing over the co-gold pairs themselves (not available at
test time; it shows what kind of edge the benchmark rewards).

    .venv/bin/python -m bench.graph_cogold_diagnostic --warehouse artifacts/warehouse/tgr.duckdb --dataset toolbench_stable
"""
from __future__ import annotations

import argparse

import duckdb
import numpy as np

from tasks.retrieval.gcn import gcn_propagate
from tasks.retrieval.inputs import load_inputs
from tasks.retrieval.metrics import pass_rate_at_k, recall_at_k
from tasks.retrieval.ranking import cosine_scores, top_k_from_scores


def service(tool_id: str) -> str:
    return tool_id.split("::")[0]


def at5(inputs, embeddings: np.ndarray) -> tuple[float, float]:
    ids = np.array(inputs.tool_ids)
    top = top_k_from_scores(cosine_scores(inputs.query_embeddings, embeddings), 5)
    ranked = [list(ids[t]) for t in top]
    return (float(np.mean([recall_at_k(r, g, 5) for r, g in zip(ranked, inputs.golds)])),
            float(np.mean([pass_rate_at_k(r, g, 5) for r, g in zip(ranked, inputs.golds)])))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--warehouse", default="artifacts/warehouse/tgr.duckdb")
    p.add_argument("--dataset", default="toolbench_stable")
    a = p.parse_args(argv)
    inputs = load_inputs.fn(a.warehouse, a.dataset)
    cogold = {(x, y) for g in inputs.golds for x in g for y in g if x != y}
    same_service = sum(service(x) == service(y) for x, y in cogold)
    print(f"{a.dataset}: {len(cogold)} ordered co-gold pairs, {same_service} ({same_service / max(len(cogold), 1):.0%}) "
          "of them two endpoints of one service")
    con = duckdb.connect(a.warehouse, read_only=True)
    print("| edge source | edges | co-gold | same service |\n|---|---|---|---|")
    for (source,) in con.execute("SELECT DISTINCT source FROM edges WHERE dataset = ? ORDER BY 1", [a.dataset]).fetchall():
        edges = con.execute("SELECT dependent, prerequisite FROM edges WHERE dataset = ? AND source = ?",
                            [a.dataset, source]).fetchall()
        hits = sum((x, y) in cogold for x, y in edges)
        same = sum(service(x) == service(y) for x, y in edges)
        print(f"| {source} | {len(edges)} | {hits} ({hits / max(len(edges), 1):.0%}) | {same} |")
    con.close()
    index = {t: i for i, t in enumerate(inputs.tool_ids)}
    base = inputs.embeddings["base"]
    r, pr = at5(inputs, base)
    print(f"embedding: R@5 {r:.3f} Pass@5 {pr:.3f}")
    r, pr = at5(inputs, gcn_propagate(base, [(index[x], index[y]) for x, y in sorted(cogold)]))
    print(f"+TGR over the co-gold pairs (diagnostic upper bound, uses the answers): R@5 {r:.3f} Pass@5 {pr:.3f}")


if __name__ == "__main__":
    main()
