"""Discriminator metrics (sklearn): P/R/F1, direction, calibration of the edge threshold, the
parameter-match baselines, beyond-rule recall (the gold dependencies neither name rule finds), the
Trainer's ``compute_metrics`` and the printed tables."""
from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

from schemas.tdi import ID2LABEL, LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A, LABEL_NO_DEPENDENCY, NUM_LABELS
from tasks.training.examples import PairExample, symmetrize

DEPENDENCY_CLASSES = (LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A)


def classification_metrics(y_true: Sequence[int], y_pred: Sequence[int]) -> dict[str, Any]:
    """Per-class and macro P/R/F1, accuracy, the confusion matrix and the dependency figures.

    ``dependency``: micro P/R/F1 over the two dependency classes, i.e. a pair counts as a true
    positive when it is predicted as a dependency *with the right direction*; precision is over
    all pairs predicted as 0 or 2, recall over all pairs labelled 0 or 2. This is the
    edge-finding quality the tool graph depends on (our reading of the paper's Table 3).
    """
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    y_true, y_pred = np.asarray(y_true, dtype=int), np.asarray(y_pred, dtype=int)
    labels = list(range(NUM_LABELS))
    if not len(y_true):
        zero = {"precision": 0.0, "recall": 0.0, "f1": 0.0}
        return {"n": 0, "accuracy": 0.0, "per_class": {ID2LABEL[k]: {**zero, "support": 0} for k in labels},
                "macro": zero, "dependency": zero, "dependency_macro": zero,
                "confusion_matrix": [[0] * NUM_LABELS for _ in labels]}
    p, r, f, support = precision_recall_fscore_support(y_true, y_pred, labels=labels, zero_division=0)
    per_class = {ID2LABEL[k]: {"precision": float(p[k]), "recall": float(r[k]), "f1": float(f[k]), "support": int(support[k])}
                 for k in labels}
    dep = list(DEPENDENCY_CLASSES)
    dp, dr, df, _ = precision_recall_fscore_support(y_true, y_pred, labels=dep, average="micro", zero_division=0)

    def mean(keys: Sequence[int], m: str) -> float:
        return float(np.mean([per_class[ID2LABEL[k]][m] for k in keys]))

    return {
        "n": int(len(y_true)),
        "accuracy": float((y_true == y_pred).mean()),
        "per_class": per_class,
        "macro": {m: mean(labels, m) for m in ("precision", "recall", "f1")},
        "dependency": {"precision": float(dp), "recall": float(dr), "f1": float(df)},
        "dependency_macro": {m: mean(dep, m) for m in ("precision", "recall", "f1")},
        "confusion_matrix": confusion_matrix(y_true, y_pred, labels=labels).tolist(),
    }


def direction_accuracy(y_true: Sequence[int], probs: np.ndarray) -> dict[str, Any]:
    """On the true dependency pairs: how often p(a->b) vs p(b->a) points the right way.

    Counted whatever the "none" probability, so it measures the sense of direction alone; 0.5 is
    a coin toss.
    """
    y_true = np.asarray(y_true, dtype=int)
    dep = np.isin(y_true, DEPENDENCY_CLASSES)
    if not dep.any():
        return {"n": 0, "accuracy": None}
    probs = np.asarray(probs)
    guess = np.where(probs[dep, LABEL_A_DEPENDS_ON_B] >= probs[dep, LABEL_B_DEPENDS_ON_A], LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A)
    return {"n": int(dep.sum()), "accuracy": float((guess == y_true[dep]).mean())}


CALIBRATION_CRITERIA = ("max_f1", "precision")


def choose_probability_cut(gold: Sequence[bool], p: np.ndarray, criterion: str = "max_f1",
                           target_precision: float = 0.9, weights: np.ndarray | None = None) -> dict[str, Any]:
    """``choose_threshold`` for a one-probability scorer (p that a unit is a dependency; ``gold`` True where it
    is): the same cut rules on the 3-class view [p, 1 - p, 0]."""
    y = np.where(np.asarray(gold, dtype=bool), LABEL_A_DEPENDS_ON_B, LABEL_NO_DEPENDENCY)
    p = np.asarray(p, dtype=np.float64)
    return choose_threshold(y, np.stack([p, 1 - p, np.zeros_like(p)], axis=1), criterion, target_precision, weights)


def dependency_curve(y_true: Sequence[int], probs: np.ndarray, weights: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Every pair ranked by p(dependency) = p0 + p2, best first, as if the top k were called dependencies: per
    rank the cut score, the true positives (right-direction true dependencies: the larger of p0 and p2), the
    predicted positives (a false positive counts its ``weights`` entry) and whether a cut may fall there (not
    inside a tie of equal scores); and the number of true dependencies."""
    y_true, probs = np.asarray(y_true, dtype=int), np.asarray(probs, dtype=np.float64).reshape(-1, NUM_LABELS)
    n_true = int(np.isin(y_true, DEPENDENCY_CLASSES).sum())
    p_dep = probs[:, LABEL_A_DEPENDS_ON_B] + probs[:, LABEL_B_DEPENDS_ON_A]
    direction = np.where(probs[:, LABEL_A_DEPENDS_ON_B] >= probs[:, LABEL_B_DEPENDS_ON_A], LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A)
    order = np.argsort(-p_dep, kind="stable")
    right = direction[order] == y_true[order]
    w = np.ones(len(y_true)) if weights is None else np.asarray(weights, dtype=np.float64)
    cuts = p_dep[order]
    last_of_tie = np.r_[cuts[1:] != cuts[:-1], True]
    return cuts, np.cumsum(right), np.cumsum(np.where(right, 1.0, w[order])), last_of_tie, n_true


def counts_at_cut(y_true: Sequence[int], probs: np.ndarray, cut: float, weights: np.ndarray | None = None) -> np.ndarray:
    """(true positives, weighted false positives, gold dependencies) of the pairs called dependencies at ``cut``,
    counted as calibration counts them (``dependency_curve``: a wrong direction is a false positive)."""
    cuts, tp, predicted, _, n_true = dependency_curve(y_true, probs, weights)
    k = int((cuts >= cut).sum())  # the pairs called dependencies at this cut
    return np.array([tp[k - 1], predicted[k - 1] - tp[k - 1], n_true] if k else [0, 0, n_true], dtype=float)


def prf_of_counts(c: np.ndarray) -> tuple[float, float, float]:
    """Precision, recall and F1 of ``counts_at_cut``'s (true positives, weighted false positives, gold)."""
    p, r = c[0] / max(c[0] + c[1], 1e-9), c[0] / max(c[2], 1)
    return float(p), float(r), float(2 * p * r / max(p + r, 1e-9))


def at_prior(y_true: Sequence[int], probs: np.ndarray, cut: float, weights: np.ndarray, none_per_dependency: float
             ) -> dict[str, Any]:
    """Dependency P/R/F1 at ``cut`` with every none pair weighted (``examples.none_weights``) so the none class has
    the tool sets' natural size, ``none_per_dependency`` per dependency: what a catalog's every ordered pair would
    show, where a validation split whose none pairs were subsampled overstates precision."""
    precision, recall, f1 = prf_of_counts(counts_at_cut(y_true, probs, cut, weights))
    return {"precision": precision, "recall": recall, "f1": f1, "threshold": float(cut),
            "none_per_dependency": float(none_per_dependency)}


def choose_threshold(y_true: Sequence[int], probs: np.ndarray, criterion: str = "max_f1",
                     target_precision: float = 0.9, weights: np.ndarray | None = None) -> dict[str, Any]:
    """The cut on p(dependency) = p0 + p2 for ``models.discriminator.decide``, chosen on validation.

    ``max_f1``: the cut with the highest dependency F1 (direction must be right); ``precision``:
    the lowest cut whose precision reaches ``target_precision`` (most recall at that precision),
    falling back to max F1 when no cut reaches it. Ties keep the higher cut (fewer edges).
    ``weights`` (per pair, e.g. ``none_weights``) count a false positive as that many pairs: a
    validation set whose none class was subsampled then calibrates for the real class prior, where
    a cut chosen at a balanced prior lets far too many edges through.
    """
    if criterion not in CALIBRATION_CRITERIA:
        raise ValueError(f"unknown calibration criterion {criterion!r}; known: {', '.join(CALIBRATION_CRITERIA)}")
    cuts, tp, k, last_of_tie, n_true = dependency_curve(y_true, probs, weights)
    precision, recall = tp / k, tp / max(n_true, 1)
    f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
    valid = last_of_tie & (n_true > 0)
    if not valid.any():
        return {"criterion": criterion, "threshold": 1.0, "precision": 0.0, "recall": 0.0, "f1": 0.0, "n": int(len(tp)),
                "note": "no dependency pairs in the calibration set: threshold 1.0 keeps no edge"}
    chosen, note = None, ""
    if criterion == "precision":
        ok = np.flatnonzero(valid & (precision >= target_precision))
        if ok.size:
            chosen = int(ok[np.argmax(recall[ok] + 1e-9 * k[ok])])  # most recall; the larger k on ties
        else:
            note = f"no cut reaches precision {target_precision}; fell back to max F1"
    if chosen is None:
        cand = np.flatnonzero(valid)
        chosen = int(cand[np.argmax(f1[cand] - 1e-9 * k[cand])])  # best F1; the smaller k on ties
    out = {"criterion": criterion, "threshold": float(cuts[chosen]), "precision": float(precision[chosen]),
           "recall": float(recall[chosen]), "f1": float(f1[chosen]), "n": int(len(tp)), "weighted": weights is not None}
    if criterion == "precision":
        out["target_precision"] = target_precision
    if note:
        out["note"] = note
    return out


def rule_labels(examples: Sequence[PairExample], partial: bool = False) -> list[int]:
    """The parameter-match rule's label of each pair (``schemas.name_rule.schema_rule_label``).
    ``partial``: the looser rule that also counts partial name matches (``user_token`` -> ``token``)."""
    from schemas.name_rule import schema_rule_label

    parsed: dict[str, dict] = {}

    def doc(text: str) -> dict:
        if text not in parsed:
            parsed[text] = json.loads(text)
        return parsed[text]

    return [schema_rule_label(doc(e.doc_a), doc(e.doc_b), partial=partial) for e in examples]


def schema_rule_metrics(examples: Sequence[PairExample], partial: bool = False,
                        labels: Sequence[int] | None = None) -> dict[str, Any]:
    """The parameter-match rule (schemas.name_rule) on the same pairs: the baseline to beat.
    ``partial``: the looser rule that also counts partial name matches (``user_token`` -> ``token``).
    ``labels``: the rule's labels when already computed (``rule_labels``)."""
    preds = rule_labels(examples, partial) if labels is None else labels
    return classification_metrics([e.label for e in examples], preds)


def beyond_rule_metrics(y_true: Sequence[int], y_pred: Sequence[int], exact: Sequence[int],
                        partial: Sequence[int]) -> dict[str, Any]:
    """What the model finds that the name rules do not: the edges it adds to the rule's graph.

    ``recall``: over the gold dependencies that neither rule finds (``n_gold``: neither the exact
    rule's label ``exact`` nor the partial rule's ``partial`` is the gold label, so a rule that fires
    the wrong way round has not found the pair; ``n_gold_rule_wrong_way`` of them), the share the
    model labels right (direction included, as ``classification_metrics``' dependency figures).
    ``precision``: over the pairs neither rule fires on (``n_rule_silent``: both say no dependency),
    the share of the model's dependency predictions there (``n_predicted``) that are the gold label.
    None where undefined (no such gold pair; no such prediction).
    """
    y, pred = np.asarray(y_true, dtype=int), np.asarray(y_pred, dtype=int)
    exact, partial = np.asarray(exact, dtype=int), np.asarray(partial, dtype=int)
    if not (len(y) == len(pred) == len(exact) == len(partial)):
        raise ValueError(f"beyond_rule_metrics: {len(y)} labels, {len(pred)} predictions, {len(exact)} and "
                         f"{len(partial)} rule labels")
    gold = np.isin(y, DEPENDENCY_CLASSES)
    beyond = gold & (exact != y) & (partial != y)
    silent = (exact == LABEL_NO_DEPENDENCY) & (partial == LABEL_NO_DEPENDENCY)
    predicted = silent & np.isin(pred, DEPENDENCY_CLASSES)
    found, right = int((pred[beyond] == y[beyond]).sum()), int((pred[predicted] == y[predicted]).sum())
    n_gold, n_predicted = int(beyond.sum()), int(predicted.sum())
    return {"recall": found / n_gold if n_gold else None, "precision": right / n_predicted if n_predicted else None,
            "n_gold": n_gold, "true_positives": found, "n_gold_rule_wrong_way": int((beyond & ~silent).sum()),
            "n_rule_silent": int(silent.sum()), "n_predicted": n_predicted, "correct_predicted": right}


def evaluate_probs(y_true: Sequence[int], probs: np.ndarray, threshold: float | None,
                   rules: tuple[Sequence[int], Sequence[int]] | None = None) -> dict[str, Any]:
    """Argmax metrics, calibrated metrics (when a threshold is given) and direction accuracy;
    ``rules`` (the exact and the partial rule's labels): each section's ``beyond_rule`` figures too."""
    from models.discriminator import decide

    def section(pred: np.ndarray) -> dict[str, Any]:
        out = classification_metrics(y_true, pred)
        if rules is not None:
            out["beyond_rule"] = beyond_rule_metrics(y_true, pred, *rules)
        return out

    out = {"argmax": section(decide(probs)), "direction": direction_accuracy(y_true, probs)}
    if threshold is not None:
        out["calibrated"] = {**section(decide(probs, threshold)), "threshold": threshold}
    return out


def recall_by_kind(examples: Sequence[PairExample], y_pred: Sequence[int]) -> dict[str, dict[str, Any]]:
    """Recall (direction included) on the gold dependencies of each kind ("data", "precondition"; examples
    without a kind, such as tool-set pairs, are left out): a name rule can only find data dependencies, so
    this shows what the model adds on preconditions. Kinds with no gold pair are absent."""
    out: dict[str, dict[str, Any]] = {}
    for e, pred in zip(examples, y_pred):
        if e.label in DEPENDENCY_CLASSES and e.kind:
            row = out.setdefault(e.kind, {"n_gold": 0, "true_positives": 0})
            row["n_gold"] += 1
            row["true_positives"] += int(pred == e.label)
    for row in out.values():
        row["recall"] = row["true_positives"] / row["n_gold"]
    return dict(sorted(out.items()))


def predicted_kinds(p_precondition: np.ndarray, cut: float) -> list[str]:
    """The kind head's verdict per pair: "precondition" where p(precondition) reaches ``cut``, else "data"."""
    return ["precondition" if p >= cut else "data" for p in np.asarray(p_precondition, dtype=np.float64)]


def kind_metrics(examples: Sequence[PairExample], y_pred: Sequence[int], kinds: Sequence[str | None]) -> dict[str, Any] | None:
    """P/R/F1 per dependency kind: an edge counts for kind k when it is found with the right direction *and*
    called k. ``kinds``: the kind each pair would be given if it were an edge (the kind head's verdict; "data"
    for a name rule, which finds edges through a parameter). Only pairs whose kind is known take part: "no
    dependency" pairs (a dependency predicted there is a false positive of the kind it is given) and dependent
    pairs with a kind; dependent pairs of unknown kind (UltraTool's call-order links) are left out.
    ``kind_accuracy``: the share of found edges (right direction) given their gold kind. None when no dependent
    pair has a kind."""
    if not any(e.kind and e.label in DEPENDENCY_CLASSES for e in examples):
        return None
    rows = {k: {"n_gold": 0, "n_predicted": 0, "true_positives": 0} for k in ("data", "precondition")}
    found = right_kind = 0
    for e, pred, kind in zip(examples, y_pred, kinds):
        gold_dep = e.label in DEPENDENCY_CLASSES
        if gold_dep and not e.kind:
            continue
        if gold_dep:
            rows[e.kind]["n_gold"] += 1
        if pred in DEPENDENCY_CLASSES and kind in rows:
            rows[kind]["n_predicted"] += 1
            if gold_dep and pred == e.label:
                found += 1
                right_kind += int(kind == e.kind)
                rows[kind]["true_positives"] += int(kind == e.kind)
    for row in rows.values():
        tp, n_pred, n_gold = row["true_positives"], row["n_predicted"], row["n_gold"]
        row["precision"] = tp / n_pred if n_pred else None
        row["recall"] = tp / n_gold if n_gold else None
        p, r = row["precision"] or 0.0, row["recall"] or 0.0
        row["f1"] = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return {**rows, "kind_accuracy": right_kind / found if found else None, "n_found": found}


def choose_kind_cut(examples: Sequence[PairExample], p_precondition: np.ndarray) -> dict[str, Any]:
    """The cut on the kind head's p(precondition), chosen on validation: the highest macro F1 over the two kinds
    (precondition and data F1, averaged) on the dependent pairs of known kind; ties keep the higher cut. Macro, not
    the precondition F1 alone: with preconditions a small share, a head that ranks them no better than chance
    would reach its best precondition F1 by calling every dependency a precondition; the macro F1 then keeps them
    all data. 0.5 when the pairs hold one kind only."""
    known = [(float(p), e.kind == "precondition") for e, p in zip(examples, np.asarray(p_precondition, dtype=np.float64))
             if e.label in DEPENDENCY_CLASSES and e.kind]
    n_pre = sum(pre for _, pre in known)
    n_data = len(known) - n_pre
    if not n_pre or not n_data:
        return {"kind_threshold": 0.5, "kind_macro_f1": None, "n_kind_pairs": len(known), "n_precondition": n_pre,
                "note": "no choice: the validation pairs hold one kind only"}
    known.sort(key=lambda t: -t[0])

    def macro(k: int, tp: int) -> tuple[float, float]:  # the top k called precondition, tp of them right
        data_tp = n_data - (k - tp)  # data pairs below the cut
        return 2 * tp / (k + n_pre), 2 * data_tp / ((len(known) - k) + n_data)

    pre_f1, data_f1 = macro(0, 0)  # no cut reached: every dependency data
    best = ((pre_f1 + data_f1) / 2, float("inf"), pre_f1, data_f1)
    tp = 0
    for k, (p, pre) in enumerate(known, start=1):
        tp += pre
        if k < len(known) and known[k][0] == p:
            continue  # inside a tie: a cut cannot fall here
        pre_f1, data_f1 = macro(k, tp)
        if (pre_f1 + data_f1) / 2 > best[0]:
            best = ((pre_f1 + data_f1) / 2, p, pre_f1, data_f1)
    cut = best[1] if best[1] != float("inf") else float(np.nextafter(known[0][0], np.inf))
    return {"kind_threshold": min(cut, 1.0), "kind_macro_f1": best[0], "precondition_f1": best[2], "data_f1": best[3],
            "n_kind_pairs": len(known), "n_precondition": n_pre}


def evaluate_with_rules(examples: Sequence[PairExample], probs: np.ndarray, threshold: float | None,
                        p_precondition: np.ndarray | None = None, kind_threshold: float | None = None) -> dict[str, Any]:
    """``evaluate_probs`` with beyond-rule figures and recall per dependency kind, and both name rules on the
    same pairs. ``p_precondition`` (a kind head's scores) with its ``kind_threshold``: each section's ``kinds``
    (``kind_metrics``: P/R/F1 per kind, the name rules' edges counted as data)."""
    from models.discriminator import decide

    y = [e.label for e in examples]
    exact, partial = rule_labels(examples), rule_labels(examples, partial=True)
    data_only = ["data"] * len(examples)
    out = {**evaluate_probs(y, probs, threshold, (exact, partial)),
           "schema_rule": {**schema_rule_metrics(examples, labels=exact), "by_kind": recall_by_kind(examples, exact),
                           "kinds": kind_metrics(examples, exact, data_only)},
           "schema_rule_partial": {**schema_rule_metrics(examples, partial=True, labels=partial),
                                   "by_kind": recall_by_kind(examples, partial),
                                   "kinds": kind_metrics(examples, partial, data_only)}}
    model_kinds = predicted_kinds(p_precondition, 0.5 if kind_threshold is None else kind_threshold) \
        if p_precondition is not None else None
    sections = [("argmax", decide(probs))] + ([("calibrated", decide(probs, threshold))] if threshold is not None else [])
    for name, pred in sections:
        out[name]["by_kind"] = recall_by_kind(examples, pred)
        if model_kinds is not None:
            out[name]["kinds"] = kind_metrics(examples, pred, model_kinds)
    return out


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def class_probabilities(logits: np.ndarray) -> np.ndarray:
    """The three classes' probabilities from 3 logits, or from the kind head's 5 (each dependency class's two
    kinds summed: ``models.discriminator.class_logits``)."""
    import torch

    from models.discriminator import class_logits

    return softmax(class_logits(torch.as_tensor(np.asarray(logits, dtype=np.float64))).numpy())


def make_compute_metrics(partners: np.ndarray | None):
    """``compute_metrics`` for the Trainer: symmetrized probabilities when swaps are in the eval set.

    Reports argmax dependency F1, the best F1 over cuts (what calibration will reach; the
    checkpoint choice), macro F1 and direction accuracy.
    """
    def compute_metrics(eval_pred) -> dict[str, float]:
        logits = eval_pred.predictions
        logits = logits[0] if isinstance(logits, (tuple, list)) else logits
        probs = class_probabilities(np.asarray(logits))
        if partners is not None:
            probs = symmetrize(probs, partners)
        y = eval_pred.label_ids  # (labels, kinds): the Trainer's label_names
        y = np.asarray(y[0] if isinstance(y, (tuple, list)) else y)
        from models.discriminator import decide

        argmax = classification_metrics(y, decide(probs))
        best = choose_threshold(y, probs, "max_f1")
        direction = direction_accuracy(y, probs)["accuracy"]
        return {"dependency_f1": argmax["dependency"]["f1"], "dependency_f1_calibrated": best["f1"],
                "threshold": best["threshold"], "macro_f1": argmax["macro"]["f1"],
                "direction_accuracy": float(direction) if direction is not None else 0.0}

    return compute_metrics


def format_metrics_table(metrics: dict[str, Any], title: str) -> str:
    rows = [f"{title} (n={metrics['n']}, accuracy={metrics['accuracy']:.3f})",
            f"{'class':<28}{'P':>8}{'R':>8}{'F1':>8}{'support':>9}"]
    for name, m in metrics["per_class"].items():
        rows.append(f"{name:<28}{m['precision']:>8.3f}{m['recall']:>8.3f}{m['f1']:>8.3f}{m['support']:>9}")
    for name in ("macro", "dependency", "dependency_macro"):
        m = metrics[name]
        rows.append(f"{name:<28}{m['precision']:>8.3f}{m['recall']:>8.3f}{m['f1']:>8.3f}")
    return "\n".join(rows)


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_beyond_rule(b: dict[str, Any] | None) -> str:
    """``beyond_rule_metrics`` in one line, with the counts behind each figure."""
    if b is None:
        return "not measured"
    fig = {k: "n/a" if b[k] is None else f"{b[k]:.3f}" for k in ("recall", "precision")}
    return (f"recall {fig['recall']} ({b['true_positives']} of {b['n_gold']} gold dependencies neither name rule finds), "
            f"precision {fig['precision']} ({b['correct_predicted']} of {b['n_predicted']} dependency predictions on "
            f"the {b['n_rule_silent']} pairs neither rule fires on)")


def format_kind_table(rows: dict[str, dict[str, Any]], title: str) -> str | None:
    """P/R/F1 per dependency kind (``kind_metrics``), one line per method that has them; None when none has."""
    rows = {name: m["kinds"] for name, m in rows.items() if m.get("kinds")}
    if not rows:
        return None
    out = [title, f"{'method':<40}" + "".join(f"{k + ' ' + m:>16}" for k in ("data", "precondition")
                                              for m in ("P", "R", "F1")) + f"{'kind acc.':>11}"]
    for name, kinds in rows.items():
        out.append(f"{name:<40}" + "".join(f"{_figure(kinds[k][m]):>16}" for k in ("data", "precondition")
                                            for m in ("precision", "recall", "f1"))
                   + f"{_figure(kinds['kind_accuracy']):>11}")
    return "\n".join(out)


def format_comparison(rows: dict[str, dict[str, Any]], title: str) -> str:
    """One line per method: dependency P/R/F1 (direction must be right), and for the model's rows
    beyond-rule recall and precision (``beyond_rule_metrics``; "-" for the rules and where undefined); where
    the pairs carry dependency kinds, recall per kind (``recall_by_kind``)."""
    kinds = sorted({k for m in rows.values() for k in m.get("by_kind") or {}})
    out = [title, f"{'method':<40}{'P':>8}{'R':>8}{'F1':>8}{'beyond-rule R':>15}{'P':>8}"
                  + "".join(f"{'R ' + k:>16}" for k in kinds)]
    beyond = None
    for name, m in rows.items():
        d, b = m["dependency"], m.get("beyond_rule")
        beyond = beyond or b
        by_kind = m.get("by_kind") or {}
        out.append(f"{name:<40}{d['precision']:>8.3f}{d['recall']:>8.3f}{d['f1']:>8.3f}"
                   f"{_figure(b and b['recall']):>15}{_figure(b and b['precision']):>8}"
                   + "".join(f"{_figure(by_kind[k]['recall'] if k in by_kind else None):>16}" for k in kinds))
    if beyond is not None:
        out.append(f"beyond-rule: R over the {beyond['n_gold']} gold dependencies neither name rule (exact, partial) "
                   f"finds; P over the model's dependency predictions on the {beyond['n_rule_silent']} pairs neither rule fires on")
    return "\n".join(out)
