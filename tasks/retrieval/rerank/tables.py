"""ToolRerank's report: the Markdown tables of one data set's result (test split, subsets, chosen
parameters, split and models).
"""
from __future__ import annotations

from collections.abc import Sequence

from tasks.retrieval.rerank.experiment import SELECT_METRIC, RerankResult
from tasks.retrieval.rerank.hierarchy import HIERARCHY_SOURCE, hierarchy_kind
from tasks.retrieval.rerank.query import VARIANTS

REPORTED = ("first", *VARIANTS, "both_oracle")
VARIANT_LABEL = {"first": "first stage", "rerank": "none (rerank top m)", "truncation": "truncation",
                 "both_oracle": "both, gold single/multi label",
                 "hierarchy": "hierarchy", "both": "both (ToolRerank)",
                 "both_alg1": "both, Alg. 2 off (multi-tool queries keep the score order)"}


def markdown_tables(result: RerankResult, ks: Sequence[int] = (5, 10)) -> str:
    """Per data set: test-split table first stage x variant at R/N/P@k, then NDCG@5 / Recall@5 by
    subset (single/multi-tool, seen/unseen), then the chosen parameters."""
    by = {(r["first_stage"], r["variant"], r["subset"], r["k"]): r for r in result.rows}
    stages = list(dict.fromkeys(r["first_stage"] for r in result.rows))
    subsets = [s for s in ("single", "multi", "seen", "unseen") if any(r["subset"] == s for r in result.rows)]
    n = {s: next(r["n_queries"] for r in result.rows if r["subset"] == s) for s in ["all", *subsets]}
    cols = [(m, k) for m in ("recall", "ndcg", "pass_rate") for k in ks]
    head = " | ".join(f"{m[0].upper()}@{k}" for m, k in cols)
    lines = [f"### {result.dataset}: ToolRerank on the test split ({n['all']} queries)", "",
             f"| first stage | reranking | {head} |", "|---|---|" + "---|" * len(cols)]
    for s in stages:
        for v in REPORTED:
            lines.append(f"| {s} | {VARIANT_LABEL[v]} | " +
                         " | ".join(f"{by[(s, v, 'all', k)][m]:.3f}" for m, k in cols) + " |")
    if subsets:
        lines += ["", "NDCG@5 / Recall@5 by subset (" + ", ".join(f"{s} {n[s]}" for s in subsets) + " queries):", "",
                  "| first stage | reranking | " + " | ".join(subsets) + " |", "|---|---|" + "---|" * len(subsets)]
        for s in stages:
            for v in REPORTED:
                lines.append(f"| {s} | {VARIANT_LABEL[v]} | " + " | ".join(
                    f"{by[(s, v, sub, 5)]['ndcg']:.3f} / {by[(s, v, sub, 5)]['recall']:.3f}" for sub in subsets) + " |")
    lines += ["", "Parameters chosen on validation (" + SELECT_METRIC + "):", "",
              "| first stage | m | m_s | m_u | tau_s | tau_m | n |", "|---|---|---|---|---|---|---|"]
    for s in stages:
        p = result.params[s]
        lines.append(f"| {s} | {p['m']} | {p['m_s']} | {p['m_u']} | {p['tau_s']:.2f} | {p['tau_m']:.2f} | {p['n']} |")
    sp, pm = result.split, result.pair_model
    acc = "n/a" if result.classifier_test_accuracy is None else f"{result.classifier_test_accuracy:.3f}"
    lines += ["", f"Split (seed {sp['seed']}): {sp['train']} train / {sp['val']} validation / {sp['test']} test queries; "
              f"{sp['seen_tools']} seen tools, {sp['held_out_val_tools']} + {sp['held_out_test_tools']} held out; "
              f"test: {sp['seen_test_queries']} seen, {sp['single_test_queries']} single-tool. Pair model: "
              f"{pm['kind']}{' with q*d' if pm['product_features'] else ''}, C = {pm['C']} ({pm['training_pairs']} pairs, {pm['positives']} positive). "
              f"Single/multi classifier test accuracy {acc}. Hierarchy: {HIERARCHY_SOURCE[hierarchy_kind(result.dataset)]}.",
              ""]
    return "\n".join(lines)

