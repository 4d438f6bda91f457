"""The precondition edges ``build-graph --cross-encoder-preconditions checks`` adds, listed for reading by hand.

For each checkpoint, the same-group pairs where a tool that checks may gate the other (``tasks.graph.checks``,
both with inputs) are scored as the evaluate-only flow scores them (the cross-encoder at its calibrated cut, the
parameter level on their inputs), and an edge is listed where two levels with "checks" call the pair dependent
and two levels alone do not. Only those pairs can change, so only they are scored. Written as a markdown table
(with empty verdict columns), one row per distinct edge, with the checkpoints that added it; the gold column is
the tool set's own edge file.

    .venv/bin/python -m bench.check_precondition_edges --checkpoint artifacts/discriminator/minilm/best \\
        --toolset <n>/nes_test --out /tmp/check_edges.md          # <n>: bench.nestools_split --output <n>
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import flows.train_discriminator as td
from models.discriminator import decide, load_calibration, trained_max_length
from schemas.tdi import LABEL_A_DEPENDS_ON_B
from tasks.graph.checks import check_pairs
from tasks.graph.two_level import TWO_LEVEL_CUT, parameter_scorer_of


def added_edges(checkpoint: Path, toolset, pairs) -> dict[tuple[str, str], float]:
    """(prerequisite, dependent) -> p(dependency) of the edges "checks" adds on ``pairs`` (both orders of each)."""
    calibration = load_calibration(checkpoint) or {}
    max_length = trained_max_length(calibration) or td.TrainDiscriminatorConfig().max_length
    probs = np.asarray(td.score_examples.fn(checkpoint, pairs, max_length, 64, True, False)["probs"]).reshape(-1, 3)
    two, checks = td.two_level_scores.fn(parameter_scorer_of(checkpoint), [(toolset, pairs)], probs,
                                         calibration.get("threshold"), ("off", "checks"))
    out = {}
    for e, label, added, p in zip(pairs, decide(checks, TWO_LEVEL_CUT), td.precondition_rows_added(checks, two), checks):
        if added:
            dependent, prerequisite = (e.tool_a, e.tool_b) if label == LABEL_A_DEPENDS_ON_B else (e.tool_b, e.tool_a)
            out[(prerequisite, dependent)] = max(out.get((prerequisite, dependent), 0.0), float(p[0] + p[2]))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", action="append", required=True, help="repeatable: one column of seeds each")
    p.add_argument("--toolset", required=True, help="a benchmark name or a tool-set folder")
    p.add_argument("--out", required=True, help="markdown file written")
    a = p.parse_args(argv)
    [(toolset, every)] = td.toolset_pairs((a.toolset,), td.TrainDiscriminatorConfig().benchmarks_root, None, 0)
    index = {t.tool_id: n for n, t in enumerate(toolset.tools)}
    wanted = set(check_pairs(toolset.tools))
    pairs = [e for e in every if (min(index[e.tool_a], index[e.tool_b]), max(index[e.tool_a], index[e.tool_b])) in wanted]
    gold = {(e.prerequisite, e.dependent) for e in toolset.edges}
    found = {ck: added_edges(Path(ck), toolset, pairs) for ck in a.checkpoint}
    edges = sorted(set().union(*found.values()), key=lambda k: -max(f.get(k, 0.0) for f in found.values()))
    docs = {t.tool_id: t.doc for t in toolset.tools}
    lines = [f"{len(wanted)} check pairs of {toolset.name} scored; edges added per checkpoint: "
             + ", ".join(f"`{ck}` {len(f)} ({sum(k in gold for k in f)} gold)" for ck, f in found.items()), "",
             "| # | prerequisite (checks) | dependent | p(dependency) per checkpoint | gold | verdict | why |",
             "|---|---|---|---|---|---|---|"]
    for n, (pre, dep) in enumerate(edges, 1):
        ps = " / ".join(f"{found[ck][(pre, dep)]:.2f}" if (pre, dep) in found[ck] else "-" for ck in a.checkpoint)
        lines.append(f"| {n} | `{pre}` | `{dep}`: {docs[dep].get('description', '')} | {ps} | "
                     f"{'yes' if (pre, dep) in gold else 'no'} | | |")
    Path(a.out).write_text("\n".join(lines) + "\n")
    print(lines[0])


if __name__ == "__main__":
    main()
