"""The discriminator on tool sets that declare inputs only (issue 7 diagnostic).

Many real catalogues list no output parameters; the project's hidden benchmark is one. Here API-Bank
is rewritten with every ``output_params`` removed, so each tool's output comes from its name
(``GetUserToken`` -> ``user_token``), and the same test pairs are scored with a checkpoint and its
stored cut, beside the exact parameter-match rule and the rule that also counts partial name
matches (``user_token`` -> ``token``, ``movie`` -> ``movie_id``). A checkpoint that carries a parameter scorer
(``best/parameter_scorer``) adds its two-level row.

    .venv/bin/python -m bench.inputs_only_eval --checkpoint artifacts/discriminator/minilm/best
    .venv/bin/python -m bench.inputs_only_eval --test-max-none none     # every ordered pair (real use's prior)
    .venv/bin/python -m bench.inputs_only_eval --benchmark /tmp/n20/nes_test --test-max-none 3000   # a tool-set folder
"""
from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import numpy as np

import flows.train_discriminator as td
from models.discriminator import load_calibration, trained_max_length
from tasks.graph.two_level import TWO_LEVEL_CUT, parameter_scorer_of
from tasks.toolsets.readers import load_benchmark, write_toolset_dir


def without_outputs(name: str, root: Path, out: Path) -> Path:
    toolset = load_benchmark(name, root)
    tools = [dataclasses.replace(t, doc={**t.doc, "output_params": []}) for t in toolset.tools]
    copy = f"{Path(name).name}-inputs-only"  # a benchmark name or a tool-set folder's path
    return write_toolset_dir(dataclasses.replace(toolset, name=copy, tools=tools), out / copy)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", default="artifacts/discriminator/minilm/best")
    p.add_argument("--benchmark", default="apibank", help="a benchmark name or a tool-set folder")
    p.add_argument("--test-max-none", default="500", help="none pairs kept (seeded), or none: all")
    a = p.parse_args(argv)
    max_none = None if a.test_max_none == "none" else int(a.test_max_none)
    cfg, best = td.TrainDiscriminatorConfig(), Path(a.checkpoint)
    calibration = load_calibration(best)
    threshold = calibration["threshold"] if calibration else None
    max_length = trained_max_length(calibration) or cfg.max_length
    print(f"| {a.benchmark} test pairs | method | P | R | F1 | beyond-rule R | beyond-rule P |\n|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, spec in ((f"{a.benchmark} as published", a.benchmark),
                            (f"{a.benchmark}, outputs removed", str(without_outputs(a.benchmark, cfg.benchmarks_root, Path(tmp))))):
            test_sets = td.toolset_pairs.fn((spec,), cfg.benchmarks_root, max_none, cfg.split_seed)
            pairs = test_sets[0][1]
            probs = np.asarray(td.score_examples.fn(best, pairs, max_length, 128, True, False)["probs"]).reshape(-1, 3)
            section, beside = td.report(pairs, probs, threshold), {}
            if parameter_scorer_of(best) is not None:  # two levels, and with the preconditions whose prerequisite checks
                two_level, checks = td.two_level_scores.fn(parameter_scorer_of(best), test_sets, probs, threshold,
                                                           ("off", "checks"))
                beside = {"test_two_level": td.report(pairs, two_level, TWO_LEVEL_CUT),
                          td.PRECONDITION_ROWS["checks"][0]: td.report(pairs, checks, TWO_LEVEL_CUT)}
            for method, metrics in td.comparison_rows(section, beside).items():
                d, b = metrics["dependency"], metrics.get("beyond_rule") or {}
                beyond = " | ".join("-" if b.get(k) is None else f"{b[k]:.3f}" for k in ("recall", "precision"))
                print(f"| {label} | {method} | {d['precision']:.3f} | {d['recall']:.3f} | {d['f1']:.3f} | {beyond} |")


if __name__ == "__main__":
    main()
