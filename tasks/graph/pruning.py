"""Candidate pairs of a tool set: same-group pairs, the pruning rules (parameter names, text,
embedding neighbours) and how many gold edges a strategy keeps.

Scoring every pair is O(N^2), the paper's stated limitation (ToolBench stable: 161,228 unordered
pairs inside categories). Pruning keeps a pair only when it can plausibly carry a dependency;
a strategy is a ``+``-joined union of rules:
  * ``params``: an output of one tool has the normalised name of an input of the other (dependency
    condition 1 of the paper). Outputs come from ``schemas.name_rule.output_names``: declared
    outputs, or the one derived from the tool's name when none is declared (``GetUserToken`` ->
    ``user_token``), so it also works on tool sets that list inputs only;
  * ``text``: an input parameter of one tool is named in the other's name or description
    (``token`` in "GetUserToken"), or a content word of one tool's (name-derived) output occurs
    among the other's parameter names or in its name/description (``SearchMovie`` -> ``movie`` in
    "GetMovieCredit"; words singular, stop words out), or one tool is a gatekeeper (login, auth,
    verify, token in its name: "prior verification"); works on tool sets without any parameters
    (UltraTool, TMDB);
  * ``neighbours``: one tool is among the other's ``m`` nearest tools by embedding (cosine) in its
    group; catches "prior verification" dependencies that share no words;
  * ``retrieval``: directed; each input parameter of a consumer retrieves its top-k producers of the
    group by meaning (tasks/graph/candidates.py), so ``path`` <- "create a temporary directory" is
    kept where no name matches;
  * ``none``: every same-group pair.
The symmetric rules keep a pair in both orders, ``retrieval`` keeps (producer, consumer) only: the
result counts the ordered pairs kept and the gold edges kept in their own direction, besides the
unordered pairs handed to the scorer (which scores both orders of each).
The default ``params+text+neighbours+retrieval`` (k=3) keeps more gold edges than the earlier default
``params+text+neighbours`` at a share of pairs within 0.02 of it on API-Bank, UltraTool, TMDB and
NesTools (bench/RESULTS.md "Candidate recall"; docs/warehouse.md has the older figures).
"""
from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from schemas.name_rule import content_words, identifier_tokens, input_names, name_derived_output, output_names
from schemas.toolset import DependencyEdge, Tool

log = logging.getLogger(__name__)

PRUNING_RULES = ("params", "text", "neighbours", "retrieval")
PRUNING_STRATEGIES = ("none", "params", "text", "neighbours", "retrieval", "params+neighbours", "params+text",
                      "params+retrieval", "text+neighbours", "params+text+neighbours", "params+text+retrieval",
                      "params+text+neighbours+retrieval")
DEFAULT_PRUNING = "params+text+neighbours+retrieval"
RECALL_WARNING = 0.90  # gold-edge recall of pruning below this is logged as a WARNING
ONE_GROUP_WARNING = 100  # tools in a catalog's one group above which it most likely lacks a group field (TMDB: 46)


# Tool-name words of "prior verification" tools: every tool of their group may need them first.
GATEKEEPER_WORDS = frozenset({"login", "logon", "signin", "auth", "authenticate", "authentication", "authorize",
                              "authorization", "verify", "verification", "token", "credential", "credentials"})

def groups_of(tools: Sequence[Tool]) -> list[list[int]]:
    """Indices into ``tools`` per group, groups in order of first appearance."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(tools):
        by_group[t.group].append(i)
    return list(by_group.values())


def iter_same_group_pairs(tools: Sequence[Tool]) -> Iterator[tuple[int, int]]:
    """All unordered pairs (i < j) of tools in one group, as indices into ``tools``, one at a time."""
    return (p for idx in groups_of(tools) for p in combinations(idx, 2))


def same_group_pairs(tools: Sequence[Tool]) -> list[tuple[int, int]]:
    """All unordered pairs (i < j) of tools in one group, as indices into ``tools``."""
    return list(iter_same_group_pairs(tools))


def param_compatible(a: Tool, b: Tool) -> bool:
    """An output of one tool can feed an input of the other (same normalised name); outputs are
    name-derived when a tool declares none (``schemas.name_rule.output_names(derive=True)``)."""
    return bool(output_names(a.doc, derive=True) & input_names(b.doc)) or bool(
        output_names(b.doc, derive=True) & input_names(a.doc))


@dataclass(frozen=True)
class _TextProfile:
    """What the ``text`` rule compares, computed once per tool."""

    inputs: tuple[frozenset[str], ...]  # content words of each input parameter name
    outputs: frozenset[str]  # content words of the declared or name-derived outputs
    param_words: frozenset[str]  # content words of all parameter names
    words: frozenset[str]  # content words of the name and description
    gatekeeper: bool  # a login / authentication / verification tool (prior verification)


def _text_profile(doc: dict[str, Any]) -> _TextProfile:
    inputs = tuple(w for w in (frozenset(content_words(p["name"])) for p in doc.get("input_params") or []) if w)
    declared = [p["name"] for p in doc.get("output_params") or []]
    if not declared:
        derived = name_derived_output(doc.get("name", ""))
        declared = [derived] if derived else []
    outputs = frozenset(w for n in declared for w in content_words(n))
    params = frozenset(w for p in (doc.get("input_params") or []) + (doc.get("output_params") or [])
                       for w in content_words(p["name"]))
    words = frozenset(content_words(doc.get("name", "")) | content_words(doc.get("description", "")))
    gatekeeper = bool(set(identifier_tokens(doc.get("name", ""))) & GATEKEEPER_WORDS)
    return _TextProfile(inputs, outputs, params, words, gatekeeper)


def _text_links(x: _TextProfile, y: _TextProfile) -> bool:
    """One direction of the ``text`` rule: x's input is named by y, y's output words occur in x,
    or y is a gatekeeper (login, auth, verify: the paper's "prior verification" dependency)."""
    if y.gatekeeper:
        return True
    if any(inp <= y.words for inp in x.inputs):
        return True
    return bool(y.outputs & (x.param_words | x.words))


def text_compatible(a: Tool, b: Tool) -> bool:
    """The ``text`` rule on one pair (either direction)."""
    pa_, pb = _text_profile(a.doc), _text_profile(b.doc)
    return _text_links(pa_, pb) or _text_links(pb, pa_)


def embedding_neighbour_pairs(
    tools: Sequence[Tool], embeddings: np.ndarray, m: int
) -> set[tuple[int, int]]:
    """Unordered pairs where one tool is among the other's m most cosine-similar tools in its group."""
    x = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(tools):
        by_group[t.group].append(i)
    pairs: set[tuple[int, int]] = set()
    for idx in by_group.values():
        if len(idx) < 2:
            continue
        idx_arr = np.array(idx)
        sims = x[idx_arr] @ x[idx_arr].T
        np.fill_diagonal(sims, -np.inf)
        near = np.argsort(-sims, axis=1, kind="stable")[:, : min(m, len(idx) - 1)]
        for row, cols in enumerate(near):
            for col in cols:
                i, j = int(idx_arr[row]), int(idx_arr[col])
                pairs.add((min(i, j), max(i, j)))
    return pairs


class PairArray(Sequence):
    """Index pairs (i, j) held as two int32 arrays (5M pairs: 40 MB, not 600 MB of tuples); reads as a
    sequence of ``(int, int)`` tuples and equals a list of the same tuples."""

    def __init__(self, first: np.ndarray, second: np.ndarray) -> None:
        self.first, self.second = np.asarray(first, dtype=np.int32), np.asarray(second, dtype=np.int32)

    def __len__(self) -> int:
        return len(self.first)

    def __getitem__(self, at):
        if isinstance(at, slice):
            return PairArray(self.first[at], self.second[at])
        return int(self.first[at]), int(self.second[at])

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return zip(self.first.tolist(), self.second.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PairArray):
            return bool(np.array_equal(self.first, other.first) and np.array_equal(self.second, other.second))
        return isinstance(other, (list, tuple)) and list(self) == list(other)

    __hash__ = None  # mutable arrays inside

    def __repr__(self) -> str:
        return f"PairArray({list(self)[:5]}{'...' if len(self) > 5 else ''}, {len(self)} pairs)"


@dataclass(frozen=True)
class PruningResult:
    strategy: str
    candidates: Sequence[tuple[int, int]]  # sorted unordered index pairs (i < j): what the scorer scores
    pairs_in_groups: int
    known_edges: int
    known_edges_in_groups: int
    known_edges_kept: int  # kept in their own direction (prerequisite, dependent)
    ordered_pairs_kept: int  # symmetric rules keep both orders of a pair, ``retrieval`` one

    @property
    def pairs_removed(self) -> int:
        return self.pairs_in_groups - len(self.candidates)

    @property
    def kept_share(self) -> float:
        """Unordered same-group pairs handed to the scorer / all of them (the scoring cost)."""
        return len(self.candidates) / self.pairs_in_groups if self.pairs_in_groups else 1.0

    @property
    def ordered_pairs_in_groups(self) -> int:
        return 2 * self.pairs_in_groups

    @property
    def ordered_share(self) -> float:
        """Ordered same-group pairs (prerequisite, dependent) kept / all of them."""
        return self.ordered_pairs_kept / self.ordered_pairs_in_groups if self.pairs_in_groups else 1.0

    @property
    def known_edge_recall(self) -> float | None:
        """Known (gold) edges kept / known edges inside a group; None when the set has none."""
        return self.known_edges_kept / self.known_edges_in_groups if self.known_edges_in_groups else None

    def as_row(self, dataset: str) -> dict:
        return {"dataset": dataset, "strategy": self.strategy, "pairs_in_groups": self.pairs_in_groups,
                "pairs_kept": len(self.candidates), "known_edges": self.known_edges,
                "known_edges_in_groups": self.known_edges_in_groups,
                "known_edges_kept": self.known_edges_kept, "known_edge_recall": self.known_edge_recall,
                "ordered_pairs_in_groups": self.ordered_pairs_in_groups,
                "ordered_pairs_kept": self.ordered_pairs_kept, "ordered_share_kept": self.ordered_share}

    def describe(self) -> str:
        recall = "n/a (no known edges)" if self.known_edge_recall is None else f"{self.known_edge_recall:.3f}"
        return (f"{len(self.candidates)} of {self.pairs_in_groups} same-group pairs kept ({self.kept_share:.3f}, "
                f"{self.strategy}), ordered pairs {self.ordered_pairs_kept} of {self.ordered_pairs_in_groups} "
                f"({self.ordered_share:.3f}); known edges kept {self.known_edges_kept}/{self.known_edges_in_groups}, "
                f"gold-edge recall {recall}")


def pruning_rules(strategy: str) -> tuple[str, ...]:
    """The rules of a strategy (``params+text`` -> ("params", "text")); ``none`` -> ()."""
    if strategy == "none":
        return ()
    rules = tuple(strategy.split("+"))
    if not rules or any(r not in PRUNING_RULES for r in rules) or len(set(rules)) != len(rules):
        raise ValueError(f"unknown pruning strategy {strategy!r}; known: {', '.join(PRUNING_STRATEGIES)} "
                         f"(or any '+'-union of {', '.join(PRUNING_RULES)})")
    return rules


def prune_candidates(
    tools: Sequence[Tool],
    embeddings: np.ndarray | None = None,
    strategy: str = DEFAULT_PRUNING,
    neighbours: int = 5,
    known_edges: Sequence[DependencyEdge] = (),
    retrieved: Collection[tuple[int, int]] | None = None,
    progress: Callable[[str], None] | None = None,
    every_s: float = 5.0,
) -> PruningResult:
    """Candidate pairs to score, plus how many same-group pairs (unordered and ordered) and known edges
    survive. ``retrieved``: the ``retrieval`` rule's ordered (producer, consumer) index pairs
    (``tasks.graph.candidates.retrieval_candidates``), needed when the strategy has that rule.
    The pairs are walked group by group, never all held at once (only the kept ones are); ``progress`` gets
    a line about every ``every_s`` seconds (pairs checked, kept) and one at the end."""
    rules = pruning_rules(strategy)
    groups = groups_of(tools)
    n = len(tools)
    pairs_in_groups = sum(len(idx) * (len(idx) - 1) // 2 for idx in groups)
    parts: list[np.ndarray] = []  # kept pairs as codes i * n + j (i < j), one array per group
    params, text = "params" in rules, "text" in rules
    if params:
        outs = [output_names(t.doc, derive=True) for t in tools]
        ins = [input_names(t.doc) for t in tools]
    if text:
        prof = [_text_profile(t.doc) for t in tools]
    say = progress or (lambda _line: None)
    checked, kept_so_far, last = 0, 0, time.monotonic()
    for idx in groups:
        if not rules:
            codes = [i * n + j for i, j in combinations(idx, 2)]
        elif params or text:
            codes = [i * n + j for i, j in combinations(idx, 2)
                     if (params and (outs[i] & ins[j] or outs[j] & ins[i])) or (
                         text and (_text_links(prof[i], prof[j]) or _text_links(prof[j], prof[i])))]
        else:
            codes = []
        if codes:
            parts.append(np.asarray(codes, dtype=np.int64))
            kept_so_far += len(codes)
        checked += len(idx) * (len(idx) - 1) // 2
        if time.monotonic() - last >= every_s:
            last = time.monotonic()
            say(f"pruning: {checked}/{pairs_in_groups} same-group pairs checked, {kept_so_far} kept")
    if "neighbours" in rules:
        if embeddings is None:
            raise ValueError(f"pruning strategy {strategy!r} needs tool embeddings")
        parts.append(np.fromiter((i * n + j for i, j in embedding_neighbour_pairs(tools, embeddings, neighbours)),
                                 dtype=np.int64))
    keep = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)  # sorted

    def kept(codes: np.ndarray) -> np.ndarray:
        at = np.searchsorted(keep, codes)
        return (at < len(keep)) & (keep[np.minimum(at, len(keep) - 1)] == codes) if len(keep) else \
            np.zeros(len(codes), dtype=bool)

    directed = np.zeros(0, dtype=np.int64)  # (producer, consumer) kept in this order only, as p * n + c
    if "retrieval" in rules:
        if retrieved is None:
            raise ValueError(f"pruning strategy {strategy!r} needs the retrieval rule's pairs "
                             "(tasks.graph.candidates.retrieval_candidates)")
        for p, c in retrieved:
            if p == c or tools[p].group != tools[c].group:
                raise ValueError(f"retrieved pair ({p}, {c}) is not two tools of one group")
        pc = np.array(sorted(retrieved), dtype=np.int64).reshape(-1, 2)
        pc = pc[~kept(pc.min(axis=1) * n + pc.max(axis=1))]
        directed = np.unique(pc[:, 0] * n + pc[:, 1])
    index = {t.tool_id: i for i, t in enumerate(tools)}
    in_groups = known_kept = 0
    for e in known_edges:
        i, j = index.get(e.dependent), index.get(e.prerequisite)
        if i is None or j is None or tools[i].group != tools[j].group:
            continue
        in_groups += 1
        # both orders, or producer (j) -> consumer (i)
        # directed is sorted (np.unique): a binary search, not np.isin's O(len(directed)) per edge
        at = int(np.searchsorted(directed, j * n + i))
        known_kept += bool(kept(np.array([min(i, j) * n + max(i, j)]))[0]) or (
            at < len(directed) and int(directed[at]) == j * n + i)
    ordered_kept = 2 * len(keep) + len(directed)
    if len(directed):
        keep = np.union1d(keep, np.minimum(directed // n, directed % n) * n + np.maximum(directed // n, directed % n))
    say(f"pruning: {pairs_in_groups}/{pairs_in_groups} same-group pairs checked, {len(keep)} kept ({strategy})")
    return PruningResult(strategy, PairArray(keep // max(n, 1), keep % max(n, 1)), pairs_in_groups,
                         len(known_edges), in_groups, known_kept, ordered_kept)


def log_groups(dataset: str, tools: Sequence[Tool], logger: Any = log) -> None:
    """One INFO line (how many groups, the largest); a WARNING when all of a catalog larger than
    ONE_GROUP_WARNING shares one group, as one without a group field does: pruning, the parameter level's ranks
    among a value's makers and the check pairs then compete across the whole catalog."""
    sizes: dict[str, int] = defaultdict(int)
    for t in tools:
        sizes[t.group] += 1
    largest = max(sizes, key=lambda g: (sizes[g], g))
    logger.info(f"{dataset}: {len(tools)} tools in {len(sizes)} group{'s' if len(sizes) != 1 else ''}, the largest "
                f"{largest!r} with {sizes[largest]}")
    if len(sizes) == 1 and len(tools) > ONE_GROUP_WARNING:
        logger.warning(
            f"ONE GROUP on {dataset}: all {len(tools)} tools share group {largest!r}, so every producer competes with "
            "every tool of the catalog and fewer dependencies are found (NesTools' 29 held-out domains read as one "
            "group: F1 0.760 -> 0.693, bench/RESULTS.md 'Check pairs bounded per check'). Give the tools a group "
            "(a domain or category: docs/toolsets.md) where the catalog has one.")


def log_pruning(dataset: str, pruning: PruningResult, logger: Any = log) -> None:
    """One INFO line; a loud WARNING with the numbers when gold-edge recall is below RECALL_WARNING."""
    logger.info(f"{dataset}: {pruning.describe()}")
    recall = pruning.known_edge_recall
    if recall is not None and recall < RECALL_WARNING:
        logger.warning(
            f"PRUNING LOSES GOLD EDGES on {dataset}: recall {recall:.3f} < {RECALL_WARNING} "
            f"({pruning.known_edges_kept} of {pruning.known_edges_in_groups} known same-group edges survive "
            f"'{pruning.strategy}'); {pruning.known_edges_in_groups - pruning.known_edges_kept} can never become "
            "discriminator edges. Try --pruning none or a wider union (params+text+neighbours+retrieval, more "
            "--neighbours or --retrieval-k)."
        )
