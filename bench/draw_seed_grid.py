"""The cross-encoder's catalog figures over draws of the mined TDI and training seeds (bench/RESULTS.md, "Draws of
the mined TDI and training seeds"). A draw is ``mine-tdi --seed D``: the same corpus, another sample of pairs per
class, outputs dropped, split and negatives; a seed is ``train-discriminator --seed S``. One training seed on one
draw moves the held-out figures by as much as a design change does, so a change is judged on the grid.

    .venv/bin/python -m bench.draw_seed_grid --root /tmp/grid                       # 3 draws x 3 seeds, about 1 h on 2 cores
    .venv/bin/python -m bench.draw_seed_grid --root /tmp/grid --cell 13:42=artifacts/discriminator/minilm \\
        --tdi 13=artifacts/tdi/tdi-mined                                            # reuse the default run and its TDI
    .venv/bin/python -m bench.draw_seed_grid --root /tmp/grid-ema --train-args "--ema-decay 0.95"   # a change, gridded

Each draw is mined into ``<root>/tdi-d<D>`` and each cell trained into ``<root>/d<D>_s<S>`` (``--no-parameter-scorer``:
the cross-encoder only), both skipped when already there, so a stopped grid goes on where it stopped. Per cell:
the held-out groups' calibrated F1 as the run reports it (the report's prior), the same at the real prior with the
stored cut and with a cut chosen on other groups (``bench.calibration_crossfit``), the cross-encoder on API-Bank,
the TDI validation split and the cut. The table gives each draw's three seeds and mean, the mean ± sd of all
cells, the sd of the draws' means and the mean sd within a draw. ``--out`` also writes the cells as JSON.
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.retriever_seeds import spread

# (key, the table's row title); the key names a cell's figure in ``cell_figures``
ROWS = (("heldout", "UltraTool+TMDB held-out groups, calibrated, every pair (runs before 2026-12-01's last: "
                    "finetuning's sample of their none pairs)"),
        ("heldout_ultratool", "of them UltraTool's held-out groups"),
        ("heldout_tmdb", "of them TMDB's held-out tools (runs before the split per data set: none)"),
        ("real_prior", "the same at the real prior, stored cut"),
        ("real_prior_ultratool", "of it UltraTool's held-out groups (runs before metrics.json's at_prior: none)"),
        ("real_prior_tmdb", "of it TMDB's held-out tools (likewise)"),
        ("real_prior_recall", "its recall (every gold link of these sets is beyond the name rules)"),
        ("real_prior_precision", "its precision"),
        ("crossfit", "the same, cut chosen on other groups (2-fold, 5 splits)"),
        ("apibank", "API-Bank, cross-encoder calibrated"),
        ("tdi", "TDI validation, calibrated"),
        ("cut", "calibrated cut"))


@dataclass(frozen=True)
class Cell:
    draw: int
    seed: int
    run: Path  # a train-discriminator --output folder (metrics.json, best/)


def _pairs(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"--{what} {text!r}: comma-separated integers") from None
    if not values or len(set(values)) != len(values):
        raise SystemExit(f"--{what} {text!r}: at least one, each once")
    return values


def _mapping(items: list[str], flag: str) -> dict[str, Path]:
    out = {}
    for item in items:
        key, sep, path = item.partition("=")
        if not sep or not key or not path:
            raise SystemExit(f"{flag} {item!r}: KEY=PATH")
        out[key] = Path(path)
    return out


def plan(root: Path, draws: list[int], seeds: list[int], tdis: dict[int, Path], cells: dict[tuple[int, int], Path],
         mine_args: list[str], train_args: list[str]) -> tuple[list[Cell], list[tuple[str, list[str]]]]:
    """The grid's cells and the commands still to run for them, in order, each with its log's name: each draw's
    mine-tdi where its TDI is not there (a manifest), then each cell's train-discriminator where its run has no
    metrics.json."""
    python = [sys.executable, "-m"]
    commands: list[tuple[str, list[str]]] = []
    grid: list[Cell] = []
    for draw in draws:
        tdi = tdis.get(draw, root / f"tdi-d{draw}")
        todo = [s for s in seeds if (draw, s) not in cells and not (root / f"d{draw}_s{s}" / "metrics.json").is_file()]
        if todo and not (tdi / "manifest.json").is_file():
            if draw in tdis:
                raise SystemExit(f"--tdi {draw}={tdi}: no manifest.json there")
            commands.append((tdi.name, [*python, "flows.mine_tdi", "--output-root", str(root), "--dataset", tdi.name,
                                        "--seed", str(draw), *mine_args]))
        for seed in seeds:
            run = cells.get((draw, seed), root / f"d{draw}_s{seed}")
            grid.append(Cell(draw, seed, run))
            if seed in todo:
                commands.append((run.name, [*python, "flows.train_discriminator", "--pretrain-data", str(tdi),
                                            "--output", str(run), "--seed", str(seed), "--no-parameter-scorer", *train_args]))
    return grid, commands


def cell_figures(run: Path, held_out: dict[str, float]) -> dict[str, float]:
    """One cell's figures: those its metrics.json reports, and ``held_out``'s real-prior ones (``real_prior``,
    ``real_prior_recall``, ``real_prior_precision``, ``crossfit``)."""
    metrics = json.loads((run / "metrics.json").read_text())
    validation = metrics["validation"]
    by_set = metrics.get("validation_by_set") or {}
    return {"heldout": validation["finetune"]["calibrated"]["dependency"]["f1"],
            **{f"heldout_{name}": by_set[name]["calibrated"]["dependency"]["f1"] if name in by_set else float("nan")
               for name in ("ultratool", "tmdb")},
            **{key: held_out[key] for key in ("real_prior", "real_prior_recall", "real_prior_precision", "crossfit")},
            **{f"real_prior_{name}": by_set[name]["at_prior"]["f1"] if "at_prior" in by_set.get(name, {}) else float("nan")
               for name in ("ultratool", "tmdb")},
            "apibank": metrics["test"]["calibrated"]["dependency"]["f1"],
            "tdi": validation["tdi"]["calibrated"]["dependency"]["f1"],
            "cut": metrics["calibration"]["threshold"]}


def grid_table(figures: dict[tuple[int, int], dict[str, float]]) -> str:
    """The markdown table: per row, each draw's seeds and their mean, all cells' mean ± sd, the sd of the draws'
    means and the mean sd within a draw (the last two need two draws, and two seeds per draw)."""
    draws = sorted({d for d, _ in figures})
    seeds = {d: [s for dd, s in figures if dd == d] for d in draws}
    head = f"| seeds {' / '.join(map(str, seeds[draws[0]]))} | " + " | ".join(f"draw {d}" for d in draws)
    lines = [head + " | all cells | sd of the draws' means | mean sd within a draw |",
             "|---|" + "---|" * (len(draws) + 3)]
    for key, title in ROWS:
        per_draw = {d: [figures[(d, s)][key] for s in seeds[d]] for d in draws}
        cells = [" / ".join(f"{v:.3f}" for v in vs) + f" ({statistics.mean(vs):.3f})" for vs in per_draw.values()]
        every = [v for vs in per_draw.values() for v in vs]
        between = f"{statistics.stdev([statistics.mean(vs) for vs in per_draw.values()]):.3f}" if len(draws) > 1 else "-"
        within = (f"{statistics.mean(statistics.stdev(vs) for vs in per_draw.values()):.3f}"
                  if all(len(vs) > 1 for vs in per_draw.values()) else "-")
        lines.append(f"| {title} | " + " | ".join(cells) + f" | **{spread(every)}** | {between} | {within} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True, help="where the draws' TDIs and the cells' runs are written")
    parser.add_argument("--draws", default="13,14,15", help="mine-tdi seeds (13: mine-tdi's default)")
    parser.add_argument("--seeds", default="42,1,2", help="train-discriminator seeds (42: its default)")
    parser.add_argument("--tdi", action="append", default=[], metavar="D=PATH",
                        help="a draw's mined TDI already there (repeatable), e.g. 13=artifacts/tdi/tdi-mined")
    parser.add_argument("--cell", action="append", default=[], metavar="D:S=PATH",
                        help="a cell's train-discriminator run already there (repeatable)")
    parser.add_argument("--mine-args", default="", help="more mine-tdi arguments for every draw (one string)")
    parser.add_argument("--train-args", default="", help="more train-discriminator arguments for every cell (one string)")
    parser.add_argument("--summarize-only", action="store_true", help="run nothing: the table of the cells already there")
    parser.add_argument("--out", type=Path, help="also write every cell's figures here (JSON)")
    args = parser.parse_args(argv)
    draws, seeds = _pairs(args.draws, "draws"), _pairs(args.seeds, "seeds")
    tdis = {int(k): v for k, v in _mapping(args.tdi, "--tdi").items()}
    cells = {}
    for key, path in _mapping(args.cell, "--cell").items():
        draw, sep, seed = key.partition(":")
        if not sep:
            raise SystemExit(f"--cell {key!r}: D:S=PATH")
        cells[(int(draw), int(seed))] = path
    grid, commands = plan(args.root, draws, seeds, tdis, cells, shlex.split(args.mine_args), shlex.split(args.train_args))
    if commands and args.summarize_only:
        missing = [c.run for c in grid if not (c.run / "metrics.json").is_file()]
        raise SystemExit(f"--summarize-only: {len(missing)} cell(s) not trained yet, first {missing[0]}")
    args.root.mkdir(parents=True, exist_ok=True)
    for name, command in commands:  # one at a time: each uses every core
        print("$", shlex.join(command), flush=True)
        log = args.root / f"{name}.log"
        with log.open("w") as out:
            if subprocess.run(command, stdout=out, stderr=subprocess.STDOUT).returncode:
                raise SystemExit(f"failed: {shlex.join(command)} (log: {log})")

    from bench.calibration_crossfit import figures, held_out_groups
    from tasks.training.metrics import prf_of_counts as prf

    valid, weights = held_out_groups()
    results: dict[tuple[int, int], dict[str, float]] = {}
    for cell in grid:
        rows = figures(cell.run / "best", valid, weights)
        precision, recall, f1 = prf(rows["stored"][1])
        results[(cell.draw, cell.seed)] = cell_figures(cell.run, {
            "real_prior": f1, "real_prior_recall": recall, "real_prior_precision": precision,
            "crossfit": prf(rows["crossfit"][1])[2]})
    print(grid_table(results))
    if args.out:
        args.out.write_text(json.dumps([{"draw": d, "seed": s, "run": str(c.run), **results[(d, s)]}
                                        for c in grid for d, s in [(c.draw, c.seed)]], indent=1))


if __name__ == "__main__":
    main()
