"""GTool on CPU, part 1: missing-dependency prediction as link prediction (docs/gtool.md).

A ``ToolGraph`` is tools (text embeddings) and directed dependency edges ``(dependent,
prerequisite)``, checked on the way in: fewer than two tools, repeated tool ids, edges naming
unknown tools, self-loops, or (where edges are needed) no edges at all raise ``GraphInputError``
with the graph's name and the offending items, before anything reaches torch.

``LinkPredictor`` trains ``models.graph_encoder`` (TransformerConv x n_l over the tool texts) with
GTool's missing-dependency objective (MDPL): at every step each known training edge is masked with
probability rho (at least one), the encoder runs on the graph without the masked edges, and a link
head scores the masked edges against as many sampled non-edges (a balanced set, as RS(E+, alpha) u
RS(E-, alpha) of Eq. 2), with binary cross-entropy instead of the frozen LLM's token NLL. Optional
pair features: the cosine of the two texts and, when given, the discriminator's directed
probabilities (the two complement each other).

``mask_split`` hides a share of a gold graph's edges (test), keeps a validation share of the rest
for model selection and the decision threshold, and trains on what is left: the three are disjoint
and the trainer never sees a test or validation edge (it records what it trained on). Recovery is
scored against every ordered pair that is not an observed edge (realistic prevalence): AUC, average
precision, and F1 at the threshold chosen on validation. Baselines: the discriminator alone,
common neighbours and embedding similarity, thresholded the same way.
"""
from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from models.graph_encoder import GraphEncoder, LinkHead
from tasks.retrieval.ranking import l2_normalize


class GraphInputError(ValueError):
    """A graph GTool cannot use; the message names the graph and what is wrong."""


# ---------------------------------------------------------------- graphs
@dataclass(frozen=True)
class ToolGraph:
    name: str
    tool_ids: tuple[str, ...]
    x: np.ndarray  # (n_tools, dim) float32 text embeddings
    edges: np.ndarray  # (n_edges, 2) int64 (dependent, prerequisite), no repeats, no self-loops
    groups: tuple[str, ...] = ()  # tool groups (candidate pairs may be limited to one group)

    @property
    def n(self) -> int:
        return len(self.tool_ids)

    def index(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.tool_ids)}


def tool_graph(name: str, tool_ids: Sequence[str], x: np.ndarray, edges: Iterable[tuple[str, str]],
               groups: Sequence[str] = (), require_edges: bool = True) -> ToolGraph:
    """A checked ``ToolGraph``; ``edges`` are (dependent, prerequisite) tool ids. Repeated edges are
    one edge. Raises ``GraphInputError`` for anything torch should never see."""
    ids = [str(t) for t in tool_ids]
    if len(ids) < 2:
        raise GraphInputError(f"{name}: {len(ids)} tool(s); dependency prediction needs at least two tools")
    repeated = sorted({t for t in ids if ids.count(t) > 1}) if len(set(ids)) != len(ids) else []
    if repeated:
        raise GraphInputError(f"{name}: tool ids repeat: {repeated[:5]}")
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[0] != len(ids) or x.shape[1] == 0:
        raise GraphInputError(f"{name}: embeddings of shape {x.shape} for {len(ids)} tools")
    if not np.isfinite(x).all():
        raise GraphInputError(f"{name}: embeddings hold NaN or infinite values")
    if groups and len(groups) != len(ids):
        raise GraphInputError(f"{name}: {len(groups)} groups for {len(ids)} tools")
    index = {t: i for i, t in enumerate(ids)}
    pairs = [(str(d), str(p)) for d, p in edges]
    unknown = sorted({t for pair in pairs for t in pair if t not in index})
    if unknown:
        raise GraphInputError(f"{name}: edges name {len(unknown)} unknown tool(s): {unknown[:5]}")
    loops = sorted({d for d, p in pairs if d == p})
    if loops:
        raise GraphInputError(f"{name}: self-loops on {loops[:5]}: a tool cannot depend on itself")
    unique = sorted({(index[d], index[p]) for d, p in pairs})
    if require_edges and not unique:
        raise GraphInputError(f"{name}: no edges: nothing to mask or learn a dependency from")
    arr = np.array(unique, dtype=np.int64).reshape(-1, 2)
    return ToolGraph(name, tuple(ids), x, arr, tuple(str(g) for g in groups))


def candidate_mask(graph: ToolGraph, same_group: bool = False) -> np.ndarray:
    """(n, n) bool: the ordered pairs that may be edges (i != j; within one group when asked)."""
    allowed = ~np.eye(graph.n, dtype=bool)
    if same_group and graph.groups:
        g = np.array(graph.groups)
        allowed &= g[:, None] == g[None, :]
    return allowed


def edge_matrix(n: int, edges: np.ndarray) -> np.ndarray:
    m = np.zeros((n, n), dtype=bool)
    if len(edges):
        m[edges[:, 0], edges[:, 1]] = True
    return m


# ---------------------------------------------------------------- the masking split
@dataclass(frozen=True)
class EdgeSplit:
    """Disjoint (dependent, prerequisite) edge sets: ``train`` (the model sees these), ``val`` (model
    selection and threshold; hidden from the graph while training) and ``test`` (the masked edges
    to recover)."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray

    @property
    def observed(self) -> np.ndarray:
        return np.concatenate([self.train, self.val]) if len(self.val) else self.train


def mask_split(edges: np.ndarray, mask_rate: float, val_share: float = 0.2, seed: int = 0) -> EdgeSplit:
    """Hide ``round(mask_rate * E)`` edges (at least one, at most E - 1) as test; of the rest, keep
    ``round(val_share * rest)`` (at least one when two or more remain, never all) as validation.
    Seeded; the three sets are disjoint and their union is ``edges``."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    if not 0.0 < mask_rate < 1.0:
        raise GraphInputError(f"mask rate {mask_rate}: must lie strictly between 0 and 1")
    if len(edges) < 2:
        raise GraphInputError(f"{len(edges)} edge(s): masking needs at least two (one hidden, one kept)")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(edges))
    n_test = int(min(max(1, round(mask_rate * len(edges))), len(edges) - 1))
    rest = order[n_test:]
    n_val = int(min(max(1, round(val_share * len(rest))), len(rest) - 1)) if len(rest) >= 2 and val_share > 0 else 0
    return EdgeSplit(train=edges[rest[n_val:]], val=edges[rest[:n_val]], test=edges[order[:n_test]])


# ---------------------------------------------------------------- pair features
@dataclass(frozen=True)
class DiscriminatorScores:
    """The discriminator's directed probabilities: ``p[d, q]`` = p(d depends on q) for scored pairs,
    ``scored[d, q]`` whether the pair was scored (candidate pruning leaves most pairs unscored)."""

    p: np.ndarray
    scored: np.ndarray


def pair_features(x_unit: np.ndarray, pairs: np.ndarray, disc: DiscriminatorScores | None) -> np.ndarray:
    """(P, F) features of ordered pairs: text cosine, and with ``disc`` p(a->b), p(b->a), scored."""
    a, b = pairs[:, 0], pairs[:, 1]
    cols = [embedding_similarity(x_unit, pairs)]
    if disc is not None:
        cols += [disc.p[a, b], disc.p[b, a], disc.scored[a, b].astype(np.float32)]
    return np.stack(cols, axis=1).astype(np.float32)


def unit_rows(x: np.ndarray) -> np.ndarray:
    return l2_normalize(np.asarray(x, dtype=np.float32)).astype(np.float32)


# ---------------------------------------------------------------- the link predictor
@dataclass
class LinkConfig:
    hidden: int = 64
    layers: int = 3  # n_l (paper: 3)
    heads: int = 2
    dropout: float = 0.1
    lr: float = 3e-3
    weight_decay: float = 5e-4
    steps: int = 300
    rho: float = 0.1  # MDPL mask probability per edge and step (paper: 0.1)
    neg_ratio: int = 1  # sampled non-edges per masked edge (1: balanced, as Eq. 2)
    # "uniform": non-edges drawn uniformly (Eq. 2's RS(E-)); "mixed": half of them instead corrupt one end
    # of a masked edge, so a node's degree alone cannot tell edges from non-edges (docs/gtool.md)
    negatives: str = "uniform"
    eval_every: int = 25  # validation AUC every this many steps; the best state is kept
    val_negatives: int = 4000  # non-edges sampled for the validation AUC
    seed: int = 0


def _auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """ROC AUC of positives against negatives (ties count half); NaN when either side is empty."""
    from sklearn.metrics import roc_auc_score

    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    return float(roc_auc_score(np.r_[np.ones(len(pos)), np.zeros(len(neg))], np.r_[pos, neg]))


def average_precision(pos: np.ndarray, neg: np.ndarray) -> float:
    """Average precision (tied scores form one threshold, scikit-learn's definition)."""
    from sklearn.metrics import average_precision_score

    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    return float(average_precision_score(np.r_[np.ones(len(pos)), np.zeros(len(neg))], np.r_[pos, neg]))


def best_threshold(pos: np.ndarray, neg: np.ndarray) -> tuple[float, float]:
    """(threshold, F1): the score cut that maximises F1 of 'score >= cut' with ``pos`` the true
    edges and ``neg`` the other candidate pairs; ties go to the higher cut (fewer edges)."""
    if len(pos) == 0:
        return float("nan"), float("nan")
    cuts = np.unique(np.concatenate([pos, neg]))[::-1]
    pos_sorted, neg_sorted = np.sort(pos), np.sort(neg)
    tp = len(pos) - np.searchsorted(pos_sorted, cuts, side="left")
    fp = len(neg) - np.searchsorted(neg_sorted, cuts, side="left")
    f1 = 2 * tp / np.maximum(tp + fp + len(pos), 1)
    best = int(np.argmax(f1))
    return float(cuts[best]), float(f1[best])


def f1_at(pos: np.ndarray, neg: np.ndarray, threshold: float) -> float:
    if np.isnan(threshold) or len(pos) == 0:
        return float("nan")
    tp, fp = int((pos >= threshold).sum()), int((neg >= threshold).sum())
    return 2 * tp / max(tp + fp + len(pos), 1)


class LinkPredictor:
    """MDPL-trained graph encoder + link head over one ``ToolGraph``'s tools."""

    def __init__(self, graph: ToolGraph, cfg: LinkConfig, disc: DiscriminatorScores | None = None) -> None:
        self.graph, self.cfg, self.disc = graph, cfg, disc
        self.x_unit = unit_rows(graph.x)
        torch.manual_seed(cfg.seed)
        self.encoder = GraphEncoder(graph.x.shape[1], cfg.hidden, cfg.layers, cfg.heads, cfg.dropout)
        # prior of the head's linear term: text cosine +1, and p(a->b) +1 with the discriminator
        self.head = LinkHead(cfg.hidden, 1 + (3 if disc is not None else 0),
                             [1.0] + ([1.0, 0.0, 0.0] if disc is not None else []))
        self.x = torch.from_numpy(graph.x)
        # pair features are standardised with the mean and spread over every ordered pair of the graph
        every = np.argwhere(~np.eye(graph.n, dtype=bool))
        if len(every) > 200_000:
            every = every[np.random.default_rng(0).choice(len(every), 200_000, replace=False)]
        raw = pair_features(self.x_unit, every, disc)
        self.feat_mean, self.feat_std = raw.mean(0), np.where(raw.std(0) > 0, raw.std(0), 1.0).astype(np.float32)
        self.trained_on: np.ndarray = np.zeros((0, 2), dtype=np.int64)  # supervision and message edges
        self.history: list[dict[str, float]] = []

    def _logits(self, h: torch.Tensor, pairs: np.ndarray) -> torch.Tensor:
        feats = torch.from_numpy((pair_features(self.x_unit, pairs, self.disc) - self.feat_mean) / self.feat_std)
        return self.head(h, torch.from_numpy(pairs), feats)

    def parameters(self) -> list[nn.Parameter]:
        return list(self.encoder.parameters()) + list(self.head.parameters())

    def fit(self, train: np.ndarray, val: np.ndarray | None = None, allowed: np.ndarray | None = None
            ) -> "LinkPredictor":
        """Train on ``train`` edges only (message passing and supervision); ``val`` edges pick the
        best state by AUC against sampled pairs that are not training edges."""
        cfg, n = self.cfg, self.graph.n
        train = np.asarray(train, dtype=np.int64).reshape(-1, 2)
        if len(train) == 0:
            raise GraphInputError(f"{self.graph.name}: no training edges left to learn from")
        self.trained_on = train.copy()
        allowed = candidate_mask(self.graph) if allowed is None else allowed
        known = edge_matrix(n, train)
        negatives = np.argwhere(allowed & ~known)
        if len(negatives) == 0:
            raise GraphInputError(f"{self.graph.name}: every candidate pair is an edge; no non-edge to contrast")
        rng = np.random.default_rng(cfg.seed)
        val_pos, val_neg = None, None
        if val is not None and len(val):
            pool = np.argwhere(allowed & ~known & ~edge_matrix(n, val))
            val_pos = np.asarray(val, dtype=np.int64)
            val_neg = pool[rng.choice(len(pool), size=min(cfg.val_negatives, len(pool)), replace=False)]
        params = self.parameters()
        opt = torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        loss_fn = nn.BCEWithLogitsLoss()
        train_t = torch.from_numpy(train)
        best, best_auc = None, -1.0
        if val_pos is not None:  # the untrained head (ranks like its features) is a candidate state too
            p = self.scores(train, np.concatenate([val_pos, val_neg]))
            best_auc = _auc(p[: len(val_pos)], p[len(val_pos):])
            self.history.append({"step": 0, "loss": float("nan"), "val_auc": best_auc})
            best = (copy.deepcopy(self.encoder.state_dict()), copy.deepcopy(self.head.state_dict()))
        for step in range(1, cfg.steps + 1):
            self.encoder.train(), self.head.train()
            masked = rng.random(len(train)) < cfg.rho
            if not masked.any():
                masked[rng.integers(len(train))] = True
            pos = train[masked]
            neg = self._negatives(pos, negatives, known, allowed, rng)
            h = self.encoder(self.x, train_t[torch.from_numpy(~masked)])
            logits = self._logits(h, np.concatenate([pos, neg]))
            target = torch.cat([torch.ones(len(pos)), torch.zeros(len(neg))])
            loss = loss_fn(logits, target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if val_pos is not None and (step % cfg.eval_every == 0 or step == cfg.steps):
                p = self.scores(train, np.concatenate([val_pos, val_neg]))
                auc = _auc(p[: len(val_pos)], p[len(val_pos):])
                self.history.append({"step": step, "loss": float(loss.detach()), "val_auc": auc})
                if auc > best_auc:
                    best_auc = auc
                    best = (copy.deepcopy(self.encoder.state_dict()), copy.deepcopy(self.head.state_dict()))
        if best is not None:
            self.encoder.load_state_dict(best[0])
            self.head.load_state_dict(best[1])
        return self

    def _negatives(self, pos: np.ndarray, pool: np.ndarray, known: np.ndarray, allowed: np.ndarray,
                   rng: np.random.Generator) -> np.ndarray:
        """``neg_ratio`` non-edges per positive. ``uniform``: from ``pool`` (all allowed non-edges).
        ``mixed``: a third uniform, a third a positive with one end replaced by a random tool, a
        third the dependent of one training edge with the prerequisite of another (degree-preserving
        swaps), the last two kept only where they are allowed non-edges. The swaps put the tools of
        the training edges on both sides, so 'is one of the few connected tools' (learnable from the
        text alone) no longer tells edges from non-edges; that shortcut ranks held-out edges between
        other tools below random pairs once most edges are missing."""
        count = len(pos) * self.cfg.neg_ratio
        neg = pool[rng.integers(len(pool), size=count)]
        if self.cfg.negatives == "mixed":
            kind = rng.integers(3, size=count)
            alt = np.repeat(pos, self.cfg.neg_ratio, axis=0)
            side = rng.integers(2, size=count)
            corrupt = kind == 1
            alt[corrupt, side[corrupt]] = rng.integers(self.graph.n, size=int(corrupt.sum()))
            swap = kind == 2
            alt[swap, 0] = self.trained_on[rng.integers(len(self.trained_on), size=int(swap.sum())), 0]
            alt[swap, 1] = self.trained_on[rng.integers(len(self.trained_on), size=int(swap.sum())), 1]
            ok = (kind > 0) & allowed[alt[:, 0], alt[:, 1]] & ~known[alt[:, 0], alt[:, 1]]
            neg[ok] = alt[ok]
        elif self.cfg.negatives != "uniform":
            raise ValueError(f"negatives must be 'uniform' or 'mixed', not {self.cfg.negatives!r}")
        return neg

    @torch.no_grad()
    def scores(self, graph_edges: np.ndarray, pairs: np.ndarray, chunk: int = 200_000) -> np.ndarray:
        """p(dependent depends on prerequisite) for ``pairs`` with messages over ``graph_edges``."""
        self.encoder.eval(), self.head.eval()
        h = self.encoder(self.x, torch.from_numpy(np.asarray(graph_edges, dtype=np.int64).reshape(-1, 2)))
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        out = [torch.sigmoid(self._logits(h, pairs[i:i + chunk])).numpy() for i in range(0, len(pairs), chunk)]
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)

    @torch.no_grad()
    def embeddings(self, graph_edges: np.ndarray) -> torch.Tensor:
        self.encoder.eval()
        return self.encoder(self.x, torch.from_numpy(np.asarray(graph_edges, dtype=np.int64).reshape(-1, 2)))


# ---------------------------------------------------------------- baselines (no training)
def common_neighbours(n: int, observed: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """|N(a) & N(b)| on the undirected observed graph (symmetric: no direction)."""
    from scipy.sparse import csr_matrix

    if len(observed) == 0:
        return np.zeros(len(pairs))
    rows = np.concatenate([observed[:, 0], observed[:, 1]])
    cols = np.concatenate([observed[:, 1], observed[:, 0]])
    a = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    a.data[:] = 1.0
    a.sum_duplicates()
    a.data = np.minimum(a.data, 1.0)
    return np.asarray(a[pairs[:, 0]].multiply(a[pairs[:, 1]]).sum(axis=1)).ravel()


def embedding_similarity(x_unit: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", x_unit[pairs[:, 0]], x_unit[pairs[:, 1]])


def discriminator_scores(disc: DiscriminatorScores, pairs: np.ndarray) -> np.ndarray:
    return disc.p[pairs[:, 0], pairs[:, 1]]


# ---------------------------------------------------------------- recovery of masked edges
GTOOL = "GTool (text + graph)"
GTOOL_DISC = "GTool + discriminator feature"
DISC = "discriminator alone"
CN = "common neighbours"
EMBSIM = "embedding similarity"
METHODS = (GTOOL, GTOOL_DISC, DISC, CN, EMBSIM)


def recovery_sets(graph: ToolGraph, split: EdgeSplit, allowed: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(validation candidates, test candidates, test labels). Validation: the validation edges
    against every allowed pair that is not a training edge (the model does not know the test
    edges, so they count as non-edges there, as they would for a user); test: every allowed pair
    that is not an observed (training or validation) edge, the masked edges labelled 1."""
    n = graph.n
    val_cand = np.argwhere(allowed & ~edge_matrix(n, split.train))
    test_cand = np.argwhere(allowed & ~edge_matrix(n, split.observed))
    test_labels = edge_matrix(n, split.test)[test_cand[:, 0], test_cand[:, 1]]
    return val_cand, test_cand, test_labels


def recover_masked(graph: ToolGraph, split: EdgeSplit, cfg: LinkConfig, disc: DiscriminatorScores | None = None,
                   methods: Sequence[str] = METHODS) -> list[dict[str, Any]]:
    """Every method's AUC, average precision and F1 (threshold chosen on validation) at recovering
    ``split.test`` from ``split.train`` (+ ``split.val`` as observed at test time)."""
    n, allowed = graph.n, candidate_mask(graph)
    val_cand, test_cand, test_labels = recovery_sets(graph, split, allowed)
    val_labels = edge_matrix(n, split.val)[val_cand[:, 0], val_cand[:, 1]]
    x_unit = unit_rows(graph.x)
    rows = []
    for method in methods:
        if method in (DISC, GTOOL_DISC) and disc is None:
            continue
        if method in (GTOOL, GTOOL_DISC):
            model = LinkPredictor(graph, cfg, disc if method == GTOOL_DISC else None)
            model.fit(split.train, split.val, allowed)
            val_s = model.scores(split.train, val_cand) if len(split.val) else np.zeros(0)
            test_s = model.scores(split.observed, test_cand)
        elif method == DISC:
            val_s, test_s = discriminator_scores(disc, val_cand), discriminator_scores(disc, test_cand)
        elif method == CN:
            val_s = common_neighbours(n, split.train, val_cand)
            test_s = common_neighbours(n, split.observed, test_cand)
        elif method == EMBSIM:
            val_s, test_s = embedding_similarity(x_unit, val_cand), embedding_similarity(x_unit, test_cand)
        else:
            raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
        threshold, val_f1 = (best_threshold(val_s[val_labels], val_s[~val_labels]) if len(split.val)
                             else (float("nan"), float("nan")))
        pos, neg = test_s[test_labels], test_s[~test_labels]
        rows.append({"method": method, "auc": _auc(pos, neg), "ap": average_precision(pos, neg),
                     "f1": f1_at(pos, neg, threshold), "threshold": threshold, "val_f1": val_f1,
                     "n_train": len(split.train), "n_val": len(split.val), "n_test": len(split.test),
                     "n_candidates": len(test_cand)})
    return rows


def robustness_rows(graph: ToolGraph, rates: Sequence[float], seeds: Sequence[int], cfg: LinkConfig,
                    disc: DiscriminatorScores | None = None, val_share: float = 0.2,
                    methods: Sequence[str] = METHODS) -> list[dict[str, Any]]:
    """``recover_masked`` for every mask rate and seed (seed = split and model seed)."""
    rows = []
    for rate in rates:
        for seed in seeds:
            split = mask_split(graph.edges, rate, val_share, seed)
            run_cfg = replace(cfg, seed=seed)
            for row in recover_masked(graph, split, run_cfg, disc, methods):
                rows.append({"dataset": graph.name, "mask_rate": rate, "seed": seed} | row)
    return rows


def summarise(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and standard deviation over seeds per (dataset, method, mask rate)."""
    keys = list(dict.fromkeys((r["dataset"], r["method"], r["mask_rate"]) for r in rows))
    out = []
    for ds, method, rate in keys:
        sel = [r for r in rows if (r["dataset"], r["method"], r["mask_rate"]) == (ds, method, rate)]
        item = {"dataset": ds, "method": method, "mask_rate": rate, "seeds": len(sel),
                "n_test": float(np.mean([r["n_test"] for r in sel])),
                "n_observed": float(np.mean([r["n_train"] + r["n_val"] for r in sel]))}
        for metric in ("auc", "ap", "f1"):
            vals = np.array([r[metric] for r in sel], dtype=float)
            vals = vals[~np.isnan(vals)]
            item[metric] = float(vals.mean()) if len(vals) else float("nan")
            item[f"{metric}_std"] = float(vals.std()) if len(vals) else float("nan")
        out.append(item)
    return out


# ---------------------------------------------------------------- completing a graph (predicted edges)
@dataclass
class Completion:
    """Predicted edges that complete a graph: one direction per unordered pair (the more likely),
    none where the graph has the pair in either direction, each with p >= the validated threshold."""

    dataset: str
    base_source: str
    predicted: list[tuple[int, int, float]]  # (dependent, prerequisite, prob)
    threshold: float
    val_f1: float
    val_auc: float
    n_base: int
    n_candidates: int
    details: dict[str, Any] = field(default_factory=dict)


def complete_graph(graph: ToolGraph, cfg: LinkConfig, base_source: str, disc: DiscriminatorScores | None = None,
                   val_share: float = 0.2, same_group: bool = True, max_ratio: float | None = None) -> Completion:
    """Train on ``1 - val_share`` of the graph's edges, choose the threshold that maximises F1 of the
    held-out edges against every other candidate pair, then score all candidate pairs with messages
    over the whole graph and keep those at or above it (``max_ratio``: at most that many times the
    graph's edge count, the most probable first)."""
    if len(graph.edges) < 2:
        raise GraphInputError(f"{graph.name}: {len(graph.edges)} {base_source} edge(s): completing a graph needs at "
                              "least two (one to validate the threshold on)")
    rng = np.random.default_rng(cfg.seed)
    order = rng.permutation(len(graph.edges))
    n_val = int(min(max(1, round(val_share * len(order))), len(order) - 1))
    val, train = graph.edges[order[:n_val]], graph.edges[order[n_val:]]
    allowed = candidate_mask(graph, same_group)
    val_cand = np.argwhere(allowed & ~edge_matrix(graph.n, train))
    val_labels = edge_matrix(graph.n, val)[val_cand[:, 0], val_cand[:, 1]]
    model = LinkPredictor(graph, cfg, disc).fit(train, val, allowed)
    val_s = model.scores(train, val_cand)
    threshold, val_f1 = best_threshold(val_s[val_labels], val_s[~val_labels])
    val_auc = _auc(val_s[val_labels], val_s[~val_labels])
    known = edge_matrix(graph.n, graph.edges)
    cand = np.argwhere(allowed & ~known & ~known.T)
    probs = model.scores(graph.edges, cand)
    best: dict[tuple[int, int], tuple[int, int, float]] = {}
    for (d, p), prob in zip(cand.tolist(), probs.tolist()):
        if prob >= threshold:
            key = (min(d, p), max(d, p))
            if key not in best or prob > best[key][2]:
                best[key] = (d, p, float(prob))
    predicted = sorted(best.values(), key=lambda e: (-e[2], e[0], e[1]))
    capped = None
    if max_ratio is not None and len(predicted) > max_ratio * len(graph.edges):
        capped = len(predicted)
        predicted = predicted[: int(max_ratio * len(graph.edges))]
    return Completion(graph.name, base_source, predicted, threshold, val_f1, val_auc, len(graph.edges), len(cand),
                      {"n_val": n_val, "n_train": len(train), "capped_from": capped, "history": model.history})
