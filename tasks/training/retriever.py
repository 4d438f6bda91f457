"""The dependency retriever's training: (query, producer, hard negative) examples from mined TDI v2 shards and
from tool sets with gold edges, an in-batch contrastive loss, and a seeded loop sized for CPU that keeps the
checkpoint with the best validation score (the untrained encoder is step 0, so training never makes it worse)."""
from __future__ import annotations

import bisect
import json
import logging
import math
import random
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from models.encoder_path import SENTENCE_BERT_CONFIG, layer_cut, resolve_model_name_or_path
from models.sentence_encoder import SentenceEncoder, mean_pool
from schemas.dependency_text import parameter_query, producer_text, tool_query
from schemas.parameters import doc_without_outputs
from schemas.tdi import LABEL_A_DEPENDS_ON_B, LABEL_NO_DEPENDENCY
from schemas.toolset import ToolSet
from tasks.common.atomic import hidden_sibling, replace_dir
from tasks.training.param_examples import input_param, v2_shard_rows
from tasks.training.precision import cpu_autocast

log = logging.getLogger(__name__)

RETRIEVER_FILE = "dependency_retriever.json"  # beside the weights: how it was trained and how it scored


@dataclass(frozen=True)
class RetrieverExample:
    """``query`` (a consumer input, or a consumer without inputs) takes ``positive``'s output; ``negative``
    (optional) is a tool of the same group that it does not take."""

    query: str
    positive: str
    negative: str | None
    group: str
    key: str  # the positive producer's id: two queries with the same producer are no negatives of each other


def _query(consumer: dict, param: str | None, rng: random.Random, name_dropout: float) -> str:
    if param is None:
        return tool_query(consumer)
    return parameter_query(consumer, input_param(consumer, param), show_name=rng.random() >= name_dropout)


def _package(source: str | None) -> str:
    return (source or "").split(".")[0] or "?"


def tdi_retriever_examples(tdi_dir: Path, split: str, seed: int = 0, name_dropout: float = 0.3,
                           max_examples: int | None = None) -> list[RetrieverExample]:
    """One example per dependent row of a TDI v2 dataset's ``split`` with a ``consumer_param`` (a row and its
    swap are one): the consumer's input as the query, the producer as the positive, and as the negative a
    tool of the same package (top-level module) that the row's tools never feed."""
    rng = random.Random(seed)
    rows, tools_by_package, fed = [], defaultdict(dict), defaultdict(set)
    for doc_a, doc_b, label, ta, tb, sa, sb, param in v2_shard_rows(
            tdi_dir, split, ["doc_a", "doc_b", "label", "tool_a_id", "tool_b_id", "source_a", "source_b", "consumer_param"]):
        tools_by_package[_package(sa)].setdefault(ta, doc_a)
        tools_by_package[_package(sb)].setdefault(tb, doc_b)
        if label == LABEL_NO_DEPENDENCY or not param:
            continue
        consumer, producer, cid, pid, source = (
            (doc_a, doc_b, ta, tb, sb) if label == LABEL_A_DEPENDS_ON_B else (doc_b, doc_a, tb, ta, sa))
        fed[(cid, param)].add(pid)
        rows.append((consumer, producer, cid, pid, param, _package(source)))
    out, seen = [], set()
    ids_by_package = {pkg: sorted(tools) for pkg, tools in tools_by_package.items()}
    for consumer, producer, cid, pid, param, pkg in rows:
        if (cid, param, pid) in seen:
            continue
        seen.add((cid, param, pid))
        other = _choice_excluding(rng, ids_by_package[pkg], fed[(cid, param)] | {cid})
        negative = producer_text(json.loads(tools_by_package[pkg][other])) if other is not None else None
        out.append(RetrieverExample(_query(json.loads(consumer), param, rng, name_dropout),
                                    producer_text(json.loads(producer)), negative, f"tdi/{pkg}", pid))
    rng.shuffle(out)
    return out[:max_examples] if max_examples else out


def _choice_excluding(rng: random.Random, ids: list[str], excluded: set[str]) -> str | None:
    """``rng.choice([t for t in ids if t not in excluded])`` for sorted ``ids``, without building that list for
    every row (a package holds thousands of tools): the same draw, since ``choice(seq)`` and
    ``randrange(len(seq))`` both take ``_randbelow(len(seq))``; None when every id is excluded."""
    skip = sorted(i for t in excluded if (i := bisect.bisect_left(ids, t)) < len(ids) and ids[i] == t)
    if len(skip) >= len(ids):
        return None
    i = rng.randrange(len(ids) - len(skip))
    for p in skip:  # the i-th id that is not excluded
        if p > i:
            break
        i += 1
    return ids[i]


def toolset_retriever_examples(toolset: ToolSet, groups: Collection[str] | None = None, seed: int = 0,
                               name_dropout: float = 0.3, output_dropout: float = 0.0) -> list[RetrieverExample]:
    """Gold edges of ``toolset`` in ``groups`` (default all): each parameter edge as (consumer input,
    producer); each tool edge whose consumer declares no inputs as (consumer, producer), as the retrieval
    rule asks. Negative: a tool of the group that is no prerequisite of the consumer. ``output_dropout``: a
    seeded share of examples shows both producers without their declared outputs (name and description only),
    as a tool set that documents no outputs shows them; its own generator, so the rest is drawn as without it."""
    rng = random.Random(seed)
    hide = random.Random(f"output-dropout/{seed}")
    tools = {t.tool_id: t for t in toolset.tools if groups is None or t.group in groups}
    members: dict[str, list[str]] = defaultdict(list)
    for t in tools.values():
        members[t.group].append(t.tool_id)
    prerequisites: dict[str, set[str]] = defaultdict(set)
    for e in toolset.edges:
        prerequisites[e.dependent].add(e.prerequisite)
    for e in toolset.parameter_edges:
        prerequisites[e.dependent].add(e.prerequisite)
    units = {(e.prerequisite, e.dependent, e.consumer_param) for e in toolset.parameter_edges}
    units |= {(e.prerequisite, e.dependent, None) for e in toolset.edges
              if e.dependent in tools and not tools[e.dependent].doc.get("input_params")}
    out = []
    for pid, cid, param in sorted(units, key=lambda u: (u[0], u[1], u[2] or "")):
        if pid not in tools or cid not in tools or tools[pid].group != tools[cid].group:
            continue
        consumer = tools[cid]
        others = [t for t in members[consumer.group] if t != cid and t not in prerequisites[cid]]
        shown = doc_without_outputs if output_dropout and hide.random() < output_dropout else (lambda d: d)
        negative = producer_text(shown(tools[rng.choice(others)].doc)) if others else None
        query = _query(consumer.doc, param, rng, name_dropout)
        out.append(RetrieverExample(query, producer_text(shown(tools[pid].doc)), negative,
                                    f"{toolset.name}/{consumer.group}", pid))
    rng.shuffle(out)
    return out


class InBatchContrastiveLoss(torch.nn.Module):
    """Multiple-negatives ranking: each query against every positive and hard negative of the batch,
    cross-entropy on cosine x ``scale`` with its own positive as the answer; another query's positive
    that is the same producer is masked, not counted as a negative."""

    def __init__(self, scale: float = 20.0) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, queries: torch.Tensor, docs: torch.Tensor, keys: Sequence[str]) -> torch.Tensor:
        """``docs``: the batch's positives (one per query, in order) then its hard negatives."""
        n = len(queries)
        logits = self.scale * queries @ docs.T
        same = torch.tensor([[a == b for b in keys] for a in keys], dtype=torch.bool)
        mask = torch.zeros_like(logits, dtype=torch.bool)
        mask[:, :n] = same & ~torch.eye(n, dtype=torch.bool)
        logits = logits.masked_fill(mask, float("-inf"))
        return torch.nn.functional.cross_entropy(logits, torch.arange(n))


@dataclass
class RetrieverArguments:
    """One retriever training run (bi-encoder, mean pooling); the dependency retriever's defaults."""

    base_model: str | None = field(default=None, metadata={"help": "encoder to start from (none: offline-minilm)"})
    num_layers: int | None = field(default=None, metadata={"help": "keep the first N layers (none: all)"})
    epochs: float = field(default=1.0, metadata={"help": "passes over the training examples"})
    batch_size: int = field(default=32, metadata={"help": "queries per step (each also brings its positive and "
                                                           "negative: more in-batch negatives per step)"})
    learning_rate: float = field(default=5e-5, metadata={"help": "peak AdamW learning rate"})
    warmup_ratio: float = field(default=0.1, metadata={"help": "share of steps with linear warmup"})
    max_length: int = field(default=64, metadata={"help": "word pieces per text (training and, recorded, at use)"})
    scale: float = field(default=20.0, metadata={"help": "cosine multiplier of the contrastive loss"})
    max_steps: int = field(default=-1, metadata={"help": "stop after this many steps (-1: all epochs)"})
    evals: int = field(default=4, metadata={"help": "validations (and best-checkpoint saves) over the run"})
    seed: int = field(default=42, metadata={"help": "seed of shuffling and dropout"})
    bf16: bool = field(default=False, metadata={
        "help": "encode the training batches in bf16 mixed precision on the CPU (the loss, the weights and the "
                "saved encoder stay fp32; validation encodes in fp32)"})

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_length", "evals"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} {getattr(self, name)}: must be at least 1")
        if self.num_layers is not None and self.num_layers < 1:
            raise ValueError(f"num_layers {self.num_layers}: must be at least 1 (or none: all)")
        if self.epochs <= 0 or self.learning_rate <= 0 or self.scale <= 0:
            raise ValueError("epochs, learning_rate and scale must be positive")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError(f"warmup_ratio {self.warmup_ratio}: must lie in [0, 1)")


@dataclass
class RetrieverResult:
    best_dir: Path
    best_score: float
    untrained_score: float
    best_step: int
    steps: int
    history: list[dict]


def load_encoder(base_model: str | None, num_layers: int | None = None):
    """Tokenizer and bare encoder (``AutoModel``) of ``base_model``, cut to ``num_layers``."""
    from transformers import AutoModel, AutoTokenizer

    path = resolve_model_name_or_path(base_model)
    return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path, **layer_cut(path, num_layers))


def _embed(model, tokenizer, texts: Sequence[str], max_length: int) -> torch.Tensor:
    batch = tokenizer(list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    return mean_pool(model(**batch).last_hidden_state, batch["attention_mask"])


def _save(model, tokenizer, dst: Path, meta: dict) -> None:
    tmp = hidden_sibling(dst, "tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / SENTENCE_BERT_CONFIG).write_text(json.dumps({"max_seq_length": meta["max_length"]}))
    (tmp / RETRIEVER_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True))
    replace_dir(tmp, dst)


def train_retriever(examples: Sequence[RetrieverExample], args: RetrieverArguments, out_dir: Path,
                    validate: Callable[[SentenceEncoder], float | tuple[float, ...]],
                    log_every: int = 20) -> RetrieverResult:
    """Train on ``examples``; ``validate(encoder) -> score`` (higher is better, e.g. candidate recall on
    validation groups) runs on the untrained encoder and ``args.evals`` times during the run; the best is saved
    to ``out_dir/best`` with ``dependency_retriever.json``. A tuple score is compared in order: its first number
    is the validation score, the rest break its ties (recall at one k ties easily; see
    ``tasks.graph.retriever_run.validation_score``); a full tie keeps the earlier, so the untrained one when
    training does not help."""
    if not examples:
        raise ValueError("no retriever training examples")
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    tokenizer, model = load_encoder(args.base_model, args.num_layers)
    steps_per_epoch = math.ceil(len(examples) / args.batch_size)
    total = args.max_steps if args.max_steps > 0 else math.ceil(args.epochs * steps_per_epoch)
    eval_at = {round(total * (i + 1) / args.evals) for i in range(args.evals)}
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.01)
    warmup = max(1, int(args.warmup_ratio * total))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (total - s) / max(1, total - warmup))))
    loss_fn = InBatchContrastiveLoss(args.scale)
    meta = {"arguments": asdict(args), "n_train": len(examples), "steps": total,
            "query_format": "schemas.dependency_text.parameter_query / tool_query",
            "doc_format": "schemas.dependency_text.producer_text", "max_length": args.max_length}
    best_dir = Path(out_dir) / "best"

    def evaluate(step: int) -> tuple[float, ...]:
        model.eval()
        got = validate(SentenceEncoder.from_loaded(model, tokenizer, args.max_length))
        model.train()
        key = tuple(float(s) for s in got) if isinstance(got, tuple) else (float(got),)
        history.append({"step": step, "validation": key[0]} | ({"tie_break": list(key[1:])} if key[1:] else {}))
        return key

    started = time.time()
    history: list[dict] = []
    untrained_key = best_key = evaluate(0)
    untrained, best_step = untrained_key[0], 0
    _save(model, tokenizer, best_dir, meta | {"best_step": 0, "validation": untrained, "untrained_validation": untrained})
    log.info("retriever: %d examples, %d steps of %d; untrained validation %s", len(examples), total,
             args.batch_size, _shown(untrained_key))
    order: list[int] = []
    model.train()
    running = []
    for step in range(1, total + 1):
        if len(order) < args.batch_size:
            fresh = list(range(len(examples)))
            rng.shuffle(fresh)
            order += fresh
        batch = [examples[i] for i in order[: args.batch_size]]
        del order[: args.batch_size]
        negatives = [e.negative for e in batch if e.negative]
        with cpu_autocast(args.bf16):
            q = _embed(model, tokenizer, [e.query for e in batch], args.max_length)
            d = _embed(model, tokenizer, [e.positive for e in batch] + negatives, args.max_length)
        loss = loss_fn(q.float(), d.float(), [e.key for e in batch])  # cosines times the scale: in fp32
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        running.append(loss.item())
        if step % log_every == 0:
            log.info("retriever step %d/%d: loss %.4f (%.1f s)", step, total, np.mean(running), time.time() - started)
            running = []
        if step in eval_at:
            key = evaluate(step)
            if key > best_key:
                best_key, best_step = key, step
                _save(model, tokenizer, best_dir, meta | {"best_step": step, "validation": key[0],
                                                          "untrained_validation": untrained, "history": history})
            log.info("retriever step %d: validation %s (best %s at step %d)", step, _shown(key), _shown(best_key),
                     best_step)
    meta_path = best_dir / RETRIEVER_FILE
    saved = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps(saved | {"history": history, "seconds": round(time.time() - started)},
                                    indent=1, sort_keys=True))
    return RetrieverResult(best_dir, best_key[0], untrained, best_step, total, history)


def _shown(key: tuple[float, ...]) -> str:
    return f"{key[0]:.4f}" + (f" (tie-break {', '.join(f'{s:.4f}' for s in key[1:])})" if key[1:] else "")
