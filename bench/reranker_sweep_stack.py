"""The reranker design sweep, step 3 of 3: per configuration, the stacked head (logistic regression over the
cross-encoder's logit and the head's features) fitted on the validation domains' candidates (grouped 5-fold cut),
measured on the test domains; the cross-encoder alone and the head alone beside it.

    .venv/bin/python -m bench.reranker_sweep_stack SWEEP_DIR PREDICTIONS_DIR ce6 ce6_e6 ...
"""
import gzip, json, numpy as np, sys
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
for name in sys.argv[3:]:
    pr = np.load(f"{PRED}/pred_{name}.npz")
    feats = {}
    for k in ("validation", "test"):
        X = np.array([r["x"] for r in by[k]]); y = np.array([r["y"] for r in by[k]], bool)
        feats[k] = (np.column_stack([pr[k], X]), y, [r["group"] for r in by[k]], X)
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
    print(name, "stack: CV F1 %.3f" % cvf1, "test P/R/F1", prf(yt, pt), "beyond R %.3f P %.3f" % ((pt & beyond).sum()/beyond.sum(), (pt & ~fires & yt).sum()/max(1,(pt & ~fires).sum())), "oracle %.3f" % best_cut(yt, st)[1])
    # CE alone, cut on validation
    c2, _ = best_cut(yv, pr["validation"]); print("   CE alone", prf(yt, pr["test"] >= c2))
    # head alone on these candidate units
    hv = np.array([r["head"] for r in by["validation"]]); ht = np.array([r["head"] for r in by["test"]])
    c3, _ = best_cut(yv, hv); print("   head alone (cut on val candidates)", prf(yt, ht >= c3), "head own cut", prf(yt, ht >= meta["head_threshold"]))
