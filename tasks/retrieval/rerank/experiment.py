"""ToolRerank's experiment on one data set: split, train the pair model and the classifier, grid
search the parameters on validation, and the test rows of every first stage x variant x subset.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tasks.retrieval.metrics import evaluate_rankings
from tasks.retrieval.rerank.classifier import QueryTypeClassifier, is_single_tool
from tasks.retrieval.rerank.library import Library
from tasks.retrieval.rerank.pair_model import PairModel, pair_training_set
from tasks.retrieval.rerank.query import VARIANTS, RerankParams, rerank
from tasks.retrieval.rerank.split import seeded_split

# Grids of ToolRerank's Table 2 (grid search on dev).
M_GRID = (10, 30, 50)
TAU_GRID = tuple(round(0.60 + 0.05 * i, 2) for i in range(7))  # 0.60 ... 0.90
N_GRID = (2, 3, 4)
PAIR_C_GRID = (0.0001, 0.001, 0.01)  # inverse L2 strength of the pair model, chosen on validation
PAIR_PRODUCT_GRID = (False, True)  # with or without the q * d block, chosen on validation
CLASSIFIER_C_GRID = (0.01, 0.1, 1.0)
DEPTH = max(M_GRID)  # first-stage depth the reranker needs (m >= m_u)
SELECT_METRIC = "ndcg@5"  # what validation maximises (ties: recall@5)


@dataclass
class RerankResult:
    dataset: str
    split: dict[str, Any]
    pair_model: dict[str, Any]
    classifier_test_accuracy: float | None
    params: dict[str, dict[str, Any]]  # first stage -> chosen parameters (+ validation score)
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per first stage x variant x subset x k


class TooFewQueries(ValueError):
    """The split leaves a training, validation or test part empty."""


def subsets_of(query_ids: Sequence[int], single: Sequence[bool], seen: Sequence[bool]) -> dict[str, list[int]]:
    """Positions (into ``query_ids``) of each reported subset; empty subsets are left out."""
    out = {"all": list(range(len(query_ids))),
           "single": [i for i, q in enumerate(query_ids) if single[q]],
           "multi": [i for i, q in enumerate(query_ids) if not single[q]],
           "seen": [i for i, q in enumerate(query_ids) if seen[q]],
           "unseen": [i for i, q in enumerate(query_ids) if not seen[q]]}
    return {k: v for k, v in out.items() if v}


def _mean_metric(rankings: Sequence[Sequence[int]], golds: Sequence[set[int]], metric: str = SELECT_METRIC) -> float:
    k = int(metric.split("@")[1])
    return evaluate_rankings(rankings, golds, (k,))[metric] if rankings else 0.0


def run_toolrerank(library: Library, query_texts: Sequence[str], query_embeddings: np.ndarray,
                   golds: Sequence[set[int]], first_stages: Mapping[str, Sequence[Sequence[int]]],
                   seed: int = 0, ks: Sequence[int] = (5, 10), log: Callable[[str], None] | None = None
                   ) -> RerankResult:
    """Split, train the pair model and the classifier, choose the parameters per first stage on the
    validation split, and evaluate every first stage x variant on the test split.

    ``golds``: gold API indices per query; ``first_stages``: name -> per-query ranking of library
    indices, at least ``DEPTH`` deep. The dense (``embedding``) and ``BM25`` first stages, when
    present, give the training pairs' hard negatives.
    """
    log = log or (lambda _msg: None)
    parents = library.parents
    gold_tools = [{parents[g] for g in gold} for gold in golds]
    split = seeded_split(gold_tools, seed)
    if not (split.train and split.val and split.test):
        raise TooFewQueries(f"{library.dataset}: {len(golds)} queries give {len(split.train)} train / "
                            f"{len(split.val)} validation / {len(split.test)} test queries: too few to rerank")
    single = [is_single_tool(g, parents) for g in golds]
    seen_q = [g <= split.seen_tools for g in gold_tools]
    negative_sources = [first_stages[n] for n in ("embedding", "BM25") if n in first_stages] or \
        [next(iter(first_stages.values()))]
    base, feats, labels = pair_training_set(library, query_texts, query_embeddings, golds, split,
                                            [[src[qi] for src in negative_sources] for qi in range(len(golds))], seed)
    everything = np.arange(len(library.tool_ids))
    eval_ids = split.val + split.test
    val_golds = [golds[q] for q in split.val]
    # The lexical features of every (validation or test query, library API) pair, computed once.
    scalars = {qi: base.scalar_features(query_texts[qi], query_embeddings[qi], everything) for qi in eval_ids}

    def library_scores(model: PairModel, qids: Sequence[int]) -> dict[int, np.ndarray]:
        return {qi: model.score(query_texts[qi], query_embeddings[qi], everything, scalars[qi]) for qi in qids}

    # Pair model: C and the q * d block chosen on validation, by the pair model ranking the library alone.
    best: tuple[float, PairModel] | None = None
    c_scores = {}
    for product in PAIR_PRODUCT_GRID:
        for c in PAIR_C_GRID:
            model = base.with_c(c, product).fit(feats, labels)
            val = library_scores(model, split.val)
            alone = [list(np.argsort(-val[qi], kind="stable")[:10]) for qi in split.val]
            key = f"C={c}" + (" +q*d" if product else "")
            c_scores[key] = _mean_metric(alone, val_golds)
            log(f"{library.dataset}: pair model {key}: validation {SELECT_METRIC} {c_scores[key]:.3f} (ranking the library alone)")
            if best is None or c_scores[key] > best[0]:
                best = (c_scores[key], model)
    pair_model = best[1]
    scores = np.zeros((len(golds), len(everything)), dtype=np.float32)
    for qi, row in library_scores(pair_model, eval_ids).items():
        scores[qi] = row
    # Single/multi classifier: C chosen on validation accuracy.
    val_single = [single[q] for q in split.val]
    classifier = max((QueryTypeClassifier(c).fit(query_embeddings[split.train], [single[q] for q in split.train])
                      for c in CLASSIFIER_C_GRID),
                     key=lambda m: float(np.mean(m.predict(query_embeddings[split.val]) == np.asarray(val_single))))
    predicted = np.zeros(len(golds), dtype=bool)
    predicted[eval_ids] = classifier.predict(query_embeddings[eval_ids])
    accuracy = float(np.mean([predicted[q] == single[q] for q in split.test])) if split.test else None

    def lists(ranking, qids, variant, params):
        return [rerank(ranking[q][:DEPTH], variant, params, scores[q], library, split.seen_tools,
                       bool(predicted[q]), depth=max(ks)) for q in qids]

    result = RerankResult(library.dataset, split.summary() | {"seen_test_queries": sum(seen_q[q] for q in split.test),
                                                              "single_test_queries": sum(single[q] for q in split.test)},
                          {"kind": "logistic regression on pair features", "C": pair_model.c,
                           "product_features": pair_model.product,
                           "validation": {k: round(v, 4) for k, v in c_scores.items()},
                           "training_pairs": len(labels), "positives": int(labels.sum())}, accuracy, {})
    result.split["classifier_C"] = classifier.c
    for name, ranking in first_stages.items():
        if any(len(ranking[q]) < DEPTH for q in eval_ids) and len(library.tool_ids) >= DEPTH:
            raise ValueError(f"first stage {name!r}: rankings must be at least {DEPTH} deep")
        params, chosen = select_params(lambda v, p: _mean_metric(lists(ranking, split.val, v, p), val_golds),
                                       lambda v, p, qids: _mean_metric(lists(ranking, qids, v, p),
                                                                       [golds[q] for q in qids]),
                                       [q for q in split.val if predicted[q]], [q for q in split.val if not predicted[q]])
        result.params[name] = chosen
        log(f"{library.dataset}/{name}: chosen on validation {chosen}")
        test_lists = {"first": [list(ranking[q][:max(ks)]) for q in split.test]}
        for variant in VARIANTS:
            test_lists[variant] = lists(ranking, split.test, variant, params)
        # Diagnosis, as the paper's Table 6: the gold single/multi label (ToolBench G1 vs G2/G3) routes.
        test_lists["both_oracle"] = [rerank(ranking[q][:DEPTH], "both", params, scores[q], library, split.seen_tools,
                                            single[q], depth=max(ks)) for q in split.test]
        subsets = subsets_of(split.test, single, seen_q)
        for variant, ranked in test_lists.items():
            for subset, positions in subsets.items():
                m = evaluate_rankings([ranked[i] for i in positions], [golds[split.test[i]] for i in positions], ks)
                for k in ks:
                    result.rows.append({"dataset": library.dataset, "first_stage": name, "variant": variant,
                                        "subset": subset, "k": k, "n_queries": len(positions),
                                        "recall": m[f"recall@{k}"], "ndcg": m[f"ndcg@{k}"],
                                        "pass_rate": m[f"pass_rate@{k}"]})
    return result


def select_params(score_all: Callable[[str, RerankParams], float],
                  score_on: Callable[[str, RerankParams, list[int]], float],
                  val_single: list[int], val_multi: list[int]) -> tuple[RerankParams, dict[str, Any]]:
    """Grid search on validation, in stages: m (fixed cut) for ``rerank``; (m_s, m_u) for
    ``truncation``; then, with that truncation, tau_s on the validation queries classified single-tool
    and (tau_m, n) on those classified multi-tool (Alg. 1 only sees the former and Alg. 2 the latter,
    so this equals the joint grid). Ties keep the earlier grid point."""
    m = max(M_GRID, key=lambda v: (score_all("rerank", RerankParams(m=v)), -M_GRID.index(v)))
    pairs = [(s, u) for s in M_GRID for u in M_GRID]
    m_s, m_u = max(pairs, key=lambda su: (score_all("truncation", RerankParams(m=m, m_s=su[0], m_u=su[1])),
                                          -pairs.index(su)))
    p = RerankParams(m=m, m_s=m_s, m_u=m_u)
    tau_s = p.tau_s
    if val_single:
        tau_s = max(TAU_GRID, key=lambda t: (score_on("both", RerankParams(m, m_s, m_u, tau_s=t), val_single),
                                             -TAU_GRID.index(t)))
    tau_m, n = p.tau_m, p.n
    if val_multi:
        grid = [(t, nn) for t in TAU_GRID for nn in N_GRID]
        tau_m, n = max(grid, key=lambda tn: (score_on("both", RerankParams(m, m_s, m_u, tau_m=tn[0], n=tn[1]),
                                                      val_multi), -grid.index(tn)))
    params = RerankParams(m, m_s, m_u, tau_s, tau_m, n)
    chosen = asdict(params) | {f"val_{SELECT_METRIC}": {v: round(score_all(v, params), 4) for v in VARIANTS}}
    return params, chosen
