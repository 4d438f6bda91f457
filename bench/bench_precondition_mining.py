"""Precondition pairs (call order without data flow, tasks/mining/order.py) at corpus scale: mining the stdlib +
this interpreter's site-packages, as mine-tdi lists them, without and then with precondition candidates, in one
sitting, so the extra time is measured on the same box.

    .venv/bin/python -m bench.bench_precondition_mining                      # both runs, the default corpus
    .venv/bin/python -m bench.bench_precondition_mining --only with --sample 50 --seed 22   # + a hand-reading sample
    .venv/bin/python -m bench.bench_precondition_mining --only with --sample 50 --sample-min-support 2  # of support >= 2
    .venv/bin/python -m bench.bench_precondition_mining --only with --test-orders  # test code's call orders too
    .venv/bin/python -m bench.bench_precondition_mining --only with --sample 50 --sample-pattern state_guard,error_message  # stated in code
    .venv/bin/python -m bench.bench_precondition_mining --compare-inherited --sample 30 --sample-inherited  # docstrings of base methods
    .venv/bin/python -m bench.bench_precondition_mining --compare-doctests --sample 50 --sample-pattern doctest  # usage examples

Prints files, data-flow pairs, precondition candidates, accepted pairs (distinct (consumer, producer), both
sides documented: that is what acceptance requires), how many have support >= 2, accepted pairs and candidates
per pattern, rejections per reason, and the mining wall time of each run (parse in 2 processes + resolve).
``--sample N`` draws N accepted pairs (seeded, from the pairs sorted by key) as a markdown table to fill in.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections import Counter

from tasks.mining.doctests import DOCTEST_PREFIX, DOCTEST_USAGE
from tasks.mining.mine import MineResult, mine_files
from tasks.mining.sources import FileItem, default_roots, tree_files
from tasks.mining.state import stated


def corpus(sources: list[str]) -> list[FileItem]:
    """The files mine-tdi mines for these sources (flows/mine_tdi.py ``list_files``, without Prefect)."""
    items: list[FileItem] = []
    for kind in sources:
        for root in default_roots(kind):
            items += tree_files(root, kind)
    seen: set[str] = set()
    return [i for i in items if not (i.path in seen or seen.add(i.path))]  # purelib == platlib


def summary(res: MineResult, seconds: float) -> dict:
    per_pattern_pairs: Counter[str] = Counter(p for o in res.orders for p in o.patterns)
    return {
        "mine_s": round(seconds, 1), "files_read": res.files_read, "files_parsed": res.files_parsed,
        "flow_candidates": res.candidates, "flow_pairs": len(res.flows),
        "order_candidates": res.order_candidates, "order_pairs": len(res.orders),
        "order_pairs_support_ge_2": sum(1 for o in res.orders if o.support >= 2),
        # what mine-tdi keeps at its default --min-order-support 2: a pair stated in code needs no second function
        "order_pairs_kept_by_default": sum(1 for o in res.orders if o.support >= 2 or stated(o.patterns)),
        "order_pairs_by_pattern": dict(sorted(per_pattern_pairs.items())),
        "order_pairs_by_pattern_set": dict(sorted(Counter("+".join(o.patterns) for o in res.orders).items())),
        # pairs seen in a docstring's examples, and those seen nowhere else (tasks/mining/doctests.py)
        "order_pairs_in_doctests": sum(1 for o in res.orders if "doctest" in _pattern_names(o.patterns)),
        "order_pairs_only_in_doctests": sum(1 for o in res.orders if all(p.startswith((DOCTEST_PREFIX, DOCTEST_USAGE)) for p in o.patterns)),
        "order_pairs_doctest_usage": sum(1 for o in res.orders if DOCTEST_USAGE in _pattern_names(o.patterns)),
        "order_rejected_by_reason": dict(sorted(res.order_reason_counts().items(), key=lambda kv: -kv[1])),
        "inherited_docs": res.inherited_docs,
        # accepted pairs with a side whose docstring is its base method's (SymbolTable.inherit_docstrings)
        "flow_pairs_with_inherited_doc": sum(1 for f in res.flows if _inherited(res.targets, f.consumer, f.producer)),
        "order_pairs_with_inherited_doc": sum(1 for o in res.orders if _inherited(res.order_targets, o.consumer, o.producer)),
    }


def _pattern_names(patterns: tuple[str, ...]) -> set[str]:
    """The patterns, their families (``doctest_usage`` of ``doctest_usage:guard``), and ``doctest`` when one was
    seen in a docstring's examples (``doctest:guard``, ``doctest_usage:guard``)."""
    names = set(patterns) | {p.split(":", 1)[0] for p in patterns}
    return names | {"doctest" for p in patterns if p.startswith((DOCTEST_PREFIX, DOCTEST_USAGE))}


def _inherited(targets: dict, *keys: str) -> bool:
    return any(targets[k].facts.docstring_from for k in keys if k in targets)



def sample_table(res: MineResult, n: int, seed: int, min_support: int = 1, pattern: str | None = None,
                 inherited: bool = False) -> str:
    wanted = set(pattern.split(",")) if pattern else None
    pairs = sorted((o for o in res.orders if o.support >= min_support and (wanted is None or wanted & _pattern_names(o.patterns))
                    and (not inherited or _inherited(res.order_targets, o.consumer, o.producer))),
                   key=lambda o: (o.consumer, o.producer))
    drawn = random.Random(seed).sample(pairs, min(n, len(pairs)))
    rows = ["| # | producer (first) | consumer (then) | pattern | support | record id | verdict | why |", "|---|---|---|---|---|---|---|---|"]
    for i, o in enumerate(drawn, 1):
        rows.append(f"| {i} | `{o.producer}` | `{o.consumer}` | {'+'.join(o.patterns)} | {o.support} | `{o.record_id}` |  |  |")
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", default="stdlib,site-packages")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--only", choices=("with", "without"), help="one run only")
    p.add_argument("--sample", type=int, default=0, help="draw this many accepted pairs for reading by hand")
    p.add_argument("--seed", type=int, default=22)
    p.add_argument("--sample-out", default=None, help="write the sample table here (markdown)")
    p.add_argument("--sample-min-support", type=int, default=1, help="draw the sample from pairs with at least this support")
    p.add_argument("--sample-pattern", default=None, help="draw the sample from pairs with one of these patterns (comma-separated: state_guard,error_message,fitted_check,docstring_order,state_use,keyed_state; doctest: any pattern seen in a docstring's examples; doctest_usage: those whose consumer the docstring documents)")
    p.add_argument("--test-orders", action="store_true", help="count call orders in test code too (mine-tdi --test-orders)")
    p.add_argument("--keyed-state", action="store_true", help="the stated pattern keyed_state too (mine-tdi --keyed-state)")
    p.add_argument("--sample-inherited", action="store_true", help="draw the sample from pairs with a side whose docstring is its base method's")
    p.add_argument("--compare-inherited", action="store_true",
                   help="run with precondition candidates twice instead: without, then with docstrings inherited from base methods")
    p.add_argument("--compare-doctests", action="store_true",
                   help="run with precondition candidates twice instead: without, then with call orders in docstrings' examples")
    a = p.parse_args()
    items = corpus(a.source.split(","))
    out: dict = {"files": len(items), "load_1min_before": os.getloadavg()[0]}
    if a.compare_inherited:  # (label, orders, inherited docstrings, doctests)
        runs = (("without", True, False, True), ("with", True, True, True))
    elif a.compare_doctests:
        runs = (("without", True, True, False), ("with", True, True, True))
    else:
        runs = (("without", False, True, True), ("with", True, True, True))
    for label, orders, inherit, doctests in runs:
        if a.only and a.only != label:
            continue
        t0 = time.perf_counter()
        res = mine_files(items, workers=a.workers, orders=orders, test_orders=a.test_orders, inherit_docs=inherit,
                         doctests=doctests, keyed_state=a.keyed_state)
        out[label] = summary(res, time.perf_counter() - t0)
        out[label]["load_1min_after"] = os.getloadavg()[0]
        print(json.dumps({label: out[label]}, indent=2), flush=True)
        if label == "with" and a.sample:
            table = sample_table(res, a.sample, a.seed, a.sample_min_support, a.sample_pattern, a.sample_inherited)
            if a.sample_out:
                with open(a.sample_out, "w") as fh:
                    fh.write(table + "\n")
            else:
                print(table)
        del res
    if "with" in out and "without" in out:
        out["extra_s"] = round(out["with"]["mine_s"] - out["without"]["mine_s"], 1)
        print(json.dumps({"extra_s": out["extra_s"], "load_1min_before": out["load_1min_before"]}))


if __name__ == "__main__":
    main()
