"""Prefect flow ``gtool``: GTool's missing-dependency prediction, robustness curve, request-specific
tool selection and the completed graph for TGR, on CPU from a built warehouse (docs/gtool.md).

    python -m flows.gtool --warehouse artifacts/warehouse/tgr.duckdb      # make gtool

1. Robustness: on each dataset with gold (``manual``) edges, mask 10..90% of them, train the link
   predictor (tasks/gtool/links.py) on the rest and score recovering them (AUC, AP, F1 at the threshold
   chosen on validation edges) beside the discriminator alone, common neighbours and embedding
   similarity; seeds averaged. Table and PNG in ``--out-dir``.
2. Selection: on UltraTool and TMDB, the request-specific tool graph (retrieved candidates + graph
   neighbours over transition, discriminator and predicted edges) and its node scorer
   (tasks/gtool/selection.py) against top-k retrieval with and without TGR; node F1 / link F1 / NED
   on the test requests of the warehouse's seeded trajectory split.
3. Completion: per dataset, the base graph (gold where it has one, else the discriminator's) plus
   predicted edges above the threshold validated on held-out base edges, written to the warehouse
   as ``source = 'predicted'`` edges with their lineage and the ``tgr_completed`` embeddings (Eq. 3
   over the completed graph), which ``make eval-retrieval`` reports as ``embedding+TGR-c``.

A dataset whose graph cannot be used (no edges, one tool, self-loops, edges naming unknown tools)
is a recorded skip with the reason, in the log and the report; nothing reaches torch.
"""
from __future__ import annotations

import functools
import json
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np

from tasks.common.flow_cli import FlowCLI  # first: Prefect analytics off before Prefect loads
from tasks.common.cli import Help, checking_inputs, parse_config
from tasks.common.plots import show_plot
from tasks.retrieval.gcn import gcn_propagate
from tasks.toolsets.trajectories import RESERVED
from warehouse.build import connect, replace_rows, rows_of
from warehouse.lineage import lineage_row


@dataclass
class GToolConfig:
    """The one configuration surface of the gtool flow; the command line is generated from it (tasks/common/cli.py)."""

    warehouse: Annotated[str, Help("the warehouse built by make graph (read; predicted edges are written back)")] = \
        "artifacts/warehouse/tgr.duckdb"
    out_dir: Annotated[str, Help("report folder: gtool.md, robustness.png, gtool.json")] = "artifacts/gtool"
    robustness_datasets: Annotated[tuple[str, ...], Help(
        "datasets whose gold (manual) edges are masked for the robustness curve")] = ("apibank", "ultratool", "tmdb")
    mask_rates: Annotated[tuple[str, ...], Help("shares of the gold edges hidden, each in (0, 1)")] = (
        "0.1", "0.3", "0.5", "0.7", "0.9")
    seeds: Annotated[int, Help("repeats per mask rate (seed = split and model seed 0..N-1), averaged")] = 3
    selection_datasets: Annotated[tuple[str, ...], Help(
        "datasets with gold call orders for node/link F1 (their trajectories' seeded split)")] = ("ultratool", "tmdb")
    completion_datasets: Annotated[tuple[str, ...], Help(
        "datasets to complete and write predicted edges for (none: every dataset of the warehouse)")] = ()
    completion_base: Annotated[Literal["auto", "manual", "discriminator"], Help(
        "graph to complete: auto (gold where the dataset has gold edges, else the discriminator's)")] = "auto"
    completion_same_group: Annotated[bool, Help(
        "predict edges only between tools of one group (as the discriminator scores pairs)")] = True
    completion_max_ratio: Annotated[float, Help("at most this many predicted edges per base edge (the most probable)")] = 1.0
    write_warehouse: Annotated[bool, Help("write predicted edges and tgr_completed embeddings to the warehouse")] = True
    discriminator_feature: Annotated[bool, Help(
        "give the link predictor the discriminator's probabilities as pair features (completion and selection)")] = True
    hidden: Annotated[int, Help("encoder width")] = 64
    layers: Annotated[int, Help("TransformerConv layers n_l (paper: 3)")] = 3
    heads: Annotated[int, Help("attention heads")] = 2
    dropout: Annotated[float, Help("dropout between layers")] = 0.1
    lr: Annotated[float, Help("Adam learning rate")] = 3e-3
    weight_decay: Annotated[float, Help("Adam weight decay")] = 5e-4
    steps: Annotated[int, Help("training steps of the link predictor (one masked graph per step)")] = 300
    rho: Annotated[float, Help("MDPL: probability of masking each known edge per step (paper: 0.1)")] = 0.1
    negatives: Annotated[Literal["uniform", "mixed"], Help(
        "MDPL non-edges: uniform (the paper's RS(E-)) or mixed (a third uniform, a third corrupted, a third "
        "swapped ends)")] = "uniform"
    val_share: Annotated[float, Help("share of the observed edges held out to choose the model state and threshold")] = 0.2
    candidates: Annotated[int, Help("selection: retrieved top-k that seed the request graph")] = 5
    neighbours: Annotated[int, Help("selection: graph neighbours added per candidate, most similar to the request first")] = 5
    selection_steps: Annotated[int, Help("selection: training steps (a batch of requests each)")] = 400
    batch: Annotated[int, Help("selection: requests per step")] = 64
    lambda_mdpl: Annotated[float, Help("selection: weight of the missing-dependency loss (paper: 0.1)")] = 0.1
    seed: Annotated[int, Help("seed of completion and selection training")] = 0
    threads: Annotated[int, Help("torch CPU threads (small graphs: 1 is fastest per core)")] = 1

    @property
    def rates(self) -> list[float]:
        return [float(r) for r in self.mask_rates]

    def link_config(self, seed: int | None = None) -> LinkConfig:
        return LinkConfig(hidden=self.hidden, layers=self.layers, heads=self.heads, dropout=self.dropout, lr=self.lr,
                          weight_decay=self.weight_decay, steps=self.steps, rho=self.rho, negatives=self.negatives,
                          seed=self.seed if seed is None else seed)

    def __post_init__(self) -> None:
        try:
            bad = [r for r in self.rates if not 0 < r < 1]
        except ValueError:
            raise ValueError(f"--mask-rates {','.join(self.mask_rates)}: not numbers") from None
        if bad:
            raise ValueError(f"--mask-rates {bad}: each must lie strictly between 0 and 1")
        if self.seeds < 1 or self.steps < 1 or self.threads < 1:
            raise ValueError("--seeds, --steps and --threads must be at least 1")
        if not 0 < self.val_share < 1:
            raise ValueError(f"--val-share {self.val_share}: must lie strictly between 0 and 1")
        for flag, value, least in (("--hidden", self.hidden, 1), ("--layers", self.layers, 1), ("--heads", self.heads, 1),
                                   ("--candidates", self.candidates, 1), ("--neighbours", self.neighbours, 0),
                                   ("--selection-steps", self.selection_steps, 1), ("--batch", self.batch, 1)):
            if value < least:
                raise ValueError(f"{flag} {value}: must be at least {least}")
        for flag, value in (("--dropout", self.dropout), ("--rho", self.rho)):
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{flag} {value}: must lie in [0, 1)")
        if not self.lr > 0:
            raise ValueError(f"--lr {self.lr}: must be above 0")
        for flag, value in (("--weight-decay", self.weight_decay), ("--lambda-mdpl", self.lambda_mdpl)):
            if not value >= 0:
                raise ValueError(f"{flag} {value}: must not be negative")
        if not self.completion_max_ratio > 0:
            raise ValueError(f"--completion-max-ratio {self.completion_max_ratio}: must be above 0")

    def check_inputs(self) -> None:
        """The warehouse is there and, with --write-warehouse, can be replaced; the report folder can be written:
        checked by the command line before Prefect starts and by the flow first thing."""
        from tasks.common.paths import check_writable, writable_file_problem, writable_folder_problem

        if not Path(self.warehouse).is_file():
            raise ValueError(f"--warehouse {self.warehouse}: no warehouse file there (build one: make graph)")
        check_writable(writable_file_problem(self.warehouse, "--warehouse") if self.write_warehouse else None,
                       writable_folder_problem(self.out_dir, "--out-dir"))


# ---------------------------------------------------------------- loading from the warehouse
@dataclass
class DatasetGraphs:
    inputs: EvalInputs  # tools (sorted by id), groups, embeddings per kind, queries: as eval-retrieval reads them
    edges: dict[str, list[tuple[str, str]]]  # source -> (dependent, prerequisite); transition: tool pairs only
    transition_weight: dict[tuple[str, str], float]  # (first, then) -> Eq. 5 weight (training runs)
    disc: DiscriminatorScores | None
    requests: list[Request]

    @property
    def name(self) -> str:
        return self.inputs.dataset

    @property
    def tool_ids(self) -> list[str]:
        return self.inputs.tool_ids

    @property
    def x(self) -> np.ndarray | None:
        return self.inputs.embeddings.get("base")


def parse_args(argv: list[str] | None = None) -> GToolConfig:
    return parse_config(GToolConfig, argv, "python -m flows.gtool", __doc__)


# python -m: --help and usage errors answer here, before the imports below (Prefect, models) are paid for
PROG = "python -m flows.gtool"
CLI = FlowCLI.start(__name__, checking_inputs(parse_args, PROG), PROG)  # check_inputs: a usage error too

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
# quote(x): Prefect passes x to the task without walking it for futures (the embedding rows took 16 s a walk)
from prefect.utilities.annotations import quote  # noqa: E402
from tasks.gtool.links import (METHODS, Completion, DiscriminatorScores, GraphInputError, LinkConfig, ToolGraph,  # noqa: E402
                               complete_graph, robustness_rows, summarise, tool_graph)
from tasks.gtool.selection import Request, SelectConfig, SelectionData, evaluate_selection  # noqa: E402
from tasks.retrieval.inputs import EvalInputs, load_inputs  # noqa: E402


@task(cache_policy=NO_CACHE)
def load_dataset(warehouse: str, dataset: str) -> DatasetGraphs:
    inputs = load_inputs.fn(warehouse, dataset)
    if not inputs.tool_ids:
        raise GraphInputError(f"{dataset}: not in {warehouse}")
    index = {t: i for i, t in enumerate(inputs.tool_ids)}
    con = connect(warehouse)
    try:
        edges: dict[str, list[tuple[str, str]]] = {}
        weights = {}
        for src, dep, pre, w, n in con.execute(
                "SELECT source, dependent, prerequisite, weight, n_transitions FROM edges WHERE dataset = ? "
                "AND source IN ('manual', 'discriminator', 'transition') ORDER BY ALL", [dataset]).fetchall():
            if src == "transition":
                if dep == pre or dep in RESERVED or pre in RESERVED or not n:
                    continue  # ToolNet's <start>/<end> nodes, self-loops and unseen rows are no tool-to-tool step
                weights[(pre, dep)] = float(w)
            edges.setdefault(src, []).append((dep, pre))
        disc = None
        scored = con.execute("SELECT tool_a, tool_b, p_a_depends_on_b, p_b_depends_on_a FROM scored_pairs "
                             "WHERE dataset = ?", [dataset]).fetchall()
        if scored:
            p = np.zeros((len(index), len(index)), dtype=np.float32)
            s = np.zeros((len(index), len(index)), dtype=bool)
            for a, b, pab, pba in scored:
                if a in index and b in index:
                    i, j = index[a], index[b]
                    p[i, j], p[j, i], s[i, j], s[j, i] = pab, pba, True, True
            disc = DiscriminatorScores(p, s)
        runs = rows_of(con, "SELECT query_id, tools, split FROM trajectories WHERE dataset = ? AND source = 'gold' "
                            "AND success ORDER BY query_id", [dataset])
    finally:
        con.close()
    query = dict(zip(inputs.query_ids, inputs.query_embeddings))
    requests = [Request(r["query_id"], query[r["query_id"]], tuple(index[t] for t in r["tools"]), r["split"])
                for r in runs if r["query_id"] in query and all(t in index for t in r["tools"])]
    return DatasetGraphs(inputs, edges, weights, disc, requests)


def graph_of(d: DatasetGraphs, sources: list[str], same_groups: bool = True) -> ToolGraph:
    pairs = [e for s in sources for e in d.edges.get(s, [])]
    if d.x is None:
        raise GraphInputError(f"{d.name}: no base tool embeddings in the warehouse")
    return tool_graph(f"{d.name} ({'+'.join(sources)})", d.tool_ids, d.x, pairs, d.inputs.groups if same_groups else ())


# ---------------------------------------------------------------- tasks
@dataclass(frozen=True)
class Skipped:
    """What a step returns for a graph it cannot use: a recorded skip, not a failed task run."""

    reason: str


def skips_bad_graphs(fn):
    """``fn``, returning :class:`Skipped` where it raises ``GraphInputError`` (Prefect would log an
    expected skip as a failed task with an ERROR traceback)."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except GraphInputError as exc:
            return Skipped(str(exc))
    return run


@task(cache_policy=NO_CACHE)
@skips_bad_graphs
def robustness(d: DatasetGraphs, cfg: GToolConfig) -> list[dict]:
    graph = graph_of(d, ["manual"])
    return robustness_rows(graph, cfg.rates, list(range(cfg.seeds)), cfg.link_config(), d.disc,
                           cfg.val_share, METHODS)


@task(cache_policy=NO_CACHE)
@skips_bad_graphs
def complete(d: DatasetGraphs, cfg: GToolConfig, base: str, same_group: bool) -> Completion:
    graph = graph_of(d, [base], same_groups=same_group)
    return complete_graph(graph, cfg.link_config(), base, d.disc if cfg.discriminator_feature else None,
                          cfg.val_share, same_group, cfg.completion_max_ratio)


@task(cache_policy=NO_CACHE)
@skips_bad_graphs
def selection(d: DatasetGraphs, cfg: GToolConfig) -> tuple[list[dict], dict]:
    """Selection rows on the test requests; the graph: transition edges of the training runs plus the
    discriminator's, completed with predicted edges (a predictor trained on that graph only)."""
    n = len(d.tool_ids)
    index = {t: i for i, t in enumerate(d.tool_ids)}
    trans = np.zeros((n, n))
    for (first, then), w in d.transition_weight.items():
        trans[index[first], index[then]] = w
    sources = [s for s in ("transition", "discriminator") if d.edges.get(s)]
    graph = graph_of(d, sources, same_groups=False)
    done = complete_graph(graph, cfg.link_config(), "+".join(sources), d.disc if cfg.discriminator_feature else None,
                          cfg.val_share, same_group=False, max_ratio=cfg.completion_max_ratio)
    predicted = np.array([(a, b) for a, b, _ in done.predicted], dtype=np.int64).reshape(-1, 2)
    full = np.unique(np.concatenate([graph.edges, predicted]), axis=0)
    data = SelectionData(d.name, d.tool_ids, d.x, d.requests, trans, graph.edges)
    scfg = SelectConfig(candidates=cfg.candidates, neighbours=cfg.neighbours, steps=cfg.selection_steps,
                        batch=cfg.batch, lambda_mdpl=cfg.lambda_mdpl, link=cfg.link_config())
    baselines = {"retrieval top-k (embedding)": d.x}
    for kind, name in (("tgr_discriminator", "retrieval top-k (embedding+TGR-d)"),
                       ("tgr_transition", "retrieval top-k (embedding+TGR-t)")):
        if kind in d.inputs.embeddings:
            baselines[name] = d.inputs.embeddings[kind]
    variants = {"GTool-CPU request graph (transition + discriminator + predicted)": full,
                "w/o predicted edges (transition + discriminator)": graph.edges,
                "w/o graph: candidates only": np.zeros((0, 2), dtype=np.int64)}
    rows = evaluate_selection(data, variants, scfg, full, baselines)
    return rows, {"graph_edges": len(graph.edges), "predicted_edges": len(predicted), "threshold": done.threshold,
                  "requests": {s: len(data.split(s)) for s in ("train", "validation", "test")}}


def completion_rows(d: DatasetGraphs, done: Completion, cfg: GToolConfig, built_at: datetime) -> dict[str, list[dict]]:
    """Warehouse rows: predicted edges, their lineage, and the tgr_completed embeddings."""
    from prefect.runtime import flow_run

    ids, groups = d.tool_ids, d.inputs.groups
    index = {t: i for i, t in enumerate(ids)}
    edges = [{"dataset": d.name, "tool_group": groups[a] if groups[a] == groups[b] else "*", "dependent": ids[a],
              "prerequisite": ids[b], "prob": p, "predicted_class": 0, "source": "predicted", "p_direction": p}
             for a, b, p in done.predicted]
    base = [(index[x], index[y]) for x, y in d.edges.get(done.base_source, [])]
    completed = gcn_propagate(d.x, base + [(a, b) for a, b, _ in done.predicted], "both")
    params = {"base_source": done.base_source, "threshold_chosen_on": "max F1 of held-out base edges against every "
              "other candidate pair", "val_f1": done.val_f1, "val_auc": done.val_auc, "n_base": done.n_base,
              "n_candidates": done.n_candidates, "same_group": cfg.completion_same_group,
              "max_ratio": cfg.completion_max_ratio, "capped_from": done.details.get("capped_from"),
              "discriminator_feature": cfg.discriminator_feature, "link_config": asdict(cfg.link_config())}
    lineage = lineage_row(d.name, "predicted", f"GTool missing-dependency predictor (tasks/gtool/links.py) completing the "
                          f"'{done.base_source}' graph", built_at, flow_run.id, params=params, threshold=done.threshold)
    embeddings = [{"dataset": d.name, "tool_id": t, "kind": "tgr_completed", "embedding": completed[i].tolist()}
                  for i, t in enumerate(ids)]
    return {"edges": edges, "edge_lineage": [lineage], "tool_embeddings": embeddings}


@task(cache_policy=NO_CACHE)
def write_predicted(warehouse: str, rows: dict[str, list[dict]], datasets: list[str]) -> dict:
    return replace_rows(warehouse, rows, {"edges": {"dataset": datasets, "source": ["predicted"]},
                                          "edge_lineage": {"dataset": datasets, "source": ["predicted"]},
                                          "tool_embeddings": {"dataset": datasets, "kind": ["tgr_completed"]}})


# ---------------------------------------------------------------- reports
def _fmt(v: Any, digits: int = 3) -> str:
    return "-" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.{digits}f}"


def robustness_markdown(summary: list[dict], rates: list[float]) -> str:
    lines = []
    for ds in dict.fromkeys(r["dataset"] for r in summary):
        rows = [r for r in summary if r["dataset"] == ds]
        first = {r["mask_rate"]: r for r in rows}
        counts = ", ".join(f"{rate:.0%}: {first[rate]['n_test']:.0f} hidden / {first[rate]['n_observed']:.0f} "
                           f"kept" for rate in rates if rate in first)
        lines += [f"**{ds}** ({counts}); AUC / F1, mean over {rows[0]['seeds']} seeds:", "",
                  "| method | " + " | ".join(f"{r:.0%} masked" for r in rates) + " |",
                  "|---|" + "---|" * len(rates)]
        for method in dict.fromkeys(r["method"] for r in rows):
            by = {r["mask_rate"]: r for r in rows if r["method"] == method}
            lines.append(f"| {method} | " + " | ".join(
                f"{_fmt(by[x]['auc'])} / {_fmt(by[x]['f1'])}" if x in by else "-" for x in rates) + " |")
        lines.append("")
    return "\n".join(lines)


def plot_robustness(summary: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r["dataset"] for r in summary))
    fig, axes = plt.subplots(2, len(datasets), figsize=(5 * len(datasets), 7), squeeze=False)
    for col, ds in enumerate(datasets):
        for row, metric in enumerate(("auc", "f1")):
            ax = axes[row][col]
            for method in dict.fromkeys(r["method"] for r in summary if r["dataset"] == ds):
                pts = sorted((r["mask_rate"], r[metric], r[f"{metric}_std"]) for r in summary
                             if r["dataset"] == ds and r["method"] == method)
                xs = [100 * p[0] for p in pts]
                ax.errorbar(xs, [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o", capsize=2, label=method)
            ax.set_title(f"{ds}: {metric.upper()} of recovering masked edges")
            ax.set_xlabel("edges masked (%)")
            ax.set_ylim(0, 1)
            if metric == "auc":
                ax.axhline(0.5, color="grey", lw=0.5, ls=":")
        axes[0][col].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def selection_markdown(rows: list[dict], info: dict[str, dict]) -> str:
    lines = []
    for ds in dict.fromkeys(r["dataset"] for r in rows):
        meta = info.get(ds, {})
        req = meta.get("requests", {})
        lines += [f"**{ds}** (requests train {req.get('train')} / validation {req.get('validation')} / test "
                  f"{req.get('test')}; graph {meta.get('graph_edges')} edges + {meta.get('predicted_edges')} predicted):",
                  "", "| method | chosen on validation | n-F1 | l-F1 | NED (lower is better) | gold tools in request graph |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            if r["dataset"] == ds:
                lines.append(f"| {r['method']} | {r['choice']} | {_fmt(r['n_f1'])} | {_fmt(r['l_f1'])} | "
                             f"{_fmt(r['ned'])} | {_fmt(r.get('coverage'))} |")
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------- the flow
@flow(name="gtool", log_prints=True)
def gtool(cfg: GToolConfig | None = None) -> dict:
    import torch

    cfg = cfg or GToolConfig()
    cfg.check_inputs()  # before any work
    torch.set_num_threads(cfg.threads)
    log = get_run_logger()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    con = connect(cfg.warehouse)
    try:
        available = [d for (d,) in con.execute("SELECT dataset FROM datasets ORDER BY 1").fetchall()]
    finally:
        con.close()
    wanted = set(cfg.robustness_datasets) | set(cfg.selection_datasets) | set(cfg.completion_datasets or available)
    skips: list[str] = [f"{d}: not in {cfg.warehouse}" for d in sorted(wanted - set(available))]
    loaded = {d: load_dataset(cfg.warehouse, d) for d in available if d in wanted}
    timings: dict[str, float] = {}

    def timed(name: str, fn, *args):
        c = time.process_time()
        got = fn(*(quote(a) for a in args))
        timings[name] = round(time.process_time() - c, 1)
        if isinstance(got, Skipped):
            skips.append(f"{name}: {got.reason}")
            log.warning(f"skipped {name}: {got.reason}")
            return None
        return got

    robust_rows: list[dict] = []
    for ds in cfg.robustness_datasets:
        if ds in loaded:
            robust_rows += timed(f"robustness {ds}", robustness, loaded[ds], cfg) or []
    summary = summarise(robust_rows)

    sel_rows, sel_info = [], {}
    for ds in cfg.selection_datasets:
        if ds in loaded:
            got = timed(f"selection {ds}", selection, loaded[ds], cfg)
            if got:
                sel_rows += got[0]
                sel_info[ds] = got[1]

    built_at = datetime.now(timezone.utc).replace(tzinfo=None)
    completions, wh_rows = {}, {"edges": [], "edge_lineage": [], "tool_embeddings": []}
    for ds in (cfg.completion_datasets or available):
        if ds not in loaded:
            continue
        d = loaded[ds]
        base = cfg.completion_base if cfg.completion_base != "auto" else (
            "manual" if d.edges.get("manual") else "discriminator")
        done = timed(f"completion {ds}", complete, d, cfg, base, cfg.completion_same_group)
        if done is None:
            continue
        completions[ds] = {"base_source": base, "base_edges": done.n_base, "predicted": len(done.predicted),
                           "threshold": done.threshold, "val_f1": done.val_f1, "val_auc": done.val_auc,
                           "candidates": done.n_candidates, "capped_from": done.details.get("capped_from")}
        for table, rows in completion_rows(d, done, cfg, built_at).items():
            wh_rows[table] += rows
        log.info(f"{ds}: {len(done.predicted)} predicted edges over the {done.n_base} {base} edges "
                 f"(threshold {done.threshold:.3f}, validation F1 {done.val_f1:.3f}, AUC {done.val_auc:.3f})")
    written = None
    if cfg.write_warehouse and completions:
        written = write_predicted(cfg.warehouse, quote(wh_rows), sorted(completions))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if summary:
        plot_robustness(summary, out / "robustness.png")
        show_plot(out / "robustness.png", "GTool: recovering masked gold edges", robustness_markdown(summary, cfg.rates),
                  note="AUC / F1 per share of edges masked, mean over the seeds.", key="gtool-robustness")
    report = ["# GTool on CPU (flows/gtool.py, docs/gtool.md)", "",
              f"CPU time of the flow's work: {cpu:.0f} s ({wall:.0f} s wall, torch threads {cfg.threads}); "
              "per step: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()), ""]
    if summary:
        report += ["## Robustness: recovering masked gold edges", "",
                   "AUC over every ordered pair that is not an observed edge; F1 at the threshold chosen on the "
                   "validation edges (share of the observed ones). Plot: robustness.png.", "",
                   robustness_markdown(summary, cfg.rates)]
    if sel_rows:
        report += ["## Tool selection on the test requests", "", selection_markdown(sel_rows, sel_info)]
    if completions:
        report += ["## Completed graphs (source 'predicted')", "",
                   "| dataset | base graph | base edges | predicted edges | threshold | validation F1 | validation AUC |",
                   "|---|---|---|---|---|---|---|"]
        report += [f"| {ds} | {c['base_source']} | {c['base_edges']} | {c['predicted']} | {_fmt(c['threshold'])} | "
                   f"{_fmt(c['val_f1'])} | {_fmt(c['val_auc'])} |" for ds, c in completions.items()]
        report.append("")
    if skips:
        report += ["## Skipped", ""] + [f"- {s}" for s in skips] + [""]
    text = "\n".join(report)
    (out / "gtool.md").write_text(text + "\n", encoding="utf-8")
    result = {"config": asdict(cfg), "cpu_s": cpu, "wall_s": wall, "timings_cpu_s": timings, "skips": skips,
              "robustness": robust_rows, "robustness_summary": summary, "selection": sel_rows,
              "selection_info": sel_info, "completion": completions,
              "warehouse": None if written is None else {"rows": written["rows"], "added": written["added"]}}
    (out / "gtool.json").write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    print(text)
    return result


# ---------------------------------------------------------------- command line (generated from GToolConfig)
if __name__ == "__main__":
    CLI.run(gtool)
