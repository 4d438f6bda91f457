"""bench.closure_vs_gold: the pairs a source's transitive prerequisites add, counted against the gold's direct edges
and the pairs the gold's own closure implies, on a small warehouse."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import duckdb
import pytest

from bench.closure_vs_gold import closure_counts, main, unlisted_sample
from bench.readings import reading_rows
from tests.test_warehouse import DIM, tiny_dataset
from warehouse.build import build_warehouse


@pytest.fixture()
def chained(tmp_path):
    """The tiny dataset's gold (x depends on y): a -> b -> c -> a and d -> a; its discriminator edges e -> d plus
    d -> a and a -> b, a chain e -> d -> a -> b."""
    data = tiny_dataset()
    template = next(e for e in data.rows["edges"] if e["source"] == "discriminator")
    data.rows["edges"] += [{**template, "dependent": d, "prerequisite": p} for d, p in (("d", "a"), ("a", "b"))]
    path = tmp_path / "wh" / "tgr.duckdb"
    build_warehouse(path, [data], DIM)
    return path


def test_the_closure_adds_the_chain_and_is_counted_against_the_gold_and_what_it_implies(chained):
    con = duckdb.connect(str(chained), read_only=True)
    got = closure_counts(con, "tiny")
    # direct: (e,d), (d,a), (a,b); the closure adds (e,a), (e,b), (d,b). The gold's closure implies (a,c), (b,a),
    # (c,b), (d,b), (d,c) beyond its four edges: of the added pairs only (d,b) is one of them
    assert got["direct_edges"] == 3 and got["direct_in_the_gold"] == 2
    assert got["closure_adds"] == 3 and got["added_in_the_gold"] == 0
    assert got["gold_implied_pairs"] == 5 and got["added_among_gold_implied"] == 1
    assert got["direct_edges_among_gold_implied"] == 0
    assert got["added_precision_against_gold_and_implied"] == pytest.approx(1 / 3)
    assert got["gold_implied_recall_with_closure"] == pytest.approx(1 / 5)
    assert got["gold_implied_recall_direct_only"] == 0.0


def test_a_warehouse_without_both_sources_is_refused_with_the_reason(chained, tmp_path):
    with pytest.raises(SystemExit, match="no dataset has both 'manual' and 'schema' edges"):
        main(["--warehouse", str(chained), "--predicted", "schema"])
    with pytest.raises(SystemExit, match="no such file"):
        main(["--warehouse", str(tmp_path / "missing.duckdb")])


def test_the_sample_to_read_holds_the_added_pairs_the_gold_neither_lists_nor_implies(chained):
    con = duckdb.connect(str(chained), read_only=True)
    # added (e,a), (e,b), (d,b); the gold's closure implies (d,b). e reaches a through d in two steps, b only in three
    got = unlisted_sample(con, "tiny", 10)
    assert sorted(got, key=str) == [("a", "e", "d"), ("b", "e", None)]
    assert unlisted_sample(con, "tiny", 1, seed=3) == unlisted_sample(con, "tiny", 1, seed=3)
    assert len(unlisted_sample(con, "tiny", 1)) == 1


def test_the_committed_reading_has_a_verdict_on_every_row():
    rows = [cells for _, cells in reading_rows(Path(__file__).parents[1] / "bench" / "closure_sample.md")]
    verdicts = Counter(cells[4] for cells in rows)
    assert len(rows) == 30 and verdicts == {"right": 20, "borderline": 7, "wrong": 3}
