"""Parameter-level examples (producer, consumer, consumer parameter) from TDI v2 shards and from tool
sets with parameter edges, their compact texts with identifier dropout, and the parameter-level name rule."""
from __future__ import annotations

import json
import random
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from schemas.name_rule import identifier_tokens, normalise_param_name, output_names, partial_match, raw_output_names
from schemas.parameters import output_param_names
from schemas.tdi import LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY
from schemas.toolset import Tool, ToolSet
from tasks.training.examples import PairExample

TAKES, TAKES_NOT = 1, 0
DESCRIPTION_WORDS = 24  # words of each description in a parameter-level text: inputs stay under ~96 word pieces


@dataclass(frozen=True)
class ParamExample:
    """Does ``consumer``'s input ``param`` take ``producer``'s output? ``label`` 1 yes, 0 no."""

    producer: dict[str, Any]
    consumer: dict[str, Any]
    param: str
    label: int
    group: str
    producer_id: str = ""
    consumer_id: str = ""


def _short(text: str | None, words: int = DESCRIPTION_WORDS) -> str:
    return " ".join((text or "").split()[:words])


def input_param(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """``doc``'s declared input ``name`` (its type and description), or just the name when it declares none."""
    return next((p for p in doc.get("input_params") or [] if p.get("name") == name), {"name": name})


def param_text(consumer: dict[str, Any], param: str, drop_name: bool = False) -> str:
    """``param: user_id (str): the user's id; input of get_orders: List a user's orders.``

    ``drop_name``: the parameter's name is left out when it has a description (only what it means
    is shown), else shown as words (``tmp_dir`` -> ``tmp dir``): identifier dropout."""
    p = input_param(consumer, param)
    desc = _short(p.get("description"))
    name = p["name"]
    if drop_name:
        name = "" if desc else " ".join(identifier_tokens(name))
    head = f"param: {name} ({p.get('type') or 'any'})" if name else f"param ({p.get('type') or 'any'})"
    head += f": {desc}" if desc else ""
    return f"{head}; input of {consumer.get('name', '')}: {_short(consumer.get('description'), 16)}".strip()


def producer_text(producer: dict[str, Any], drop_names: bool = False) -> str:
    """``producer: get_user: Look up a user.; returns user_id (str): the id, ...`` (the name-derived
    output when it declares none). ``drop_names``: output names as words, described ones by meaning only."""
    outputs = producer.get("output_params") or []
    if outputs:
        said = []
        for o in outputs:
            desc, name = _short(o.get("description"), 12), o["name"]
            if drop_names:
                name = "" if desc else " ".join(identifier_tokens(name))
            said.append(f"{name} ({o.get('type') or 'any'})".strip() + (f": {desc}" if desc else ""))
        returns = ", ".join(said)
    else:
        returns = ", ".join(output_param_names(producer)) or "nothing named"
    return f"producer: {producer.get('name', '')}: {_short(producer.get('description'))}; returns {returns}"


def pair_example(e: ParamExample, name_dropout: float = 0.0, rng: random.Random | None = None) -> PairExample:
    """``e`` as the discriminator's pair input (texts, not docs: no name-rule hint is added):
    ``doc_a`` the parameter, ``doc_b`` the producer; label 0 (a depends on b) when the parameter takes
    the output, 1 otherwise, so ``p0 + p2`` is p(takes) and ``choose_threshold`` calibrates it as is.
    ``name_dropout``: the chance (seeded by ``rng``) that a side shows meanings instead of names."""
    rng = rng or random.Random(0)
    drop_a = name_dropout > 0 and rng.random() < name_dropout
    drop_b = name_dropout > 0 and rng.random() < name_dropout
    return PairExample(param_text(e.consumer, e.param, drop_a), producer_text(e.producer, drop_b),
                       LABEL_A_DEPENDS_ON_B if e.label == TAKES else LABEL_NO_DEPENDENCY, e.group,
                       f"{e.consumer_id}:{e.param}", e.producer_id)


def pair_examples(examples: Sequence[ParamExample], name_dropout: float = 0.0, seed: int = 0) -> list[PairExample]:
    rng = random.Random(seed)
    return [pair_example(e, name_dropout, rng) for e in examples]


# ---------------------------------------------------------------------------------------------
# The name rule at parameter level


def param_rule(producer: dict[str, Any], consumer_param: str, ignore: Collection[str] = frozenset()) -> str | None:
    """'exact' when the parameter's normalised name is one of the producer's output names (declared, or
    the one its name implies), 'partial' when it only partly names one (``schemas.name_rule.partial_match``),
    else None. ``ignore``: normalised output names that are no evidence (too common in the group)."""
    return rule_over_outputs(output_names(producer, ignore=ignore), raw_output_names(producer, ignore=ignore),
                             consumer_param)


def rule_over_outputs(exact_keys: Collection[str], raw_outputs: Collection[str], consumer_param: str,
                      partial: Callable[[str, str], bool] = partial_match) -> str | None:
    """``param_rule`` over a producer's output names computed once (normalised, raw): for scoring many inputs
    against one producer. ``partial``: ``partial_match`` or a memoised copy of it."""
    key = normalise_param_name(consumer_param)
    if key and key in exact_keys:
        return "exact"
    if any(partial(o, consumer_param) for o in raw_outputs):
        return "partial"
    return None


# ---------------------------------------------------------------------------------------------
# From TDI shards


def _shared_tokens(producer: dict[str, Any], param: str) -> bool:
    outs = {t for n in output_param_names(producer) + [producer.get("name", "")] for t in identifier_tokens(n)}
    return bool(outs & set(identifier_tokens(param)))


def v2_shard_rows(tdi_dir: Path, split: str, columns: Sequence[str]) -> Iterator[tuple]:
    """The ``columns`` of every row of a TDI dataset's ``split`` shards, in shard order; a version-1 shard (no
    ``consumer_param``) is an error that says to mine or build the dataset again."""
    files = sorted((Path(tdi_dir) / "shards").glob(f"{split}-*.parquet"))
    if not files:
        raise FileNotFoundError(f"no {split} shards under {Path(tdi_dir) / 'shards'}")
    for file in files:
        if "consumer_param" not in pq.read_schema(file).names:
            raise ValueError(f"{file}: a version-1 shard has no consumer_param; mine or build the dataset again")
        cols = pq.read_table(file, columns=list(columns)).to_pydict()
        yield from zip(*(cols[c] for c in columns))


def load_tdi_param_examples(tdi_dir: Path, split: str, max_positives: int | None = None,
                            negatives_per_positive: int = 2, seed: int = 0) -> list[ParamExample]:
    """Parameter-level examples of a TDI dataset's ``split`` (schema version 2 shards).

    Positive: each dependent row's (producer, consumer, ``consumer_param``), once per unordered pair
    (a mined row and its swap are one). Negatives: the same producer with another input of the same
    consumer (it does not take that output), and, from the 'no dependency' rows, a consumer's input
    paired with the other tool, preferring inputs that share a name token with it (overlap, no flow).
    ``negatives_per_positive`` caps each kind against the positives kept (seeded sample)."""
    rng = random.Random(seed)
    positives, other_inputs, no_flow, seen = [], [], [], set()
    for doc_a, doc_b, label, ta, tb, param in v2_shard_rows(
            tdi_dir, split, ["doc_a", "doc_b", "label", "tool_a_id", "tool_b_id", "consumer_param"]):
        a, b = json.loads(doc_a), json.loads(doc_b)
        if label == LABEL_NO_DEPENDENCY:
            for producer, consumer, pid, cid in ((a, b, ta, tb), (b, a, tb, ta)):
                names = [p["name"] for p in consumer.get("input_params") or []]
                if names:
                    overlap = [n for n in names if _shared_tokens(producer, n)]
                    pick = rng.choice(overlap or names)
                    no_flow.append((bool(overlap), ParamExample(producer, consumer, pick, TAKES_NOT, "tdi", pid, cid)))
            continue
        if not param:
            continue
        consumer, producer, cid, pid = (a, b, ta, tb) if label == LABEL_A_DEPENDS_ON_B else (b, a, tb, ta)
        key = (pid, cid, param, doc_a if label == LABEL_A_DEPENDS_ON_B else doc_b)
        if key in seen:
            continue
        seen.add(key)
        positives.append(ParamExample(producer, consumer, param, TAKES, "tdi", pid, cid))
        for other in dict.fromkeys(p["name"] for p in consumer.get("input_params") or []):
            if other != param:
                other_inputs.append(ParamExample(producer, consumer, other, TAKES_NOT, "tdi", pid, cid))
    rng.shuffle(positives)
    positives = positives[:max_positives] if max_positives else positives
    kept = {(e.producer_id, e.consumer_id) for e in positives}
    other_inputs = [e for e in other_inputs if (e.producer_id, e.consumer_id) in kept]
    cap = negatives_per_positive * len(positives)
    rng.shuffle(other_inputs)
    no_flow.sort(key=lambda x: not x[0])  # name-overlap hard negatives first
    hard = [e for overlap, e in no_flow if overlap]
    rest = [e for overlap, e in no_flow if not overlap]
    rng.shuffle(hard)
    rng.shuffle(rest)
    out = positives + other_inputs[:cap] + (hard + rest)[:cap]
    rng.shuffle(out)
    return out


# ---------------------------------------------------------------------------------------------
# From tool sets with parameter edges


def parameter_units(tools: Sequence[Tool], pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int, str]]:
    """(producer, consumer, consumer input) for both orders of each candidate pair: what the
    parameter-level scorer scores. A consumer without declared inputs has none."""
    units = []
    for i, j in pairs:
        for p, c in ((i, j), (j, i)):
            units += [(p, c, name) for name in dict.fromkeys(q["name"] for q in tools[c].doc.get("input_params") or [])]
    return units


def unit_labels(tools: Sequence[Tool], units: Sequence[tuple[int, int, str]], toolset: ToolSet) -> list[int]:
    """1 where (producer, consumer, param) is a gold parameter edge of ``toolset``, else 0."""
    gold = {(e.prerequisite, e.dependent, e.consumer_param) for e in toolset.parameter_edges}
    return [int((tools[p].tool_id, tools[c].tool_id, q) in gold) for p, c, q in units]


def toolset_param_examples(toolset: ToolSet, groups: Collection[str] | None = None, negatives_per_positive: int = 8,
                           seed: int = 0) -> list[ParamExample]:
    """Gold parameter edges of ``toolset`` (in ``groups``, default all) as positives; as negatives, a
    seeded sample of the other (producer, consumer input) pairs of the same group: every one the
    name rule fires on (name overlap without a gold edge) and random others, up to
    ``negatives_per_positive`` per positive of the group."""
    rng = random.Random(seed)
    tools = [t for t in toolset.tools if groups is None or t.group in groups]
    by_group: dict[str, list[int]] = {}
    for n, t in enumerate(tools):
        by_group.setdefault(t.group, []).append(n)
    gold = {(e.prerequisite, e.dependent, e.consumer_param) for e in toolset.parameter_edges}
    out = []
    for group in sorted(by_group):
        idx = by_group[group]
        units = parameter_units(tools, [(a, b) for k, a in enumerate(idx) for b in idx[k + 1:]])
        pos = [u for u in units if (tools[u[0]].tool_id, tools[u[1]].tool_id, u[2]) in gold]
        if not pos:
            continue
        neg = [u for u in units if (tools[u[0]].tool_id, tools[u[1]].tool_id, u[2]) not in gold]
        named = [u for u in neg if param_rule(tools[u[0]].doc, u[2])]
        others = [u for u in neg if not param_rule(tools[u[0]].doc, u[2])]
        rng.shuffle(named)
        rng.shuffle(others)
        cap = negatives_per_positive * len(pos)
        chosen = (named[: cap // 2] + others)[:cap]
        for (p, c, q), label in [(u, TAKES) for u in pos] + [(u, TAKES_NOT) for u in chosen]:
            out.append(ParamExample(tools[p].doc, tools[c].doc, q, label, f"{toolset.name}/{group}",
                                    tools[p].tool_id, tools[c].tool_id))
    rng.shuffle(out)
    return out


def split_groups(groups: Collection[str], fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
                 seed: int = 0) -> tuple[set[str], set[str], set[str]]:
    """A seeded train / validation / test split of whole groups (no group in two splits)."""
    order = sorted(groups)
    random.Random(seed).shuffle(order)
    n_train = round(fractions[0] * len(order))
    n_valid = round(fractions[1] * len(order))
    return set(order[:n_train]), set(order[n_train:n_train + n_valid]), set(order[n_train + n_valid:])
