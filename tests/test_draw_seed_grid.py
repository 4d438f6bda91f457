"""bench.draw_seed_grid: which commands a grid still needs, a cell's figures, and the table's spreads."""
import json
import math
import statistics

import pytest

from bench.draw_seed_grid import ROWS, Cell, cell_figures, grid_table, main, plan


def _metrics(run, heldout=0.4, apibank=0.8, tdi=0.5, cut=0.9, by_set=None):
    run.mkdir(parents=True)
    dep = lambda f1: {"calibrated": {"dependency": {"f1": f1}}}  # noqa: E731
    (run / "metrics.json").write_text(json.dumps({"validation": {"finetune": dep(heldout), "tdi": dep(tdi)},
                                                  "test": dep(apibank), "calibration": {"threshold": cut},
                                                  **({"validation_by_set": {k: {**dep(v), "at_prior": {"f1": v / 2}}
                                                                            for k, v in by_set.items()}}
                                                     if by_set else {})}))


def test_a_grid_mines_the_draws_it_lacks_and_trains_only_the_cells_without_metrics(tmp_path):
    root = tmp_path / "grid"
    default_tdi = tmp_path / "tdi-mined"
    default_tdi.mkdir()
    (default_tdi / "manifest.json").write_text("{}")
    _metrics(tmp_path / "default-run")                      # draw 13, seed 42: given with --cell
    _metrics(root / "d14_s1")                               # draw 14, seed 1: trained by an earlier, stopped grid
    grid, commands = plan(root, [13, 14], [42, 1], {13: default_tdi}, {(13, 42): tmp_path / "default-run"},
                          ["--keyed-state"], ["--ema-decay", "0.95"])
    assert grid == [Cell(13, 42, tmp_path / "default-run"), Cell(13, 1, root / "d13_s1"),
                    Cell(14, 42, root / "d14_s42"), Cell(14, 1, root / "d14_s1")]
    names = [name for name, _ in commands]
    assert names == ["d13_s1", "tdi-d14", "d14_s42"]        # draw 13's TDI is there; draw 14 is mined before its cell
    by_name = {name: argv for name, argv in commands}
    assert by_name["tdi-d14"][1:] == ["-m", "flows.mine_tdi", "--output-root", str(root), "--dataset", "tdi-d14",
                                      "--seed", "14", "--keyed-state"]
    assert by_name["d13_s1"][by_name["d13_s1"].index("--pretrain-data") + 1] == str(default_tdi)
    assert by_name["d14_s42"][3:] == ["--pretrain-data", str(root / "tdi-d14"), "--output", str(root / "d14_s42"),
                                      "--seed", "42", "--no-parameter-scorer", "--ema-decay", "0.95"]
    # a draw whose cells are all trained is not mined again
    _metrics(root / "d14_s42")
    assert [n for n, _ in plan(root, [14], [42, 1], {}, {}, [], [])[1]] == []


def test_a_given_tdi_without_a_manifest_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="--tdi 13=.*no manifest.json"):
        plan(tmp_path / "grid", [13], [42], {13: tmp_path / "nowhere"}, {}, [], [])


def test_a_cells_figures_come_from_its_metrics_and_the_real_prior_ones_given(tmp_path):
    _metrics(tmp_path / "run", heldout=0.45, apibank=0.83, tdi=0.53, cut=0.89, by_set={"ultratool": 0.5, "tmdb": 0.3})
    real = {"real_prior": 0.37, "real_prior_recall": 0.32, "real_prior_precision": 0.5, "crossfit": 0.29}
    assert cell_figures(tmp_path / "run", real) == {"heldout": 0.45, "heldout_ultratool": 0.5, "heldout_tmdb": 0.3,
                                                    **real, "real_prior_ultratool": 0.25, "real_prior_tmdb": 0.15,
                                                    "apibank": 0.83, "tdi": 0.53, "cut": 0.89}
    # a run from before the split per data set reports no part on its own: its rows read nan, not a number
    _metrics(tmp_path / "old", heldout=0.45)
    old = cell_figures(tmp_path / "old", real)
    assert all(math.isnan(old[k]) for k in ("heldout_ultratool", "heldout_tmdb", "real_prior_ultratool", "real_prior_tmdb"))
    assert old["heldout"] == 0.45


def test_the_table_gives_each_draw_its_mean_and_the_spreads_between_and_within_draws():
    values = {(13, 42): 0.40, (13, 1): 0.50, (14, 42): 0.20, (14, 1): 0.30}
    keys = [key for key, _ in ROWS]
    figures = {cell: dict.fromkeys(keys, v) for cell, v in values.items()}
    table = grid_table(figures).splitlines()
    assert table[0] == "| seeds 42 / 1 | draw 13 | draw 14 | all cells | sd of the draws' means | mean sd within a draw |"
    row = table[2].split(" | ")
    assert row[1:3] == ["0.400 / 0.500 (0.450)", "0.200 / 0.300 (0.250)"]
    every = list(values.values())
    assert row[3] == f"**{statistics.mean(every):.3f} ± {statistics.stdev(every):.3f}**"
    assert row[4] == f"{statistics.stdev([0.45, 0.25]):.3f}"            # 0.141: the draws apart
    assert row[5] == f"{statistics.stdev([0.4, 0.5]):.3f} |"            # 0.071: the seeds apart, the same in both
    assert len(table) == 2 + len(keys)


def test_summarize_only_names_a_cell_not_trained_yet(tmp_path):
    tdi = tmp_path / "tdi"
    tdi.mkdir()
    (tdi / "manifest.json").write_text("{}")
    _metrics(tmp_path / "run")
    with pytest.raises(SystemExit, match=r"--summarize-only: 1 cell\(s\) not trained yet, first .*d13_s1"):
        main(["--root", str(tmp_path / "grid"), "--draws", "13", "--seeds", "42,1", "--tdi", f"13={tdi}",
              "--cell", f"13:42={tmp_path / 'run'}", "--summarize-only"])
    with pytest.raises(SystemExit, match="--seeds '1,1': at least one, each once"):
        main(["--root", str(tmp_path / "grid"), "--seeds", "1,1"])
