"""Prefect flow ``train-retriever``: the dependency retriever, a bi-encoder trained contrastively so that each
consumer input ("name: description (input of tool)") finds the producers whose output it takes; build-graph's
``retrieval`` pruning rule uses it (``--retrieval-encoder``) to choose the pairs the discriminator scores.

    python -m flows.train_retriever                       # make train-retriever
    python -m flows.train_retriever --tdi none --toolset nestools --max-steps 50   # tool sets only, a quick run

1. Examples: each dependent row of a mined TDI v2 dataset (``--tdi``; its ``consumer_param``) and each gold
   edge of the train groups of the ``--toolset`` sets (parameter edges; tool edges where the consumer
   declares no inputs), each with a same-group tool it does not take as a hard negative
   (tasks/training/retriever.py). The sets' groups are split train / validation / test, seeded.
2. Training: in-batch contrastive loss; the checkpoint kept is the one with the best candidate recall on
   the validation groups (the untrained encoder counts as step 0, so training never makes it worse).
3. Report: candidate recall of gold edges and the share of ordered same-group pairs kept, per k, on the
   test groups of the ``--toolset`` sets and on the whole ``--heldout`` sets, untrained beside trained
   (``metrics.json``, ``report.md``).
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

from tasks.common.flow_cli import FlowCLI  # first: Prefect analytics off before Prefect loads
from tasks.common.cli import Flag, Help, checking_inputs, parse_config
from models.encoder_path import OFFLINE_DEFAULT

DEFAULT_TDI = "artifacts/tdi/tdi-mined"
DEFAULT_BENCHMARKS = "../shared/data/benchmarks"
# (k, share cap) of the retrieval rule in the report: top-k per input, then (share) the best-scored pairs up to
# that share of each group's ordered pairs; 5% is the budget
REPORT_SETTINGS = ((1, None), (3, None), (5, None), (10, None), (10, 0.05), (10, 0.03))
VALIDATION_K = 3  # the k of build-graph's default --retrieval-k: the checkpoint is chosen there


@dataclass
class RetrieverConfig:
    """The one config surface of train-retriever (Prefect parameter and, generated from it, the command line)."""

    tdi: Annotated[str | None, Help("mined TDI v2 dataset folder (rows with consumer_param); none: tool sets only")] = \
        DEFAULT_TDI
    toolsets: Annotated[tuple[str, ...], Help(
        "tool sets with gold edges to train on (their train groups), validate on and test on (their held-out "
        "groups); repeat or comma-separate")] = field(default=("nestools", "ultratool"),
                                                       metadata={"cli": Flag("toolset", repeat=True)})
    heldout: Annotated[tuple[str, ...], Help("tool sets measured whole, never trained on")] = ("apibank", "tmdb")
    benchmarks_root: Annotated[str, Help("where tool-set names are looked up")] = DEFAULT_BENCHMARKS
    output: Annotated[str, Help("run folder: best/ (the retriever), metrics.json, report.md")] = \
        "artifacts/retriever/dependency-retriever"
    split_fractions: Annotated[tuple[float, float, float], Help(
        "train,validation,test shares of each --toolset set's groups")] = field(
        default=(0.6, 0.2, 0.2), metadata={"cli": Flag("split")})
    split_seed: Annotated[int, Help("seed of the group split")] = 0
    base_model: Annotated[str, Help("encoder to start from (offline-minilm, a hub id or a folder)")] = OFFLINE_DEFAULT
    num_layers: Annotated[int | None, Help("keep the first N transformer layers (none: all)")] = None
    epochs: Annotated[float, Help("passes over the training examples")] = 1.0
    max_steps: Annotated[int | None, Help("stop after N steps (none: all epochs)")] = None
    batch_size: Annotated[int, Help("queries per step (with their positives and hard negatives)")] = 32
    learning_rate: Annotated[float, Help("peak AdamW learning rate")] = 5e-5
    max_length: Annotated[int, Help("word pieces per text, in training and (recorded in the folder) at use")] = 64
    name_dropout: Annotated[float, Help("share of training queries shown by description only (no parameter name)")] = 0.3
    max_tdi_examples: Annotated[int | None, Help(
        "seeded cap on mined examples (none: all); more mined rows pulled validation recall down (bench/RESULTS.md)")] = 1500
    evals: Annotated[int, Help("validations (best-checkpoint saves) over the run")] = 4
    seed: Annotated[int, Help("seed of sampling, shuffling and negatives")] = 42
    threads: Annotated[int | None, Help("torch CPU threads (none: torch's default)")] = None
    reranker: Annotated[bool, Help(
        "also train the parameter reranker: a cross-encoder over the retriever's candidate units (top-k producers "
        "of each input, or a name-rule match), stacked with the parameter head; build-graph --param-discriminator "
        "uses it from <run>/best/param_reranker")] = False
    reranker_layers: Annotated[int, Help("transformer layers of the reranker, from the retriever's")] = 6
    reranker_epochs: Annotated[int, Help("reranker passes over the positives (negatives drawn afresh each)")] = 2
    reranker_k: Annotated[int, Help("reranker candidates: each input's top-k producers by the retriever")] = 5
    reranker_max_steps: Annotated[int | None, Help("stop the reranker after N steps (none: all epochs)")] = None
    checkpoint: Annotated[str | None, Help(
        "a trained retriever folder (<run>/best): measure it on the test groups and sets, train nothing")] = None

    def __post_init__(self) -> None:
        if not self.toolsets and not self.tdi:
            raise ValueError("--toolset and --tdi: name at least one source of training examples")
        fractions = self.split_fractions
        if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1) > 1e-9 or fractions[1] <= 0:
            raise ValueError(f"--split {','.join(map(str, fractions))}: three non-negative fractions summing to 1, "
                             "validation above 0 (it chooses the checkpoint)")
        for flag, value in (("--num-layers", self.num_layers), ("--max-steps", self.max_steps),
                            ("--batch-size", self.batch_size), ("--max-length", self.max_length),
                            ("--max-tdi-examples", self.max_tdi_examples), ("--evals", self.evals),
                            ("--threads", self.threads), ("--reranker-layers", self.reranker_layers),
                            ("--reranker-epochs", self.reranker_epochs), ("--reranker-k", self.reranker_k),
                            ("--reranker-max-steps", self.reranker_max_steps)):
            if value is not None and value < 1:
                raise ValueError(f"{flag} {value}: must be at least 1")
        if not 0.0 <= self.name_dropout <= 1.0:
            raise ValueError(f"--name-dropout {self.name_dropout}: must lie in [0, 1]")
        if self.epochs <= 0 or self.learning_rate <= 0:
            raise ValueError("--epochs and --learning-rate must be positive")

    def check_inputs(self) -> None:
        """Every folder the run reads exists (called first by the flow, before any work)."""
        if self.checkpoint and not Path(self.checkpoint, "config.json").is_file():
            raise ValueError(f"--checkpoint {self.checkpoint}: no config.json there (a train-retriever <run>/best)")
        for name in (*self.toolsets, *self.heldout):
            if not (Path(name).is_dir() or (Path(self.benchmarks_root) / name).is_dir()):
                raise ValueError(f"tool set {name!r}: not a folder, nor a benchmark under {self.benchmarks_root} "
                                 "(../shared/data/README.md says where each comes from)")
        if not self.checkpoint and self.tdi and not (Path(self.tdi) / "shards").is_dir():
            raise ValueError(f"--tdi {self.tdi}: no shards/ folder there (make mine-tdi, or --tdi none)")

    def arguments(self):
        from tasks.training.retriever import RetrieverArguments

        return RetrieverArguments(self.base_model, self.num_layers, self.epochs, self.batch_size, self.learning_rate,
                                  max_length=self.max_length, max_steps=self.max_steps or -1, evals=self.evals,
                                  seed=self.seed)


    def reranker_arguments(self):
        from tasks.training.param_reranker import RerankerArguments

        return RerankerArguments(layers=self.reranker_layers, epochs=self.reranker_epochs, candidate_k=self.reranker_k,
                                 seed=self.seed, max_steps=self.reranker_max_steps or -1)


def parse_args(argv: list[str] | None = None) -> RetrieverConfig:
    return parse_config(RetrieverConfig, argv, PROG, __doc__)


# python -m: --help and usage errors answer here, before the imports below (Prefect, torch) are paid for
PROG = "python -m flows.train_retriever"
CLI = FlowCLI.start(__name__, checking_inputs(parse_args, PROG), PROG)  # check_inputs: a usage error too

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402

from schemas.toolset import ToolSet  # noqa: E402
from tasks.training.retriever import (RETRIEVER_FILE, RetrieverExample, tdi_retriever_examples,  # noqa: E402
                                      toolset_retriever_examples, train_retriever)


@dataclass(frozen=True)
class SplitToolSets:
    train: list[tuple[ToolSet, set[str]]]  # (tool set, its train groups)
    validation: list[ToolSet]
    test: list[ToolSet]  # held-out groups of the --toolset sets, then the --heldout sets whole


@task(cache_policy=NO_CACHE)
def split_toolsets(cfg: RetrieverConfig) -> SplitToolSets:
    from tasks.toolsets.readers import load_toolset_spec
    from tasks.training.param_examples import split_groups

    train, valid, test = [], [], []
    for name in cfg.toolsets:
        ts = load_toolset_spec(name, Path(cfg.benchmarks_root))
        fit, held, tested = split_groups({t.group for t in ts.tools}, cfg.split_fractions, cfg.split_seed)
        train.append((ts, fit))
        valid.append(ts.only_groups(held))
        if tested:
            test.append(ts.only_groups(tested))
    test += [load_toolset_spec(name, Path(cfg.benchmarks_root)) for name in cfg.heldout]
    return SplitToolSets(train, valid, test)


@task(cache_policy=NO_CACHE)
def training_examples(cfg: RetrieverConfig, sets: SplitToolSets) -> tuple[list[RetrieverExample], dict[str, int]]:
    examples, counts = [], {}
    if cfg.tdi:
        mined = tdi_retriever_examples(Path(cfg.tdi), "train", cfg.seed, cfg.name_dropout, cfg.max_tdi_examples)
        examples += mined
        counts["tdi"] = len(mined)
    for ts, groups in sets.train:
        got = toolset_retriever_examples(ts, groups, cfg.seed, cfg.name_dropout)
        examples += got
        counts[ts.name] = len(got)
    return examples, counts


def recall_table(sets: list[ToolSet], encode, settings=REPORT_SETTINGS,
                 strategies=("retrieval", "params+retrieval"), head=None) -> dict[str, list[dict]]:
    from tasks.graph.candidates import retrieval_recall

    return {ts.name: retrieval_recall(ts, encode, settings, strategies, head=head) for ts in sets}


HEAD_RANKED_SETTINGS = ((10, 0.05), (10, 0.03))


def head_ranked_table(sets: list[ToolSet], encode, folder: Path) -> dict[str, list[dict]]:
    """Candidate recall under the share cap with the pairs ranked by the parameter head saved in ``folder``
    (build-graph --retrieval-rank head)."""
    from tasks.training.param_head import HEAD_FILE, ParamHead

    if not Path(folder, HEAD_FILE).is_file():
        return {}
    return recall_table(sets, encode, HEAD_RANKED_SETTINGS, head=ParamHead.load(Path(folder)))


def mean_recall(table: dict[str, list[dict]], k: int = VALIDATION_K) -> float:
    """The validation score: the retrieval rule's gold-edge recall at ``k``, averaged over the sets."""
    got = [r["recall"] for rows in table.values() for r in rows
           if r["strategy"] == "retrieval" and r["k"] == k and r["share_cap"] is None and r["recall"] is not None]
    return sum(got) / len(got) if got else 0.0


@task(cache_policy=NO_CACHE)
def parameter_head(sets: SplitToolSets, encode, folder: Path) -> dict | None:
    """Fit the parameter-level head (tasks/training/param_head.py) on the validation groups of the sets with
    parameter edges, save it beside the retriever, and measure it on their test groups, the name rules beside."""
    from tasks.training.param_examples import ParamExample
    from tasks.training.param_head import fit_on_toolsets, unit_features, unit_gold
    from tasks.training.param_scorer import param_metrics

    fit_sets = [ts for ts in sets.validation if ts.parameter_edges]
    if not fit_sets:
        return None
    head = fit_on_toolsets(fit_sets, encode)
    head.fitted_on = f"validation groups of {head.fitted_on}"
    head.save(folder)
    test = {}
    for ts in sets.test:
        if not ts.parameter_edges:
            continue
        units, x = unit_features(ts.tools, encode)
        gold = unit_gold(ts, ts.tools, units)
        examples = [ParamExample(ts.tools[p].doc, ts.tools[c].doc, q, int(g), ts.tools[c].group)
                    for (p, c, q), g in zip(units, gold)]
        test[ts.name] = param_metrics(examples, head.predict(x), head.threshold)
    return {"head": asdict(head), "test": test}


def reranker_test(sets: SplitToolSets, encode, folder: Path) -> dict:
    """The reranker of ``folder``: its stacked head, and its figures on every unit of the test sets with
    parameter edges (units outside its candidates: p 0, not kept), as the head is measured."""
    import numpy as np

    from tasks.training.param_examples import ParamExample
    from tasks.training.param_head import unit_features, unit_gold
    from tasks.training.param_reranker import ParamReranker
    from tasks.training.param_scorer import param_metrics

    reranker, test = ParamReranker(folder), {}
    for ts in sets.test:
        if not ts.parameter_edges:
            continue
        units, x = unit_features(ts.tools, encode)
        scored, p = reranker.score_units(ts.tools, units, x)
        prob = dict(zip(scored, p))
        gold = unit_gold(ts, ts.tools, units)
        examples = [ParamExample(ts.tools[a].doc, ts.tools[c].doc, q, int(g), ts.tools[c].group)
                    for (a, c, q), g in zip(units, gold)]
        test[ts.name] = param_metrics(examples, np.array([prob.get(u, 0.0) for u in units]), reranker.head.threshold)
        test[ts.name]["candidates"] = len(scored)
    return {"head": asdict(reranker.head), "test": test}


@task(cache_policy=NO_CACHE)
def parameter_reranker(cfg: RetrieverConfig, sets: SplitToolSets, encode, retriever: Path) -> dict | None:
    """Train the parameter reranker from the retriever's weights on the train groups' candidate units, fit its
    stacked head on the validation groups, save both in ``<retriever>/param_reranker`` and measure it on the
    test groups (tasks/training/param_reranker.py)."""
    from tasks.training.param_reranker import (RERANKER_DIR, fit_stacked_head, reranker_examples,
                                               train_param_reranker)

    fit_sets = [ts for ts in sets.validation if ts.parameter_edges]
    if not fit_sets:
        return None
    args = cfg.reranker_arguments()
    folder = retriever / RERANKER_DIR
    examples = reranker_examples(sets.train, encode, args.candidate_k)
    get_run_logger().info(f"parameter reranker: {len(examples.units)} candidate units of the train groups, "
                          f"{int(examples.gold.sum())} gold")
    trained = train_param_reranker(examples, retriever, args, folder)
    fit_stacked_head(fit_sets, encode, folder, args.candidate_k, args.max_length, seed=cfg.seed).save(folder)
    return {"trained": trained} | reranker_test(sets, encode, folder)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


SCORER_COLUMNS = ("set", "scorer", "P", "R", "F1", "beyond-rule R", "beyond-rule P")


def _scorer_row(name: str, label: str, r: dict, beyond: dict | None) -> str:
    extra = f"{_fmt(beyond['recall'])} (n={beyond['n_gold']}) | {_fmt(beyond['precision'])}" if beyond else "- | -"
    return f"| {name} | {label} | {r['precision']:.3f} | {r['recall']:.3f} | {r['f1']:.3f} | {extra} |"


def _table(intro: str, *columns: str) -> list[str]:
    """A report table's opening lines: its introduction, then the header row and the rule under it."""
    return ["", intro, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def report_markdown(metrics: dict) -> str:
    about = metrics.get("trained") or metrics  # measure-only: the checkpoint's own record
    lines = ["# Dependency retriever (flows/train_retriever.py)", ""]
    if metrics.get("checkpoint"):
        lines += [f"Measured {metrics['checkpoint']}.", ""]
    if "best_step" in about:
        lines += [f"Trained: {about.get('n_train')} examples, {about.get('steps')} steps, best step "
                  f"{about['best_step']}; validation recall@{VALIDATION_K} {about.get('untrained_validation', 0):.3f} "
                  f"untrained -> {about.get('best_validation', about.get('validation', 0)):.3f}.", ""]
    lines += [
             "Candidate recall of gold edges (own direction) and share of ordered same-group pairs kept, on groups "
             "and sets not trained on ('untrained': the base encoder):", "",
             "Candidate recall of gold edges (own direction) and share of ordered same-group pairs kept, on groups "
             "and sets not trained on:", "",
             "| set | strategy | k | share cap | untrained recall | trained recall | untrained share | trained share |",
             "|---|---|---|---|---|---|---|---|"]
    for name, rows in metrics["test"]["trained"].items():
        for before, after in zip(metrics["test"]["untrained"][name], rows):
            lines.append(f"| {name} | {after['strategy']} | {after['k']} | {_fmt(after['share_cap'])} | {_fmt(before['recall'])} | "
                         f"{_fmt(after['recall'])} | {before['ordered_share']:.3f} | {after['ordered_share']:.3f} |")
    if metrics["test"].get("head_ranked"):
        lines += _table("The same share caps with the pairs ranked by the parameter head (max p over the consumer's "
                        "inputs; build-graph --retrieval-rank head):", "set", "strategy", "k", "share cap", "recall", "share")
        for name, rows in metrics["test"]["head_ranked"].items():
            lines += [f"| {name} | {r['strategy']} | {r['k']} | {_fmt(r['share_cap'])} | {_fmt(r['recall'])} | "
                      f"{r['ordered_share']:.3f} |" for r in rows]
    head = metrics.get("parameter_head")
    if head:
        lines += _table(f"Parameter-level head ({head['head']['fitted_on']}, {head['head']['n_units']} units, "
                        f"{head['head']['n_gold']} gold; cut {head['head']['threshold']:.3f}), on test groups, every "
                        "(producer, consumer input) unit of every same-group ordered pair:", *SCORER_COLUMNS)
        for name, m in head["test"].items():
            beyond = m["beyond_rule"]
            for label, key in (("retriever head", "model"), ("rule exact", "rule_exact"),
                               ("rule exact or partial", "rule_exact_or_partial"), ("head or rule", "model_or_rule")):
                lines.append(_scorer_row(name, label, m[key], beyond if key == "model" else None))
    reranker = metrics.get("parameter_reranker")
    if reranker:
        lines += _table(f"Parameter reranker (stacked head fitted on {reranker['head']['fitted_on']}, cut "
                        f"{reranker['head']['threshold']:.3f}, candidates: top-{reranker['head']['candidate_k']} producers "
                        "of each input or a name-rule match), on the same test units:", *SCORER_COLUMNS, "candidate units")
        for name, m in reranker["test"].items():
            lines.append(_scorer_row(name, "reranker + head", m["model"], m["beyond_rule"]) +
                         f" {m['candidates']} of {m['n']} |")
    return "\n".join(lines) + "\n"


@flow(name="train-retriever", log_prints=True)
def train_retriever_flow(cfg: RetrieverConfig | None = None) -> dict:
    import torch

    from models.sentence_encoder import EncoderConfig, SentenceEncoder

    cfg = cfg or RetrieverConfig()
    cfg.check_inputs()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    for name in ("tasks.training.retriever", "tasks.training.param_reranker"):
        logging.getLogger(name).setLevel(logging.INFO)
    log = get_run_logger()
    started = time.time()
    out = Path(cfg.output)
    out.mkdir(parents=True, exist_ok=True)
    # Step 1: examples and the group split
    sets = split_toolsets(cfg)
    untrained_encoder = SentenceEncoder(EncoderConfig(cfg.base_model, max_length=cfg.max_length))
    untrained_test = recall_table(sets.test, untrained_encoder.encode)
    if cfg.checkpoint:  # measure only
        trained = SentenceEncoder(EncoderConfig(cfg.checkpoint))
        metrics = {"config": asdict(cfg), "checkpoint": cfg.checkpoint,
                   "trained": json.loads(Path(cfg.checkpoint, RETRIEVER_FILE).read_text())
                   if Path(cfg.checkpoint, RETRIEVER_FILE).is_file() else None,
                   "test": {"untrained": untrained_test, "trained": recall_table(sets.test, trained.encode)},
                   "parameter_head": parameter_head(sets, trained.encode, out)}
        metrics["test"]["head_ranked"] = head_ranked_table(sets.test, trained.encode, out)
        from tasks.training.param_reranker import RERANKER_DIR, ParamReranker
        if cfg.reranker:  # a reranker on top of the given retriever: out/best is a copy of it with the reranker
            import shutil

            best = out / "best"
            shutil.rmtree(best, ignore_errors=True)
            shutil.copytree(cfg.checkpoint, best, ignore=shutil.ignore_patterns(RERANKER_DIR))
            metrics["parameter_reranker"] = parameter_reranker(cfg, sets, trained.encode, best)
        elif ParamReranker.present(cfg.checkpoint):
            metrics["parameter_reranker"] = reranker_test(sets, trained.encode, Path(cfg.checkpoint, RERANKER_DIR))
        (out / "metrics.json").write_text(json.dumps(metrics, indent=1, default=str) + "\n")
        text = report_markdown(metrics)
        (out / "report.md").write_text(text)
        print(text)
        return metrics
    examples, counts = training_examples(cfg, sets)
    log.info(f"{len(examples)} training examples ({counts}); validation: "
             f"{', '.join(f'{t.name} {len(t.tools)} tools' for t in sets.validation)}")
    # Step 2: train, keeping the best validation recall
    def validate(encoder) -> float:
        table = recall_table(sets.validation, encoder.encode, [(VALIDATION_K, None)], ("retrieval",))
        log.info("validation recall@%d: %s", VALIDATION_K, ", ".join(
            f"{name} {rows[0]['recall']:.3f}" for name, rows in table.items() if rows[0]["recall"] is not None))
        return mean_recall(table)

    result = train_retriever(examples, cfg.arguments(), out, validate)
    # Step 3: report on the held-out groups and sets
    trained = SentenceEncoder(EncoderConfig(str(result.best_dir)))
    metrics = {"config": asdict(cfg), "trained_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "n_train": len(examples), "examples": counts, "steps": result.steps, "best_step": result.best_step,
               "untrained_validation": result.untrained_score, "best_validation": result.best_score,
               "history": result.history, "validation_k": VALIDATION_K,
               "test": {"untrained": untrained_test, "trained": recall_table(sets.test, trained.encode)},
               "parameter_head": parameter_head(sets, trained.encode, result.best_dir)}
    metrics["test"]["head_ranked"] = head_ranked_table(sets.test, trained.encode, result.best_dir)
    # Step 4 (--reranker): the cross-encoder over the candidate units, stacked with the head
    if cfg.reranker:
        metrics["parameter_reranker"] = parameter_reranker(cfg, sets, trained.encode, result.best_dir)
    metrics["seconds"] = round(time.time() - started)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1, default=str) + "\n")
    text = report_markdown(metrics)
    (out / "report.md").write_text(text)
    print(text)
    log.info(f"retriever: {result.best_dir} (use: build-graph --retrieval-encoder {result.best_dir})")
    return metrics


if __name__ == "__main__":
    CLI.run(train_retriever_flow)
