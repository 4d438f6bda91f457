"""Training throughput (samples/s): this project's loop vs the stock Hugging Face ``Trainer``.

Same model (fresh 3-label head on the offline MiniLM unless --base-model), same pairs (seeded
sample of the UltraTool+TMDB finetuning pairs), same batch size, learning rate, max_length and
epochs; both runs in one process, alternating, so the ratio is measured under the same load.
Our loop's time includes its tokenization and its end-of-epoch checkpoint save; the Trainer
gets pre-tokenized data, no saving and no evaluation (both choices favour the Trainer).

    python -m bench.bench_train_throughput --pairs 512 --max-length 256 --repeats 2 --write-results
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import DataCollatorWithPadding, Trainer, TrainingArguments  # noqa: E402

from models.discriminator import encode_pairs, load_model, load_tokenizer  # noqa: E402
from tasks.toolsets import load_benchmark  # noqa: E402
from tasks.training import LoopConfig, build_pairs, train_classifier  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "RESULTS.md"
SECTION = "## Discriminator training throughput"


def bench_pairs(n: int, seed: int):
    root = REPO.parent / "shared" / "data" / "benchmarks"
    pairs = build_pairs(load_benchmark("ultratool", root)) + build_pairs(load_benchmark("tmdb", root))
    return random.Random(seed).sample(pairs, n)


def run_ours(base_model, pairs, args) -> float:
    tokenizer, model = load_tokenizer(base_model), load_model(base_model)
    cfg = LoopConfig(epochs=1, batch_size=args.batch_size, learning_rate=3e-5, max_length=args.max_length,
                     seed=args.seed, progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        train_classifier(model, tokenizer, pairs, [], cfg, Path(tmp), loss_name="ce", stage="bench")
        return len(pairs) / (time.perf_counter() - start)


def run_trainer(base_model, pairs, args) -> float:
    tokenizer, model = load_tokenizer(base_model), load_model(base_model)
    enc = encode_pairs(tokenizer, [p.doc_a for p in pairs], [p.doc_b for p in pairs], args.max_length)
    data = Dataset.from_dict({**enc, "labels": [p.label for p in pairs]})
    with tempfile.TemporaryDirectory() as tmp:
        targs = TrainingArguments(output_dir=tmp, per_device_train_batch_size=args.batch_size, num_train_epochs=1,
                                  learning_rate=3e-5, warmup_steps=int(0.1 * len(pairs) / args.batch_size),
                                  weight_decay=0.01, max_grad_norm=1.0, seed=args.seed, report_to="none",
                                  save_strategy="no", eval_strategy="no", logging_strategy="no",
                                  disable_tqdm=True, use_cpu=not torch.cuda.is_available(),
                                  bf16=torch.cuda.is_available(), dataloader_num_workers=0)
        trainer = Trainer(model=model, args=targs, train_dataset=data,
                          data_collator=DataCollatorWithPadding(tokenizer), processing_class=tokenizer)
        start = time.perf_counter()
        trainer.train()
        return len(pairs) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base-model", default="offline-minilm")
    parser.add_argument("--pairs", type=int, default=512)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()

    pairs = bench_pairs(args.pairs, args.seed)
    ours, stock = [], []
    for r in range(args.repeats):  # alternate so both see the same machine load
        ours.append(run_ours(args.base_model, pairs, args))
        stock.append(run_trainer(args.base_model, pairs, args))
        print(f"repeat {r + 1}: ours {ours[-1]:.1f} samples/s, Trainer {stock[-1]:.1f} samples/s")
    ratio = statistics.median(ours) / statistics.median(stock)
    device = f"CUDA {torch.cuda.get_device_name()}" if torch.cuda.is_available() else \
        f"CPU ({os.cpu_count()} cores, {platform.processor() or platform.machine()}), no GPU in this session"
    print(f"ratio ours/Trainer (median of {args.repeats}): {ratio:.2f}x on {device}")
    if args.write_results:
        write_results(args, ours, stock, ratio, device)


def write_results(args, ours, stock, ratio, device) -> None:
    cmd = (f"python -m bench.bench_train_throughput --pairs {args.pairs} --max-length {args.max_length} "
           f"--batch-size {args.batch_size} --repeats {args.repeats} --write-results")
    body = f"""{SECTION}

Training throughput of `tasks.training.train_classifier` (length-bucketed dynamic padding, AdamW,
linear warmup, grad clipping) against the stock `transformers.Trainer` (default random sampler,
`DataCollatorWithPadding`) on the same model and data, measured in one run, alternating.

- device: {device}
- model: `{args.base_model}` + fresh 3-label head; {args.pairs} UltraTool+TMDB finetuning pairs
  (seeded sample), max_length {args.max_length}, batch size {args.batch_size}, 1 epoch, fp32
- ours (samples/s per repeat): {', '.join(f'{x:.1f}' for x in ours)}; includes tokenization and one checkpoint save
- Trainer (samples/s per repeat): {', '.join(f'{x:.1f}' for x in stock)}; pre-tokenized, no save
- **ratio ours / Trainer (medians): {ratio:.2f}x**
- 1-min load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores. When other jobs share the
  CPU the repeats spread widely; read the ratio against that spread, and no absolute times.
  The loop's design advantage is padding each batch only to its longest member inside
  length-sorted buckets (the Trainer pads to the longest member of a random batch).

Rerun: `{cmd}`
"""
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    if SECTION in text:  # replace only our section, keep the others
        head, rest = text.split(SECTION, 1)
        nxt = rest.find("\n## ")
        text = head + body + (rest[nxt + 1 :] if nxt >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + body
    RESULTS.write_text(text)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
