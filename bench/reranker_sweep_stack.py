"""The reranker design sweep, step 3 of 3: per configuration, the stacked head (logistic regression over the
cross-encoder's logit and the head's features) fitted on the validation domains' candidates (grouped 5-fold cut),
measured on the test domains; the cross-encoder alone and the head alone beside it.

    .venv/bin/python -m bench.reranker_sweep_stack SWEEP_DIR PREDICTIONS_DIR ce6 ce6_e6 ... [--group]

``--group`` adds where a unit's logit stands among its consumer input's candidates (rank, gap to the best,
the best's lead) to the stack's features.
"""
import gzip, json, numpy as np, sys
from pathlib import Path
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold
SWEEP, PRED = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in gzip.open(f"{SWEEP}/units.jsonl.gz", "rt")]
by = {}
for r in rows: by.setdefault(r["split"], []).append(r)
meta = json.load(open(f"{SWEEP}/meta.json")); F = meta["features"]; E, P = F.index("exact"), F.index("partial")
def best_cut(y, s):
    o = np.argsort(-s); tp = np.cumsum(y[o]); k = np.arange(1, len(y) + 1); f1 = 2 * tp / (k + y.sum()); j = int(np.argmax(f1)); return float(s[o][j]), float(f1[j])
def prf(y, pred):
    tp = int((y & pred).sum()); p = tp / max(1, pred.sum()); r = tp / max(1, y.sum()); return round(p,3), round(r,3), round(2*p*r/(p+r) if p+r else 0,3)
def unit_features(data, logit):
    """Per unit, where its logit stands among its consumer input's candidates: rank (0 = best), the gap to the
    input's best logit, and the best's lead over the runner-up (0 for the others)."""
    groups = {}
    for i, r in enumerate(data): groups.setdefault((r["consumer"], r["param"]), []).append(i)
    out = np.zeros((len(data), 3))
    for idx in groups.values():
        v = logit[idx]; o = np.argsort(-v); top = v[o[0]]; second = v[o[1]] if len(o) > 1 else top - 10.0
        for rank, j in enumerate(o):
            out[idx[j]] = (min(rank, 5), v[j] - top, (top - second) if rank == 0 else 0.0)
    return out
GROUP = "--group" in sys.argv
for name in [a for a in sys.argv[3:] if not a.startswith("--")]:
    if Path(f"{PRED}/preds.npz").exists():  # every configuration in one file (the sweep since 2026-11-28)
        every = np.load(f"{PRED}/preds.npz"); pr = {k: every[f"{name}.{k}"] for k in ("validation", "test")}
    else:
        pr = np.load(f"{PRED}/pred_{name}.npz")
    feats = {}
    for k in ("validation", "test"):
        X = np.array([r["x"] for r in by[k]]); y = np.array([r["y"] for r in by[k]], bool)
        cols = [pr[k], X] + ([unit_features(by[k], pr[k])] if GROUP else [])
        feats[k] = (np.column_stack(cols), y, [r["group"] for r in by[k]], X)
    Xv, yv, gv, _ = feats["validation"]; Xt, yt, gt, Xraw = feats["test"]
    mu, sd = Xv.mean(0), Xv.std(0) + 1e-6
    held = np.zeros(len(yv))
    for tr, te in GroupKFold(5).split(Xv, yv, gv):
        held[te] = LogisticRegression(class_weight="balanced", max_iter=2000).fit((Xv[tr]-mu)/sd, yv[tr]).predict_proba((Xv[te]-mu)/sd)[:, 1]
    cut, cvf1 = best_cut(yv, held)
    m = LogisticRegression(class_weight="balanced", max_iter=2000).fit((Xv-mu)/sd, yv)
    st = m.predict_proba((Xt-mu)/sd)[:, 1]
    pt = st >= cut
    fires = (Xraw[:, E] > 0) | (Xraw[:, P] > 0)
    beyond = yt & ~fires
    print(name + (" +group" if GROUP else ""), "stack: CV F1 %.3f" % cvf1, "test P/R/F1", prf(yt, pt), "beyond R %.3f P %.3f" % ((pt & beyond).sum()/beyond.sum(), (pt & ~fires & yt).sum()/max(1,(pt & ~fires).sum())), "oracle %.3f" % best_cut(yt, st)[1])
    # CE alone, cut on validation
    c2, _ = best_cut(yv, pr["validation"]); print("   CE alone", prf(yt, pr["test"] >= c2))
    # head alone on these candidate units
    hv = np.array([r["head"] for r in by["validation"]]); ht = np.array([r["head"] for r in by["test"]])
    c3, _ = best_cut(yv, hv); print("   head alone (cut on val candidates)", prf(yt, ht >= c3), "head own cut", prf(yt, ht >= meta["head_threshold"]))
