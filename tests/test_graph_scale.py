"""Issue 21 item 6, the graph build at scale: the content-addressed embedding cache (a rerun encodes nothing),
progress lines of encoding, pruning and the warehouse write, the column-wise (Arrow) embedding rows equal to
the row-dict ones, pruning walked group by group equal to the pair-by-pair rules, and Ctrl-C (SIGINT) during
a warehouse rebuild or an encode leaving only whole files."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

from schemas.toolset import DependencyEdge, Query, Tool, ToolSet
from tasks.common.embedding_cache import EmbeddingCache, encode_cached, encoder_identity
from tasks.graph.edges import dataset_tables
from tasks.graph.pruning import (embedding_neighbour_pairs, param_compatible, prune_candidates,
                                 text_compatible)
from warehouse.build import (DatasetTables, WarehouseError, arrow_columns, build_warehouse, connect,
                             rows_of)

ROOT = Path(__file__).resolve().parents[1]


class CountingEncoder:
    """A deterministic fake sentence encoder that counts the texts it is asked to encode."""

    def __init__(self, dim: int = 8):
        self.dim, self.calls, self.texts = dim, 0, 0

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        out = np.stack([np.random.default_rng(abs(hash(t)) % 2**32).normal(size=self.dim) for t in texts])
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def test_a_rerun_encodes_no_text_and_returns_the_same_vectors(tmp_path):
    texts = [f"tool {i} does {i % 7}" for i in range(50)] + ["tool 3 does 3"]  # one repeat
    first = CountingEncoder()
    a = encode_cached(texts, first, EmbeddingCache(tmp_path, "enc", 256), chunk=16)
    assert first.texts == 50  # the repeated text once
    assert first.calls == 4  # chunks of 16
    again = CountingEncoder()
    b = encode_cached(texts, again, EmbeddingCache(tmp_path, "enc", 256), chunk=16)  # a new run: read from disk
    assert again.texts == 0 and again.calls == 0
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a[3], a[-1])
    # new texts only are encoded; another encoder or max length is another key
    more = CountingEncoder()
    encode_cached(texts + ["a new tool"], more, EmbeddingCache(tmp_path, "enc", 256))
    assert more.texts == 1
    other = CountingEncoder()
    encode_cached(texts[:5], other, EmbeddingCache(tmp_path, "enc", 128))
    encode_cached(texts[:5], other, EmbeddingCache(tmp_path, "other-enc", 256))
    assert other.texts == 10


def test_cache_ignores_a_shard_without_its_keys_and_leaves_no_temp_files(tmp_path):
    cache = EmbeddingCache(tmp_path, "enc", 256)
    encode_cached(["a", "b"], CountingEncoder(), cache)
    shards = list(cache.folder.glob("*.npy"))
    assert sorted(p.name.split(".")[1] for p in shards) == ["keys", "vec"]
    assert not list(cache.folder.glob(".*"))  # no temp file left
    next(p for p in shards if ".keys." in p.name).unlink()  # as if killed between the two renames
    fresh = CountingEncoder()
    encode_cached(["a", "b"], fresh, EmbeddingCache(tmp_path, "enc", 256))
    assert fresh.texts == 2


def test_encoder_identity_of_a_folder_changes_with_its_weights(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"1")
    before = encoder_identity(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"12")
    assert encoder_identity(str(tmp_path)) != before
    assert encoder_identity("offline-minilm") == "offline-minilm"


def test_encoding_says_its_progress_per_chunk(tmp_path):
    lines: list[str] = []
    encode_cached([f"t{i}" for i in range(10)], CountingEncoder(), EmbeddingCache(tmp_path, "enc", 256),
                  "tool texts", progress=lines.append, chunk=4, every_s=0.0)
    assert lines[0].startswith("encoding 10 tool texts: 0 from the cache, 10 to encode")
    assert [line.split(": ")[1].split(" ")[0] for line in lines[1:]] == ["4/10", "8/10", "10/10"]
    lines.clear()  # a fast encoder: a line every every_s seconds and one at the end
    encode_cached([f"u{i}" for i in range(10)], CountingEncoder(), EmbeddingCache(tmp_path, "enc", 256),
                  "tool texts", progress=lines.append, chunk=4, every_s=60.0)
    assert [line.split(": ")[1].split(" ")[0] for line in lines[1:]] == ["10/10"]
    lines.clear()
    encode_cached([f"t{i}" for i in range(10)], CountingEncoder(), EmbeddingCache(tmp_path, "enc", 256),
                  "tool texts", progress=lines.append, chunk=4)
    assert lines == [f"encoding 10 tool texts: 10 from the cache, 0 to encode ({tmp_path / lines[0].split('/')[-1][:-1]})"]


def _doc(name, inputs=(), outputs=(), description=None):
    return {"name": name, "description": description or f"{name} tool",
            "input_params": [{"name": n, "type": "str", "description": ""} for n in inputs],
            "output_params": [{"name": n, "type": "str", "description": ""} for n in outputs]}


def _catalog(n_groups=4, per_group=30, seed=0) -> ToolSet:
    rng = np.random.default_rng(seed)
    words = ["user", "token", "order", "movie", "city", "price", "date", "account", "email", "file"]
    tools = []
    for g in range(n_groups):
        for k in range(per_group):
            ins = list(rng.choice(words, size=rng.integers(0, 3), replace=False))
            outs = list(rng.choice(words, size=rng.integers(0, 2), replace=False))
            name = f"Get{str(rng.choice(words)).title()}{g}x{k}"
            tools.append(Tool(f"g{g}t{k}", f"group{g}", _doc(name, ins, outs)))
    edges = [DependencyEdge(t.group, t.tool_id, tools[i - 1].tool_id) for i, t in enumerate(tools)
             if i % 5 == 1 and tools[i - 1].group == t.group]
    return ToolSet("scale", tools, edges, [Query("q1", "find a movie", [tools[0].tool_id])])


@pytest.mark.parametrize("strategy", ["none", "params", "text", "params+text", "params+text+neighbours"])
def test_pruning_by_groups_keeps_exactly_the_pairs_of_the_pair_rules(strategy):
    toolset = _catalog()
    emb = np.random.default_rng(1).normal(size=(len(toolset.tools), 6)).astype(np.float32)
    got = prune_candidates(toolset.tools, emb, strategy, 3, toolset.edges)
    rules = set(strategy.split("+")) - {"none"}
    pairs = [(i, j) for i, j in combinations(range(len(toolset.tools)), 2)
             if toolset.tools[i].group == toolset.tools[j].group]
    want = set(pairs) if not rules else set()
    for i, j in pairs:
        a, b = toolset.tools[i], toolset.tools[j]
        if ("params" in rules and param_compatible(a, b)) or ("text" in rules and text_compatible(a, b)):
            want.add((i, j))
    if "neighbours" in rules:
        want |= embedding_neighbour_pairs(toolset.tools, emb, 3)
    assert got.candidates == sorted(want)
    assert got.pairs_in_groups == len(pairs) == 4 * 30 * 29 // 2
    assert 0 < len(got.candidates) <= len(pairs)


def test_pruning_says_its_progress():
    toolset = _catalog()
    lines: list[str] = []
    result = prune_candidates(toolset.tools, None, "params+text", known_edges=toolset.edges, progress=lines.append,
                              every_s=0.0)
    assert len(lines) == 5  # one per group, one at the end
    assert lines[0] == f"pruning: {30 * 29 // 2}/{result.pairs_in_groups} same-group pairs checked, " \
        f"{lines[0].split(', ')[1].split(' ')[0]} kept"
    assert lines[-1] == (f"pruning: {result.pairs_in_groups}/{result.pairs_in_groups} same-group pairs checked, "
                         f"{len(result.candidates)} kept (params+text)")


def _tables(toolset: ToolSet, kinds=("base", "tgr_schema")) -> DatasetTables:
    rng = np.random.default_rng(3)
    emb = {k: rng.normal(size=(len(toolset.tools), 6)).astype(np.float32) for k in kinds}
    queries = rng.normal(size=(len(toolset.queries), 6)).astype(np.float32)
    tables = dataset_tables(toolset, "structured", [t.doc["name"] for t in toolset.tools], "enc", None, emb, queries,
                            None, [], np.zeros((0, 3)), [], datetime(2024, 1, 1))
    tables.rows["edge_lineage"] = [{"dataset": toolset.name, "source": "manual", "producer": "test",
                                    "built_at": datetime(2024, 1, 1)}]
    return tables


def test_column_wise_embeddings_give_the_rows_of_row_dicts(tmp_path):
    toolset = _catalog(n_groups=2, per_group=5)
    bulk = _tables(toolset)
    assert set(bulk.arrow) == {"tool_embeddings", "query_embeddings"} and "tool_embeddings" not in bulk.rows
    # the same rows as dicts, as dataset_tables made them before
    as_dicts = DatasetTables(bulk.dataset, bulk.rows | {
        name: bulk.arrow[name].to_pylist() for name in bulk.arrow})
    assert isinstance(as_dicts.rows["tool_embeddings"][0]["embedding"], list)
    build_warehouse(tmp_path / "bulk.duckdb", [bulk], 6)
    build_warehouse(tmp_path / "dicts.duckdb", [as_dicts], 6)
    for table, key in (("tool_embeddings", "kind, tool_id"), ("query_embeddings", "query_id"), ("tools", "tool_id")):
        got = [rows_of(connect(tmp_path / f"{f}.duckdb"), f"SELECT * FROM {table} ORDER BY {key}")
               for f in ("bulk", "dicts")]
        assert got[0] == got[1] and len(got[0]) > 0
    assert len(got[0]) == len(toolset.tools)
    con = connect(tmp_path / "bulk.duckdb")
    assert con.execute("SELECT count(*) FROM tool_embeddings").fetchone()[0] == 2 * len(toolset.tools)
    emb = con.execute("SELECT embedding FROM tool_embeddings WHERE kind = 'base' AND tool_id = 'g0t0'").fetchone()[0]
    con.close()
    np.testing.assert_allclose(emb, np.random.default_rng(3).normal(size=(len(toolset.tools), 6))[0], rtol=1e-6)


def test_arrow_columns_are_checked_like_rows(tmp_path):
    with pytest.raises(WarehouseError, match="unknown columns"):
        arrow_columns("tool_embeddings", {"dataset": ["x"], "tool_id": ["a"], "kind": ["base"], "vector": [[1.0]]})
    with pytest.raises(WarehouseError, match="NULL in the NOT NULL column"):
        arrow_columns("tool_embeddings", {"dataset": ["x"], "tool_id": ["a"], "embedding": np.ones((1, 4))})
    with pytest.raises(WarehouseError, match="different lengths"):
        arrow_columns("tool_embeddings", {"dataset": ["x", "x"], "tool_id": ["a"], "kind": ["base"],
                                          "embedding": np.ones((1, 4))})
    good = arrow_columns("tool_embeddings", {"dataset": ["other"], "tool_id": ["a"], "kind": ["base"],
                                             "embedding": np.ones((1, 4))})
    with pytest.raises(WarehouseError, match="another dataset"):
        DatasetTables("x", {}, {"tool_embeddings": good})
    toolset = _catalog(n_groups=1, per_group=3)
    with pytest.raises(WarehouseError, match=r"embeddings of size \[6\], expected 4"):
        build_warehouse(tmp_path / "w.duckdb", [_tables(toolset)], 4)


def test_warehouse_write_says_its_progress(tmp_path):
    lines: list[str] = []
    build_warehouse(tmp_path / "w.duckdb", [_tables(_catalog(n_groups=1, per_group=3))], 6, progress=lines.append)
    assert "warehouse: staged tool_embeddings (6 rows)" in lines
    assert any(line.startswith("warehouse: SQL step 020_core.sql") for line in lines)
    assert lines[-2:] == ["warehouse: integrity checks", f"warehouse: {tmp_path / 'w.duckdb'} replaced"]


_INTERRUPTED_BUILD = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, {root!r})
    from pathlib import Path
    from tests.test_graph_scale import _catalog, _tables
    from warehouse.build import build_warehouse

    def progress(line):
        if line.startswith("warehouse: SQL step 020"):
            print("interrupting", flush=True)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the KeyboardInterrupt comes at once; never reached
    build_warehouse(Path(sys.argv[1]), [_tables(_catalog(n_groups=2, per_group=4))], 6, progress=progress)
""")


def test_sigint_during_a_rebuild_leaves_the_old_warehouse_whole(tmp_path):
    target = tmp_path / "wh" / "tgr.duckdb"
    build_warehouse(target, [_tables(_catalog(n_groups=1, per_group=3), kinds=("base",))], 6)
    before = target.read_bytes()
    script = tmp_path / "interrupt.py"
    script.write_text(_INTERRUPTED_BUILD.format(root=str(ROOT)))
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(script), str(target)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert "interrupting" in done.stdout, done.stderr
    assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr
    assert target.read_bytes() == before  # the old file, whole
    assert sorted(p.name for p in target.parent.iterdir()) == ["tgr.duckdb"]  # no build folder, temp file or lock
    con = connect(target)
    assert con.execute("SELECT count(*) FROM tool_embeddings").fetchone()[0] == 3
    con.close()
    assert time.monotonic() - start < 60


_SLOW_ENCODE = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    import numpy as np
    from tasks.common.embedding_cache import EmbeddingCache, encode_cached

    def encode(texts):
        for _ in texts:
            time.sleep(0.02)  # a model's forward pass, op by op
        return np.ones((len(texts), 4), dtype=np.float32)

    encode_cached([f"t{{i}}" for i in range(100000)], encode, EmbeddingCache(sys.argv[1], "enc", 256),
                  progress=lambda line: print(line, flush=True), chunk=8, every_s=0.0)
""")


def test_sigint_while_encoding_stops_within_two_seconds_keeping_whole_shards(tmp_path):
    script = tmp_path / "encode.py"
    script.write_text(_SLOW_ENCODE.format(root=str(ROOT)))
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "cache")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    seen = 0
    for line in proc.stdout:  # wait for two committed chunks
        seen += "encoded" in line
        if seen == 2:
            break
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    assert time.monotonic() - sent < 2.0
    assert proc.returncode != 0
    cache = EmbeddingCache(tmp_path / "cache", "enc", 256)
    assert len(cache) % 8 == 0 and len(cache) >= 16  # whole chunks only
    assert not [p for p in cache.folder.iterdir() if p.name.startswith(".")]  # no temp file left


def test_build_graph_rerun_encodes_nothing_and_writes_the_same_embeddings(tmp_path, prefect_harness, monkeypatch):
    """The flow's encode step (tool texts and the retrieval rule's texts) goes through the cache: a second build
    asks the encoder for zero texts and stores the same vectors."""
    import flows.build_graph as flow_module
    from flows.build_graph import GraphConfig, build_graph, parse_args
    from tasks.toolsets.readers import write_toolset_dir

    asked: list[int] = []
    real = flow_module.sentence_encoder

    class Counting:
        def __init__(self, *args):
            self.inner = real(*args)

        def encode(self, texts):
            asked.append(len(texts))
            return self.inner.encode(texts)

    monkeypatch.setattr(flow_module, "sentence_encoder", Counting)
    folder = write_toolset_dir(_catalog(n_groups=2, per_group=6), tmp_path / "scale")
    stored = []
    for run in range(2):
        asked.clear()
        target = tmp_path / f"tgr{run}.duckdb"
        build_graph(GraphConfig(toolsets=(str(folder),), warehouse=str(target), discriminator=None,
                                embedding_cache=str(tmp_path / "cache"), transitions=False))
        con = connect(target)
        stored.append(rows_of(con, "SELECT kind, tool_id, embedding FROM tool_embeddings ORDER BY ALL"))
        con.close()
        if run == 0:
            assert sum(asked) >= 12 + 12  # 12 tool texts, 12 producer texts of the retrieval rule, its queries
    assert asked == []
    assert stored[0] == stored[1] and len(stored[0]) >= 12
    assert parse_args(["--toolset", "x", "--no-discriminator", "--no-embedding-cache"]).embedding_cache is None


@pytest.mark.parametrize("direction", ["both", "dependent_to_prerequisite", "prerequisite_to_dependent"])
def test_sparse_propagation_equals_the_dense_reference(direction):
    """Eq. 3 runs on a sparse A (a dense one of 10^5 tools is 80 GB): the same numbers as the dense matrices."""
    from tasks.retrieval.gcn import (adjacency_matrix, gcn_propagate, gcn_propagate_weighted, normalized_adjacency,
                                     weighted_adjacency)

    rng = np.random.default_rng(5)
    x = rng.normal(size=(40, 6)).astype(np.float32)
    edges = [tuple(map(int, e)) for e in rng.integers(0, 40, size=(90, 2))]  # repeats and self loops included
    dense = (normalized_adjacency(adjacency_matrix(40, edges, direction)) @ x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(gcn_propagate(x, edges, direction), dense, rtol=1e-5, atol=1e-6)
    weighted = [(a, b, float(w)) for (a, b), w in zip(edges, rng.uniform(0.1, 2, size=len(edges)))]
    dense_w = (normalized_adjacency(weighted_adjacency(40, weighted, direction)) @ x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(gcn_propagate_weighted(x, weighted, direction), dense_w, rtol=1e-5, atol=1e-6)


def test_prefect_server_runs_in_its_own_session_so_ctrl_c_reaches_the_flow_only():
    """A terminal's Ctrl-C goes to the foreground process group: the temporary server, started in its own
    session, stays up for the interrupted flow's last reports (in its group, each report was retried for minutes)."""
    from tasks.common.prefect_guard import _GuardedSubprocess

    calls = []

    class Real:
        def Popen(self, args, *rest, **kwargs):  # noqa: N802
            calls.append((args, kwargs))

    guarded = _GuardedSubprocess(Real())
    guarded.Popen([sys.executable, "-m", "uvicorn", "--port", "1"])
    guarded.Popen([sys.executable, "-m", "other"])
    assert calls[0][0][1:4] == ["-m", "tasks.common.prefect_guard", str(os.getpid())]
    assert calls[0][1] == {"start_new_session": True}
    assert calls[1][1] == {}
