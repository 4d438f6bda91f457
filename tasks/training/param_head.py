"""The fast parameter-level scorer: a logistic head over what the dependency retriever and the name rule say
about one (producer, consumer input) unit of a group: the cosine, its rank and margin among the group's
producers, whether it is the consumer's best-matching input for that producer, the exact / partial name
match, and the input's words found in the producer's name and outputs (IDF-weighted). A bi-encoder encodes each
tool and each input once, so a group costs tools + inputs encodings, not a transformer pass per pair; the head is
fitted on groups the retriever did not train on."""
from __future__ import annotations

import dataclasses
import functools
import json
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from schemas.dependency_text import parameter_query, producer_text, tool_query, value_query
from schemas.name_rule import (identifier_tokens, name_words, normalise_param_name, output_names, partial_match,
                               raw_output_names)
from schemas.parameters import doc_without_outputs, is_optional, output_param_names
from schemas.toolset import Tool, ToolSet
from tasks.common.progress import EVERY_S, stage_progress
from tasks.training.metrics import choose_probability_cut
from tasks.training.param_examples import rule_over_outputs

FEATURES = ("cosine", "inverse_rank", "margin", "best_input", "inverse_column_rank", "tool_cosine", "exact", "partial",
            "token_overlap", "type_match", "declares_outputs", "producer_takes_it", "producer_takes_it_partly",
            "maker_inverse_rank", "maker_margin", "value_cosine", "value_maker_inverse_rank", "value_maker_margin",
            "lexical_overlap", "lexical_maker_inverse_rank", "lexical_maker_margin", "input_optional")
# What a new head is fitted on: rank and margin among the possible makers replace rank and margin among all the
# group's producers (bench/RESULTS.md, "Rank among makers"); heads saved before still read their own columns.
HEAD_FEATURES = tuple(f for f in FEATURES if f not in ("inverse_rank", "margin"))
OUTPUT_DROPOUT = 0.3  # share of producers shown without their declared outputs when the head is fitted
HEAD_FILE = "param_head.json"  # beside the retriever's weights: build-graph --param-discriminator takes the folder

Unit = tuple[int, int, str]  # (producer, consumer, consumer input) as tool indices
# Words any description uses by grammar, not for what it names; the rest are weighted by their IDF, so
# common ones ("user", "id") weigh little without a list of their own.
LEXICAL_STOP_WORDS = frozenset(
    "a an the of to for and or in on by with from at as is are be this that its it any specific given based which "
    "whose what who when where how optional default unit".split())


def _tokens(text: str) -> set[str]:
    return set(identifier_tokens(text))


def _type(value) -> str:
    return str(value or "").strip().lower()


def lexical_words(text: str) -> set[str]:
    """The words of a name or a sentence (identifiers split: ``userToken`` is "user", "token"), without stop
    words and single letters."""
    return {w for w in identifier_tokens(text) if len(w) > 1 and w not in LEXICAL_STOP_WORDS}


def _lexical_weights(tools: Sequence[Tool], values: Sequence[str]) -> tuple[list[set[str]], list[dict[str, float]]]:
    """Per producer the words of its name and outputs (names and descriptions), and per input the IDF of each of
    its words (``values``: the inputs as bare values), the IDF over those producer texts of ``tools``."""
    offered = [lexical_words(t.doc.get("name", "")).union(*(
        lexical_words(f"{o.get('name', '')} {o.get('description') or ''}") for o in t.doc.get("output_params") or []))
        for t in tools]
    seen = Counter(w for words in offered for w in words)
    n = len(tools)
    return offered, [{w: float(np.log((n + 1) / (seen.get(w, 0) + 1))) for w in lexical_words(v)} for v in values]


def _lexical_overlap(asked: Sequence[dict[str, float]], offered: Sequence[set[str]]) -> np.ndarray:
    """(inputs, producers): the IDF-weighted share of each input's words found in each producer's words."""
    from sklearn.feature_extraction import DictVectorizer

    words = DictVectorizer()  # the producers' words are the columns; an input's other words find nothing
    p = words.fit_transform([dict.fromkeys(offer, 1.0) for offer in offered])
    mass = np.array([sum(a.values()) for a in asked])
    return (words.transform(asked) @ p.T).toarray() / np.maximum(mass, 1e-12)[:, None]


def _tie_broken(first: np.ndarray, then: np.ndarray) -> np.ndarray:
    """One key that orders as ``first``, ties broken by ``then`` (one row of each; -inf where ``first`` is):
    dense ranks combined."""
    a = np.unique(first, return_inverse=True)[1].reshape(first.shape)
    b = np.unique(then, return_inverse=True)[1].reshape(then.shape)
    key = (a * (b.max(initial=0) + 1) + b).astype(np.float64)
    return np.where(np.isfinite(first), key, -np.inf)


def _said_groups(groups: list[list[int]], inputs_of: Counter, every_s: float) -> Iterator[list[int]]:
    """``groups`` (tool indices) one by one, the (input, producer) pairs they hold said as progress: a group's
    inputs against its tools, where the time of ``unit_features`` goes."""
    size = [sum(inputs_of[i] for i in idx) * len(idx) for idx in groups]
    with stage_progress("parameter head", sum(size), "input-producer pairs", every_s=every_s) as progress:
        for idx, n in zip(groups, size):
            yield idx
            progress.advance(n)


def unit_features(tools: Sequence[Tool], encode: Callable[[list[str]], np.ndarray],
                  pairs: Collection[tuple[int, int]] | None = None,
                  progress_every_s: float = EVERY_S) -> tuple[list[Unit], np.ndarray]:
    """Every (producer, consumer input) unit of each group (or only of the ordered (producer, consumer)
    ``pairs``) and its features (``FEATURES`` order):

    - cosine of the input's query and the producer's doc; its inverse rank among the group's producers for
      that input (1 = first) and its margin over the best other producer; whether the input is the
      consumer's closest input to that producer; the inverse rank of the input among all inputs of the
      group for that producer (1 = the producer's closest input: a mutual nearest neighbour scores 1 and 1);
    - cosine of the consumer as a whole (its name and description) and the producer;
    - the exact and partial name rule; the share of the input's name tokens found in the producer's name
      and output names; whether the input's declared type is one of the producer's output types (0.5 when
      either side declares none); whether the producer declares outputs at all;
    - whether the producer itself takes an input of that name (exactly, or by the partial rule either way): two
      tools that both take ``destination`` share the caller's value, and without declared outputs nothing else
      tells a sibling that takes the value from the tool that makes it;
    - the inverse rank and the margin among the group's possible makers of the value: the producers that do not
      take an input of that name themselves (a sibling is no rival for making it; margin against -1 when no
      other maker is left);
    - the same cosine, maker rank and margin for the input as a bare value (its name and description without the
      tool that asks, ``value_query``): the consumer's own topic no longer pulls it toward tools like the consumer
      (bench/RESULTS.md, "The input as a bare value");
    - the lexical overlap: the share of the bare value's words (IDF-weighted over ``tools``' producer texts) found
      in the producer's name and outputs, and its rank (ties broken by the cosine) and margin among the makers:
      words a cosine blurs ("The URL of the post" / "Create a blog post"), the hybrid retrieval's second view
      (bench/RESULTS.md, "A lexical view in the parameter head");
    - whether the input is optional (its description opens with ``(optional)``, as every importer marks one the
      tool does not require): a setting the caller chooses is seldom another tool's output (NesTools: 10% of the
      inputs, 2% of the gold ones; bench/RESULTS.md, "Optional inputs in the parameter head").

    A pass that runs ``progress_every_s`` or longer (a 10^3-tool catalog: a minute and more) says its count of
    (input, producer) pairs, rate and time left."""
    queries, values, owner, names = [], [], [], []
    for c, t in enumerate(tools):
        for p in dict((q["name"], q) for q in t.doc.get("input_params") or []).values():
            queries.append(parameter_query(t.doc, p))
            values.append(value_query(p))
            owner.append(c)
            names.append(p["name"])
    if not queries:
        return [], np.zeros((0, len(FEATURES)), dtype=np.float32)
    query_tokens = [_tokens(name) for name in names]
    n = len(tools)
    emb = encode([producer_text(t.doc) for t in tools] + [tool_query(t.doc) for t in tools] + queries + values)
    emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    prod, whole, qry, val = emb[:n], emb[n: 2 * n], emb[2 * n: 2 * n + len(queries)], emb[2 * n + len(queries):]
    offered = [_tokens(t.doc.get("name", "")) | {w for o in output_param_names(t.doc) for w in _tokens(o)}
               for t in tools]
    exact_keys = [output_names(t.doc) for t in tools]  # the name rule's inputs, once per producer
    raw_outputs = [raw_output_names(t.doc) for t in tools]
    partial = functools.lru_cache(maxsize=1 << 16)(partial_match)
    out_types = [{_type(o.get("type")) for o in t.doc.get("output_params") or [] if _type(o.get("type"))}
                 for t in tools]
    in_types = {(c, q["name"]): _type(q.get("type")) for c, t in enumerate(tools) for q in t.doc.get("input_params") or []}
    optional_in = {(c, q["name"]) for c, t in enumerate(tools) for q in t.doc.get("input_params") or []
                   if is_optional(q)}
    own_inputs = [[q["name"] for q in t.doc.get("input_params") or []] for t in tools]
    own_input_keys = [{normalise_param_name(n) for n in inputs} for inputs in own_inputs]
    words = functools.lru_cache(maxsize=1 << 16)(name_words)
    query_keys = [normalise_param_name(name) for name in names]  # per input, once: a unit pairs it with each producer
    lexical_offered, lexical_asked = _lexical_weights(tools, values)

    def producer_takes(p: int, r: int, exactly: bool) -> tuple[float, float]:  # p takes r's value: exactly, partly
        if exactly:
            return 1.0, 0.0
        name, asked = names[r], words(names[r])  # most inputs share no word with the name: no partial test to run
        return 0.0, float(any(not asked.isdisjoint(words(n)) and (partial(n, name) or partial(name, n))
                              for n in own_inputs[p]))

    members: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(tools):
        members[t.group].append(i)
    wanted = None if pairs is None else set(pairs)
    units, rows = [], []
    for idx in _said_groups(list(members.values()), Counter(owner), progress_every_s):
        if len(idx) < 2:
            continue
        col = {tool: k for k, tool in enumerate(idx)}
        siblings = functools.lru_cache(maxsize=None)(  # per input name: which of the group's tools take it
            lambda key, idx=idx: np.array([key in own_input_keys[p] for p in idx]))
        qrows = [r for r, c in enumerate(owner) if c in col]
        if not qrows:
            continue
        # (inputs of the group, producers of the group): the input as asked, and as a bare value
        sims, value_sims = qry[qrows] @ prod[idx].T, val[qrows] @ prod[idx].T
        own = np.array([col[owner[r]] for r in qrows])
        lexical = _lexical_overlap([lexical_asked[r] for r in qrows], [lexical_offered[p] for p in idx])
        for m in (sims, value_sims, lexical):
            m[np.arange(len(qrows)), own] = -np.inf  # a tool is not its own producer
        tool_sims = whole[idx] @ prod[idx].T
        # column rank: per producer, inputs ranked by cosine (inputs of the producer itself excluded: -inf)
        column_rank = np.argsort(np.argsort(-sims, axis=0, kind="stable"), axis=0, kind="stable") + 1
        inputs_of: dict[int, list[int]] = defaultdict(list)  # consumer -> its rows of sims
        for i, r in enumerate(qrows):
            inputs_of[owner[r]].append(i)
        closest = {c: sims[rows].max(axis=0) for c, rows in inputs_of.items()}  # per producer, c's best input
        for i, r in enumerate(qrows):
            c = owner[r]
            row = sims[i]
            finite = np.sort(row[np.isfinite(row)])[::-1]
            # the same cosines with the siblings (producers that take this input themselves) left out
            taken = siblings(query_keys[r])
            maker_ranks, makers, top = _among_makers(row, taken)
            value_row = value_sims[i]
            value_ranks, value_makers, value_top = _among_makers(value_row, taken)
            lexical_ranks = _among_makers(_tie_broken(lexical[i], row), taken)[0]  # ties by the cosine
            _, lexical_makers, lexical_top = _among_makers(lexical[i], taken)
            taken = taken.tolist()
            for p in idx:
                if p == c or (wanted is not None and (p, c) not in wanted):
                    continue
                cos = float(row[col[p]])
                rank = 1 + int((row > cos).sum())
                other = finite[1] if len(finite) > 1 and finite[0] == cos else finite[0]
                margin = cos - float(other) if len(finite) > 1 else 0.0
                best_input = float(cos >= closest[c][col[p]])
                maker_margin = _maker_margin(cos, makers, top, col[p])
                value_cos = float(value_row[col[p]])
                rule = rule_over_outputs(exact_keys[p], raw_outputs[p], names[r], partial)
                want = query_tokens[r]
                overlap = len(want & offered[p]) / len(want) if want else 0.0
                t_in = in_types.get((c, names[r]), "")
                type_match = 0.5 if not t_in or not out_types[p] else float(t_in in out_types[p])
                units.append((p, c, names[r]))
                rows.append((cos, 1.0 / rank, margin, best_input, 1.0 / column_rank[i, col[p]],
                             float(tool_sims[col[c], col[p]]), float(rule == "exact"), float(rule == "partial"),
                             overlap, type_match, float(bool(tools[p].doc.get("output_params"))),
                             *producer_takes(p, r, taken[col[p]]), 1.0 / maker_ranks[col[p]], maker_margin,
                             value_cos, 1.0 / value_ranks[col[p]], _maker_margin(value_cos, value_makers, value_top, col[p]),
                             float(lexical[i, col[p]]), 1.0 / lexical_ranks[col[p]],
                             _maker_margin(float(lexical[i, col[p]]), lexical_makers, lexical_top, col[p]),
                             float((c, names[r]) in optional_in)))
    return units, np.asarray(rows, dtype=np.float32).reshape(-1, len(FEATURES))


def _among_makers(row: np.ndarray, taken: np.ndarray) -> tuple[list[int], list[float], list[int]]:
    """One input's cosines with the group's producers (``row``), the siblings (``taken``: producers that take the
    input themselves) left out: each producer's rank among the makers, the makers' cosines (-inf for a
    sibling or the consumer), and the two best makers' columns."""
    makers = np.where(taken, -np.inf, row)
    ordered = np.sort(makers)  # rank = 1 + the makers strictly above: a search, not a producers x producers compare
    ranks = (1 + len(ordered) - np.searchsorted(ordered, row, side="right")).tolist()
    return ranks, makers.tolist(), np.argsort(-makers, kind="stable")[:2].tolist()


def _maker_margin(cos: float, makers: list[float], top: list[int], column: int) -> float:
    """``cos`` over the best maker other than this producer (against -1 when no other maker is left)."""
    rival = makers[top[1]] if len(top) > 1 and top[0] == column else makers[top[0]]
    return cos - (rival if rival != -np.inf else -1.0)


def without_outputs(toolset: ToolSet, share: float, seed: int = 0) -> ToolSet:
    """``toolset`` with a seeded ``share`` of its tools shown without declared outputs (as many real tool
    sets document them: not at all), so a head fitted on both copies does not lean on output names alone."""
    rng = random.Random(seed)
    tools = [Tool(t.tool_id, t.group, doc_without_outputs(t.doc)) if rng.random() < share else t
             for t in toolset.tools]
    return dataclasses.replace(toolset, tools=tools)


def fit_on_toolsets(toolsets: Sequence[ToolSet], encode: Callable[[list[str]], np.ndarray],
                    output_dropout: float = OUTPUT_DROPOUT, seed: int = 0,
                    rows: Callable[..., tuple[list[Unit], np.ndarray]] = unit_features,
                    computed: tuple[str, ...] = FEATURES, features: tuple[str, ...] = HEAD_FEATURES) -> ParamHead:
    """The head fitted on every unit of ``toolsets`` (with parameter edges) and of a copy of each with
    ``output_dropout`` of its producers' outputs removed; folds by group. ``rows(tools, encode)``: the units
    and their features, the columns ``computed`` (the reranker's stacked head passes its own); the head reads
    the columns ``features`` of them."""
    xs, ys, groups = [], [], []
    for ts in toolsets:
        for copy in (ts, without_outputs(ts, output_dropout, seed)) if output_dropout else (ts,):
            units, x = rows(copy.tools, encode)
            xs.append(x)
            ys.append(unit_gold(copy, copy.tools, units))
            groups += [f"{ts.name}/{copy.tools[c].group}" for _, c, _ in units]
    columns = [computed.index(f) for f in features]
    head = fit_param_head(np.vstack(xs)[:, columns], np.concatenate(ys), groups,
                          fitted_on=", ".join(ts.name for ts in toolsets) + f" (and a copy with {output_dropout:.0%} "
                          "of the producers' outputs removed)" * bool(output_dropout), seed=seed)
    head.features = tuple(features)
    return head.reading(computed)


def unit_gold(toolset: ToolSet, tools: Sequence[Tool], units: Sequence[Unit]) -> np.ndarray:
    gold = {(e.prerequisite, e.dependent, e.consumer_param) for e in toolset.parameter_edges}
    return np.array([(tools[p].tool_id, tools[c].tool_id, q) in gold for p, c, q in units], dtype=bool)


@dataclass
class ParamHead:
    """Standardised logistic regression over ``FEATURES``, with the cut chosen on held-out predictions."""

    coef: list[float]
    intercept: float
    mean: list[float]
    scale: list[float]
    threshold: float
    features: tuple[str, ...] = FEATURES
    n_units: int = 0
    n_gold: int = 0
    fitted_on: str = ""
    cut_f1: float | None = None  # F1 at the cut on the cross-validated predictions it was chosen on
    candidate_k: int | None = None  # a reranker's stacked head: the candidate rule's k (param_reranker.py)
    # the columns of ``features`` among the ones computed (``reading``; None: all of them, in order): a head
    # fitted on other columns (an older checkpoint, or HEAD_FEATURES) reads its own and ignores the rest
    columns: list[int] | None = field(default=None, repr=False)

    def predict(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        z = ((x[:, self.columns] if self.columns is not None else x) - self.mean) / self.scale
        return 1.0 / (1.0 + np.exp(-(z @ np.asarray(self.coef) + self.intercept)))

    def save(self, folder: Path) -> Path:
        path = Path(folder) / HEAD_FILE
        path.write_text(json.dumps({k: v for k, v in asdict(self).items() if k != "columns"}, indent=1))
        return path

    @classmethod
    def load(cls, folder: Path, features: tuple[str, ...] = FEATURES) -> "ParamHead":
        data = json.loads((Path(folder) / HEAD_FILE).read_text())
        data["features"] = tuple(data["features"])
        unknown = [f for f in data["features"] if f not in features]
        if unknown:
            raise ValueError(f"{folder}/{HEAD_FILE}: features {unknown} are not among the ones this code computes "
                             f"{features}")
        if len(data["coef"]) != len(data["features"]):
            raise ValueError(f"{folder}/{HEAD_FILE}: {len(data['coef'])} weights for {len(data['features'])} features")
        return cls(**data).reading(features)

    def reading(self, computed: Sequence[str]) -> "ParamHead":
        """This head set to read its ``features`` out of rows with the columns ``computed``."""
        self.columns = None if self.features == tuple(computed) else [list(computed).index(f) for f in self.features]
        return self


def fit_param_head(x: np.ndarray, y: np.ndarray, groups: Sequence[str], fitted_on: str = "", folds: int = 5,
                   seed: int = 0) -> ParamHead:
    """Fit on every unit (class-balanced); the cut maximises F1 of grouped cross-validated predictions, so
    it is chosen on groups each fold's head did not see."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=bool)
    if y.sum() == 0 or y.all():
        raise ValueError("the parameter head needs gold and non-gold units")
    mean, scale = x.mean(axis=0), np.maximum(x.std(axis=0), 1e-6)
    z = (x - mean) / scale

    def model():
        return LogisticRegression(class_weight="balanced", C=1.0, max_iter=1000, random_state=seed)

    held = np.zeros(len(y))
    n_groups = len(set(groups))
    for train, test in GroupKFold(n_splits=min(folds, n_groups)).split(z, y, groups) if n_groups > 1 else []:
        if y[train].any() and not y[train].all():
            held[test] = model().fit(z[train], y[train]).predict_proba(z[test])[:, 1]
    threshold, best = best_cut(held if n_groups > 1 else model().fit(z, y).predict_proba(z)[:, 1], y)
    final = model().fit(z, y)
    return ParamHead(final.coef_[0].tolist(), float(final.intercept_[0]), mean.tolist(), scale.tolist(), threshold,
                     n_units=len(y), n_gold=int(y.sum()), fitted_on=fitted_on, cut_f1=best)


def best_cut(p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The probability cut with the highest F1 (ties: the higher cut) and that F1 (``choose_probability_cut``)."""
    chosen = choose_probability_cut(y, p)
    return chosen["threshold"], chosen["f1"]
