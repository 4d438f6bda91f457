"""The reranker design sweep, step 1 of 3 (bench/RESULTS.md "Parameter reranker"): the candidate units of a trained
retriever (top-10 producers per consumer input, every input of those pairs) on NesTools' train / validation / test
domains (train-retriever's split) and API-Bank, with their texts, gold and head features, into OUT/units.jsonl.gz.

    .venv/bin/python -m bench.reranker_sweep_prep RETRIEVER/best OUT   # then reranker_sweep_gpu, reranker_sweep_stack
"""
import sys, json, gzip, random, numpy as np
from pathlib import Path
from tasks.graph.retriever_run import split_toolsets
from tasks.training.retriever_config import RetrieverConfig
from models.sentence_encoder import EncoderConfig, SentenceEncoder
from tasks.toolsets.readers import load_toolset_spec
from tasks.training.param_examples import split_groups, param_text, producer_text, load_tdi_param_examples
from tasks.training.param_head import unit_features, unit_gold, without_outputs, ParamHead, FEATURES
from tasks.graph.candidates import retrieval_texts, retrieve_producers

ckpt, OUT = sys.argv[1], sys.argv[2]
Path(OUT).mkdir(parents=True, exist_ok=True)
enc = SentenceEncoder(EncoderConfig(ckpt)).encode
head = ParamHead.load(Path(ckpt))
root = Path("../shared/data/benchmarks")
nes = load_toolset_spec("nestools", root)
tr, va, te = split_groups({t.group for t in nes.tools}, (0.6, 0.2, 0.2), 0)
out = []
def units_for(ts, split, k=10):
    tools = ts.tools
    texts = retrieval_texts(tools); emb = enc(texts.producers + texts.queries); n = len(texts.producers)
    top = retrieve_producers(tools, emb[:n], emb[n:], texts.consumer, k, None)
    u, x = unit_features(tools, enc, top)
    g = unit_gold(ts, tools, u) if ts.parameter_edges else np.zeros(len(u), bool)
    p = head.predict(x)
    rows = []
    for (pi, ci, q), y, ph, xx in zip(u, g, p, x):
        rows.append({"split": split, "set": ts.name, "group": tools[ci].group, "producer": tools[pi].tool_id,
                     "consumer": tools[ci].tool_id, "param": q, "a": param_text(tools[ci].doc, q),
                     "a_drop": param_text(tools[ci].doc, q, drop_name=True),
                     "b": producer_text(tools[pi].doc), "b_drop": producer_text(tools[pi].doc, drop_names=True),
                     "y": int(y), "head": float(ph), "x": [round(float(v), 5) for v in xx]})
    print(ts.name, split, len(rows), "units", sum(r["y"] for r in rows), "gold in candidates of",
          len(ts.parameter_edges) if ts.parameter_edges else 0, flush=True)
    return rows
for split, groups in (("train", tr), ("validation", va), ("test", te)):
    out += units_for(nes.only_groups(groups), split)
ab = load_toolset_spec("apibank", root)
out += units_for(ab, "apibank")
out += units_for(without_outputs(ab, 1.0, 0), "apibank-noout")
# apibank tool edges gold
gold_ab = [[e.prerequisite, e.dependent] for e in ab.edges]
# mined TDI param examples (train split), for a "+mined" variant
mined = load_tdi_param_examples(Path("artifacts/tdi/tdi-mined"), "train", max_positives=4000, negatives_per_positive=2, seed=0)
mined_rows = [{"split": "mined", "a": param_text(e.consumer, e.param), "a_drop": param_text(e.consumer, e.param, True),
               "b": producer_text(e.producer), "b_drop": producer_text(e.producer, True), "y": int(e.label == 1) if False else None,
               "label": e.label} for e in mined]
from tasks.training.param_examples import TAKES
for r in mined_rows: r["y"] = int(r.pop("label") == TAKES)
print("mined", len(mined_rows), sum(r["y"] for r in mined_rows))
with gzip.open(f"{OUT}/units.jsonl.gz", "wt") as f:
    for r in out + mined_rows: f.write(json.dumps(r) + "\n")
json.dump({"apibank_gold_edges": gold_ab, "features": FEATURES, "head_threshold": head.threshold},
          open(f"{OUT}/meta.json", "w"))
