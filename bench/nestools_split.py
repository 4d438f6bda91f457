"""NesTools' held-out domains as tool-set folders (bench/RESULTS.md, "Two levels in one checkpoint"): the groups
split as train-retriever and train-discriminator's parameter level split them (60/20/20, split seed 0), each part
written with its tools, tool edges and parameter edges, so any flow can be measured on the domains the parameter
scorer never trained on.

    .venv/bin/python -m bench.nestools_split --output /tmp/n20
    .venv/bin/python -m flows.train_discriminator --checkpoint artifacts/discriminator/minilm/best \\
        --test /tmp/n20/nes_test --test-max-none none --output /tmp/n20/eval
"""
from __future__ import annotations

import argparse
from pathlib import Path

from tasks.graph.retriever_run import split_toolsets
from tasks.toolsets.readers import write_toolset_dir
from tasks.training.retriever_config import DEFAULT_BENCHMARKS, RetrieverConfig


def nestools_split(benchmarks_root: Path):
    """NesTools split by the run's own split step, with its defaults: the split the parameter scorer is trained
    with (``SplitToolSets``: train, validation and test parts)."""
    return split_toolsets.fn(RetrieverConfig(toolsets=("nestools",), heldout=(), benchmarks_root=str(benchmarks_root)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True, help="folder for nes_train, nes_fit and nes_test")
    parser.add_argument("--benchmarks-root", type=Path, default=Path(DEFAULT_BENCHMARKS))
    args = parser.parse_args(argv)
    sets = nestools_split(args.benchmarks_root)
    (nestools, train), = sets.train
    valid, test = ({t.group for t in part.tools} for part in (sets.validation[0], sets.test[0]))
    for name, groups in (("nes_train", train), ("nes_fit", train | valid), ("nes_test", test)):
        part = nestools.only_groups(groups)
        part.name = name
        write_toolset_dir(part, args.output / name)
        print(f"{args.output / name}: {len(groups)} domains, {len(part.tools)} tools, {len(part.edges)} tool edges, "
              f"{len(part.parameter_edges)} parameter edges")


if __name__ == "__main__":
    main()
