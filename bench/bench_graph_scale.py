"""Scale of build-graph (issue 21 item 6, issue 20 item 6): time and peak RSS per step on a synthetic catalog.

    python -m bench.bench_graph_scale --tools 10000 [--encoder offline-minilm] [--workdir W] [--rerun]
    python -m bench.bench_graph_scale --tools 10000 --discriminator artifacts/discriminator/minilm/best \
        --pruning retrieval --retrieval-share 0.05 [--scoring-runner dask]

Steps timed: each Prefect task or helper of flows.build_graph named in ``STEPS``, and the parameter level
(``PARAM_STEPS``, tasks.graph.param_scoring). The result names the edges per source and the parameter edges.

The catalog (``synthetic_catalog``): ToolBench stable's 2,479 tools replicated with renamed ids, names and
groups (replica r: tool id ``<id>~r<r>``, group ``<category> r<r>``), cut to ``--tools``; so each group has a
ToolBench category's size and the pair counts grow linearly with the tools. Each tool's name and description end
with a word of its own (``tag``: letters drawn from a hash of its id), so that no two texts are the same and the
embedding cache cannot short-cut the first run, while no word is shared that the real catalog lacks: a replica
number in every name and description ("r0", "replica") gave every two tools of a group a common word, and the
``text`` pruning rule linked 67% of sampled same-group pairs instead of ToolBench's own 22%.
The build runs in this process (the flow function, Prefect's temporary server); each step (a Prefect task or
helper of flows.build_graph) is timed, and RSS is sampled every 0.1 s for its peak per step, summed over this
process and its children (a local Dask or Ray cluster's workers, the Prefect server); ``ru_maxrss`` is this
process's own peak. Without ``--discriminator`` no pair is scored. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import shutil
import tempfile
import threading
import time
from pathlib import Path

DATA_ROOT = Path("../shared/data/benchmarks")
NAME_MAX, DESC_MAX = 120, 1200  # schemas/api_doc.schema.json: name and description maxLength
STEPS = ("load_toolset", "encode_texts", "prune", "schema_edges", "check_pairs", "score", "score_on_cluster",
         "gcn_propagate", "read_runs", "dataset_tables", "write_warehouse")
# the parameter level of a two-level checkpoint (build-graph imports this module where it scores inputs)
PARAM_STEPS = ("score_parameters",)


def tag(tool_id: str, length: int = 8) -> str:
    """A word of lowercase letters drawn from a hash of ``tool_id``: one word (no digit or case change splits it),
    found in no other tool's text (26^8 words)."""
    import hashlib

    digest = hashlib.sha256(tool_id.encode()).digest()
    return "".join(chr(ord("a") + b % 26) for b in digest[:length])


def synthetic_catalog(n_tools: int, folder: Path, data_root: Path = DATA_ROOT) -> Path:
    """``n_tools`` tools in the tool set folder format (docs/toolsets.md) made from ToolBench stable by
    replication with renamed ids (see the module docstring); deterministic, no randomness."""
    from schemas.toolset import Tool, ToolSet
    from tasks.toolsets.readers import load_benchmark, write_toolset_dir

    base = load_benchmark("toolbench_stable", data_root).tools
    tools: list[Tool] = []
    replica = 0
    while len(tools) < n_tools:
        for t in base:
            if len(tools) == n_tools:
                break
            tool_id, word = f"{t.tool_id}~r{replica}", tag(f"{t.tool_id}~r{replica}")
            doc = dict(t.doc, name=f"{t.doc['name'][:NAME_MAX - len(word) - 1]} {word}",
                       description=f"{(t.doc.get('description') or '')[:DESC_MAX - len(word) - 1]} {word}".strip())
            tools.append(Tool(tool_id, f"{t.group} r{replica}", doc))
        replica += 1
    return write_toolset_dir(ToolSet(name=f"synthetic{n_tools}", tools=tools), folder)


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (/proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for children in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in children.read_text().split()]
            except OSError:
                pass
    return out


class _Rss:
    """Peak RSS between marks of this process and its children, sampled from /proc every 0.1 s."""

    def __init__(self) -> None:
        self.peak, self._stop = 0, False
        threading.Thread(target=self._run, daemon=True).start()

    @staticmethod
    def now() -> int:
        total = 0
        for pid in _tree(os.getpid()):
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            except OSError:  # a child that just exited
                pass
        return total

    def _run(self) -> None:
        while not self._stop:
            self.peak = max(self.peak, self.now())
            time.sleep(0.1)

    def reset(self) -> int:
        peak, self.peak = self.peak, self.now()
        return max(peak, self.peak)


class _StubEncoder:
    """``encode(texts)``: a seeded random unit vector per text (no model)."""

    def encode(self, texts):
        import hashlib

        import numpy as np

        out = np.stack([np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little"))
                        .standard_normal(384, dtype=np.float32) for t in texts])
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tools", type=int, default=10_000)
    ap.add_argument("--encoder", default="offline-minilm")
    ap.add_argument("--workdir", default=None, help="catalog, warehouse and cache go here (default: a temp folder)")
    ap.add_argument("--rerun", action="store_true", help="build twice; the second run's figures are reported too")
    ap.add_argument("--stub-encoder", action="store_true",
                    help="replace the sentence encoder by a hash of each text to a random unit vector (384 dims): "
                         "times every step but the model's forward passes, whose cost the encoding rate of a real "
                         "run gives; the vectors mean nothing")
    ap.add_argument("--discriminator", default=None, help="checkpoint that scores the candidate pairs (default: none)")
    ap.add_argument("--scoring-runner", default="local", choices=("local", "dask", "ray"))
    ap.add_argument("--scoring-workers", type=int, default=2)
    ap.add_argument("--pruning", default=None, help="build-graph --pruning (default: its default)")
    ap.add_argument("--retrieval-k", type=int, default=None)
    ap.add_argument("--retrieval-share", type=float, default=None)
    ap.add_argument("--single-order", action="store_true", help="score <a,b> only (build-graph --single-order)")
    ap.add_argument("--encoder-engine", default=None, help="build-graph --encoder-engine (default: its default)")
    args = ap.parse_args()

    import flows.build_graph as bg

    work = Path(args.workdir or tempfile.mkdtemp(prefix="graph-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    catalog = work / f"synthetic{args.tools}"
    if not (catalog / "tools.jsonl").exists():
        synthetic_catalog(args.tools, catalog)
    rss = _Rss()
    steps: dict[str, dict] = {}

    def timed(name, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            rss.reset()
            start = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                s = steps.setdefault(name, {"s": 0.0, "calls": 0, "peak_rss_gb": 0.0})
                s["s"] = round(s["s"] + time.perf_counter() - start, 2)
                s["calls"] += 1
                s["peak_rss_gb"] = max(s["peak_rss_gb"], round(rss.reset() / 1e9, 3))
        return wrapper

    if args.stub_encoder:
        bg.sentence_encoder = lambda *_a: _StubEncoder()
    for name in STEPS:
        if hasattr(bg, name):
            setattr(bg, name, timed(name, getattr(bg, name)))
    from tasks.graph import param_scoring

    for name in PARAM_STEPS:
        setattr(param_scoring, name, timed(name, getattr(param_scoring, name)))
    fields = {f for f in bg.GraphConfig.__dataclass_fields__}
    # the stub's vectors go to their own cache folder, never mixed with a real encoder's
    extra = {"embedding_cache": str(work / ("cache-stub" if args.stub_encoder else "cache"))} \
        if "embedding_cache" in fields else {}
    runs = []
    for _ in range(2 if args.rerun else 1):
        steps = {}
        scoring = {"scoring_runner": args.scoring_runner, "scoring_workers": args.scoring_workers,
                   "both_orders": not args.single_order,
                   **{k: v for k, v in (("pruning", args.pruning), ("retrieval_k", args.retrieval_k),
                                        ("retrieval_share", args.retrieval_share),
                                        ("encoder_engine", args.encoder_engine)) if v is not None}}
        cfg = bg.GraphConfig(toolsets=(str(catalog),), warehouse=str(work / "tgr.duckdb"),
                             discriminator=args.discriminator, encoder=args.encoder, **scoring, **extra)
        start = time.perf_counter()
        bg.build_graph(cfg)
        runs.append({"total_s": round(time.perf_counter() - start, 1), "steps": steps})
    import duckdb

    with duckdb.connect(str(work / "tgr.duckdb"), read_only=True) as con:
        pairs_scored = con.execute("SELECT count(*) FROM scored_pairs").fetchone()[0]
        edges = dict(con.execute("SELECT source, count(*) FROM edges GROUP BY source").fetchall())
        parameter_edges = con.execute("SELECT count(*) FROM parameter_edges").fetchone()[0]
    out = {"tools": args.tools, "encoder": "stub (no model)" if args.stub_encoder else args.encoder, "runs": runs,
           "discriminator": args.discriminator, "scoring": scoring, "pairs_scored": pairs_scored,
           "edges": edges, "parameter_edges": parameter_edges,
           "ru_maxrss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9, 3),
           "cores": os.cpu_count(), "workdir": str(work)}
    print(json.dumps(out, indent=1))
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
