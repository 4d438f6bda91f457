"""GTool's graph encoder in plain torch (no torch-geometric): TransformerConv layers, a link head
for missing-dependency prediction and a request head for tool selection.

``TransformerConv`` is Shi et al. (2020), the conv GTool uses (n_l = 3): for node i with
in-neighbours j, ``x_i' = W_r x_i + sum_j a_ij (W_v x_j + W_e e_ij)``, ``a_ij = softmax_j((W_q x_i)
. (W_k x_j + W_e e_ij) / sqrt(d))``, multi-head, heads concatenated. Edges carry one of two types
(``e_ij``): the message comes from a prerequisite or from a dependent, so a dependency graph is
passed both ways and the encoder still knows the direction. The softmax is a segment softmax over
each node's incoming edges (``scatter_reduce`` amax, ``index_add``): a node without incoming edges
keeps its root term only, so nothing divides by zero.

Everything here works on index tensors that ``tasks.gtool.links`` has already checked (known nodes, no
self-loops, at least two nodes); the modules do not validate their input again.
"""
from __future__ import annotations

import math

import torch
from torch import nn

FROM_PREREQUISITE, FROM_DEPENDENT = 0, 1  # edge types of a message


def message_edges(dep_pre: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(src, dst, type) of the messages of a dependency graph given as (E, 2) (dependent,
    prerequisite) rows: each edge sends prerequisite -> dependent (type FROM_PREREQUISITE) and
    dependent -> prerequisite (type FROM_DEPENDENT)."""
    if dep_pre.numel() == 0:
        empty = torch.zeros(0, dtype=torch.long)
        return empty, empty, empty
    dep, pre = dep_pre[:, 0], dep_pre[:, 1]
    src = torch.cat([pre, dep])
    dst = torch.cat([dep, pre])
    kind = torch.cat([torch.full_like(dep, FROM_PREREQUISITE), torch.full_like(dep, FROM_DEPENDENT)])
    return src, dst, kind


class TransformerConv(nn.Module):
    """Multi-head graph transformer convolution with a root (skip) weight and typed edges."""

    def __init__(self, d_in: int, d_out: int, heads: int = 2, edge_types: int = 2) -> None:
        super().__init__()
        if d_out % heads:
            raise ValueError(f"output size {d_out} is not a multiple of {heads} heads")
        self.heads, self.d = heads, d_out // heads
        self.q = nn.Linear(d_in, d_out)
        self.k = nn.Linear(d_in, d_out)
        self.v = nn.Linear(d_in, d_out)
        self.root = nn.Linear(d_in, d_out)
        self.edge = nn.Embedding(edge_types, d_out)

    def forward(self, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, kind: torch.Tensor) -> torch.Tensor:
        n, h, d = x.shape[0], self.heads, self.d
        out = self.root(x)
        if src.numel() == 0:
            return out
        e = self.edge(kind).view(-1, h, d)
        q = self.q(x).view(n, h, d)[dst]
        k = self.k(x).view(n, h, d)[src] + e
        v = self.v(x).view(n, h, d)[src] + e
        score = (q * k).sum(-1) / math.sqrt(d)  # (E, h)
        index = dst.unsqueeze(-1).expand_as(score)
        peak = torch.full((n, h), float("-inf"), dtype=score.dtype).scatter_reduce(
            0, index, score, reduce="amax", include_self=True)
        weight = torch.exp(score - peak[dst])
        total = torch.zeros((n, h), dtype=score.dtype).index_add(0, dst, weight)
        alpha = weight / total[dst]
        agg = torch.zeros((n, h, d), dtype=x.dtype).index_add(0, dst, alpha.unsqueeze(-1) * v)
        return out + agg.reshape(n, h * d)


def degree_features(n: int, dep_pre: torch.Tensor) -> torch.Tensor:
    """(n, 2): log(1 + number of prerequisites), log(1 + number of dependents) of each node. The
    attention softmax normalises neighbour counts away, so a hub (a search tool many others need)
    would look like a leaf without them."""
    deg = torch.zeros((n, 2))
    if dep_pre.numel():
        ones = torch.ones(dep_pre.shape[0])
        deg[:, 0].index_add_(0, dep_pre[:, 0], ones)
        deg[:, 1].index_add_(0, dep_pre[:, 1], ones)
    return torch.log1p(deg)


class GraphEncoder(nn.Module):
    """Input projection of the tool text embeddings and the node degrees on the message graph,
    then ``layers`` TransformerConvs (ReLU, dropout between them)."""

    def __init__(self, d_in: int, hidden: int = 64, layers: int = 3, heads: int = 2, dropout: float = 0.1) -> None:
        super().__init__()
        self.inp = nn.Linear(d_in + 2, hidden)
        self.convs = nn.ModuleList(TransformerConv(hidden, hidden, heads) for _ in range(layers))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, dep_pre: torch.Tensor) -> torch.Tensor:
        src, dst, kind = message_edges(dep_pre)
        h = self.dropout(torch.relu(self.inp(torch.cat([x, degree_features(x.shape[0], dep_pre)], dim=1))))
        for n, conv in enumerate(self.convs):
            h = conv(h, src, dst, kind)
            if n < len(self.convs) - 1:
                h = self.dropout(torch.relu(h))
        return h


class LinkHead(nn.Module):
    """p(dependent depends on prerequisite) from [h_dep, h_pre, h_dep * h_pre, pair features]: the
    CPU stand-in for GTool's MDPL through the frozen LLM (notes: 'link head on (h_i, h_j)'). Ordered:
    the score of (a, b) and of (b, a) differ.

    The pair features (standardised by the caller) also reach the logit through a linear term that
    starts at ``prior`` (e.g. 1 for the text cosine), and the MLP's last layer starts at zero: an
    untrained head ranks pairs like its features, and training moves it away only as far as the
    validation edges reward it (the trainer keeps the best state, step 0 included). With a few dozen
    edges an MLP over 64-d node states otherwise memorises the training pairs."""

    def __init__(self, hidden: int, pair_features: int, prior: list[float] | None = None) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(3 * hidden + pair_features, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        nn.init.zeros_(self.mlp[2].weight)
        nn.init.zeros_(self.mlp[2].bias)
        self.skip = nn.Linear(pair_features, 1)
        with torch.no_grad():
            self.skip.weight.copy_(torch.tensor([prior or [1.0] + [0.0] * (pair_features - 1)]))
            self.skip.bias.zero_()

    def forward(self, h: torch.Tensor, pairs: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        a, b = h[pairs[:, 0]], h[pairs[:, 1]]
        return (self.mlp(torch.cat([a, b, a * b, features], dim=-1)) + self.skip(features)).squeeze(-1)


class RequestHead(nn.Module):
    """GTool's request node: its feature is the request's text embedding, it receives an attention
    message from every node of the request-specific subgraph (edges only point into it, so only
    h_G is request-specific), and ``p(tool in plan) = sigmoid(MLP[h_G; h_i; h_G * h_i; node features])``
    (the notes' CPU route for the planning loss)."""

    def __init__(self, d_in: int, hidden: int, heads: int, node_features: int) -> None:
        super().__init__()
        self.heads, self.d = heads, hidden // heads
        self.q = nn.Linear(d_in, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.root = nn.Linear(d_in, hidden)
        self.mlp = nn.Sequential(nn.Linear(3 * hidden + node_features, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, h: torch.Tensor, query: torch.Tensor, nodes: torch.Tensor, valid: torch.Tensor,
                features: torch.Tensor) -> torch.Tensor:
        """``query`` (B, d_in), ``nodes`` (B, M) indices into ``h`` (padded), ``valid`` (B, M) bool,
        ``features`` (B, M, F): logits (B, M); padded slots are -inf."""
        b, m = nodes.shape
        hn = h[nodes]  # (B, M, hidden)
        q = self.q(query).view(b, 1, self.heads, self.d)
        k = self.k(hn).view(b, m, self.heads, self.d)
        v = self.v(hn).view(b, m, self.heads, self.d)
        score = (q * k).sum(-1) / math.sqrt(self.d)  # (B, M, heads)
        score = score.masked_fill(~valid.unsqueeze(-1), float("-inf"))
        alpha = torch.softmax(score, dim=1)
        h_g = self.root(query) + (alpha.unsqueeze(-1) * v).sum(1).reshape(b, -1)  # (B, hidden)
        g = h_g.unsqueeze(1).expand(b, m, h_g.shape[-1])
        logits = self.mlp(torch.cat([g, hn, g * hn, features], dim=-1)).squeeze(-1)
        return logits.masked_fill(~valid, float("-inf"))
