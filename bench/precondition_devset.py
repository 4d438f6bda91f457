"""The kind-labelled dev set (data / precondition / none) from API-Bank's gold dialogues, and the name rule
and the call-order precondition rule scored on it (issue 22; docs/preconditions.md).

    .venv/bin/python -m bench.precondition_devset [--data-root ../shared/data/benchmarks] [--seed 0]
                                                 [--sample-out artifacts/precondition_devset/sample.md]

Prints the dev set's counts per kind and how every co-occurring pair ended; writes a sample to read by
hand (every precondition item, a seeded sample of data items, with the tools' parameters and dialogues
that call both; the verdicts are in bench/precondition_devset_sample.md); prints P/R/F1 per kind of

- the name rule (schemas/name_rule.py; a rule firing from producer to consumer predicts ``data``),
- the call-order candidate rule (tasks/toolsets/call_order.py, judged by names only: the tool set's edges
  are the labels), on all dialogues (circular: the labels come from the same order statistics) and with
  the dialogues split in two halves (statistics from one, labels from the other, both ways), split by
  dialogue and by template (the set of tools a dialogue calls: API-Bank repeats each template ~5 times),
- both rules together;

and, descriptive only, how the call-order rule decides the gold-link pairs of UltraTool and TMDB (whose
links follow call order and carry no kind). Prints only; bench/RESULTS.md quotes its figures.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
from collections import Counter
from dataclasses import replace
from pathlib import Path

from tasks.toolsets.call_order import (
    ACCEPTED,
    name_rule_context,
    name_rule_evidence,
    order_statistics,
    precondition_candidates,
)
from tasks.toolsets.kind_devset import DATA, KINDS, PRECONDITION, build_kind_devset, kind_scores
from tasks.toolsets.readers import DEFAULT_DATA_ROOT, load_benchmark
from tasks.toolsets.trajectories import Trajectory, gold_trajectories


def name_rule_edges(toolset, partial: bool) -> list[tuple[str, str, str]]:
    """(producer, consumer, 'data') where the rule fires one way more than the other (as schema_rule_label)."""
    tools, common, common_inputs = name_rule_context(toolset)

    def n(p, c):
        found = name_rule_evidence(tools[p], tools[c], common, common_inputs)
        return len([x for x in found if partial or x.startswith("exact:")])

    out = []
    ids = sorted(tools)
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            ab, ba = n(a, b), n(b, a)
            if ab != ba:
                out.append((a, b, DATA) if ab > ba else (b, a, DATA))
    return out


def order_rule_edges(toolset, runs: list[Trajectory]) -> list[tuple[str, str, str]]:
    names_only = replace(toolset, edges=[], parameter_edges=())
    report = precondition_candidates(order_statistics(runs), names_only)
    return [(c.producer, c.consumer, PRECONDITION) for c in report.candidates]


def fmt(scores_outside) -> str:
    scores, outside = scores_outside
    parts = [f"{k} P {s.precision:.2f} R {s.recall:.2f} F1 {s.f1:.2f} ({s.true_positive}/{s.predicted} pred, "
             f"{s.gold} gold)" for k, s in scores.items() if k != "none"]
    return " | ".join(parts) + f" | unjudged predictions {outside}"


def in_half(key: str, seed: int) -> bool:
    """A seeded, stable half of the dialogues: True for about half of the keys."""
    return hashlib.sha256(f"{seed}:kind-devset-half:{key}".encode()).digest()[0] < 128


def template_key(run: Trajectory) -> str:
    return ",".join(sorted(set(run.tools)))


def write_sample(dev, toolset, path: Path, seed: int, n_data: int) -> None:
    docs = {t.tool_id: t.doc for t in toolset.tools}
    queries = {q.query_id: q.text for q in toolset.queries}

    def params(tool: str) -> str:
        d = docs[tool]
        ins = ", ".join(p["name"] for p in d.get("input_params") or [])
        outs = ", ".join(p["name"] for p in d.get("output_params") or [])
        return f"`{tool}({ins}) -> {outs or '-'}`: {d.get('description', '')}"

    data = [i for i in dev.items if i.kind == DATA]
    picked = [i for i in dev.items if i.kind == PRECONDITION] + sorted(
        random.Random(seed).sample(data, min(n_data, len(data))), key=lambda i: (i.producer, i.consumer))
    lines = ["# Kind dev set: items to read by hand", "",
             f"Written by `bench/precondition_devset.py --seed {seed}`: every precondition item and {n_data} "
             "data items (seeded), with the two tools and up to two dialogues that call both.", ""]
    for n, item in enumerate(picked, 1):
        lines += [f"## {n}. {item.kind}: {item.producer} -> {item.consumer} (support {item.support}, "
                  f"consistency {item.consistency if item.consistency is None else round(item.consistency, 2)}"
                  f"{', params ' + ', '.join(item.params) if item.params else ''})", "",
                  f"- producer {params(item.producer)}", f"- consumer {params(item.consumer)}"]
        shown = [r for r in dev.runs if item.producer in r.tools and item.consumer in r.tools][:2]
        lines += [f"- dialogue `{r.run_id}`: {' > '.join(r.tools)}; \"{queries.get(r.run_id, '')[:200]}\""
                  for r in shown]
        lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-root", type=Path, default=DEFAULT_DATA_ROOT)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample-out", type=Path, default=Path("artifacts/precondition_devset/sample.md"))
    p.add_argument("--sample-data", type=int, default=12, help="data items in the hand-read sample")
    a = p.parse_args(argv)
    folder = a.data_root / "apibank"

    dev = build_kind_devset(folder, seed=a.seed)
    toolset = load_benchmark(folder)
    print(f"API-Bank kind dev set (seed {a.seed}): {dict(dev.counts())}; dialogues {len(dev.runs)}, "
          f"co-occurring ordered pairs {len(dev.stats.pairs)}, none pool {dev.none_pool}")
    print(f"  every co-occurring pair: {dev.accounting()}  (sum {sum(dev.accounting().values())})")
    print(f"  edge-file lines left out: {len(dev.rejected_edges)}")
    write_sample(dev, toolset, a.sample_out, a.seed, a.sample_data)
    print(f"  hand-read sample written to {a.sample_out}")

    print("\nName rule (fires producer -> consumer: data):")
    exact, loose = name_rule_edges(toolset, False), name_rule_edges(toolset, True)
    print(f"  exact            {fmt(kind_scores(exact, dev))}")
    print(f"  exact + partial  {fmt(kind_scores(loose, dev))}")

    print("\nCall-order rule (names only; defaults of precondition_candidates):")
    circular = order_rule_edges(toolset, dev.runs)
    print(f"  all dialogues (CIRCULAR)  {fmt(kind_scores(circular, dev))}")
    print(f"  + name rule exact         {fmt(kind_scores(circular + exact, dev))}")
    for split_name, key in (("dialogue", lambda r: r.key), ("template", template_key)):
        for half in (0, 1):
            def in_b(r, half=half, key=key):
                return in_half(key(r), a.seed) == bool(half)

            labels = build_kind_devset(folder, keep_run=in_b, seed=a.seed)
            rule = order_rule_edges(toolset, [r for r in dev.runs if not in_b(r)])
            print(f"  by {split_name}, stats half {1 - half} -> labels half {half} "
                  f"({labels.counts()[PRECONDITION]} precondition labels): {fmt(kind_scores(rule, labels))}")
            print(f"     + name rule exact: {fmt(kind_scores(rule + exact, labels))}")

    print("\nGold-link pairs of UltraTool and TMDB, decided by the call-order rule (names only), descriptive:")
    for name in ("ultratool", "tmdb"):
        bench_folder = a.data_root / name
        ts = load_benchmark(bench_folder)
        runs = gold_trajectories(bench_folder / "queries.jsonl", {t.tool_id for t in ts.tools}).runs
        report = precondition_candidates(order_statistics(runs), replace(ts, edges=[], parameter_edges=()))
        decided = {(d.order.a, d.order.b): d.reason for d in report.decisions}
        edge_file = next(f for f in bench_folder.glob("*edges*.jsonl"))
        rows = [json.loads(x) for x in edge_file.read_text(encoding="utf-8").splitlines() if x.strip()]
        links = sorted({(r["producer"], r["consumer"]) for r in rows if r["producer"] != r["consumer"]})
        tally = Counter(decided.get(link, "never in one run") for link in links)
        shown = {("precondition (accepted)" if k == ACCEPTED else "data (name rule fires)" if k == "name rule fires"
                  else k): v for k, v in tally.most_common()}
        print(f"  {name}: {len(links)} gold-link pairs: {shown}")
    assert set(KINDS) >= set(dev.counts())


if __name__ == "__main__":
    main()
