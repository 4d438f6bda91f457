"""The reranker design sweep, step 2 of 3: cross-encoders trained on the prepared candidate units (torch and
transformers only, so it runs on a bare GPU machine beside units.jsonl.gz, meta.json and model/ = the retriever's
weights), one per configuration, predictions to $OUT. Configurations are named on the command line: pointwise
(``ce*``: balanced BCE per unit) or listwise (``lw*``: per consumer input, a softmax over its candidates and
"none").

    OUT=/tmp/sweep python3 bench/reranker_sweep_gpu.py ce6 ce6_e6 ...   # in the folder of reranker_sweep_prep's OUT
"""
import gzip, json, math, os, random, sys, time
import numpy as np, torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

SMOKE = "--smoke" in sys.argv
OUT = os.environ.get("OUT", "/tmp/out"); os.makedirs(OUT, exist_ok=True)
dev = "cuda" if torch.cuda.is_available() else "cpu"
here = os.environ.get("SWEEP_DIR", os.path.dirname(os.path.abspath(__file__)))
rows = [json.loads(l) for l in gzip.open(f"{here}/units.jsonl.gz", "rt")]
meta = json.load(open(f"{here}/meta.json"))
by = {}
for r in rows: by.setdefault(r["split"], []).append(r)
if SMOKE:
    by = {k: v[:300] + [r for r in v if r["y"]][:20] for k, v in by.items()}
tok = AutoTokenizer.from_pretrained(f"{here}/model")
E, P = meta["features"].index("exact"), meta["features"].index("partial")
results = {}
all_preds = {}

def encode(batch, drop):
    a = [r["a_drop"] if d else r["a"] for r, d in zip(batch, drop)]
    b = [r["b_drop"] if d else r["b"] for r, d in zip(batch, drop)]
    return tok(a, b, truncation=True, max_length=MAXLEN, padding=True, return_tensors="pt").to(dev)

@torch.no_grad()
def predict(model, data):
    model.eval(); out = []
    order = sorted(range(len(data)), key=lambda i: len(data[i]["a"]) + len(data[i]["b"]))
    for s in range(0, len(order), 512):
        idx = order[s:s + 512]
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
            logit = model(**encode([data[i] for i in idx], [False] * len(idx))).logits[:, 0].float()
        out += list(zip(idx, logit.cpu().numpy()))
    res = np.zeros(len(data)); 
    for i, v in out: res[i] = v
    return res

def best_cut(y, s):
    o = np.argsort(-s); tp = np.cumsum(y[o]); k = np.arange(1, len(y) + 1)
    f1 = 2 * tp / (k + y.sum()); j = int(np.argmax(f1)); return float(s[o][j]), float(f1[j])

def prf(y, pred):
    tp = int((y & pred).sum()); p = tp / max(1, pred.sum()); r = tp / max(1, y.sum())
    return {"P": round(p, 4), "R": round(r, 4), "F1": round(2 * p * r / (p + r) if p + r else 0, 4)}

def tool_f1(data, s, cut, gold):
    best = {}
    for r, v in zip(data, s):
        k = (r["producer"], r["consumer"]); best[k] = max(best.get(k, -1e9), v)
    pred = {k for k, v in best.items() if v >= cut}
    # one edge per unordered pair: the higher direction
    kept = set()
    for (p, c) in pred:
        if (c, p) in pred and best[(c, p)] > best[(p, c)]: continue
        kept.add((p, c))
    g = {tuple(e) for e in gold}; tp = len(kept & g)
    pr = tp / max(1, len(kept)); rc = tp / max(1, len(g))
    return {"P": round(pr, 4), "R": round(rc, 4), "F1": round(2 * pr * rc / (pr + rc) if pr + rc else 0, 4), "kept": len(kept)}

def unit_groups(data, top=5):
    """A consumer input's candidates as one group: its gold producer (if any) and its ``top`` others by the head."""
    groups = {}
    for i, r in enumerate(data):
        groups.setdefault((r["consumer"], r["param"]), []).append(i)
    out = []
    for idx in groups.values():
        gold = [i for i in idx if data[i]["y"]]
        rest = sorted((i for i in idx if not data[i]["y"]), key=lambda i: -data[i]["head"])[:top]
        out.append((gold[:1], rest))
    return out

def run_listwise(name, layers=6, epochs=2, lr=5e-5, drop=0.3, seed=0, maxlen=128, groups_per_batch=8, top=5,
                 pointwise=0.0, none_ratio=1.0):
    """Listwise: per consumer input, a softmax over its candidates and a 'none of them' slot (logit 0); the gold
    producer or 'none' is the target. ``pointwise`` adds that weight of the balanced BCE of the same rows."""
    global MAXLEN; MAXLEN = maxlen
    random.seed(seed); torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(f"{here}/model", num_labels=1, num_hidden_layers=layers,
                                                               dtype=torch.float32).to(dev)
    train = by["train"]; groups = unit_groups(train, top)
    with_gold = [g for g in groups if g[0]]; without = [g for g in groups if not g[0]]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    per_epoch = len(with_gold) + min(len(without), int(none_ratio * len(with_gold)))
    total = math.ceil(per_epoch / groups_per_batch) * epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1, (s + 1) / (0.1 * total)) * max(0.0, (total - s) / total))
    t0 = time.time(); seen = 0; step = 0; history = []
    for ep in range(epochs):
        ex = with_gold + random.sample(without, min(len(without), int(none_ratio * len(with_gold))))
        random.shuffle(ex); model.train()
        for s in range(0, len(ex), groups_per_batch):
            batch = ex[s:s + groups_per_batch]
            rows, spans, targets = [], [], []
            for gold, rest in batch:
                idx = gold + rest; random.shuffle(idx)
                spans.append((len(rows), len(rows) + len(idx)))
                targets.append(idx.index(gold[0]) if gold else len(idx))  # len(idx): the 'none' slot
                rows += [train[i] for i in idx]
            d = [random.random() < drop for _ in rows]
            with torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
                logit = model(**encode(rows, d)).logits[:, 0].float()
            loss = 0.0
            for (a, b), t in zip(spans, targets):
                z = torch.cat([logit[a:b], torch.zeros(1, device=dev)])
                loss = loss + torch.nn.functional.cross_entropy(z[None], torch.tensor([t], device=dev))
            loss = loss / len(batch)
            if pointwise:
                y = torch.tensor([r["y"] for r in rows], dtype=torch.float32, device=dev)
                w = torch.where(y > 0, float(top), 1.0)
                loss = loss + pointwise * (torch.nn.functional.binary_cross_entropy_with_logits(logit, y, reduction="none") * w).sum() / w.sum()
            loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); sched.step(); opt.zero_grad()
            seen += len(rows); step += 1
            if SMOKE and step > 3: break
        history.append(round(float(loss), 4))
    finish(name, model, seen, time.time() - t0, history,
           dict(listwise=True, layers=layers, epochs=epochs, lr=lr, drop=drop, seed=seed, maxlen=maxlen,
                groups_per_batch=groups_per_batch, top=top, pointwise=pointwise, none_ratio=none_ratio, steps=step))

def run(name, layers=6, mined=False, neg_per_pos=8, epochs=3, lr=5e-5, drop=0.3, seed=0, maxlen=128, bs=64):
    global MAXLEN; MAXLEN = maxlen
    random.seed(seed); torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(f"{here}/model", num_labels=1, num_hidden_layers=layers,
                                                               dtype=torch.float32).to(dev)
    train = by["train"]; pos = [r for r in train if r["y"]]; neg = [r for r in train if not r["y"]]
    extra = by.get("mined", []) if mined else []
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    steps_per_epoch = math.ceil((len(pos) * (1 + neg_per_pos) + len(extra)) / bs); total = steps_per_epoch * epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1, (s + 1) / (0.1 * total)) * max(0.0, (total - s) / total))
    t0 = time.time(); seen = 0; step = 0; history = []
    for ep in range(epochs):
        ex = pos + random.sample(neg, min(len(neg), len(pos) * neg_per_pos)) + extra
        random.shuffle(ex); model.train()
        for s in range(0, len(ex), bs):
            b = ex[s:s + bs]
            d = [random.random() < drop for _ in b]
            y = torch.tensor([r["y"] for r in b], dtype=torch.float32, device=dev)
            with torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
                logit = model(**encode(b, d)).logits[:, 0].float()
            w = torch.where(y > 0, float(neg_per_pos), 1.0)  # balanced classes
            loss = (torch.nn.functional.binary_cross_entropy_with_logits(logit, y, reduction="none") * w).sum() / w.sum()
            loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); sched.step(); opt.zero_grad()
            seen += len(b); step += 1
            if SMOKE and step > 3: break
        history.append(round(float(loss), 4))
    finish(name, model, seen, time.time() - t0, history,
           dict(layers=layers, mined=mined, neg_per_pos=neg_per_pos, epochs=epochs, lr=lr, drop=drop, seed=seed, maxlen=maxlen))

def finish(name, model, seen, train_s, history, config):
    t1 = time.time()
    preds = {k: predict(model, by[k]) for k in ("validation", "test", "apibank", "apibank-noout")}
    pred_s = time.time() - t1
    yv = np.array([r["y"] for r in by["validation"]], bool); cut, vf1 = best_cut(yv, preds["validation"])
    yt = np.array([r["y"] for r in by["test"]], bool); st = preds["test"]
    fires = np.array([r["x"][E] > 0 or r["x"][P] > 0 for r in by["test"]])
    pt = st >= cut
    beyond = yt & ~fires
    res = {"config": config,
           "train_examples_seen": seen, "train_s": round(train_s, 1), "train_ex_per_s": round(seen / train_s, 1),
           "predict_units": sum(len(by[k]) for k in preds), "predict_s": round(pred_s, 1), "loss_end_of_epochs": history,
           "cut": cut, "validation_F1": round(vf1, 4), "test": prf(yt, pt),
           "test_beyond": {"R": round(float((pt & beyond).sum() / max(1, beyond.sum())), 4),
                           "P": round(float((pt & ~fires & yt).sum() / max(1, (pt & ~fires).sum())), 4), "n": int(beyond.sum())},
           "test_best_F1_oracle": round(best_cut(yt, st)[1], 4),
           "apibank_tool": tool_f1(by["apibank"], preds["apibank"], cut, meta["apibank_gold_edges"]),
           "apibank_noout_tool": tool_f1(by["apibank-noout"], preds["apibank-noout"], cut, meta["apibank_gold_edges"])}
    print(name, json.dumps(res), flush=True)
    results[name] = res
    all_preds.update({f"{name}.{k}": v.astype(np.float32) for k, v in preds.items()})
    np.savez_compressed(f"{OUT}/preds.npz", **all_preds)  # one file for every configuration (few files come back)
    json.dump(results, open(f"{OUT}/results.json", "w"), indent=1)

configs = [("ce6_n4e2", {"neg_per_pos": 4, "epochs": 2}), ("ce6_n8e2", {"epochs": 2}),
           ("ce6_n4e3_len96", {"neg_per_pos": 4, "maxlen": 96}), ("ce4_e6", {"layers": 4, "epochs": 6}),
           ("ce6_n4e2_s1", {"neg_per_pos": 4, "epochs": 2, "seed": 1}), ("ce6_n4e4", {"neg_per_pos": 4, "epochs": 4}),
           ("ce6", {}), ("ce6_mined", {"mined": True}), ("ce3", {"layers": 3}), ("ce6_e6", {"epochs": 6}),
           ("ce6_neg20", {"neg_per_pos": 20}), ("ce6_s1", {"seed": 1}), ("ce6_lr2e5", {"lr": 2e-5, "epochs": 5})]
# listwise (2026-11-28): per consumer input, softmax over its candidates and 'none'
listwise = [("lw6_e2", {}), ("lw6_e2_s1", {"seed": 1}), ("lw6_e3", {"epochs": 3}), ("lw6_e2_pw", {"pointwise": 0.5}),
            ("lw6_e2_top9", {"top": 9}), ("lw6_e2_none2", {"none_ratio": 2.0}), ("lw6_e2_top3", {"top": 3}), ("lw6_e2_s2", {"seed": 2}),
            ("ce6_n4e2_s2", {"neg_per_pos": 4, "epochs": 2, "seed": 2})]
only = [a for a in sys.argv[1:] if not a.startswith("--")]
named = dict(configs + listwise)
for name, kw in ([(n, named[n]) for n in only] if only else configs + listwise):
    (run_listwise if name.startswith("lw") else run)(name, **kw)
    if SMOKE: break
print("done", time.time())
