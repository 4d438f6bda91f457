"""Why the default pretraining sometimes ends at the class prior (issue 20, "figures that hold still"): the pairs and
model of `make train-discriminator`'s pretraining (8,000 mined TDI pairs with their hints, seed 42's sample; 1,200
validation pairs; MiniLM; 96 word pieces; batch 32; AdamW, weight decay 0.01, 10% warmup, linear decay, clipping
at 1.0), trained under several learning rates, step counts, depths and seeds. The sample stays the same; the seed
moves the head's initialisation and the batch order. Quality only: a GPU's speed is no CPU figure.

    .venv/bin/python -m bench.pretrain_sweep_gpu prep .ptsweep           # here: pairs as text, MiniLM in fp16
    OUT=/tmp/out SWEEP_DIR=.ptsweep python3 bench/pretrain_sweep_gpu.py run     # on a GPU machine (torch, transformers)
    OUT=/tmp/out SWEEP_DIR=.ptsweep .venv/bin/python bench/pretrain_sweep_gpu.py run --only=L3_lr0.0002_s250  # a few, on a CPU

``--grouped`` draws batches as the Trainer's ``group_by_length`` does (megabatches of 50 batches sorted by length).
``run`` writes ``results.json``: per configuration the validation loss, argmax accuracy, dependency F1 (classes 0
and 2, direction right) and the share of pairs called "no dependency" (1.0: fallen to the prior).
"""
from __future__ import annotations

import gzip
import json
import math
import os
import random
import sys
import time


def prep(out: str) -> None:
    from pathlib import Path

    from flows.train_discriminator import load_pretraining_pairs
    from models.discriminator import load_model, pair_texts

    os.makedirs(out, exist_ok=True)
    train, valid = load_pretraining_pairs(Path("artifacts/tdi/tdi-mined"), 8000, 1200, 42)
    with gzip.open(f"{out}/pairs.jsonl.gz", "wt") as fh:
        for split, rows in (("train", train), ("validation", valid)):
            for e in rows:
                a, b = pair_texts(e.doc_a, e.doc_b)
                fh.write(json.dumps({"split": split, "a": a, "b": b, "y": e.label}) + "\n")
    model = load_model("offline-minilm")  # all 6 layers; run cuts to fewer at load
    model.half().save_pretrained(f"{out}/model")
    from models.discriminator import load_tokenizer

    load_tokenizer("offline-minilm").save_pretrained(f"{out}/model")
    print(f"{len(train)} train and {len(valid)} validation pairs, model in fp16 -> {out}")


CONFIGS = [(layers, lr, steps, seed) for layers, lr, steps in
           [(3, 2e-4, 250), (3, 1e-4, 250), (3, 5e-5, 250), (3, 2e-4, 750), (3, 1e-4, 750), (6, 1e-4, 250), (6, 5e-5, 750)]
           for seed in (42, 1, 2)]


def _name(layers: int, lr: float, steps: int, seed: int) -> str:
    return f"L{layers}_lr{lr:g}_s{steps}_seed{seed}"


def run() -> None:
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, get_linear_schedule_with_warmup

    here, out = os.environ.get("SWEEP_DIR", ".ptsweep"), os.environ.get("OUT", "/tmp/out")
    os.makedirs(out, exist_ok=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    rows = [json.loads(line) for line in gzip.open(f"{here}/pairs.jsonl.gz", "rt")]
    train = [r for r in rows if r["split"] == "train"]
    valid = [r for r in rows if r["split"] == "validation"]
    tok = AutoTokenizer.from_pretrained(f"{here}/model")
    configs = CONFIGS
    picked = [a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--only=")]
    if picked:  # --only=L3_lr0.0002_s250: the configurations whose names start so (a CPU can afford a few)
        configs = [c for c in CONFIGS if any(_name(*c).startswith(p) for p in picked[0])]
    if "--smoke" in sys.argv:  # a check of the script on a CPU: two tiny runs
        configs, valid = [(3, 2e-4, 5, 42), (6, 1e-4, 5, 1)], valid[:64]

    def batch(rs):
        enc = tok([r["a"] for r in rs], [r["b"] for r in rs], truncation="longest_first", max_length=96,
                  padding=True, return_tensors="pt").to(dev)
        return enc, torch.tensor([r["y"] for r in rs], device=dev)

    grouped = "--grouped" in sys.argv  # batches of similar length, as train-discriminator's Trainer makes them
    lengths = [len(r["a"]) + len(r["b"]) for r in train]
    results = {}
    for layers, lr, steps, seed in configs:
        name = _name(layers, lr, steps, seed) + ("_grouped" if grouped else "")
        t0 = time.time()
        torch.manual_seed(seed)
        model = AutoModelForSequenceClassification.from_pretrained(f"{here}/model", num_hidden_layers=layers,
                                                                   torch_dtype=torch.float32).to(dev)
        for module in (model.classifier, getattr(model.bert, "pooler", None)):  # fresh head per seed, as a fresh load
            if module is not None:
                module.apply(model._init_weights)
        decay = [p for n, p in model.named_parameters() if not any(k in n for k in ("bias", "LayerNorm"))]
        rest = [p for n, p in model.named_parameters() if any(k in n for k in ("bias", "LayerNorm"))]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}], lr=lr)
        sched = get_linear_schedule_with_warmup(opt, int(0.1 * steps), steps)
        order, rng, losses = [], random.Random(seed), []
        model.train()
        for step in range(steps):
            if len(order) < 32:
                more = list(range(len(train)))
                rng.shuffle(more)
                if grouped:  # as the Trainer's group_by_length: megabatches of 50 batches, each sorted by length
                    mega = [sorted(more[i:i + 50 * 32], key=lambda j: -lengths[j]) for i in range(0, len(more), 50 * 32)]
                    more = [j for m in mega for j in m]
                order += more
            idx, order = order[:32], order[32:]
            enc, y = batch([train[i] for i in idx])
            loss = torch.nn.functional.cross_entropy(model(**enc).logits.float(), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step(), sched.step(), opt.zero_grad()
            losses.append(loss.item())
        model.eval()
        logits = []
        with torch.no_grad():
            for s in range(0, len(valid), 256):
                enc, _ = batch(valid[s:s + 256])
                logits.append(model(**enc).logits.float().cpu())
        logits = torch.cat(logits)
        y = torch.tensor([r["y"] for r in valid])
        val_loss = torch.nn.functional.cross_entropy(logits, y).item()
        pred = logits.argmax(-1).numpy()
        yy = y.numpy()
        tp = int(((pred == yy) & (yy != 1)).sum())
        p_dep, g_dep = int((pred != 1).sum()), int((yy != 1).sum())
        prec, rec = (tp / p_dep if p_dep else 0.0), tp / g_dep
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        results[name] = {"layers": layers, "lr": lr, "steps": steps, "seed": seed, "val_loss": round(val_loss, 4),
                         "train_loss_last50": round(float(np.mean(losses[-50:])), 4),
                         "accuracy": round(float((pred == yy).mean()), 4), "dependency_f1": round(f1, 4),
                         "share_called_none": round(float((pred == 1).mean()), 4), "seconds": round(time.time() - t0, 1)}
        print(name, results[name], flush=True)
        json.dump(results, open(f"{out}/results.json", "w"), indent=1)
    print("prior (validation):", {c: round(float((y == c).float().mean()), 4) for c in (0, 1, 2)},
          "entropy", round(-sum(p * math.log(p) for p in [float((y == c).float().mean()) for c in (0, 1, 2)] if p), 4))


if __name__ == "__main__":
    if sys.argv[1:2] == ["prep"]:
        prep(sys.argv[2])
    elif sys.argv[1:2] == ["run"]:
        run()
    else:
        sys.exit(__doc__)
