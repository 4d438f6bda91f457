"""How much of each tool set's gold the name rules cannot find: the denominators of beyond-rule recall.

On the pairs train-discriminator evaluates (``build_toolset_pairs``: every dependency pair of the tool set
in both orders plus ``--max-none`` none pairs), the gold dependencies the exact rule finds, the partial
rule finds, and neither finds (``tasks.training.metrics.beyond_rule_metrics``' ``n_gold``), and the pairs
neither rule fires on. No model: the figures say how much a model must add beyond the rule.
``<name>-inputs-only``: the benchmark with every ``output_params`` removed (``bench.inputs_only_eval``).

    .venv/bin/python -m bench.beyond_rule_share --sets apibank,apibank-inputs-only,ultratool,tmdb,nestools
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

import flows.train_discriminator as td
from bench.inputs_only_eval import without_outputs
from tasks.training.metrics import DEPENDENCY_CLASSES, beyond_rule_metrics, rule_labels


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sets", default="apibank,apibank-inputs-only,ultratool,tmdb,nestools", help="benchmark names or tool set folders")
    p.add_argument("--max-none", type=int, default=500, help="none pairs per set (train-discriminator's --test-max-none)")
    p.add_argument("--seed", type=int, default=13)
    a = p.parse_args(argv)
    cfg = td.TrainDiscriminatorConfig()
    print("| tool set | gold dependency pairs | exact rule finds | partial rule finds | beyond both rules | "
          "of which a rule fires the wrong way | pairs neither rule fires on |\n|---|---|---|---|---|---|---|")
    tmp = tempfile.TemporaryDirectory()
    for spec in a.sets.split(","):
        source = spec
        if spec.endswith("-inputs-only"):
            source = str(without_outputs(spec.removesuffix("-inputs-only"), cfg.benchmarks_root, Path(tmp.name)))
        pairs = td.build_toolset_pairs.fn((source,), cfg.benchmarks_root, a.max_none, a.seed)
        y = np.asarray([e.label for e in pairs])
        exact, partial = np.asarray(rule_labels(pairs)), np.asarray(rule_labels(pairs, partial=True))
        gold = np.isin(y, DEPENDENCY_CLASSES)
        b = beyond_rule_metrics(y, y, exact, partial)  # the gold labels as predictions: only the counts are used
        n = int(gold.sum())
        share = f"{b['n_gold']} ({b['n_gold'] / n:.1%})" if n else "0"
        print(f"| {spec} | {n} | {int((gold & (exact == y)).sum())} | {int((gold & (partial == y)).sum())} | {share} | "
              f"{b['n_gold_rule_wrong_way']} | {b['n_rule_silent']} of {len(y)} |")
    tmp.cleanup()


if __name__ == "__main__":
    main()
