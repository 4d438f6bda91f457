"""How long the discriminator's pretraining sits at the class prior, by what it classifies: [CLS] through BERT's
pooler (the model before --pooling) or the mean of the pair's tokens (how all-MiniLM-L6-v2 was trained;
models/mean_pooled_bert.py). The pairs and loop of `bench.pretrain_sweep_gpu` (8,000 mined TDI pairs of the default
run's seed-42 sample, 1,200 validation pairs, MiniLM cut to 3 layers, 96 word pieces, batch 32, AdamW lr 2e-4,
weight decay 0.01, 10% warmup, linear decay, clipping at 1.0), 250 steps, bf16 autocast on the CPU as the flow
trains on AMX CPUs. Every 50 steps: the training loss of those 50 steps and the validation loss and argmax
dependency F1 (classes 0 and 2, direction right) on the first 400 validation pairs; at the end on all 1,200.

    .venv/bin/python -m bench.pretrain_sweep_gpu prep /tmp/ptsweep      # the mined TDI first (make mine-tdi)
    .venv/bin/python -m bench.pretrain_pooling --sweep-dir /tmp/ptsweep --pooling cls,mean --seeds 42,1,2   # 12 min
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import time


def run(sweep_dir: str, pooling: str, seed: int, steps: int) -> list[tuple]:
    import numpy as np
    import torch
    from transformers import AutoTokenizer, get_linear_schedule_with_warmup

    from models.discriminator import load_model

    rows = [json.loads(line) for line in gzip.open(f"{sweep_dir}/pairs.jsonl.gz", "rt")]
    train = [r for r in rows if r["split"] == "train"]
    valid = [r for r in rows if r["split"] == "validation"]
    tok = AutoTokenizer.from_pretrained(f"{sweep_dir}/model")
    torch.manual_seed(seed)
    model = load_model("offline-minilm", 3, pooling=pooling)  # a fresh head on the packaged encoder, as the flow

    def batch(rs):
        enc = tok([r["a"] for r in rs], [r["b"] for r in rs], truncation="longest_first", max_length=96,
                  padding=True, return_tensors="pt")
        return enc, torch.tensor([r["y"] for r in rs])

    def evaluate(pairs) -> tuple[float, float]:
        model.eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            logits = torch.cat([model(**batch(pairs[s:s + 200])[0]).logits.float() for s in range(0, len(pairs), 200)])
        model.train()
        y = torch.tensor([r["y"] for r in pairs])
        pred, gold = logits.argmax(-1).numpy(), y.numpy()
        tp = int(((pred == gold) & (gold != 1)).sum())
        called, dependent = int((pred != 1).sum()), int((gold != 1).sum())
        p, r = (tp / called if called else 0.0), tp / dependent
        return round(torch.nn.functional.cross_entropy(logits, y).item(), 4), round(2 * p * r / (p + r) if p + r else 0.0, 3)

    decay = [p for n, p in model.named_parameters() if not any(k in n for k in ("bias", "LayerNorm"))]
    rest = [p for n, p in model.named_parameters() if any(k in n for k in ("bias", "LayerNorm"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}], lr=2e-4)
    sched = get_linear_schedule_with_warmup(opt, int(0.1 * steps), steps)
    rng, order, losses, history, started = random.Random(seed), [], [], [], time.time()
    model.train()
    for step in range(1, steps + 1):
        if len(order) < 32:
            more = list(range(len(train)))
            rng.shuffle(more)
            order += more
        idx, order = order[:32], order[32:]
        enc, y = batch([train[i] for i in idx])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(**enc).logits.float(), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(), sched.step(), opt.zero_grad()
        losses.append(loss.item())
        if step % 50 == 0:
            history.append((step, round(float(np.mean(losses[-50:])), 4), *evaluate(valid if step == steps else valid[:400])))
            print(pooling, seed, history[-1], f"{time.time() - started:.0f} s", flush=True)
    return history


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sweep-dir", default="/tmp/ptsweep", help="made by: python -m bench.pretrain_sweep_gpu prep DIR")
    p.add_argument("--pooling", default="cls,mean", help="comma separated: cls, mean")
    p.add_argument("--seeds", default="42,1,2")
    p.add_argument("--steps", type=int, default=250)
    a = p.parse_args(argv)
    table = {}
    for seed in (int(s) for s in a.seeds.split(",")):
        for pooling in a.pooling.split(","):
            table[(pooling, seed)] = run(a.sweep_dir, pooling, seed, a.steps)
    steps = [h[0] for h in next(iter(table.values()))]
    print("\n| pooling | seed | " + " | ".join(f"step {s}" for s in steps) + " |\n|---|---|" + "---|" * len(steps))
    for (pooling, seed), history in table.items():
        print(f"| {pooling} | {seed} | " + " | ".join(f"{h[2]:.3f} / {h[3]:.3f}" for h in history) + " |")
    print("(validation loss / argmax dependency F1; the class prior's loss is about 1.044)")


if __name__ == "__main__":
    main()
