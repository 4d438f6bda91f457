"""GTool on CPU, part 2: the request-specific tool graph and tool selection (docs/gtool.md).

For a request q: the retriever's top ``candidates`` tools (cosine of the text embeddings), plus for
each of them up to ``neighbours`` graph neighbours (either direction; dependency, transition and
predicted edges), the most similar to q first. GTool's request node (feature f(q), edges from every
node of the subgraph into it) gives h_G; each subgraph node is scored ``sigmoid(MLP[h_G; h_i; ...])``
(``models.graph_encoder.RequestHead``), trained with binary cross-entropy against the gold tools plus
lambda x the missing-dependency loss on the tool graph (L = L_TL + lambda L_MDPL, lambda = 0.1; the
planning loss through a frozen LLM becomes a node-selection loss). Tools at or above a threshold
chosen on the validation requests are selected (the best one at least), then ordered.

Order (every method, baselines included, so the comparison is about which tools are picked): a
tool goes before another by the training runs' transition weight between them plus 0.5 per
dependency or predicted edge making it the prerequisite; tools are sorted by how much they go
before the others, ties by score. Plan links = consecutive tools.

Metrics (GNN4TaskPlan, per request, averaged): node F1 of the tool sets, link F1 of the
(source, target) link sets, F1 = 0 when either side is empty; NED = Levenshtein distance of the
sequences / the longer length.
"""
from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from models.graph_encoder import GraphEncoder, LinkHead, RequestHead
from tasks.gtool.links import GraphInputError, LinkConfig, edge_matrix, embedding_similarity, unit_rows
from tasks.retrieval.ranking import cosine_scores, top_k_from_scores

NODE_FEATURES = 4  # query cosine, is a retrieved candidate, candidate rank / k, linked candidates / k


# ---------------------------------------------------------------- metrics
def set_f1(pred: set, gold: set) -> float:
    """F1 of two sets; 0 when either is empty (the GNN4TaskPlan evaluator)."""
    if not pred or not gold:
        return 0.0
    tp = len(pred & gold)
    return 0.0 if tp == 0 else 2 * tp / (len(pred) + len(gold))


def plan_links(seq: Sequence) -> set[tuple]:
    return {(a, b) for a, b in zip(seq, seq[1:])}


def ned(pred: Sequence, gold: Sequence) -> float:
    """Levenshtein distance / max(len) (0 for two empty sequences)."""
    if not pred and not gold:
        return 0.0
    prev = list(range(len(gold) + 1))
    for i, a in enumerate(pred, 1):
        cur = [i]
        for j, b in enumerate(gold, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a != b)))
        prev = cur
    return prev[-1] / max(len(pred), len(gold))


def plan_scores(pred: Sequence, gold: Sequence) -> dict[str, float]:
    return {"n_f1": set_f1(set(pred), set(gold)), "l_f1": set_f1(plan_links(pred), plan_links(gold)),
            "ned": ned(list(pred), list(gold))}


def mean_scores(plans: Sequence[Sequence], golds: Sequence[Sequence]) -> dict[str, float]:
    if not golds:
        raise ValueError("no requests to score")
    rows = [plan_scores(p, g) for p, g in zip(plans, golds)]
    return {k: float(np.mean([r[k] for r in rows])) for k in ("n_f1", "l_f1", "ned")}


# ---------------------------------------------------------------- data
@dataclass(frozen=True)
class Request:
    query_id: str
    q: np.ndarray  # text embedding of the request
    gold: tuple[int, ...]  # tool indices in call order
    split: str  # train / validation / test


@dataclass
class SelectionData:
    name: str
    tool_ids: list[str]
    x: np.ndarray  # (n, d) tool text embeddings
    requests: list[Request]
    transition: np.ndarray  # (n, n) weight of "row tool, then column tool" from the training runs
    dependency: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))  # (dependent, prerequisite)

    def split(self, name: str) -> list[Request]:
        return [r for r in self.requests if r.split == name]

    def transition_edges(self) -> np.ndarray:
        """(dependent, prerequisite) = (called second, called first) for every observed transition."""
        first, second = np.nonzero(self.transition > 0)
        keep = first != second
        return np.stack([second[keep], first[keep]], axis=1).astype(np.int64).reshape(-1, 2)


def check_selection_data(data: SelectionData) -> None:
    n = len(data.tool_ids)
    if n < 2:
        raise GraphInputError(f"{data.name}: {n} tool(s); tool selection needs at least two")
    if data.transition.shape != (n, n):
        raise GraphInputError(f"{data.name}: transition matrix {data.transition.shape} for {n} tools")
    for s in ("train", "validation", "test"):
        if not data.split(s):
            raise GraphInputError(f"{data.name}: no {s} requests (a seeded train/validation/test split of "
                                  "the gold runs is needed)")
    bad = [r.query_id for r in data.requests if not r.gold or min(r.gold) < 0 or max(r.gold) >= n]
    if bad:
        raise GraphInputError(f"{data.name}: requests with no or unknown gold tools: {bad[:5]}")


def order_matrix(data: SelectionData, dependency: np.ndarray) -> np.ndarray:
    """before[a, b]: evidence that a comes before b (transition weight + 0.5 per dependency edge
    b -> a, i.e. a is b's prerequisite)."""
    before = data.transition.astype(np.float64).copy()
    np.fill_diagonal(before, 0.0)
    if len(dependency):
        np.add.at(before, (dependency[:, 1], dependency[:, 0]), 0.5)
    return before


def order_tools(selected: Sequence[int], before: np.ndarray, score: dict[int, float] | None = None) -> list[int]:
    """Selected tools sorted by net 'goes before the others' evidence, ties by score then index."""
    sel = list(dict.fromkeys(selected))
    if len(sel) < 2:
        return sel
    sub = before[np.ix_(sel, sel)]
    net = sub.sum(1) - sub.sum(0)
    score = score or {}
    return [t for _, _, t in sorted(((-net[i], -score.get(t, 0.0), t) for i, t in enumerate(sel)))]


def top_k_plans(sims: np.ndarray, k: int, before: np.ndarray) -> list[list[int]]:
    return [order_tools(top.tolist(), before, {int(t): float(row[t]) for t in top})
            for row, top in zip(sims, top_k_from_scores(sims, k))]


def choose_k(sims_val: np.ndarray, golds: list[tuple[int, ...]], before: np.ndarray, max_k: int) -> int:
    """The k in 1..max_k with the best mean node F1 on the validation requests (ties: smaller k)."""
    scores = {k: mean_scores(top_k_plans(sims_val, k, before), golds)["n_f1"] for k in range(1, max_k + 1)}
    return max(scores, key=lambda k: (scores[k], -k))


# ---------------------------------------------------------------- request-specific subgraphs
def neighbour_lists(n: int, edges: np.ndarray) -> list[np.ndarray]:
    """Neighbours of each tool in either direction of ``edges``."""
    adj = edge_matrix(n, edges)
    adj |= adj.T
    return [np.nonzero(adj[i])[0] for i in range(n)]


@dataclass
class Subgraphs:
    nodes: np.ndarray  # (R, M) tool indices, padded with 0
    valid: np.ndarray  # (R, M) bool
    feats: np.ndarray  # (R, M, NODE_FEATURES)
    labels: np.ndarray  # (R, M) 1 = gold tool
    coverage: np.ndarray  # (R,) share of the gold tools inside the subgraph


def request_subgraphs(x_unit: np.ndarray, requests: Sequence[Request], neighbours: list[np.ndarray] | None,
                      candidates: int, per_tool: int) -> Subgraphs:
    """Top ``candidates`` by cosine, plus per candidate up to ``per_tool`` neighbours (``neighbours``
    None or per_tool 0: the candidates only), most similar to the request first."""
    node_lists, feat_lists = [], []
    for r in requests:
        sims = cosine_scores(r.q, x_unit)[0]
        cand = top_k_from_scores(sims, candidates)[0].tolist()
        nodes = list(cand)
        linked = {c: 0 for c in cand}
        if neighbours is not None and per_tool > 0:
            for c in cand:
                near = sorted(neighbours[c].tolist(), key=lambda j: (-sims[j], j))
                for j in [j for j in near if j not in cand][:per_tool]:
                    if j not in linked:
                        nodes.append(j)
                        linked[j] = 0
                    linked[j] += 1
        rank = {t: i for i, t in enumerate(cand)}
        feats = [[float(sims[t]), float(t in rank), (rank[t] + 1) / candidates if t in rank else 1.0,
                  linked[t] / candidates] for t in nodes]
        node_lists.append(nodes)
        feat_lists.append(feats)
    m = max(len(n) for n in node_lists)
    r_count = len(requests)
    nodes = np.zeros((r_count, m), dtype=np.int64)
    valid = np.zeros((r_count, m), dtype=bool)
    feats = np.zeros((r_count, m, NODE_FEATURES), dtype=np.float32)
    labels = np.zeros((r_count, m), dtype=np.float32)
    coverage = np.zeros(r_count)
    for i, (r, ns, fs) in enumerate(zip(requests, node_lists, feat_lists)):
        nodes[i, : len(ns)], valid[i, : len(ns)], feats[i, : len(ns)] = ns, True, fs
        gold = set(r.gold)
        labels[i, : len(ns)] = [t in gold for t in ns]
        coverage[i] = len(gold & set(ns)) / len(gold)
    return Subgraphs(nodes, valid, feats, labels, coverage)


# ---------------------------------------------------------------- the selection model
@dataclass
class SelectConfig:
    candidates: int = 5  # retrieved top-k that seed the request graph
    neighbours: int = 5  # graph neighbours added per candidate (0: candidates only)
    steps: int = 400
    batch: int = 64  # requests per step
    lambda_mdpl: float = 0.1  # weight of the missing-dependency loss (paper: 0.1)
    eval_every: int = 50
    max_k: int = 5  # top-k baselines choose k in 1..max_k on validation
    link: LinkConfig = field(default_factory=LinkConfig)  # encoder size, lr, rho, seed


class ToolSelector:
    def __init__(self, data: SelectionData, graph_edges: np.ndarray, cfg: SelectConfig) -> None:
        self.data, self.cfg = data, cfg
        lc = cfg.link
        torch.manual_seed(lc.seed)
        d = data.x.shape[1]
        self.encoder = GraphEncoder(d, lc.hidden, lc.layers, lc.heads, lc.dropout)
        self.link = LinkHead(lc.hidden, 1)
        self.request = RequestHead(d, lc.hidden, lc.heads, NODE_FEATURES)
        self.x = torch.from_numpy(data.x.astype(np.float32))
        self.x_unit = unit_rows(data.x)
        self.edges = np.asarray(graph_edges, dtype=np.int64).reshape(-1, 2)
        self.neigh = neighbour_lists(len(data.tool_ids), self.edges) if cfg.neighbours > 0 else None
        self.history: list[dict[str, float]] = []

    def subgraphs(self, requests: Sequence[Request]) -> Subgraphs:
        return request_subgraphs(self.x_unit, requests, self.neigh, self.cfg.candidates, self.cfg.neighbours)

    def _modules(self) -> list[nn.Module]:
        return [self.encoder, self.link, self.request]

    def _logits(self, h: torch.Tensor, reqs: Sequence[Request], sg: Subgraphs, idx: np.ndarray) -> torch.Tensor:
        q = torch.from_numpy(np.stack([reqs[i].q for i in idx]).astype(np.float32))
        return self.request(h, q, torch.from_numpy(sg.nodes[idx]), torch.from_numpy(sg.valid[idx]),
                            torch.from_numpy(sg.feats[idx]))

    def fit(self) -> "ToolSelector":
        cfg, lc = self.cfg, self.cfg.link
        train, val = self.data.split("train"), self.data.split("validation")
        sg_train, sg_val = self.subgraphs(train), self.subgraphs(val)
        rng = np.random.default_rng(lc.seed)
        params = [p for m in self._modules() for p in m.parameters()]
        opt = torch.optim.Adam(params, lr=lc.lr, weight_decay=lc.weight_decay)
        bce = nn.BCEWithLogitsLoss()
        n = len(self.data.tool_ids)
        known = edge_matrix(n, self.edges)
        pool = np.argwhere(~known & ~np.eye(n, dtype=bool))
        edges_t = torch.from_numpy(self.edges)
        best, best_loss = None, float("inf")
        for step in range(1, cfg.steps + 1):
            for m in self._modules():
                m.train()
            loss = torch.zeros(())
            mp = edges_t
            if len(self.edges) and cfg.lambda_mdpl > 0:
                masked = rng.random(len(self.edges)) < lc.rho
                if not masked.any():
                    masked[rng.integers(len(self.edges))] = True
                mp = edges_t[torch.from_numpy(~masked)]
            h = self.encoder(self.x, mp)
            if len(self.edges) and cfg.lambda_mdpl > 0:
                pos = self.edges[masked]
                neg = pool[rng.integers(len(pool), size=len(pos))]
                pairs = np.concatenate([pos, neg])
                cos = embedding_similarity(self.x_unit, pairs)[:, None].astype(np.float32)
                link_logits = self.link(h, torch.from_numpy(pairs), torch.from_numpy(cos))
                loss = loss + cfg.lambda_mdpl * bce(link_logits, torch.cat([torch.ones(len(pos)),
                                                                           torch.zeros(len(neg))]))
            idx = rng.integers(len(train), size=min(cfg.batch, len(train)))
            logits = self._logits(h, train, sg_train, idx)
            valid = torch.from_numpy(sg_train.valid[idx])
            loss = loss + bce(logits[valid], torch.from_numpy(sg_train.labels[idx])[valid])
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % cfg.eval_every == 0 or step == cfg.steps:
                val_loss = self._val_loss(val, sg_val, bce)
                self.history.append({"step": step, "loss": float(loss.detach()), "val_loss": val_loss})
                if val_loss < best_loss:
                    best_loss = val_loss
                    best = [copy.deepcopy(m.state_dict()) for m in self._modules()]
        if best is not None:
            for m, state in zip(self._modules(), best):
                m.load_state_dict(state)
        return self

    @torch.no_grad()
    def _val_loss(self, val: Sequence[Request], sg: Subgraphs, bce: nn.Module) -> float:
        logits = self.probabilities(val, sg, raw=True)
        valid = torch.from_numpy(sg.valid)
        return float(bce(logits[valid], torch.from_numpy(sg.labels)[valid]))

    @torch.no_grad()
    def probabilities(self, requests: Sequence[Request], sg: Subgraphs, raw: bool = False) -> torch.Tensor:
        for m in self._modules():
            m.eval()
        h = self.encoder(self.x, torch.from_numpy(self.edges))
        logits = self._logits(h, requests, sg, np.arange(len(requests)))
        return logits if raw else torch.sigmoid(logits)

    def plans(self, requests: Sequence[Request], threshold: float, before: np.ndarray,
              sg: Subgraphs | None = None) -> list[list[int]]:
        sg = sg or self.subgraphs(requests)
        probs = self.probabilities(requests, sg).numpy()
        out = []
        for i in range(len(requests)):
            nodes = sg.nodes[i][sg.valid[i]]
            p = probs[i][sg.valid[i]]
            keep = [int(t) for t, v in zip(nodes, p) if v >= threshold] or [int(nodes[int(np.argmax(p))])]
            out.append(order_tools(keep, before, {int(t): float(v) for t, v in zip(nodes, p)}))
        return out

    def choose_threshold(self, before: np.ndarray) -> float:
        """The cut in 0.05..0.95 with the best mean node F1 on the validation requests (ties: higher)."""
        val = self.data.split("validation")
        sg = self.subgraphs(val)
        golds = [r.gold for r in val]
        grid = np.round(np.arange(0.05, 0.951, 0.05), 2)
        scores = {float(t): mean_scores(self.plans(val, t, before, sg), golds)["n_f1"] for t in grid}
        return max(scores, key=lambda t: (scores[t], t))


def evaluate_selection(data: SelectionData, variants: dict[str, np.ndarray], cfg: SelectConfig,
                       order_dependency: np.ndarray, baselines: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """Rows on the test requests: top-k baselines (``baselines``: method -> tool embeddings, k chosen
    on validation) and one trained selector per ``variants`` entry (method -> graph edges; an entry
    whose name ends with 'candidates only' uses no neighbours and no edges)."""
    check_selection_data(data)
    before = order_matrix(data, order_dependency)
    val, test = data.split("validation"), data.split("test")
    golds_val, golds_test = [r.gold for r in val], [r.gold for r in test]
    rows = []
    for method, emb in baselines.items():
        sims_val = cosine_scores(np.stack([r.q for r in val]), emb)
        sims_test = cosine_scores(np.stack([r.q for r in test]), emb)
        k = choose_k(sims_val, golds_val, before, cfg.max_k)
        m = mean_scores(top_k_plans(sims_test, k, before), golds_test)
        rows.append({"dataset": data.name, "method": method, "choice": f"k={k}", "n_requests": len(test),
                     "coverage": None} | m)
    for method, edges in variants.items():
        run = copy.deepcopy(cfg)
        if method.endswith("candidates only"):
            run.neighbours = 0
        selector = ToolSelector(data, edges, run).fit()
        threshold = selector.choose_threshold(before)
        sg = selector.subgraphs(test)
        m = mean_scores(selector.plans(test, threshold, before, sg), golds_test)
        rows.append({"dataset": data.name, "method": method, "choice": f"p>={threshold:.2f}",
                     "n_requests": len(test), "coverage": float(sg.coverage.mean()), "edges": len(edges),
                     "subgraph_nodes": float(sg.valid.sum(1).mean())} | m)
    return rows
