"""The ``retrieval`` pruning rule: each input parameter of a consumer, as a sentence ("name: description
(input of tool)"), retrieves by cosine the top-k producer tools of its group (docs: name, description,
outputs); a tool without declared inputs asks once with its name and description (texts: schemas/dependency_text.py)."""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from schemas.dependency_text import parameter_queries, producer_text
from schemas.toolset import Tool, ToolSet
from tasks.graph.pruning import prune_candidates

if TYPE_CHECKING:
    from tasks.training.param_head import ParamHead

DEFAULT_RETRIEVAL_K = 3
# what ranks the pairs under a share cap (build-graph --retrieval-rank): auto, the parameter head where the
# trained retriever's folder has one, else the cosine
RETRIEVAL_RANKS = ("auto", "cosine", "head")


@dataclass(frozen=True)
class RetrievalTexts:
    """The texts the retrieval rule embeds: one producer doc per tool, and the queries with their consumer."""

    producers: list[str]  # one per tool, in tool order
    queries: list[str]
    consumer: list[int]  # the tool index each query belongs to


def retrieval_texts(tools: Sequence[Tool]) -> RetrievalTexts:
    queries, consumer = [], []
    for i, t in enumerate(tools):
        qs = parameter_queries(t.doc)
        queries += qs
        consumer += [i] * len(qs)
    return RetrievalTexts([producer_text(t.doc) for t in tools], queries, consumer)


def _unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def retrieve_producers(
    tools: Sequence[Tool], producer_emb: np.ndarray, query_emb: np.ndarray, consumer: Sequence[int], k: int,
    share: float | None = None, rank: Callable[[set[tuple[int, int]]], dict[tuple[int, int], float]] | None = None,
) -> set[tuple[int, int]]:
    """Ordered pairs (producer, consumer): for each query, the k producers of the consumer's group (itself
    excluded) with the highest cosine; ties go to the earlier tool. ``share``: of those, only the best-scored
    pairs up to this share of the set's ordered same-group pairs (at least one): a scoring budget that a trained
    retriever's comparable scores make meaningful. The budget is the set's, not each group's: gold edges crowd
    into a few groups (a NesTools domain of 9 tools holds 7), and an even split would spend the budget on the
    sparse groups' weak pairs (bench/RESULTS.md, "One budget for the set"). Scored by the highest cosine over
    the consumer's queries, or by ``rank`` (the top-k pairs -> a score per pair; a pair it leaves out keeps its
    cosine)."""
    if k < 1:
        raise ValueError(f"retrieval k {k}: must be at least 1")
    if share is not None and not 0.0 < share <= 1.0:
        raise ValueError(f"retrieval share {share}: must lie in (0, 1]")
    if len(query_emb) != len(consumer):
        raise ValueError(f"{len(query_emb)} query embeddings for {len(consumer)} queries")
    members: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(tools):
        members[t.group].append(i)
    asks: dict[str, list[int]] = defaultdict(list)
    for n, c in enumerate(consumer):
        asks[tools[c].group].append(n)
    best: dict[tuple[int, int], float] = {}  # (producer, consumer) -> its best cosine; pairs never cross groups
    for group, rows in asks.items():
        idx = np.array(members[group])
        if len(idx) < 2:
            continue
        # normalised group by group: a whole normalised copy is 0.46 GB at 10^5 tools (issue 21 item 6)
        sims = _unit_rows(query_emb[rows]) @ _unit_rows(producer_emb[idx]).T
        owners = np.array([consumer[n] for n in rows])
        sims[owners[:, None] == idx[None, :]] = -np.inf  # a tool is not its own producer
        top = np.argsort(-sims, axis=1, kind="stable")[:, : min(k, len(idx) - 1)]
        for row, (owner, cols) in enumerate(zip(owners, top)):
            for col in cols:
                key = (int(idx[col]), int(owner))
                best[key] = max(best.get(key, -np.inf), float(sims[row, col]))
    if share is None:
        return set(best)
    if rank is not None:
        ranked = rank(set(best))
        best = {pair: ranked.get(pair, cos) for pair, cos in best.items()}
    budget = max(1, math.floor(share * sum(len(m) * (len(m) - 1) for m in members.values())))
    return {pair for pair, _ in sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:budget]}


def head_ranking(tools: Sequence[Tool], encode: Callable[[list[str]], np.ndarray], head: "ParamHead"
                 ) -> Callable[[set[tuple[int, int]]], dict[tuple[int, int], float]]:
    """``rank`` for ``retrieve_producers``: a pair's score is the parameter head's highest p(takes) over the
    consumer's inputs (tasks/training/param_head.py), which weighs the name rule and the retriever's ranks
    beside the cosine; a consumer without inputs has no units and keeps its cosine. Remembers its last answer:
    share caps of the same k rank the same pairs."""
    from tasks.training.param_head import unit_features

    ranked: set[tuple[int, int]] | None = None
    scores: dict[tuple[int, int], float] = {}

    def rank(pairs: set[tuple[int, int]]) -> dict[tuple[int, int], float]:
        nonlocal ranked, scores
        if ranked != pairs:
            units, x = unit_features(tools, encode, pairs)
            scores = {}
            for (p, c, _), prob in zip(units, head.predict(x) if units else []):
                scores[(p, c)] = max(scores.get((p, c), 0.0), float(prob))
            ranked = set(pairs)
        return scores

    return rank


def retrieval_candidates(
    tools: Sequence[Tool], encode: Callable[[list[str]], np.ndarray], k: int = DEFAULT_RETRIEVAL_K,
    share: float | None = None, head: "ParamHead | None" = None,
) -> set[tuple[int, int]]:
    """The retrieval rule end to end: ordered (producer, consumer) pairs, ``encode`` a sentence encoder
    (called on the producer docs and the queries together, and by ``head``); ``share`` as
    ``retrieve_producers``, its pairs ranked by the parameter ``head`` when given (``head_ranking``)."""
    if not tools:
        return set()
    texts = retrieval_texts(tools)
    emb = encode(texts.producers + texts.queries)
    n = len(texts.producers)
    rank = head_ranking(tools, encode, head) if head is not None and share is not None else None
    return retrieve_producers(tools, emb[:n], emb[n:], texts.consumer, k, share, rank)


def retrieval_recall(toolset: ToolSet, encode: Callable[[list[str]], np.ndarray],
                     settings: Sequence[tuple[int, float | None]] = ((1, None), (3, None), (5, None), (10, None)),
                     strategies: Sequence[str] = ("retrieval", "params+retrieval"),
                     embeddings: np.ndarray | None = None, neighbours: int = 5,
                     head: "ParamHead | None" = None) -> list[dict]:
    """Per strategy and (k, share) setting: the share of ``toolset``'s gold edges kept in their own direction
    and the share of ordered same-group pairs kept (what scoring costs), ``encode`` the retrieval encoder;
    ``embeddings`` (the tool embeddings) and ``neighbours``: for a strategy with the ``neighbours`` rule;
    ``head``: a share cap ranks the pairs by the parameter head (``head_ranking``)."""
    tools = toolset.tools
    texts = retrieval_texts(tools)
    emb = encode(texts.producers + texts.queries) if tools else np.zeros((0, 1))
    n = len(texts.producers)
    ranking = head_ranking(tools, encode, head) if head is not None else None
    rows = []
    for k, share in settings:
        retrieved = retrieve_producers(tools, emb[:n], emb[n:], texts.consumer, k, share, ranking)
        for strategy in strategies:
            r = prune_candidates(tools, embeddings, strategy, neighbours, known_edges=toolset.edges, retrieved=retrieved)
            rows.append({"strategy": strategy, "k": k, "share_cap": share, "recall": r.known_edge_recall,
                         "gold_edges": r.known_edges_in_groups, "kept": r.known_edges_kept,
                         "ordered_share": r.ordered_share, "ordered_pairs_kept": r.ordered_pairs_kept,
                         "ordered_pairs": r.ordered_pairs_in_groups})
    return rows
