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
from collections import defaultdict
from collections.abc import Collection, Sequence
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


# Tool-name words of "prior verification" tools: every tool of their group may need them first.
GATEKEEPER_WORDS = frozenset({"login", "logon", "signin", "auth", "authenticate", "authentication", "authorize",
                              "authorization", "verify", "verification", "token", "credential", "credentials"})

def same_group_pairs(tools: Sequence[Tool]) -> list[tuple[int, int]]:
    """All unordered pairs (i < j) of tools in one group, as indices into ``tools``."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(tools):
        by_group[t.group].append(i)
    return [p for idx in by_group.values() for p in combinations(idx, 2)]


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


@dataclass(frozen=True)
class PruningResult:
    strategy: str
    candidates: list[tuple[int, int]]  # sorted unordered index pairs (i < j): what the scorer scores
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
) -> PruningResult:
    """Candidate pairs to score, plus how many same-group pairs (unordered and ordered) and known edges
    survive. ``retrieved``: the ``retrieval`` rule's ordered (producer, consumer) index pairs
    (``tasks.graph.candidates.retrieval_candidates``), needed when the strategy has that rule."""
    rules = pruning_rules(strategy)
    all_pairs = same_group_pairs(tools)
    keep: set[tuple[int, int]] = set(all_pairs) if not rules else set()
    if "params" in rules:
        outs = [output_names(t.doc, derive=True) for t in tools]
        ins = [input_names(t.doc) for t in tools]
        keep |= {(i, j) for i, j in all_pairs if outs[i] & ins[j] or outs[j] & ins[i]}
    if "text" in rules:
        prof = [_text_profile(t.doc) for t in tools]
        keep |= {(i, j) for i, j in all_pairs if (i, j) not in keep
                 and (_text_links(prof[i], prof[j]) or _text_links(prof[j], prof[i]))}
    if "neighbours" in rules:
        if embeddings is None:
            raise ValueError(f"pruning strategy {strategy!r} needs tool embeddings")
        keep |= embedding_neighbour_pairs(tools, embeddings, neighbours)
    directed: set[tuple[int, int]] = set()  # (producer, consumer) kept in this order only
    if "retrieval" in rules:
        if retrieved is None:
            raise ValueError(f"pruning strategy {strategy!r} needs the retrieval rule's pairs "
                             "(tasks.graph.candidates.retrieval_candidates)")
        for p, c in retrieved:
            if p == c or tools[p].group != tools[c].group:
                raise ValueError(f"retrieved pair ({p}, {c}) is not two tools of one group")
            if (min(p, c), max(p, c)) not in keep:
                directed.add((p, c))
    index = {t.tool_id: i for i, t in enumerate(tools)}
    in_groups = kept = 0
    for e in known_edges:
        i, j = index.get(e.dependent), index.get(e.prerequisite)
        if i is None or j is None or tools[i].group != tools[j].group:
            continue
        in_groups += 1
        kept += (min(i, j), max(i, j)) in keep or (j, i) in directed  # both orders, or producer -> consumer
    ordered_kept = 2 * len(keep) + len(directed)
    keep |= {(min(p, c), max(p, c)) for p, c in directed}
    return PruningResult(strategy, sorted(keep), len(all_pairs), len(known_edges), in_groups, kept, ordered_kept)


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
