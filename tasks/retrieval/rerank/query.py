"""ToolRerank on one query: the variants, their parameters, the final list (``rerank``) and a trained
reranker that scores only a query's candidates (``ToolReranker``).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tasks.retrieval.rerank.algorithms import adaptive_truncation, multi_tool_rerank, single_tool_rerank, sort_by_score
from tasks.retrieval.rerank.classifier import QueryTypeClassifier
from tasks.retrieval.rerank.library import Library
from tasks.retrieval.rerank.pair_model import PairModel

VARIANTS = ("rerank", "truncation", "hierarchy", "both", "both_alg1")


@dataclass(frozen=True)
class RerankParams:
    m: int = 30  # fixed cut when truncation is off (the paper's Rerank-m)
    m_s: int = 10
    m_u: int = 50
    tau_s: float = 0.75
    tau_m: float = 0.75
    n: int = 3


def rerank(candidates: Sequence[int], variant: str, params: RerankParams, score: Mapping | np.ndarray,
           library: Library, seen_tools: set[str], single: bool, depth: int | None = None) -> list[int]:
    """The final list for one query. ``candidates``: first-stage ranking (library indices, >= m_u
    deep); ``score``: pair-model scores by library index (covering the library APIs of unseen
    tools, Alg. 1's extended list). Variants: ``rerank`` (fixed cut m, sort by score), ``truncation``,
    ``hierarchy`` (fixed cut + Alg. 1/2), ``both`` and ``both_alg1`` (``both`` with Alg. 2 switched off:
    multi-tool queries keep the pair-model order, as Alg. 2 lowered them in our runs). Candidates the list left out follow it in
    first-stage order, so every @k up to ``depth`` (default: the candidate count) is defined."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    parents = library.parents
    if variant in ("truncation", "both", "both_alg1"):
        kept = adaptive_truncation(candidates, lambda a: parents[a] in seen_tools, params.m_s, params.m_u)
    else:
        kept = list(candidates[:params.m])
    ranked = sort_by_score(kept, score)
    if variant in ("hierarchy", "both") or (variant == "both_alg1" and single):
        if single:
            def extend(x: set) -> list[int]:
                return [a for t in sorted(x) if t not in seen_tools for a in library.by_tool.get(t, ())]

            ranked = single_tool_rerank(ranked, score, parents, params.tau_s, extend)
        else:
            e = library.embeddings[np.asarray(ranked, dtype=np.int64)]
            ranked = multi_tool_rerank(ranked, score, parents, e @ e.T, params.tau_m, params.n)
    final = list(ranked)
    present = set(final)
    final += [c for c in candidates if c not in present]
    return final[:depth] if depth else final


class ToolReranker:
    """A trained reranker for one library: ``rerank_query(text, embedding, candidates)`` scores only
    the candidates (plus Alg. 1's extension) with the pair model, as a deployment would."""

    def __init__(self, library: Library, pair_model: PairModel, classifier: QueryTypeClassifier,
                 seen_tools: set[str], params: RerankParams) -> None:
        self.library, self.pair_model, self.classifier = library, pair_model, classifier
        self.seen_tools, self.params = seen_tools, params

    def rerank_query(self, query: str, query_embedding: np.ndarray, candidates: Sequence[int],
                     variant: str = "both") -> list[int]:
        p = self.params
        keep = candidates[:max(p.m_s, p.m_u, p.m)]
        scores: dict[int, float] = dict(zip(keep, self.pair_model.score(query, query_embedding, keep).tolist()))
        single = bool(self.classifier.predict(query_embedding)[0])
        if variant in ("hierarchy", "both", "both_alg1") and single:
            # Alg. 1's extended list may need the library APIs of unseen tools: score them too.
            extra = sorted({a for c in keep for a in self.library.by_tool[self.library.parents[c]]
                            if self.library.parents[c] not in self.seen_tools} - set(keep))
            if extra:
                scores.update(zip(extra, self.pair_model.score(query, query_embedding, extra).tolist()))
        return rerank(list(candidates), variant, p, _Scores(scores), self.library, self.seen_tools, single)


class _Scores(dict):
    """Pair scores by index; an API never scored (outside the candidates) scores 0."""

    def __missing__(self, key):
        return 0.0
