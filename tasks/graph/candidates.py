"""The ``retrieval`` pruning rule: each input parameter of a consumer, as a sentence ("name: description
(input of tool)"), retrieves by cosine the top-k producer tools of its group (docs: name, description,
outputs); a tool without declared inputs asks once with its name and description."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from schemas.name_rule import identifier_tokens
from schemas.toolset import Tool

DEFAULT_RETRIEVAL_K = 3


def readable_name(name: str) -> str:
    """An identifier as words (``GetUserToken`` -> "get user token"), so the encoder's word pieces see words."""
    return " ".join(identifier_tokens(name)) or name


def _sentence(name: str, description: str | None) -> str:
    description = (description or "").strip()
    return f"{readable_name(name)}: {description}" if description else readable_name(name)


def producer_text(doc: dict[str, Any]) -> str:
    """What a tool offers as a producer: its name, description and declared outputs (each with its description)."""
    text = _sentence(doc.get("name", ""), doc.get("description"))
    outputs = doc.get("output_params") or []
    if outputs:
        text += "; returns " + "; ".join(_sentence(p["name"], p.get("description")) for p in outputs)
    return text


def parameter_queries(doc: dict[str, Any]) -> list[str]:
    """One query per input parameter, "name: description (input of tool)"; a tool that declares no inputs
    asks once with its name and description."""
    tool = readable_name(doc.get("name", ""))
    params = doc.get("input_params") or []
    if not params:
        return [_sentence(doc.get("name", ""), doc.get("description"))]
    return [f"{_sentence(p['name'], p.get('description'))} (input of {tool})" for p in params]


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


def retrieve_producers(
    tools: Sequence[Tool], producer_emb: np.ndarray, query_emb: np.ndarray, consumer: Sequence[int], k: int
) -> set[tuple[int, int]]:
    """Ordered pairs (producer, consumer): for each query, the k producers of the consumer's group (itself
    excluded) with the highest cosine; ties go to the earlier tool."""
    if k < 1:
        raise ValueError(f"retrieval k {k}: must be at least 1")
    if len(query_emb) != len(consumer):
        raise ValueError(f"{len(query_emb)} query embeddings for {len(consumer)} queries")
    p = producer_emb / np.maximum(np.linalg.norm(producer_emb, axis=1, keepdims=True), 1e-12)
    q = query_emb / np.maximum(np.linalg.norm(query_emb, axis=1, keepdims=True), 1e-12)
    members: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(tools):
        members[t.group].append(i)
    asks: dict[str, list[int]] = defaultdict(list)
    for n, c in enumerate(consumer):
        asks[tools[c].group].append(n)
    pairs: set[tuple[int, int]] = set()
    for group, rows in asks.items():
        idx = np.array(members[group])
        if len(idx) < 2:
            continue
        sims = q[rows] @ p[idx].T
        owners = np.array([consumer[n] for n in rows])
        sims[owners[:, None] == idx[None, :]] = -np.inf  # a tool is not its own producer
        top = np.argsort(-sims, axis=1, kind="stable")[:, : min(k, len(idx) - 1)]
        for owner, cols in zip(owners, top):
            pairs.update((int(idx[col]), int(owner)) for col in cols)
    return pairs


def retrieval_candidates(
    tools: Sequence[Tool], encode: Callable[[list[str]], np.ndarray], k: int = DEFAULT_RETRIEVAL_K
) -> set[tuple[int, int]]:
    """The retrieval rule end to end: ordered (producer, consumer) pairs, ``encode`` a sentence encoder
    (called once, on the producer docs and the queries together)."""
    if not tools:
        return set()
    texts = retrieval_texts(tools)
    emb = encode(texts.producers + texts.queries)
    n = len(texts.producers)
    return retrieve_producers(tools, emb[:n], emb[n:], texts.consumer, k)
