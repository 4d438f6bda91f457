"""What the warehouse's transitive prerequisites add over a source's direct edges, against the gold's own.

``prerequisite_closure`` (warehouse/sql/030_marts.sql, what ``prerequisites_of`` returns) lists every tool a tool
needs first through a chain of edges. Per dataset with gold (``manual``) edges: the predicted source's direct edges,
the pairs its closure adds, how many of those the gold lists directly, and how many are pairs the gold's own closure
implies (an indirect dependency: the prerequisite of a prerequisite); the share of the gold's implied pairs the
predicted closure finds (bench/RESULTS.md, "Indirect prerequisites: what the closure adds").

    .venv/bin/python -m bench.closure_vs_gold --warehouse <build-graph's warehouse>
    .venv/bin/python -m bench.closure_vs_gold --warehouse <w> --sample 30   # also pairs to read (bench/closure_sample.md)
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

# the predicted source's direct edges and the pairs its closure adds; the gold's edges and the pairs its closure
# implies beyond them (self pairs left out everywhere: a tool on a cycle lists itself)
PAIRS = """
WITH direct AS (SELECT dependent AS tool_id, prerequisite FROM edges
                WHERE dataset = $ds AND source = $predicted AND dependent <> prerequisite),
     reached AS (SELECT tool_id, prerequisite FROM prerequisite_closure
                 WHERE dataset = $ds AND source = $predicted AND tool_id <> prerequisite),
     gold AS (SELECT dependent AS tool_id, prerequisite FROM edges
              WHERE dataset = $ds AND source = $gold AND dependent <> prerequisite),
     implied AS (SELECT tool_id, prerequisite FROM prerequisite_closure
                 WHERE dataset = $ds AND source = $gold AND tool_id <> prerequisite
                 EXCEPT SELECT * FROM gold),
     added AS (SELECT * FROM reached EXCEPT SELECT * FROM direct)
"""
COUNTS = PAIRS + """
SELECT (SELECT count(*) FROM direct), (SELECT count(*) FROM added),
       (SELECT count(*) FROM (SELECT * FROM added INTERSECT SELECT * FROM gold)),
       (SELECT count(*) FROM implied),
       (SELECT count(*) FROM (SELECT * FROM added INTERSECT SELECT * FROM implied)),
       (SELECT count(*) FROM (SELECT * FROM direct INTERSECT SELECT * FROM implied)),
       (SELECT count(*) FROM (SELECT * FROM direct INTERSECT SELECT * FROM gold))
"""


def closure_counts(con, dataset: str, predicted: str = "discriminator", gold: str = "manual") -> dict:
    """The counts for one dataset."""
    direct, added, added_gold, implied, added_implied, direct_implied, direct_gold = con.execute(
        COUNTS, {"ds": dataset, "predicted": predicted, "gold": gold}).fetchall()[0]
    right = added_gold + added_implied
    return {"direct_edges": direct, "direct_in_the_gold": direct_gold, "closure_adds": added,
            "added_in_the_gold": added_gold, "gold_implied_pairs": implied, "added_among_gold_implied": added_implied,
            "direct_edges_among_gold_implied": direct_implied,
            "direct_precision_against_gold_and_implied": (direct_gold + direct_implied) / direct if direct else None,
            "added_precision_against_gold_and_implied": right / added if added else None,
            "gold_implied_recall_with_closure": (added_implied + direct_implied) / implied if implied else None,
            "gold_implied_recall_direct_only": direct_implied / implied if implied else None}


UNLISTED = PAIRS + """,
     unlisted AS (SELECT * FROM added EXCEPT SELECT * FROM gold EXCEPT SELECT * FROM implied)
SELECT u.prerequisite, u.tool_id,
       (SELECT string_agg(DISTINCT d.prerequisite, ', ' ORDER BY d.prerequisite) FROM direct d JOIN direct d2
          ON d2.tool_id = d.prerequisite AND d2.prerequisite = u.prerequisite WHERE d.tool_id = u.tool_id) AS via
FROM unlisted u ORDER BY u.prerequisite, u.tool_id
"""


def unlisted_sample(con, dataset: str, n: int, seed: int = 0, predicted: str = "discriminator",
                    gold: str = "manual") -> list[tuple[str, str, str | None]]:
    """A seeded sample of the pairs the closure adds that the gold neither lists nor implies, to read by hand:
    (prerequisite, dependent, the intermediate tools of a two-step chain, or None where only longer chains reach)."""
    rows = con.execute(UNLISTED, {"ds": dataset, "predicted": predicted, "gold": gold}).fetchall()
    return random.Random(seed).sample(rows, min(n, len(rows)))


def main(argv: list[str] | None = None) -> None:
    import duckdb

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warehouse", type=Path, required=True, help="a warehouse build-graph wrote")
    parser.add_argument("--predicted", default="discriminator", help="the edge source whose closure is counted")
    parser.add_argument("--gold", default="manual", help="the gold edges' source")
    parser.add_argument("--sample", type=int, default=0,
                        help="also print this many added pairs the gold neither lists nor implies, to read (seeded)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.warehouse.is_file():
        raise SystemExit(f"--warehouse {args.warehouse}: no such file (build-graph --warehouse writes one)")
    con = duckdb.connect(str(args.warehouse), read_only=True)
    datasets = [d for (d,) in con.execute(
        "SELECT dataset FROM edges WHERE source = ? INTERSECT SELECT dataset FROM edges WHERE source = ? ORDER BY 1",
        [args.gold, args.predicted]).fetchall()]
    if not datasets:
        raise SystemExit(f"{args.warehouse}: no dataset has both {args.gold!r} and {args.predicted!r} edges")
    print(json.dumps({d: closure_counts(con, d, args.predicted, args.gold) for d in datasets}, indent=1))
    for d in datasets if args.sample else ():
        print(f"\n{d}: pairs the closure adds that the gold neither lists nor implies\n\n"
              "| # | prerequisite | through | dependent | verdict | why |\n|---|---|---|---|---|---|")
        for n, (pre, dep, via) in enumerate(unlisted_sample(con, d, args.sample, args.seed, args.predicted, args.gold), 1):
            print(f"| {n} | `{pre}` | {via or 'a longer chain'} | `{dep}` |  |  |")


if __name__ == "__main__":
    main()
