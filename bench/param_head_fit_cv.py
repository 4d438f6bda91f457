"""Choose how the parameter head is fitted without looking at test domains: grouped cross-validation inside the
NesTools validation domains the head is fitted on (bench/RESULTS.md, "Tried and dropped: fitting the head on more
producers without outputs").

For each fit mix (the validation domains as given, plus copies with a share of the producers' outputs removed),
five folds by domain: a head fitted on four fifths of the domains (each copy of the mix) predicts the other fifth
as given and with every output removed. Printed: F1 over the units and over ordered tool pairs (the max over the
consumer's inputs, each fold's head at its own cut). Then each mix fitted on all validation domains, measured on
the test domains (as given, every output removed) and on API-Bank (as published, outputs removed): read those
after choosing, not to choose.

With ``--compare-columns``, today's fit mix only, one head per set of columns named (``COLUMNS``: today's, those
before the lexical columns, those before the bare-value columns).

With ``--second-encoder``, today's fit mix only, two heads: today's columns, and those plus a second encoder's view of
the same units (its cosine, maker rank and margin, for the input as asked and as a bare value: ``SECOND_VIEW``).

    .venv/bin/python -m bench.param_head_fit_cv --retriever artifacts/discriminator/minilm/best/parameter_scorer
    .venv/bin/python -m bench.param_head_fit_cv --retriever <...>/parameter_scorer --second-encoder offline-minilm
    .venv/bin/python -m bench.param_head_fit_cv --retriever <...> --compare-columns current before-lexical
"""
from __future__ import annotations

import argparse
import copy
from collections import defaultdict
from pathlib import Path

import numpy as np

from bench.param_head_tool_edges import prf
from tasks.toolsets.readers import load_toolset_spec
from tasks.training.param_examples import split_groups
from tasks.training.param_head import (FEATURES, HEAD_FEATURES, OUTPUT_DROPOUT, fit_param_head, unit_features,
                                       unit_gold, without_outputs)

BENCHMARKS = Path("../shared/data/benchmarks")
# share of producers without outputs per extra copy (each copy its own seed); the head's fit today: as given + 0.3
MIXES = {"today (as given, 30%)": (OUTPUT_DROPOUT,), "+ a 60% copy": (OUTPUT_DROPOUT, 0.6),
         "+ a 100% copy": (OUTPUT_DROPOUT, 1.0), "as given + 100%": (1.0,)}


def f1(gold: np.ndarray, called: np.ndarray) -> float:
    """F1 of boolean arrays, through the sets ``prf`` reads."""
    return prf(set(np.flatnonzero(called).tolist()), set(np.flatnonzero(gold).tolist()))["f1"]


def tool_pairs(units, probs, cuts, gold) -> tuple[np.ndarray, np.ndarray]:
    """Ordered (producer, consumer) pairs: called when the max over the consumer's inputs reaches its cut; gold when
    any of its units is."""
    best: dict[tuple[int, int], list] = defaultdict(lambda: [0.0, 1.0, False])
    for (p, c, _), v, cut, g in zip(units, probs, cuts, gold):
        row = best[(p, c)]
        row[0], row[1], row[2] = max(row[0], v), cut, row[2] or bool(g)
    rows = list(best.values())
    return np.array([r[2] for r in rows]), np.array([r[0] >= r[1] for r in rows])


# the head's columns before the bare-value ones (bench/RESULTS.md, "The input as a bare value")
# and before the lexical ones ("A lexical view in the parameter head")
LEXICAL = tuple(f for f in HEAD_FEATURES if f.startswith("lexical_"))
COLUMNS = {"current": HEAD_FEATURES, "before-lexical": tuple(f for f in HEAD_FEATURES if f not in LEXICAL),
           "before-value": tuple(f for f in HEAD_FEATURES if not f.startswith("value_") and f not in LEXICAL)}
# a second encoder's columns beside the head's (--second-encoder): what it says of the unit's value and its makers
SECOND_VIEW = ("cosine", "maker_inverse_rank", "maker_margin", "value_cosine", "value_maker_inverse_rank",
               "value_maker_margin")


class Rows:
    """Units, head columns, gold and domain of one tool set's copy."""

    def __init__(self, toolset, encode, columns: tuple[str, ...] = HEAD_FEATURES, second=None):
        self.units, x = unit_features(toolset.tools, encode)
        self.x = x[:, [FEATURES.index(f) for f in columns]]
        if second is not None:  # ``second``: another encoder; its SECOND_VIEW columns of the same units beside
            units, y = unit_features(toolset.tools, second)
            assert units == self.units, "the same tools give the same units in the same order"
            self.x = np.hstack([self.x, y[:, [FEATURES.index(f) for f in SECOND_VIEW]]])
        self.gold = unit_gold(toolset, toolset.tools, self.units)
        self.group = np.array([toolset.tools[c].group for _, c, _ in self.units])
        self.toolset = toolset

    def view(self, columns: tuple[str, ...]) -> "Rows":
        """The same rows with only ``columns`` (of rows built with every column, ``FEATURES``)."""
        other = copy.copy(self)
        other.x = self.x[:, [FEATURES.index(f) for f in columns]]
        return other

    def tool_f1(self, probs: np.ndarray, cut: float) -> float:
        """F1 of the set's tool edges over every same-group pair, kept as build-graph keeps them
        (``param_tool_edges``: the max over the consumer's inputs, the stronger direction)."""
        from tasks.graph.param_scoring import ParamScore, param_tool_edges
        from tasks.graph.pruning import same_group_pairs

        tools = self.toolset.tools
        scores = [ParamScore(p, c, q, float(v)) for (p, c, q), v in zip(self.units, probs)]
        edges = param_tool_edges(tools, same_group_pairs(tools), scores, cut)
        called = {(e.predicted.edge.dependent, e.predicted.edge.prerequisite) for e in edges}
        return prf(called, {(e.dependent, e.prerequisite) for e in self.toolset.edges})["f1"]


def main(argv: list[str] | None = None) -> None:
    from models.sentence_encoder import EncoderConfig, SentenceEncoder

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--retriever", required=True, help="a dependency retriever folder (its encoder is used)")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3, help="fold assignments (seeded); the CV figures are their mean")
    ap.add_argument("--head-columns", choices=tuple(COLUMNS), default="current",
                    help="the head's columns: today's, or those before the lexical or the bare-value columns")
    ap.add_argument("--compare-columns", nargs="+", choices=tuple(COLUMNS),
                    help="today's fit mix, one head per set of columns named (e.g. current before-lexical)")
    ap.add_argument("--today-only", action="store_true", help="only today's fit mix (as given and 30%%)")
    ap.add_argument("--second-encoder", help="today's fit mix, with and without this encoder's cosines and maker "
                                             "ranks beside the head's columns (e.g. offline-minilm, untrained)")
    a = ap.parse_args(argv)
    encode = SentenceEncoder(EncoderConfig(a.retriever, batch_size=128)).encode
    if a.second_encoder:
        second = SentenceEncoder(EncoderConfig(a.second_encoder, batch_size=128)).encode
        compare_views(encode, second, a.second_encoder, COLUMNS[a.head_columns], a.folds, a.repeats)
        return
    if a.compare_columns:
        compare_columns(encode, a.compare_columns, a.folds, a.repeats)
        return
    nes = load_toolset_spec("nestools", BENCHMARKS)
    val, test = _split(nes)
    mixes = dict(list(MIXES.items())[:1]) if a.today_only else MIXES
    shares = sorted({s for mix in mixes.values() for s in mix})
    columns = COLUMNS[a.head_columns]
    copies = {0.0: Rows(val, encode, columns),
              **{s: Rows(without_outputs(val, s, seed=i), encode, columns) for i, s in enumerate(shares)}}
    if 1.0 not in copies:
        copies[1.0] = Rows(without_outputs(val, 1.0), encode, columns)
    print(f"## Grouped {a.folds}-fold CV inside the NesTools validation domains, mean of {a.repeats} "
          f"fold assignments ({a.retriever})\n")
    heads = {name: ({s: copies[s] for s in (0.0, 1.0, *extra)}, [0.0, *extra]) for name, extra in mixes.items()}
    cross_validate(heads, "fit mix", a.folds, a.repeats)
    shown = {name: Rows(toolset, encode, columns) for name, toolset in read_sets(test).items()}
    read_after({name: (held_copies, mix, shown) for name, (held_copies, mix) in heads.items()}, "fit mix")


def _split(nes):
    """The NesTools validation domains and test domains of the retriever's split."""
    _, held, tested = split_groups({t.group for t in nes.tools}, (0.6, 0.2, 0.2), 0)
    return nes.only_groups(held), nes.only_groups(tested)


def read_sets(test) -> dict:
    """The sets a fitted head is read on, after choosing: NesTools' test domains and API-Bank, each as given and with
    every output removed."""
    api = load_toolset_spec("apibank", BENCHMARKS)
    return {"NesTools test": test, "NesTools test, every output removed": without_outputs(test, 1.0),
            "API-Bank": api, "API-Bank, outputs removed": without_outputs(api, 1.0)}


def cross_validate(heads: dict, label: str, folds: int, repeats: int) -> None:
    """Per head (``name: (copies by share of outputs removed, the shares it is fitted on)``): grouped CV inside the
    validation domains, each fold's head predicting its held-out domains as given and with every output removed."""
    domains = np.array(sorted({g for copies, _ in heads.values() for g in copies[0.0].group}))
    assignments = [dict(zip(np.random.default_rng(r).permutation(domains), np.arange(len(domains)) % folds))
                   for r in range(repeats)]
    print(f"| {label} | units, as given | units, every output removed | tool pairs, as given "
          "| tool pairs, every output removed |")
    print("|---|---|---|---|---|")
    for name, (copies, mix) in heads.items():
        cells = []
        for shown, fold_of in ((s, f) for s in (0.0, 1.0) for f in assignments):
            target = copies[shown]
            probs, cuts = np.zeros(len(target.gold)), np.zeros(len(target.gold))
            for fold in range(folds):
                train = [np.array([fold_of[g] != fold for g in copies[s].group]) for s in mix]
                head = fit_param_head(np.vstack([copies[s].x[m] for s, m in zip(mix, train)]),
                                      np.concatenate([copies[s].gold[m] for s, m in zip(mix, train)]),
                                      [g for s, m in zip(mix, train) for g in copies[s].group[m]])
                out = np.array([fold_of[g] == fold for g in target.group])
                probs[out], cuts[out] = head.predict(target.x[out]), head.threshold
            cells.append((f1(target.gold, probs >= cuts), f1(*tool_pairs(target.units, probs, cuts, target.gold))))
        given, removed = np.mean(cells[:repeats], axis=0), np.mean(cells[repeats:], axis=0)
        print(f"| {name} | {given[0]:.3f} | {removed[0]:.3f} | {given[1]:.3f} | {removed[1]:.3f} |", flush=True)


def read_after(heads: dict, label: str) -> None:
    """Per head (``name: (copies, shares, the sets it is read on)``): fitted on all validation domains, the tool-edge
    F1 of each set (read after choosing)."""
    print("\n## Each head fitted on all validation domains: tool-edge F1 (read after choosing)\n")
    names = list(next(iter(heads.values()))[2])
    print(f"| {label} | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for name, (copies, mix, shown) in heads.items():
        head = fit_param_head(np.vstack([copies[s].x for s in mix]), np.concatenate([copies[s].gold for s in mix]),
                              [g for s in mix for g in copies[s].group])
        print(f"| {name} | " + " | ".join(f"{r.tool_f1(head.predict(r.x), head.threshold):.3f}" for r in shown.values())
              + " |", flush=True)


def compare_views(encode, second, second_name: str, columns: tuple[str, ...], folds: int, repeats: int) -> None:
    """Today's fit mix with the head's columns, and with ``second``'s ``SECOND_VIEW`` columns beside them."""
    nes = load_toolset_spec("nestools", BENCHMARKS)
    val, test = _split(nes)
    sets = read_sets(test)
    heads = {}
    for name, view in (("today's columns", None), (f"+ {second_name}'s cosines and maker ranks", second)):
        copies = {share: Rows(without_outputs(val, share, seed=0) if share else val, encode, columns, view)
                  for share in (0.0, OUTPUT_DROPOUT, 1.0)}
        heads[name] = (copies, [0.0, OUTPUT_DROPOUT], {k: Rows(t, encode, columns, view) for k, t in sets.items()})
    print(f"## Grouped {folds}-fold CV inside the NesTools validation domains, mean of {repeats} fold assignments\n")
    cross_validate({name: (copies, mix) for name, (copies, mix, _) in heads.items()}, "head's columns", folds, repeats)
    read_after(heads, "head's columns")


def compare_columns(encode, names: list[str], folds: int, repeats: int) -> None:
    """Today's fit mix, one head per set of ``COLUMNS`` named; the units computed once."""
    nes = load_toolset_spec("nestools", BENCHMARKS)
    val, test = _split(nes)
    copies = {share: Rows(without_outputs(val, share, seed=0) if share else val, encode, FEATURES)
              for share in (0.0, OUTPUT_DROPOUT, 1.0)}
    shown = {k: Rows(t, encode, FEATURES) for k, t in read_sets(test).items()}
    heads = {name: ({s: r.view(COLUMNS[name]) for s, r in copies.items()}, [0.0, OUTPUT_DROPOUT],
                    {k: r.view(COLUMNS[name]) for k, r in shown.items()}) for name in names}
    print(f"## Grouped {folds}-fold CV inside the NesTools validation domains, mean of {repeats} fold assignments\n")
    cross_validate({name: (c, mix) for name, (c, mix, _) in heads.items()}, "head's columns", folds, repeats)
    read_after(heads, "head's columns")


if __name__ == "__main__":
    main()
