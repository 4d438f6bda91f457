"""ToolNet's weighted tool graph (Liu et al. 2024, ../shared/tgr/toolnet-notes.md): the static
transition graph (Eq. 5), the dynamic re-weighting from evaluator scores (Eqs. 6-8), a rule
evaluator, an offline agent that stands in for the LLM, and next-tool ranking with hit@k.

Nodes are the tools (index = tool order) followed by ``<start>`` and ``<end>``. ``W[i, j]`` is
the weight of calling v_j right after v_i. The edge set (``mask``) is ToolNet's: every observed
transition, a self-loop on every tool, ``<start>`` -> every tool, every tool -> ``<end>``.
Plain numpy: the largest graph here (UltraTool) is 262 x 262.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tasks.toolsets.trajectories import END, START, Trajectory, split_of, stream_order

DEFAULT_ALPHAS = (0.1, 0.5, 1.0)  # the notes' sweep; the paper gives no values
DEFAULT_BETAS = (0.3, 0.5, 0.7, 0.9)
RULE_SCORE = 2  # the rule evaluator's +/- score (the notes' "+2 if gold, -2 if not")
# Which evaluator scored a run (StreamResult.evaluations): scores that came with the run, the rule
# evaluator, an LLM evaluator (tasks/toolnet/evaluator.py), or the rule where the LLM's answer failed.
BY_GIVEN, BY_RULE, BY_LLM, BY_FALLBACK = "given", "rule", "llm", "rule fallback"


@dataclass
class TransitionGraph:
    tool_ids: list[str]
    counts: np.ndarray  # (n+2, n+2) int64: #(v_i then v_j) in the training runs; row START = first tools
    weights: np.ndarray  # (n+2, n+2) float64: Eq. 5
    mask: np.ndarray  # (n+2, n+2) bool: the edge set

    @property
    def n_tools(self) -> int:
        return len(self.tool_ids)

    @property
    def nodes(self) -> list[str]:
        return [*self.tool_ids, START, END]

    @property
    def popularity(self) -> np.ndarray:
        """Calls per tool in the training runs (every call has one successor, ``<end>`` included)."""
        return self.counts[: self.n_tools].sum(axis=1)

    def index(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.nodes)}


def static_graph(tool_ids: Sequence[str], runs: Iterable[Sequence[str]]) -> TransitionGraph:
    """Eq. 5: w_ij = #(tool_s = v_i, tool_{s+1} = v_j) / #(tool_s = v_i) over runs [tool_1..tool_S, end].

    ``<start>`` gets equal weights to all tools (the paper; a retriever picks tool_1). A tool no
    training run called has no Eq. 5 row (0/0): it gets equal weights on its two offered
    successors, itself and ``<end>``, so every row but ``<end>``'s sums to 1.
    """
    n = len(tool_ids)
    index = {t: i for i, t in enumerate(tool_ids)}
    start, end = n, n + 1
    counts = np.zeros((n + 2, n + 2), dtype=np.int64)
    for run in runs:
        path = [start, *(index[t] for t in run), end]
        for a, b in zip(path, path[1:]):
            counts[a, b] += 1
    mask = counts > 0
    tools = np.arange(n)
    mask[tools, tools] = True
    mask[start, :n] = True
    mask[:n, end] = True
    weights = np.zeros((n + 2, n + 2), dtype=np.float64)
    calls = counts[:n].sum(axis=1)
    seen = calls > 0
    weights[:n][seen] = counts[:n][seen] / calls[seen, None]
    unseen = np.flatnonzero(~seen)
    weights[unseen, unseen] = 0.5
    weights[unseen, end] = 0.5
    weights[start, :n] = 1.0 / max(n, 1)
    return TransitionGraph(list(tool_ids), counts, weights, mask)


def f_score(x: np.ndarray, alpha: float) -> np.ndarray:
    """Eq. 8: alpha * x + 1 for x >= 0, exp(alpha * x) for x < 0 (positive, f(0) = 1)."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(x >= 0, alpha * x + 1.0, np.exp(alpha * np.minimum(x, 0.0)))


def dynamic_weights(graph: TransitionGraph, accumulated: np.ndarray, alpha: float, beta: float,
                    reweight_self_loops: bool = False) -> np.ndarray:
    """Eqs. 6-7: w_ij = beta * w0_ij + (1 - beta) * f(s_j) / sum_{k in out(v_i)} f(s_k).

    ``accumulated`` holds s_j per tool (``<start>``/``<end>`` are never scored: f = 1). Eq. 7 as
    printed puts the source's score on top; the target's is used (notes, Gaps 1), so the edges out
    of v_i stay a distribution that favours well-scored successors.

    Self-loops keep their static weight and the other edges of the row share the rest (so rows
    still sum to 1): a tool's score says it helps the task, not that it should be called twice
    in a row, yet by Eq. 7 a well-scored tool's self-loop grows with its own score until the tool
    is its own best successor and an agent loops on it (``reweight_self_loops=True``, the literal
    reading, shows it: tests/test_transitions.py).
    """
    f = np.ones(graph.mask.shape[0])
    f[: graph.n_tools] = f_score(accumulated, alpha)
    mask = graph.mask.copy()
    keep = np.zeros(mask.shape[0])
    if not reweight_self_loops:
        tools = np.arange(graph.n_tools)
        keep[tools] = graph.weights[tools, tools]
        mask[tools, tools] = False
    num = np.where(mask, f[None, :], 0.0)
    den = num.sum(axis=1, keepdims=True)
    delta = np.divide(num, den, out=np.zeros_like(num), where=den > 0) * (1.0 - keep)[:, None]
    w = beta * graph.weights + (1.0 - beta) * delta
    if not reweight_self_loops:
        w[tools, tools] = keep[tools]
    return w


def rule_scores(called: Iterable[str], gold: Iterable[str], magnitude: int = RULE_SCORE) -> dict[str, int]:
    """The default evaluator: each tool the run called (one score per tool) scores +magnitude when
    the gold trajectory used it, -magnitude when not."""
    gold = set(gold)
    return {t: magnitude if t in gold else -magnitude for t in dict.fromkeys(called)}


def rank_next(row: np.ndarray, popularity: np.ndarray) -> np.ndarray:
    """Tool indices by ``row`` (a score per tool), ties and zero scores by training popularity,
    then tool index: every ranker falls back to popularity where it says nothing."""
    idx = np.arange(len(row))
    return np.lexsort((idx, -popularity, -row))


def graph_from_edges(tool_ids: Sequence[str], edges: Iterable[tuple[str, str, float, int]]) -> TransitionGraph:
    """The graph back from stored (prerequisite, dependent, weight, count) transition edges."""
    graph = TransitionGraph(list(tool_ids), *(np.zeros((len(tool_ids) + 2,) * 2, dtype=t)
                                              for t in (np.int64, np.float64, bool)))
    index = graph.index()
    for pre, dep, weight, count in edges:
        i, j = index[pre], index[dep]
        graph.counts[i, j], graph.weights[i, j], graph.mask[i, j] = count, weight, True
    return graph


def top_k_hits(row: np.ndarray, target: int, popularity: np.ndarray, ks: Sequence[int]) -> dict[int, bool]:
    """Whether tool ``target`` is in the top k of ``rank_next(row, popularity)``, per k."""
    ranked = rank_next(row, popularity)
    return {k: bool(target in ranked[:k]) for k in ks}


def successor_lists(graph: TransitionGraph) -> dict[int, list[int]]:
    """Each tool's other tools with weight > 0, by weight, then count, then index (what
    ``next_tools`` lists, without ``<end>`` and the tool itself)."""
    n = graph.n_tools
    return {i: sorted((j for j in range(n) if j != i and graph.weights[i, j] > 0),
                      key=lambda j: (-graph.weights[i, j], -graph.counts[i, j], j)) for i in range(n)}


def hit_rates(items: Iterable[tuple[np.ndarray, int]], popularity: np.ndarray,
              ks: Sequence[int] = (1, 3)) -> tuple[dict[int, float], int]:
    """Share of (score row over the tools, true next tool) items whose tool is in the top k of
    ``rank_next``; and the number of items."""
    hits, n = dict.fromkeys(ks, 0), 0
    for row, target in items:
        n += 1
        for k, hit in top_k_hits(row, target, popularity, ks).items():
            hits[k] += hit
    return {k: hits[k] / n if n else float("nan") for k in ks}, n


# ---------------------------------------------------------------- the update stream (prequential)
@dataclass(frozen=True)
class StreamRun:
    """One iteration of the dynamic loop.

    ``chain``: the successful call order to measure next-tool hits on (None for a failed run).
    ``called``: what the run called when it was observed (user files); None: an offline agent
    (``agent_picks``) runs the task on the current weights. ``gold``: the tool set the rule
    evaluator compares with. ``scores``: evaluator scores given with the run (they win).
    ``similarity``: (n_tools,) cosine of the task text with each tool, for the agent.
    ``query_id``: the benchmark query of a gold run (an LLM evaluator reads its text).
    """

    run_id: str
    chain: tuple[str, ...] | None
    gold: tuple[str, ...]
    called: tuple[str, ...] | None = None
    scores: tuple[tuple[str, int], ...] = ()
    similarity: np.ndarray | None = None
    query_id: str | None = None


@dataclass(frozen=True)
class Evaluation:
    """An evaluator's scores for one run (one per tool it called) and which evaluator gave them
    (``BY_*``); ``detail``: why the rule stood in for an LLM answer."""

    scores: dict[str, int]
    by: str = BY_RULE
    detail: str = ""


# (run, the tools it called in order) -> its evaluation; None: the rule evaluator
Evaluator = Callable[[StreamRun, Sequence[str]], Evaluation]


def agent_picks(weights: np.ndarray, graph: TransitionGraph, chain: Sequence[str], similarity: np.ndarray | None,
                index: Mapping[str, int]) -> list[str]:
    """The offline agent (notes: "pick the successor maximising w_ij * cos(query, tool doc)"),
    teacher-forced: from ``<start>`` and from each gold tool it picks one next tool; it stands in for
    the LLM that ToolNet's dynamic loop needs."""
    n = graph.n_tools
    sim = np.ones(n) if similarity is None else (1.0 + np.asarray(similarity, dtype=np.float64)) / 2.0
    picks, popularity = [], graph.popularity
    for current in [START, *chain[:-1]]:
        scores = weights[index[current], :n] * sim
        picks.append(graph.tool_ids[int(rank_next(scores, popularity)[0])])
    return picks


@dataclass
class StreamResult:
    hits: dict[int, list[bool]]  # k -> one entry per measured step, in stream order
    versions: list[tuple[int, int, int, float]] = field(default_factory=list)  # (iteration, i, j, weight)
    scores: list[tuple[int, str, str, int, float]] = field(default_factory=list)  # (iteration, run, tool, delta, s)
    final: np.ndarray | None = None
    evaluations: list[tuple[int, str, str, str]] = field(default_factory=list)  # (iteration, run, BY_*, detail)

    def evaluated_by(self) -> dict[str, int]:
        """Runs per evaluator (``BY_*``) of a recorded stream."""
        return dict(Counter(by for _, _, by, _ in self.evaluations))

    def hit_rate(self, k: int) -> float:
        return float(np.mean(self.hits[k])) if self.hits[k] else float("nan")


def step_hits(weights: np.ndarray, graph: TransitionGraph, chain: Sequence[str], index: Mapping[str, int],
              ks: Sequence[int]) -> dict[int, list[bool]]:
    """Next-tool hits along a chain (teacher-forced): from tool_s, is tool_{s+1} in the top k?"""
    out: dict[int, list[bool]] = {k: [] for k in ks}
    popularity = graph.popularity
    for a, b in zip(chain, chain[1:]):
        for k, hit in top_k_hits(weights[index[a], : graph.n_tools], index[b], popularity, ks).items():
            out[k].append(hit)
    return out


def run_stream(graph: TransitionGraph, stream: Sequence[StreamRun], alpha: float, beta: float,
               ks: Sequence[int] = (1, 3), magnitude: int = RULE_SCORE, record: bool = False,
               tol: float = 1e-12, reweight_self_loops: bool = False,
               evaluator: Evaluator | None = None) -> StreamResult:
    """ToolNet's loop over ``stream`` (iteration n = the n-th run): measure next-tool hits with
    w^(n-1), evaluate what the run called (given scores, else ``evaluator``, else the rule
    evaluator), accumulate s^(n), re-weight (Eqs. 6-8). ``beta = 1`` is the static graph. With
    ``record``, the edges whose weight changed at each iteration (the versioned rows), every
    evaluator score and which evaluator scored each run are kept."""
    index = graph.index()
    weights = graph.weights.copy()
    accumulated = np.zeros(graph.n_tools)
    result = StreamResult({k: [] for k in ks})
    for iteration, run in enumerate(stream, 1):
        if run.chain:
            for k, h in step_hits(weights, graph, run.chain, index, ks).items():
                result.hits[k] += h
        if run.scores:
            evaluation = Evaluation(dict(run.scores), BY_GIVEN)
        else:
            called = run.called if run.called is not None else agent_picks(weights, graph, run.chain or run.gold,
                                                                             run.similarity, index)
            evaluation = (Evaluation(rule_scores(called, run.gold, magnitude)) if evaluator is None
                          else evaluator(run, called))
        delta = evaluation.scores
        if record:
            result.evaluations.append((iteration, run.run_id, evaluation.by, evaluation.detail))
        for tool, d in delta.items():
            accumulated[index[tool]] += d
        if record:
            result.scores += [(iteration, run.run_id, t, int(d), float(accumulated[index[t]])) for t, d in delta.items()]
        if beta >= 1.0:
            continue  # the static graph: scores are kept, weights never move
        new = dynamic_weights(graph, accumulated, alpha, beta, reweight_self_loops)
        if record:
            changed = np.argwhere(graph.mask & (np.abs(new - weights) > tol))
            result.versions += [(iteration, int(i), int(j), float(new[i, j])) for i, j in changed]
        weights = new
    result.final = weights
    return result


def choose_alpha_beta(graph: TransitionGraph, validation: Sequence[StreamRun], alphas: Sequence[float] = DEFAULT_ALPHAS,
                      betas: Sequence[float] = DEFAULT_BETAS, magnitude: int = RULE_SCORE,
                      evaluator: Evaluator | None = None) -> tuple[float, float, list[dict]]:
    """(alpha, beta) with the best prequential next-tool hit@1 on the validation stream (then hit@3,
    then the larger beta, the smaller alpha); every setting tried, the static graph (beta = 1) too,
    goes to the returned sweep. The runs are scored as in the test stream (``magnitude``, ``evaluator``)."""
    sweep = []
    for alpha in alphas:
        for beta in [*betas, 1.0]:
            if beta == 1.0 and alpha != alphas[0]:
                continue  # alpha is irrelevant to the static graph
            r = run_stream(graph, validation, alpha, beta, magnitude=magnitude, evaluator=evaluator)
            sweep.append({"alpha": alpha, "beta": beta, "hit@1": r.hit_rate(1), "hit@3": r.hit_rate(3),
                          "steps": len(r.hits[1])})
    candidates = [s for s in sweep if s["beta"] < 1.0]
    if not candidates:
        raise ValueError("no beta below 1: the dynamic update needs one")

    def key(s: dict) -> tuple:
        h1, h3 = (0.0 if np.isnan(s[m]) else s[m] for m in ("hit@1", "hit@3"))
        return (h1, h3, s["beta"], -s["alpha"])

    best = max(candidates, key=key)
    return best["alpha"], best["beta"], sweep


def replay(graph: TransitionGraph, versions: Iterable[tuple[int, int, int, float]], iterations: int) -> Iterator[np.ndarray]:
    """w^(0), w^(1), ..., w^(iterations - 1) rebuilt from the versioned rows alone (an edge keeps
    its weight until a later row changes it: what SQL's as-of macro ``transition_weights_at`` reads).
    One array, updated in place between yields: copy what you keep."""
    by_iteration: dict[int, list[tuple[int, int, float]]] = {}
    for iteration, i, j, w in versions:
        by_iteration.setdefault(iteration, []).append((i, j, w))
    weights = graph.weights.copy()
    for n in range(iterations):
        for i, j, w in by_iteration.get(n, []):
            weights[i, j] = w
        yield weights


# ---------------------------------------------------------------- one dataset, end to end
@dataclass
class ToolNetBuild:
    graph: TransitionGraph  # Eq. 5 from the successful training runs
    splits: dict[str, str]  # run key -> split
    stream: list[Trajectory]  # the test runs in update order (iteration n = stream[n - 1])
    result: StreamResult  # the test stream with the chosen alpha, beta (versions recorded)
    alpha: float
    beta: float
    chosen_on: str
    sweep: list[dict]
    failed_train_runs: int
    evaluator_info: dict = field(default_factory=lambda: {"kind": BY_RULE})  # the evaluator's settings and totals

    def runs_in(self, split: str) -> int:
        return sum(s == split for s in self.splits.values())

    @property
    def evaluator(self) -> str:
        """``transition_builds.evaluator``: ``rule``; or ``llm:<model>:<prompt version>`` and which
        evaluator scored the test runs, e.g. ``llm:gpt-4o-mini:toolnet-evaluate-v1 (test stream: 40
        llm, 2 rule fallback)``."""
        if self.evaluator_info.get("kind") != BY_LLM:
            return BY_RULE
        info, by = self.evaluator_info, self.result.evaluated_by()
        counts = ", ".join(f"{by[k]} {k}" for k in (BY_LLM, BY_FALLBACK, BY_GIVEN) if by.get(k))
        return f"llm:{info.get('model')}:{info.get('prompt_version')} (test stream: {counts or 'no runs'})"

    @property
    def evaluator_record(self) -> dict:
        """The evaluator's settings and totals, which evaluator scored the test runs, and every test
        run the rule scored in place of a failed LLM answer (lineage params, the build summary)."""
        return {**self.evaluator_info, "test_stream": self.result.evaluated_by(),
                "test_fallbacks": [{"iteration": n, "run_id": run, "reason": detail}
                                   for n, run, by, detail in self.result.evaluations if by == BY_FALLBACK]}


def stream_runs(runs: Sequence[Trajectory], similarity: Mapping[str, np.ndarray]) -> list[StreamRun]:
    """Gold runs (a benchmark task) are run by the offline agent; user runs are what they called.
    A failed user run gives its tools no gold: the rule evaluator scores each of them negative."""
    out = []
    for r in runs:
        if r.source == "gold":
            out.append(StreamRun(r.run_id, r.tools, r.tools, None, r.scores, similarity.get(r.query_id or ""),
                                 r.query_id))
        else:
            out.append(StreamRun(r.run_id, r.tools if r.success else None, r.tools if r.success else (), r.tools,
                                 r.scores))
    return out


def build_toolnet(tool_ids: Sequence[str], runs: Sequence[Trajectory], similarity: Mapping[str, np.ndarray],
                  seed: int, fractions: Sequence[float], alpha: float | None = None, beta: float | None = None,
                  alphas: Sequence[float] = DEFAULT_ALPHAS, betas: Sequence[float] = DEFAULT_BETAS,
                  magnitude: int = RULE_SCORE, evaluator: Evaluator | None = None) -> ToolNetBuild:
    """Split the runs (seeded), Eq. 5 on the successful training runs, alpha and beta by the
    validation stream unless both are given, then the test stream with versions recorded.
    ``similarity``: query_id -> (n_tools,) cosine of the query with each tool, for the agent.
    ``evaluator``: scores the validation and test runs without given scores (None: the rule); one
    with a ``prefetch(runs)`` method is handed those runs first (tasks/toolnet/evaluator.py evaluates the
    runs whose calls are known, concurrently, before the streams), and its ``info()`` is kept."""
    splits = {r.key: split_of(r, seed, fractions) for r in runs}
    train = [r for r in runs if splits[r.key] == "train"]
    graph = static_graph(tool_ids, [r.tools for r in train if r.success])
    validation = stream_runs(stream_order([r for r in runs if splits[r.key] == "validation"], seed), similarity)
    stream = stream_order([r for r in runs if splits[r.key] == "test"], seed)
    test = stream_runs(stream, similarity)
    sweeping = (alpha is None or beta is None) and any(len(r.chain or ()) > 1 for r in validation)
    if evaluator is not None and hasattr(evaluator, "prefetch"):
        evaluator.prefetch([*validation, *test] if sweeping else test)
    if alpha is not None and beta is not None:
        chosen_on, sweep = "given (--alpha, --beta)", []
    elif sweeping:
        alpha, beta, sweep = choose_alpha_beta(graph, validation, alphas, betas, magnitude, evaluator)
        chosen_on = "validation stream: prequential next-tool hit@1, then hit@3"
    else:
        alpha, beta, sweep = 0.5 if alpha is None else alpha, 0.7 if beta is None else beta, []
        chosen_on = "default (the validation split has no transition to measure)"
    result = run_stream(graph, test, alpha, beta, magnitude=magnitude, record=True, evaluator=evaluator)
    info = (evaluator.info() if evaluator is not None and hasattr(evaluator, "info")
            else {"kind": BY_RULE, "rule_score": magnitude})
    return ToolNetBuild(graph, splits, stream, result, alpha, beta, chosen_on, sweep,
                        sum(not r.success for r in train), info)
