"""The parameter head's errors on a tool set with parameter edges, written out to be read by hand.

NesTools' held-out domains by default, or ``--toolset`` (bench/RESULTS.md, "NesTools' gold read by hand"): every
false-positive and false-negative unit (producer, consumer input) at the head's cut, and a seeded sample of the
units just under the cut that the gold does not list, one table row each with an empty verdict cell. ``--verdicts``
also counts a filled copy: per section right / borderline / wrong, and the head's precision at its cut with the
false positives read right counted as right.

    .venv/bin/python -m bench.param_head_errors --out /tmp/param_head_errors.md
    .venv/bin/python -m bench.param_head_errors --verdicts bench/param_head_errors_sample.md
"""
from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.readings import reading_rows
from tasks.training.retriever_config import DEFAULT_BENCHMARKS

RETRIEVER = Path("artifacts/discriminator/minilm/best/parameter_scorer")
FALSE_POSITIVES, FALSE_NEGATIVES, UNDER_THE_CUT = "False positives", "False negatives", "Under the cut, not in the gold"
SECTIONS = (FALSE_POSITIVES, FALSE_NEGATIVES, UNDER_THE_CUT)
VERDICTS = ("right", "borderline", "wrong")
Unit = tuple[int, int, str]  # (producer, consumer, consumer input) as tool indices


@dataclass(frozen=True)
class ErrorRow:
    unit: Unit
    prob: float
    rank: int  # among the producers scored for the same input (1: the head's best)
    gold_producers: tuple[int, ...]  # the tools the gold says feed this input


def error_rows(units: Sequence[Unit], probs: Sequence[float], gold: set[Unit], cut: float, band_low: float = 0.95,
               sample: int = 40, seed: int = 0) -> dict[str, list[ErrorRow]]:
    """Per section, in the units' order: the units called fed but not in the gold, the gold units left under the
    cut, and ``sample`` of the units in [``band_low``, cut) that the gold does not list (seeded)."""
    by_input: dict[tuple[int, str], list[float]] = defaultdict(list)
    feeders: dict[tuple[int, str], list[int]] = defaultdict(list)
    for (p, c, q), x in zip(units, probs):
        by_input[(c, q)].append(x)
    for p, c, q in sorted(gold):
        feeders[(c, q)].append(p)

    def row(u: Unit, x: float) -> ErrorRow:
        return ErrorRow(u, float(x), 1 + sum(o > x for o in by_input[(u[1], u[2])]), tuple(feeders[(u[1], u[2])]))

    out: dict[str, list[ErrorRow]] = {s: [] for s in SECTIONS}
    for u, x in zip(units, probs):
        if (x >= cut) != (u in gold):
            out[FALSE_POSITIVES if x >= cut else FALSE_NEGATIVES].append(row(u, x))
    band = [row(u, x) for u, x in under_the_cut(units, probs, gold, cut, band_low)]
    out[UNDER_THE_CUT] = random.Random(seed).sample(band, min(sample, len(band)))
    return out


def under_the_cut(units: Sequence[Unit], probs: Sequence[float], gold: set[Unit], cut: float,
                  band_low: float) -> list[tuple[Unit, float]]:
    """The units scored in [``band_low``, ``cut``) that the gold does not list, in the units' order."""
    return [(u, x) for u, x in zip(units, probs) if band_low <= x < cut and u not in gold]


def _cell(text: str | None, limit: int = 90) -> str:
    text = " ".join((text or "").split()).replace("|", "/")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def markdown(rows: dict[str, list[ErrorRow]], names: Sequence[str], docs: Sequence[dict], header: str) -> str:
    """One table per section; the verdict cell is left for the reader."""
    lines = [header]
    for section, got in rows.items():
        lines += ["", f"## {section} ({len(got)})", "",
                  "| # | producer (its outputs) | consumer . input: description | p | rank | gold feeds this input | verdict | why |",
                  "|---|---|---|---|---|---|---|---|"]
        for n, r in enumerate(got, 1):
            p, c, q = r.unit
            outputs = ", ".join(o.get("name", "") for o in docs[p].get("output_params") or [])
            param = next((x for x in docs[c].get("input_params") or [] if x.get("name") == q), {})
            gold = ", ".join(f"`{names[g]}`" for g in r.gold_producers) or "none"
            lines.append(f"| {n} | `{names[p]}`: {_cell(docs[p].get('description'), 60)} ({_cell(outputs, 60)}) | "
                         f"`{names[c]}` . `{q}`: {_cell(param.get('description'))} | {r.prob:.3f} | {r.rank} | {gold} |  |  |")
    return "\n".join(lines) + "\n"


def read_verdicts(path: Path) -> dict[str, Counter]:
    """Per section (a ``## `` heading that opens with a section's name), the verdicts of its table rows: the
    first cell after the gold column that opens with right, borderline or wrong."""
    counts: dict[str, Counter] = {s: Counter() for s in SECTIONS}
    for heading, cells in reading_rows(path):
        section = next((s for s in SECTIONS if heading.startswith(s)), None)
        if section is not None:
            verdict = next((re.split(r"[\s,;]", c)[0] for c in map(str.lower, cells[6:]) if c.startswith(VERDICTS)), None)
            counts[section][verdict or "unread"] += 1
    return counts


def precision_by_reading(true_positives: int, counts: dict[str, Counter]) -> dict[str, float]:
    """The head's precision at its cut, its false positives read right counted as right (borderline both ways)."""
    fp = counts[FALSE_POSITIVES]
    predicted = true_positives + sum(fp.values())
    return {"against the gold": true_positives / predicted,
            "read right counted": (true_positives + fp["right"]) / predicted,
            "read right or borderline counted": (true_positives + fp["right"] + fp["borderline"]) / predicted}


def scored_units(retriever: Path, benchmarks_root: Path, toolset: str | None = None):
    """Every same-group unit of ``toolset`` (a benchmark name or folder with parameter edges) scored by the head;
    none: NesTools' test domains of the retriever's own split, which no model of the default checkpoint saw."""
    from bench.nestools_split import nestools_split
    from tasks.graph.param_scoring import param_threshold, score_parameters
    from tasks.graph.pruning import same_group_pairs
    from tasks.toolsets.readers import load_toolset_spec

    if toolset is None:
        test = nestools_split(benchmarks_root).test[0]
    else:
        test = load_toolset_spec(toolset, benchmarks_root)
    if not test.parameter_edges:
        raise SystemExit(f"{toolset}: no parameter edges (param_edges.jsonl): nothing to count the head's errors against")
    tools = test.tools
    index = {t.tool_id: i for i, t in enumerate(tools)}
    scores = score_parameters(retriever, tools, same_group_pairs(tools))
    gold = {(index[e.prerequisite], index[e.dependent], e.consumer_param) for e in test.parameter_edges
            if e.prerequisite in index and e.dependent in index}
    return tools, [(s.producer, s.consumer, s.param) for s in scores], [s.prob for s in scores], gold, \
        param_threshold(retriever)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retriever", type=Path, default=RETRIEVER, help="a retriever folder with its parameter head")
    parser.add_argument("--benchmarks-root", type=Path, default=Path(DEFAULT_BENCHMARKS))
    parser.add_argument("--toolset", help="a benchmark name or tool-set folder with parameter edges (default: "
                                          "NesTools' held-out domains of the retriever's split)")
    parser.add_argument("--out", type=Path, help="write the rows to read here (markdown)")
    parser.add_argument("--sample", type=int, default=40, help="units under the cut to sample")
    parser.add_argument("--band-low", type=float, default=0.95, help="the sample's lowest p")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verdicts", type=Path, help="a filled copy of --out: count its verdicts")
    args = parser.parse_args(argv)

    tools, units, probs, gold, cut = scored_units(args.retriever, args.benchmarks_root, args.toolset)
    rows = error_rows(units, probs, gold, cut, args.band_low, args.sample, args.seed)
    predicted = sum(x >= cut for x in probs)
    tp = predicted - len(rows[FALSE_POSITIVES])
    figures = {"cut": cut, "units": len(units), "gold": len(gold), "predicted": predicted, "true_positives": tp,
               "precision": tp / predicted, "recall": tp / len(gold), "f1": 2 * tp / (predicted + len(gold)),
               "rows": {s: len(r) for s, r in rows.items()},
               "under_the_cut_not_in_the_gold": len(under_the_cut(units, probs, gold, cut, args.band_low))}
    if args.out:
        where = args.toolset or "NesTools' held-out domains"
        header = (f"# The parameter head's errors on {where}\n\n`{args.retriever}`, cut {cut:.4f}: "
                  f"{len(units):,} units, {len(gold)} gold, {predicted} called fed, {tp} of them gold "
                  f"(P {figures['precision']:.3f} R {figures['recall']:.3f} F1 {figures['f1']:.3f}).")
        args.out.write_text(markdown(rows, [t.tool_id for t in tools], [t.doc for t in tools], header))
    if args.verdicts:
        counts = read_verdicts(args.verdicts)
        figures["verdicts"] = {s: dict(c) for s, c in counts.items()}
        if sum(counts[FALSE_POSITIVES].values()) == len(rows[FALSE_POSITIVES]):
            figures["precision_by_reading"] = precision_by_reading(tp, counts)
        else:
            figures["precision_by_reading"] = "the file's false positives are not this head's: read a fresh --out"
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
