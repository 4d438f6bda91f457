"""ToolNet in the warehouse: transition edges with counts, next_tools, versioned dynamic weights
(as-of SQL = the numpy replay), Eq. 5 recounted in SQL from the recorded training split, lineage,
tool ids that look like SQL, and the build-graph / eval-retrieval flows on a small tool set."""
from __future__ import annotations

import json
import re
from datetime import datetime

import duckdb
import numpy as np
import pytest

from schemas.toolset import Query, Tool, ToolSet
from tasks.toolsets.trajectories import END, START, merge, read_trajectories
from tasks.toolnet.transitions import build_toolnet, replay
from tests.conftest import REPO_ROOT
from tests.test_warehouse import DIM, tiny_dataset
from warehouse.build import WarehouseError, build_warehouse, connect, rows_of

EVIL = "O'Brien\"; DROP TABLE edges; --"  # a real tool id of this tool set
TOOL_IDS = ["a", "b", "c", "d", "e", "f", EVIL]


def toolset() -> ToolSet:
    doc = {"name": "x", "description": "x", "input_params": [], "output_params": []}
    return ToolSet("tiny", [Tool(t, "g2" if t == "f" else "g1", doc) for t in TOOL_IDS], [],
                   [Query("q1", "find a", ("a",))])


def runs_file(tmp_path):
    lines = [{"run_id": f"r{n}", "tools": tools} for n, tools in enumerate(
        [["a", "b", "c"], ["a", "b"], ["a", "c"], ["b", "c", "c"], ["a", EVIL, "b"], ["d", "e"], ["a", "b", "c"],
         ["e", "a"], [EVIL, "c"], ["a", "b"]] * 4)]
    lines += [{"run_id": "bad1", "tools": ["a", "x'); DROP TABLE tools; --"]}, {"run_id": "bad2", "tools": []},
              {"run_id": "fail", "tools": ["a", "d"], "success": False}]
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def with_toolnet(tmp_path):
    """The tiny warehouse dataset plus the evil tool and a transition graph from a user file."""
    from flows.build_graph import GraphConfig, lineage_rows, toolnet_rows

    ts = toolset()
    runs = merge([read_trajectories(runs_file(tmp_path), set(TOOL_IDS))])
    built = build_toolnet(sorted(TOOL_IDS), runs.runs, {}, seed=0, fractions=(0.5, 0.25, 0.25))
    cfg = GraphConfig(split_fractions=(0.5, 0.25, 0.25))
    tables = tiny_dataset()
    rows = tables.rows
    rows["tools"].append({"dataset": "tiny", "tool_id": EVIL, "name": EVIL, "tool_group": "g1", "doc_json": "{}",
                          "embed_text": EVIL})
    rows["tool_embeddings"].append({"dataset": "tiny", "tool_id": EVIL, "kind": "base", "embedding": [0.1] * DIM})
    extra = toolnet_rows(ts, runs, built, cfg)
    rows["edges"] += extra.pop("edges")
    rows |= extra
    rows["edge_lineage"] = lineage_rows(ts, tmp_path, {e["source"] for e in rows["edges"]}, cfg, None, None, runs,
                                        built, datetime(2024, 1, 1))
    return tables, built, runs


@pytest.fixture()
def toolnet_warehouse(tmp_path):
    tables, built, runs = with_toolnet(tmp_path)
    path = tmp_path / "wh" / "tgr.duckdb"
    build_warehouse(path, [tables], DIM)
    return path, built, runs


def test_transition_edges_store_weights_counts_and_the_special_nodes(toolnet_warehouse):
    path, built, _ = toolnet_warehouse
    con = connect(path)
    g, nodes = built.graph, built.graph.nodes
    stored = {(p, d): (w, c) for p, d, w, c in con.execute(
        "SELECT prerequisite, dependent, weight, n_transitions FROM edges WHERE source = 'transition'").fetchall()}
    assert stored == {(nodes[i], nodes[j]): (g.weights[i, j], g.counts[i, j]) for i, j in np.argwhere(g.mask)}
    assert (START, "a") in stored and ("c", END) in stored and (EVIL, EVIL) in stored
    # the view keeps <start>/<end> edges; closure and density ignore call order / self-loops
    assert con.execute("SELECT count(*) FROM edge_list WHERE source = 'transition' AND prerequisite = '<start>'"
                       ).fetchone()[0] == len(TOOL_IDS)
    assert con.execute("SELECT count(*) FROM prerequisite_closure WHERE source = 'transition'").fetchone()[0] == 0
    density = dict(con.execute("SELECT source, n_connected FROM graph_density WHERE tool_group = '*'").fetchall())
    linked = {t for (p, d) in stored if p != d and START not in (p, d) and END not in (p, d) for t in (p, d)}
    assert density["transition"] == len(linked) < len(TOOL_IDS)


def test_eq5_recounted_in_sql_from_the_recorded_training_split(toolnet_warehouse):
    """Eq. 5 is a GROUP BY over consecutive calls of the successful training runs (docs/warehouse.md)."""
    path, built, runs = toolnet_warehouse
    con = connect(path)
    assert dict(con.execute("SELECT split, count(*) FROM trajectories GROUP BY 1").fetchall()) == {
        s: built.runs_in(s) for s in ("train", "validation", "test")}
    sql = docs_sql("Eq. 5 again, in SQL")
    recount = {(p, d): w for p, d, w in con.execute(sql, ["tiny"]).fetchall()}
    stored = dict(((p, d), w) for p, d, w in con.execute(
        "SELECT prerequisite, dependent, weight FROM edges WHERE source = 'transition' AND weight > 0 "
        "AND prerequisite <> '<start>' AND n_transitions > 0").fetchall())
    assert recount.keys() == stored.keys()
    assert all(recount[e] == pytest.approx(stored[e]) for e in stored)
    # the failed run is recorded (not in Eq. 5), the rejected ones by file and line
    assert con.execute("SELECT success FROM trajectories WHERE run_id = 'fail'").fetchone() == (False,)
    rej = rows_of(con, "SELECT line, run_id, reason FROM trajectory_rejections ORDER BY line")
    assert [(r["line"], r["run_id"]) for r in rej] == [(41, "bad1"), (42, "bad2")]
    assert "x'); DROP TABLE tools; --" in rej[0]["reason"] and rej[1]["reason"] == "empty run (no tools)"


def test_next_tools_binds_any_tool_id_and_refuses_bad_arguments(toolnet_warehouse):
    path, built, _ = toolnet_warehouse
    con = connect(path)
    g, i = built.graph, built.graph.index()
    got = con.execute("SELECT next_tool, weight, n_transitions, rank FROM next_tools(?, ?, ?)", ["tiny", "a", 3]).fetchall()
    expected = sorted(((n, g.weights[i["a"], j], g.counts[i["a"], j]) for j, n in enumerate(g.nodes)
                       if g.mask[i["a"], j] and g.weights[i["a"], j] > 0), key=lambda x: (-x[1], -x[2], x[0]))[:3]
    assert [r[:3] for r in got] == expected and [r[3] for r in got] == [1, 2, 3]
    # a tool id full of quotes and SQL is an ordinary bound value, as argument and as answer
    evil = con.execute("SELECT next_tool FROM next_tools(?, ?, 5)", ["tiny", EVIL]).fetchall()
    assert evil and ("c",) in evil
    assert (EVIL,) in con.execute("SELECT next_tool FROM next_tools('tiny', 'a', 10)").fetchall()
    assert con.execute("SELECT count(*) FROM next_tools('tiny', '<start>', 100)").fetchone()[0] == len(TOOL_IDS)
    with pytest.raises(duckdb.Error, match="next_tools: tiny has no tool x'; DROP"):
        con.execute("SELECT * FROM next_tools(?, ?, 3)", ["tiny", "x'; DROP TABLE edges; --"]).fetchall()
    with pytest.raises(duckdb.Error, match="k must be a positive integer"):
        con.execute("SELECT * FROM next_tools('tiny', 'a', 0)").fetchall()
    assert con.execute("SELECT count(*) FROM edges").fetchone()[0] > 0  # nothing was dropped


def test_weights_as_of_iteration_n_are_the_stream_s_weights(toolnet_warehouse):
    path, built, _ = toolnet_warehouse
    con = connect(path)
    g, nodes = built.graph, built.graph.nodes
    n_iter = len(built.stream)
    assert n_iter > 3 and built.result.versions
    numpy_at = [w.copy() for w in replay(g, built.result.versions, n_iter + 1)]
    np.testing.assert_allclose(numpy_at[-1], built.result.final)
    for n in (0, 1, n_iter // 2, n_iter):
        sql = {(p, d): w for p, d, w, _ in con.execute("SELECT * FROM transition_weights_at('tiny', ?)", [n]).fetchall()}
        assert len(sql) == int(g.mask.sum())
        assert all(sql[(nodes[i], nodes[j])] == pytest.approx(numpy_at[n][i, j]) for i, j in np.argwhere(g.mask))
    top = con.execute("SELECT next_tool FROM next_tools_at('tiny', 'a', 1, ?)", [n_iter]).fetchone()[0]
    row = built.result.final[g.index()["a"]]
    assert top == nodes[int(np.argmax(row))]
    # every evaluator score of the stream is kept, with its accumulated sum
    scores = con.execute("SELECT count(*), min(iteration), max(iteration) FROM transition_scores").fetchone()
    assert scores[0] == len(built.result.scores) and scores[2] <= n_iter
    assert con.execute("SELECT count(*) FROM trajectories WHERE stream_iteration IS NOT NULL").fetchone()[0] == n_iter


def test_every_edge_has_lineage_and_the_documented_join_runs(toolnet_warehouse, tmp_path):
    path, built, runs = toolnet_warehouse
    con = connect(path)
    sql = docs_sql("What produced an edge")
    rows = rows_of(con, sql, ["tiny"])
    assert len(rows) == con.execute("SELECT count(*) FROM edges WHERE dataset = 'tiny'").fetchone()[0]
    transition = [r for r in rows if r["source"] == "transition"]
    assert {tuple(r["input_files"]) for r in transition} == {tuple(runs.files)}
    from tasks.common.checksums import sha256_file

    assert transition[0]["input_sha256"] == [sha256_file(tmp_path / "runs.jsonl")]
    con.close()
    tables, _, _ = with_toolnet(tmp_path)
    tables.rows["edge_lineage"] = [r for r in tables.rows["edge_lineage"] if r["source"] != "transition"]
    with pytest.raises(WarehouseError, match="edge sources without a lineage row"):
        build_warehouse(tmp_path / "no-lineage.duckdb", [tables], DIM)


def test_checkpoint_lineage_hashes_the_folder_and_finds_the_tdi_manifest(tmp_path):
    from warehouse.lineage import checkpoint_lineage, folder_sha256

    tdi = tmp_path / "tdi"
    tdi.mkdir()
    (tdi / "manifest.json").write_text("{}")
    ckpt = tmp_path / "run" / "best"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "run" / "metrics.json").write_text(json.dumps({"config": {"pretrain_data": str(tdi)}}))
    got = checkpoint_lineage(ckpt)
    assert got["checkpoint_sha256"] == folder_sha256(ckpt) and got["tdi_manifest"] == str(tdi / "manifest.json")
    assert len(got["tdi_manifest_sha256"]) == 64 and got["tdi_manifest_newer_than_checkpoint"] is False
    before = got["checkpoint_sha256"]
    (ckpt / "model.safetensors").write_bytes(b"other weights")
    assert folder_sha256(ckpt) != before


def test_transition_integrity_checks(tmp_path):
    tables, _, _ = with_toolnet(tmp_path)
    edge = next(e for e in tables.rows["edges"] if e["source"] == "transition")
    tables.rows["edges"].append(dict(edge, dependent="ghost"))
    with pytest.raises(WarehouseError, match="transition edges naming unknown tools"):
        build_warehouse(tmp_path / "x.duckdb", [tables], DIM)
    tables, _, _ = with_toolnet(tmp_path)
    row = next(e for e in tables.rows["edges"] if e["source"] == "transition" and e["weight"] > 0.1)
    row["weight"] = row["prob"] = row["weight"] - 0.1
    with pytest.raises(WarehouseError, match="do not sum to 1"):
        build_warehouse(tmp_path / "y.duckdb", [tables], DIM)


def test_every_toolnet_sql_example_in_the_docs_runs(toolnet_warehouse):
    path, built, _ = toolnet_warehouse
    text = (REPO_ROOT / "docs" / "warehouse.md").read_text()
    block = next(b for b in re.findall(r"```sql\n(.*?)```", text, re.S) if "next_tools('tmdb'" in b)
    statements = [x.strip() for x in "\n".join(line for line in block.splitlines() if not line.startswith("--"))
                  .split(";") if x.strip()]
    assert len(statements) >= 6
    con = connect(path)
    for sql in statements:
        con.execute(sql.replace("'tmdb'", "'tiny'").replace("'SearchMovie'", "'a'")).fetchall()  # raises on error


def docs_sql(title: str) -> str:
    """The SQL block under the '-- <title>' comment of docs/warehouse.md's ToolNet examples, with
    $1 for the dataset: the documentation users paste must run."""
    text = (REPO_ROOT / "docs" / "warehouse.md").read_text()
    block = re.search(r"-- " + re.escape(title) + r"[^\n]*\n(.*?)(?:\n\n|```)", text, re.S)
    assert block, f"docs/warehouse.md has no SQL example titled {title!r}"
    return block.group(1).strip().rstrip(";").replace("'apibank'", "$1")


@pytest.mark.slow
def test_build_and_eval_flows_with_a_trajectories_file(tmp_path, prefect_harness):
    from flows.build_graph import build_graph, parse_args
    from flows.eval_retrieval import EvalConfig, eval_retrieval
    from tests.test_graph_flow import TOYSET
    from tasks.toolsets.readers import write_toolset_dir

    folder = write_toolset_dir(TOYSET, tmp_path / "toy")
    runs = tmp_path / "runs.jsonl"
    chains = [["login", "update_email"], ["login", "delete_account"], ["weather", "clothes"],
              ["login", "update_email", "delete_account"], ["weather", "clothes", "clothes"]] * 12
    runs.write_text("".join(json.dumps({"run_id": f"r{n}", "tools": c}) + "\n" for n, c in enumerate(chains))
                    + json.dumps({"run_id": "odd", "tools": ["login", "nope"]}) + "\n")
    target = tmp_path / "wh" / "tgr.duckdb"
    cfg = parse_args(["--toolset", str(folder), "--warehouse", str(target), "--no-discriminator",
                      "--trajectories", f"toy={runs}", "--split", "0.5,0.25,0.25"])
    out = build_graph(cfg)
    tn = out["datasets"]["toy"]["transitions"]
    assert tn["rejected_runs"] == 1 and sum(tn["runs"].values()) == len(chains) and 0 <= tn["beta"] < 1
    con = connect(target)
    assert con.execute("SELECT line, reason FROM trajectory_rejections").fetchall() == [
        (61, "unknown tool ids ['nope']")]
    assert con.execute("SELECT next_tool FROM next_tools('toy', 'weather', 1)").fetchone() == ("clothes",)
    kinds = {k for (k,) in con.execute("SELECT DISTINCT kind FROM tool_embeddings").fetchall()}
    assert "tgr_transition" in kinds
    lineage = rows_of(con, "SELECT source, input_files, flow_run_id FROM edge_lineage ORDER BY source")
    assert [r["source"] for r in lineage] == ["call_order", "manual", "schema", "transition"]
    assert lineage[0]["input_files"] == lineage[3]["input_files"] == [str(runs)] and all(r["flow_run_id"] for r in lineage)
    con.close()
    # the toy queries have no gold runs, so no held-out query rows; next-tool rows from the test runs
    result = eval_retrieval(EvalConfig(warehouse=str(target), out_dir=str(tmp_path / "eval"), rerank=False))
    methods = {r["method"] for r in result["next_tool_rows"]}
    assert {"popularity", "transition", "transition (dynamic)", "dependency successors (manual)"} <= methods
    assert all(r["query_split"] == "all" for r in result["rows"])
    con = connect(target)
    hits = dict(con.execute("SELECT method, hit_1 FROM next_tool_table").fetchall())
    assert hits["transition"] >= hits["popularity"]
    assert "# ToolNet transition graph" in (tmp_path / "eval" / "retrieval.md").read_text()
    # a file with a non-JSON line stops the build, naming file and line
    runs.write_text(json.dumps({"tools": ["login"]}) + "\nnot json\n")
    with pytest.raises(Exception, match=r"runs.jsonl:2: not valid JSON"):
        build_graph(cfg)


def test_carry_over_into_a_folder_with_a_quote(tmp_path):
    path = tmp_path / "o'neil" / "tgr.duckdb"
    build_warehouse(path, [tiny_dataset("one")], DIM)
    build_warehouse(path, [tiny_dataset("two")], DIM)
    assert connect(path).execute("SELECT list(dataset ORDER BY dataset) FROM datasets").fetchone()[0] == ["one", "two"]
