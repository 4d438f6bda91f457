"""Discriminator metrics (sklearn): P/R/F1, direction, calibration of the edge threshold, the
parameter-match baseline, the Trainer's ``compute_metrics`` and the printed tables."""
from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

from schemas.tdi import ID2LABEL, LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A, NUM_LABELS
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
    y_true, probs = np.asarray(y_true, dtype=int), np.asarray(probs, dtype=np.float64)
    n_true = int(np.isin(y_true, DEPENDENCY_CLASSES).sum())
    p_dep = probs[:, LABEL_A_DEPENDS_ON_B] + probs[:, LABEL_B_DEPENDS_ON_A]
    direction = np.where(probs[:, LABEL_A_DEPENDS_ON_B] >= probs[:, LABEL_B_DEPENDS_ON_A], LABEL_A_DEPENDS_ON_B, LABEL_B_DEPENDS_ON_A)
    order = np.argsort(-p_dep, kind="stable")
    # predicting the top k pairs as dependencies: TP = right-direction true dependencies among them
    tp = np.cumsum(direction[order] == y_true[order])
    w = np.ones(len(y_true)) if weights is None else np.asarray(weights, dtype=np.float64)
    k = np.cumsum(np.where(direction[order] == y_true[order], 1.0, w[order]))  # weighted predicted positives
    last_of_tie = np.r_[p_dep[order][1:] != p_dep[order][:-1], True]  # a cut cannot split equal scores
    precision, recall = tp / k, tp / max(n_true, 1)
    f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
    valid = last_of_tie & (n_true > 0)
    if not valid.any():
        return {"criterion": criterion, "threshold": 1.0, "precision": 0.0, "recall": 0.0, "f1": 0.0, "n": int(len(y_true)),
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
    out = {"criterion": criterion, "threshold": float(p_dep[order][chosen]), "precision": float(precision[chosen]),
           "recall": float(recall[chosen]), "f1": float(f1[chosen]), "n": int(len(y_true)), "weighted": weights is not None}
    if criterion == "precision":
        out["target_precision"] = target_precision
    if note:
        out["note"] = note
    return out


def schema_rule_metrics(examples: Sequence[PairExample], partial: bool = False) -> dict[str, Any]:
    """The parameter-match rule (schemas.name_rule) on the same pairs: the baseline to beat.
    ``partial``: the looser rule that also counts partial name matches (``user_token`` -> ``token``)."""
    from schemas.name_rule import schema_rule_label

    parsed: dict[str, dict] = {}

    def doc(text: str) -> dict:
        if text not in parsed:
            parsed[text] = json.loads(text)
        return parsed[text]

    preds = [schema_rule_label(doc(e.doc_a), doc(e.doc_b), partial=partial) for e in examples]
    return classification_metrics([e.label for e in examples], preds)


def evaluate_probs(y_true: Sequence[int], probs: np.ndarray, threshold: float | None) -> dict[str, Any]:
    """Argmax metrics, calibrated metrics (when a threshold is given) and direction accuracy."""
    from models.discriminator import decide

    out = {"argmax": classification_metrics(y_true, decide(probs)), "direction": direction_accuracy(y_true, probs)}
    if threshold is not None:
        out["calibrated"] = {**classification_metrics(y_true, decide(probs, threshold)), "threshold": threshold}
    return out


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def make_compute_metrics(partners: np.ndarray | None):
    """``compute_metrics`` for the Trainer: symmetrized probabilities when swaps are in the eval set.

    Reports argmax dependency F1, the best F1 over cuts (what calibration will reach; the
    checkpoint choice), macro F1 and direction accuracy.
    """
    def compute_metrics(eval_pred) -> dict[str, float]:
        probs = softmax(eval_pred.predictions)
        if partners is not None:
            probs = symmetrize(probs, partners)
        y = np.asarray(eval_pred.label_ids)
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


def format_comparison(rows: dict[str, dict[str, Any]], title: str) -> str:
    """One line per method: dependency P/R/F1 (direction must be right)."""
    out = [title, f"{'method':<40}{'P':>8}{'R':>8}{'F1':>8}"]
    for name, m in rows.items():
        d = m["dependency"]
        out.append(f"{name:<40}{d['precision']:>8.3f}{d['recall']:>8.3f}{d['f1']:>8.3f}")
    return "\n".join(out)
