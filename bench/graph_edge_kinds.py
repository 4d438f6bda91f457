"""Which discriminator edges help or hurt retrieval, by the evidence the model was shown (issue 7 diagnostic).

    .venv/bin/python -m bench.graph_edge_kinds [--warehouse artifacts/warehouse/tgr.duckdb] [--dataset toolbench_stable]

Each discriminator edge of a built warehouse is put in one class by the hint its pair carried
(``models.discriminator.hint_evidence``, what ``pair_texts`` shows): ``exact`` (an output name of the
prerequisite is an input name of the dependent), ``partial`` (a partial name match only), ``mention``
(the dependent's text names the prerequisite's output) or ``none``. Then Eq. 3 is applied with the edges of
some classes only (and, for ``service::endpoint`` ids, with the edges inside one service or across
services only), and Recall@5 / Pass Rate@5 of every query are printed beside the encoder alone. Last, all
edges weighted by their probability, and with a heavier self-loop (``A + lambda I``, the same as weights
``1/lambda``: the degree scaling cancels).
Prints only; bench/RESULTS.md quotes its figures.
"""
from __future__ import annotations

import argparse
import json

import numpy as np

from models.discriminator import hint_evidence
from schemas.toolset import Tool
from tasks.graph.schema_rule import group_common_names, group_common_partial_inputs
from tasks.retrieval.gcn import gcn_propagate, gcn_propagate_weighted
from tasks.retrieval.ranking import cosine_scores, top_k_from_scores
from warehouse.build import connect

SUBSETS = (("exact",), ("exact", "mention"), ("exact", "partial"), ("exact", "partial", "mention", "none"), ("partial",))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--warehouse", default="artifacts/warehouse/tgr.duckdb")
    p.add_argument("--dataset", default="toolbench_stable")
    p.add_argument("--k", type=int, default=5)
    a = p.parse_args(argv)
    con = connect(a.warehouse)
    ds = a.dataset
    tools = con.execute("SELECT tool_id, tool_group, doc_json FROM tools WHERE dataset = ? ORDER BY tool_id", [ds]).fetchall()
    docs = {t: json.loads(d) for t, _, d in tools}
    group = {t: g for t, g, _ in tools}
    catalogue = [Tool(t, group[t], docs[t]) for t in docs]
    common, common_inputs = group_common_names(catalogue), group_common_partial_inputs(catalogue)
    rows = con.execute("SELECT tool_id, embedding FROM tool_embeddings WHERE dataset = ? AND kind = 'base' ORDER BY tool_id",
                       [ds]).fetchall()
    index = {t: i for i, (t, _) in enumerate(rows)}
    x = np.array([e for _, e in rows], dtype=np.float32)
    queries = con.execute("SELECT q.query_id, e.embedding FROM queries q JOIN query_embeddings e USING (dataset, query_id) "
                          "WHERE q.dataset = ? ORDER BY 1", [ds]).fetchall()
    gold: dict[str, set[int]] = {}
    for qid, t in con.execute("SELECT query_id, tool_id FROM query_gold_tools WHERE dataset = ?", [ds]).fetchall():
        gold.setdefault(qid, set()).add(index[t])
    q = np.array([e for _, e in queries], dtype=np.float32)
    qids = [qid for qid, _ in queries]

    def metrics(emb: np.ndarray) -> str:
        top = top_k_from_scores(cosine_scores(q, emb), a.k)
        recall = np.mean([len(set(top[n]) & gold[qid]) / len(gold[qid]) for n, qid in enumerate(qids)])
        passed = np.mean([gold[qid] <= set(top[n]) for n, qid in enumerate(qids)])
        return f"R@{a.k} {recall:.3f} | P@{a.k} {passed:.3f}"

    by_kind: dict[str, list[tuple[int, int]]] = {}
    prob: dict[tuple[int, int], float] = {}
    for dep, pre, p_edge in con.execute("SELECT dependent, prerequisite, prob FROM edges WHERE dataset = ? AND "
                                        "source = 'discriminator'", [ds]).fetchall():
        prob[index[dep], index[pre]] = p_edge
        kind = hint_evidence(docs[pre], docs[dep], common[group[dep]], common_inputs[group[dep]]).kind
        by_kind.setdefault(kind, []).append((index[dep], index[pre]))
    print(f"{ds}: discriminator edges by hint {dict(sorted((k, len(v)) for k, v in by_kind.items()))}")
    print(f"| edges | count | metrics |\n|---|---|---|\n| none (encoder alone) | 0 | {metrics(x)} |")
    for kinds in SUBSETS:
        edges = [e for k in kinds for e in by_kind.get(k, [])]
        print(f"| {' + '.join(kinds)} | {len(edges)} | {metrics(gcn_propagate(x, edges, 'both'))} |")
    # ToolBench ids are "service::endpoint": edges inside one service against edges across services
    service = {i: t.split("::")[0] for t, i in index.items() if "::" in t}
    if service:
        every = [e for v in by_kind.values() for e in v]
        for label, same in (("inside one service", True), ("across services", False)):
            edges = [(d, p) for d, p in every if (service.get(d) == service.get(p)) == same]
            print(f"| all, {label} | {len(edges)} | {metrics(gcn_propagate(x, edges, 'both'))} |")
    weighted = [(d, p, w) for (d, p), w in prob.items()]
    print(f"| all, weight = prob ({min(prob.values(), default=0):.3f}-{max(prob.values(), default=0):.3f}) | "
          f"{len(weighted)} | {metrics(gcn_propagate_weighted(x, weighted))} |")
    for lam in (2, 3, 5, 10):
        print(f"| all, self-loop weight {lam} | {len(prob)} | "
              f"{metrics(gcn_propagate_weighted(x, [(d, p, 1 / lam) for d, p in prob]))} |")


if __name__ == "__main__":
    main()
