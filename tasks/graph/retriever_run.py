"""The steps of a dependency-retriever run (tasks/training/retriever.py trains; these split the tool sets, gather
the examples, choose the checkpoint by candidate recall of gold edges, fit and measure the parameter head and the
reranker, and write the report) and the whole run, ``run_retriever``: the train-retriever flow is that run, and
train-discriminator's parameter level runs it inside its own flow. Here rather than in tasks/training/ because
the retriever is judged by the graph's candidate recall (tasks/graph/candidates.py)."""
from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
# quote(x): Prefect passes x to the task without walking it for futures (the tool sets are thousands of tools)
from prefect.utilities.annotations import quote

from models.discriminator_defaults import POOLED
from schemas.toolset import ToolSet
from tasks.training.retriever import (RETRIEVER_FILE, RetrieverExample, tdi_retriever_examples,
                                      toolset_retriever_examples, train_retriever)
from tasks.training.retriever_config import REPORT_SETTINGS, VALIDATION_K, VALIDATION_TIE_KS, RetrieverConfig


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
        got = toolset_retriever_examples(ts, groups, cfg.seed, cfg.name_dropout, cfg.output_dropout)
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


def pooled_recall(table: dict[str, list[dict]], k: int = VALIDATION_K) -> float:
    """The retrieval rule's gold-edge recall at ``k`` over the gold edges of all the sets together (the validation
    score at ``VALIDATION_K``). Pooled, not averaged per set: every gold edge weighs the same, so a set with few
    validation edges (UltraTool's 4 groups) cannot outvote one with hundreds (NesTools' 29 domains)."""
    rows = [r for rows in table.values() for r in rows
            if r["strategy"] == "retrieval" and r["k"] == k and r["share_cap"] is None and r["gold_edges"]]
    gold = sum(r["gold_edges"] for r in rows)
    return sum(r["kept"] for r in rows) / gold if gold else 0.0


# the (k, share cap) settings validation measures: VALIDATION_K and the k of the curve that breaks its ties
VALIDATION_SETTINGS = [(k, None) for k in sorted({VALIDATION_K, *VALIDATION_TIE_KS})]


def validation_table(validation: list[ToolSet], encode) -> dict[str, list[dict]]:
    """The retrieval rule's recall on the validation groups at ``VALIDATION_SETTINGS``, read by ``validation_score``."""
    return recall_table(validation, encode, VALIDATION_SETTINGS, ("retrieval",))


def validation_score(table: dict[str, list[dict]]) -> tuple[float, float]:
    """The checkpoint's score: pooled recall at ``VALIDATION_K``, then, breaking its ties, the mean pooled recall
    at ``VALIDATION_TIE_KS``. Recall at one k moves in steps of one edge and ties often, and a tie kept the
    untrained encoder where training had raised recall@1 from 0.58 to 0.68 and the parameter head's F1 from
    0.726 to 0.765 (bench/RESULTS.md, "The retriever's checkpoint at a tie"); the curve tells them apart."""
    curve = sum(pooled_recall(table, k) for k in VALIDATION_TIE_KS) / len(VALIDATION_TIE_KS)
    return pooled_recall(table, VALIDATION_K), curve


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

    from models.discriminator import model_pooling
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
    return {"head": asdict(reranker.head), "pooling": model_pooling(reranker.model), "test": test}


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
        lines += _table(f"Parameter reranker (classifies {POOLED[reranker.get('pooling', 'cls')]}; stacked head fitted on "
                        f"{reranker['head']['fitted_on']}, cut {reranker['head']['threshold']:.3f}, candidates: top-{reranker['head']['candidate_k']} producers "
                        "of each input or a name-rule match), on the same test units:", *SCORER_COLUMNS, "candidate units")
        for name, m in reranker["test"].items():
            lines.append(_scorer_row(name, "reranker + head", m["model"], m["beyond_rule"]) +
                         f" {m['candidates']} of {m['n']} |")
    return "\n".join(lines) + "\n"


def run_retriever(cfg: RetrieverConfig) -> dict:
    """One run: train (or, with ``cfg.checkpoint``, measure only), report, and return the metrics written to
    ``<output>/metrics.json``. Call it inside a flow (its steps are Prefect tasks)."""
    import torch

    from models.sentence_encoder import EncoderConfig, MemoEncode, SentenceEncoder

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
        encode = MemoEncode(trained.encode)  # the test groups are encoded for three reports: once
        metrics = {"config": asdict(cfg), "checkpoint": cfg.checkpoint,
                   "trained": json.loads(Path(cfg.checkpoint, RETRIEVER_FILE).read_text())
                   if Path(cfg.checkpoint, RETRIEVER_FILE).is_file() else None,
                   "test": {"untrained": untrained_test, "trained": recall_table(sets.test, encode)},
                   "parameter_head": parameter_head(quote(sets), quote(encode), out)}
        metrics["test"]["head_ranked"] = head_ranked_table(sets.test, encode, out)
        from tasks.training.param_reranker import RERANKER_DIR, ParamReranker
        if cfg.reranker:  # a reranker on top of the given retriever: out/best is a copy of it with the reranker
            import shutil

            best = out / "best"
            shutil.rmtree(best, ignore_errors=True)
            shutil.copytree(cfg.checkpoint, best, ignore=shutil.ignore_patterns(RERANKER_DIR))
            metrics["parameter_reranker"] = parameter_reranker(cfg, quote(sets), quote(encode), best)
        elif ParamReranker.present(cfg.checkpoint):
            metrics["parameter_reranker"] = reranker_test(sets, encode, Path(cfg.checkpoint, RERANKER_DIR))
        (out / "metrics.json").write_text(json.dumps(metrics, indent=1, default=str) + "\n")
        text = report_markdown(metrics)
        (out / "report.md").write_text(text)
        print(text)
        return metrics
    examples, counts = training_examples(cfg, quote(sets))
    log.info(f"{len(examples)} training examples ({counts}); validation: "
             f"{', '.join(f'{t.name} {len(t.tools)} tools' for t in sets.validation)}")
    # Step 2: train, keeping the best validation recall
    def validate(encoder) -> tuple[float, float]:
        table = validation_table(sets.validation, encoder.encode)
        log.info("validation recall@%d: %s", VALIDATION_K, ", ".join(
            f"{name} {row['recall']:.3f}" for name, rows in table.items() for row in rows
            if row["k"] == VALIDATION_K and row["recall"] is not None))
        return validation_score(table)

    result = train_retriever(examples, cfg.arguments(), out, validate)
    # Step 3: report on the held-out groups and sets
    trained = SentenceEncoder(EncoderConfig(str(result.best_dir)))
    encode = MemoEncode(trained.encode)  # the test groups are encoded for three reports: once
    metrics = {"config": asdict(cfg), "trained_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "n_train": len(examples), "examples": counts, "steps": result.steps, "best_step": result.best_step,
               "untrained_validation": result.untrained_score, "best_validation": result.best_score,
               "history": result.history, "validation_k": VALIDATION_K,
               "test": {"untrained": untrained_test, "trained": recall_table(sets.test, encode)},
               "parameter_head": parameter_head(quote(sets), quote(encode), result.best_dir)}
    metrics["test"]["head_ranked"] = head_ranked_table(sets.test, encode, result.best_dir)
    # Step 4 (--reranker): the cross-encoder over the candidate units, stacked with the head
    if cfg.reranker:
        metrics["parameter_reranker"] = parameter_reranker(cfg, quote(sets), quote(encode), result.best_dir)
    metrics["seconds"] = round(time.time() - started)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1, default=str) + "\n")
    text = report_markdown(metrics)
    (out / "report.md").write_text(text)
    print(text)
    log.info(f"retriever: {result.best_dir} (use: build-graph --retrieval-encoder {result.best_dir})")
    return metrics

