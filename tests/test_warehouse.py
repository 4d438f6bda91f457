"""The layered SQL against small temporary DuckDB warehouses: marts, closure on a cycle, atomic
rebuilds, carry-over of other datasets, SQL vs numpy retrieval."""
from __future__ import annotations

import csv
import hashlib
from datetime import datetime

import duckdb
import numpy as np
import pytest

from tasks.retrieval.ranking import cosine_top_k
from warehouse.build import (
    CORE_STEP,
    SCHEMA_VERSION,
    DatasetTables,
    WarehouseError,
    build_warehouse,
    connect,
    core_sql,
    rows_of,
    sql_files,
    update_warehouse,
)

DIM = 4
BUILT = datetime(2024, 1, 1)


def tiny_dataset(name: str = "tiny", extra_edges: list[tuple[str, str]] = ()) -> DatasetTables:
    """Tools a..e in group g1, f in g2. Manual edges form the cycle a -> b -> c -> a plus d -> a
    (x -> y: x depends on y); one discriminator edge e -> d."""
    rng = np.random.default_rng(7)
    tools = ["a", "b", "c", "d", "e", "f"]
    groups = {t: "g1" for t in tools[:5]} | {"f": "g2"}
    emb = rng.normal(size=(len(tools), DIM)).astype(np.float32)
    manual = [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a"), *extra_edges]

    def edge(dep, pre, source, prob=1.0, cls=0):
        return {"dataset": name, "tool_group": groups[dep], "dependent": dep, "prerequisite": pre, "prob": prob,
                "predicted_class": cls, "source": source}

    rows = {
        "datasets": [{"dataset": name, "embed_style": "structured", "encoder": "test", "discriminator": None,
                      "built_at": BUILT}],
        "tools": [{"dataset": name, "tool_id": t, "name": t.upper(), "tool_group": groups[t],
                   "doc_json": f'{{"name": "{t}"}}', "embed_text": f"tool {t}"} for t in tools],
        "queries": [{"dataset": name, "query_id": "q1", "query_text": "find a", "query_group": None}],
        "query_gold_tools": [{"dataset": name, "query_id": "q1", "tool_id": "a"}],
        "edges": [edge(d, p, "manual") for d, p in manual] + [edge("e", "d", "discriminator", 0.8, 2)],
        "tool_embeddings": [{"dataset": name, "tool_id": t, "kind": "base", "embedding": emb[i].tolist()}
                            for i, t in enumerate(tools)],
        "query_embeddings": [{"dataset": name, "query_id": "q1", "embedding": emb[0].tolist()}],
        # every edge source needs a lineage row (build check); one per source a test may add
        "edge_lineage": [{"dataset": name, "source": src, "producer": "test", "built_at": BUILT}
                         for src in ("manual", "discriminator", "schema", "fused", "transition")],
    }
    return DatasetTables(name, rows)


@pytest.fixture()
def warehouse(tmp_path):
    path = tmp_path / "wh" / "tgr.duckdb"
    build_warehouse(path, [tiny_dataset()], DIM)
    return path


def test_schema_version_records_every_sql_file(warehouse):
    con = connect(warehouse)
    rows = con.execute("SELECT version, sql_file FROM schema_version ORDER BY sql_file").fetchall()
    assert rows == [(SCHEMA_VERSION, name) for name, _ in sql_files()]
    assert [n for n, _ in sql_files()][:3] == ["000_schema_version.sql", CORE_STEP, "030_marts.sql"]
    # the core step is generated from warehouse/tables.py; its recorded hash is that of the generated text
    assert con.execute("SELECT sha256 FROM schema_version WHERE sql_file = ?", [CORE_STEP]).fetchone() == (
        hashlib.sha256(core_sql().encode()).hexdigest(),)
    # No staging view is left: the finished file holds no view that reads the build's Parquet.
    views = {v for (v,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    assert views == {"edge_list", "prerequisite_closure", "graph_density", "retrieval_table", "trajectory_steps",
                     "next_tool_table", "call_order_pairs"}


def test_prerequisite_closure_terminates_on_a_cycle(warehouse):
    con = connect(warehouse)
    closure = con.execute("SELECT tool_id, list(prerequisite ORDER BY prerequisite) FROM prerequisite_closure "
                          "WHERE dataset = 'tiny' AND source = 'manual' GROUP BY 1 ORDER BY 1").fetchall()
    # a, b, c sit on the cycle: each reaches all three (itself included); d reaches the cycle.
    assert closure == [("a", ["a", "b", "c"]), ("b", ["a", "b", "c"]), ("c", ["a", "b", "c"]),
                       ("d", ["a", "b", "c"])]
    walk = con.execute("SELECT prerequisite, depth, call_order FROM prerequisites_of('tiny', 'manual', 'd') "
                       "ORDER BY depth").fetchall()
    # d -> a -> b -> c; the path stops before revisiting a; call order lists prerequisites first.
    assert walk == [("a", 1, ["a", "d"]), ("b", 2, ["b", "a", "d"]), ("c", 3, ["c", "b", "a", "d"])]
    assert con.execute("SELECT count(*) FROM prerequisites_of('tiny', 'manual', 'f')").fetchone()[0] == 0


def test_graph_density_per_group_and_total(warehouse):
    con = connect(warehouse)
    rows = rows_of(con, "SELECT source, tool_group, n_tools, n_connected, connected_share FROM graph_density "
                        "ORDER BY source, tool_group")
    # manual edges touch a, b, c, d; the discriminator edge touches d, e; f (group g2) has none.
    assert rows == [
        {"source": "discriminator", "tool_group": "*", "n_tools": 6, "n_connected": 2, "connected_share": 0.333},
        {"source": "discriminator", "tool_group": "g1", "n_tools": 5, "n_connected": 2, "connected_share": 0.4},
        {"source": "discriminator", "tool_group": "g2", "n_tools": 1, "n_connected": 0, "connected_share": 0.0},
        {"source": "manual", "tool_group": "*", "n_tools": 6, "n_connected": 4, "connected_share": 0.667},
        {"source": "manual", "tool_group": "g1", "n_tools": 5, "n_connected": 4, "connected_share": 0.8},
        {"source": "manual", "tool_group": "g2", "n_tools": 1, "n_connected": 0, "connected_share": 0.0},
    ]


def test_edge_list_exports_with_names(warehouse, tmp_path):
    con = connect(warehouse)
    out = tmp_path / "edges.csv"
    con.execute(f"COPY (SELECT * FROM edge_list WHERE dataset = 'tiny' ORDER BY source, dependent) TO '{out}' (HEADER)")
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 5
    assert rows[0]["source"] == "discriminator" and rows[0]["dependent_name"] == "E"
    assert rows[0]["prerequisite_name"] == "D" and float(rows[0]["prob"]) == 0.8


def test_sql_top_k_agrees_with_numpy(warehouse):
    con = connect(warehouse)
    ids, emb = zip(*con.execute("SELECT tool_id, embedding FROM tool_embeddings WHERE dataset = 'tiny' "
                                "AND kind = 'base' ORDER BY tool_id").fetchall())
    emb = np.array(emb, dtype=np.float32)
    query = np.random.default_rng(3).normal(size=DIM).astype(np.float32)
    sql = con.execute("SELECT tool_id, score FROM tool_top_k('tiny', 'base', ?, 3)", [query.tolist()]).fetchall()
    expected = [ids[i] for i in cosine_top_k(query, emb, 3)[0]]
    assert [t for t, _ in sql] == expected
    cos = emb @ query / np.linalg.norm(emb, axis=1) / np.linalg.norm(query)
    np.testing.assert_allclose([s for _, s in sql], np.sort(cos)[::-1][:3], rtol=1e-5)
    per_query = con.execute("SELECT tool_id FROM query_top_k('tiny', 'base', 1)").fetchall()
    assert per_query == [("a",)]  # q1's embedding is a's embedding


def test_rebuild_carries_other_datasets_and_replaces_rebuilt_ones(warehouse):
    build_warehouse(warehouse, [tiny_dataset("other")], DIM)
    con = connect(warehouse)
    assert con.execute("SELECT dataset, count(*) FROM tools GROUP BY 1 ORDER BY 1").fetchall() == [
        ("other", 6), ("tiny", 6)]
    con.close()
    build_warehouse(warehouse, [tiny_dataset("tiny", extra_edges=[("e", "f")])], DIM)
    con = connect(warehouse)
    edges = dict(con.execute("SELECT dataset, count(*) FROM edges GROUP BY 1").fetchall())
    assert edges == {"tiny": 6, "other": 5}


def test_failed_build_leaves_the_old_file_untouched(warehouse):
    before = warehouse.read_bytes()
    bad = tiny_dataset()
    bad.rows["edges"].append({"dataset": "tiny", "tool_group": "g1", "dependent": "a", "prerequisite": "nope",
                              "prob": 1.0, "predicted_class": 0, "source": "manual"})
    with pytest.raises(WarehouseError, match="edges whose tools are unknown"):
        build_warehouse(warehouse, [bad], DIM)
    assert warehouse.read_bytes() == before
    # no temp leftovers, and no lock file: it is removed when the build ends, failed or not
    assert sorted(p.name for p in warehouse.parent.iterdir()) == ["tgr.duckdb"]
    wrong_dim = tiny_dataset()
    with pytest.raises(WarehouseError, match="expected 8"):
        build_warehouse(warehouse, [wrong_dim], 8)
    with pytest.raises(WarehouseError, match="another dataset"):
        DatasetTables("x", {"tools": [{"dataset": "y"}]})


def test_bad_edge_class_is_rejected_by_the_core_checks(tmp_path):
    bad = tiny_dataset()
    bad.rows["edges"][0]["predicted_class"] = 1  # "no dependency" is never an edge
    with pytest.raises(duckdb.ConstraintException):
        build_warehouse(tmp_path / "w.duckdb", [bad], DIM)
    assert not (tmp_path / "w.duckdb").exists()


def test_update_is_atomic_and_other_schema_versions_are_refused(warehouse):
    def add_metric(con):
        con.execute("INSERT INTO retrieval_metrics (dataset, method, k, recall, ndcg, pass_rate, n_queries, evaluated_at, "
                    "query_split) VALUES ('tiny', 'BM25', 5, 0.5, 0.4, 0.3, 1, now(), 'all')")

    update_warehouse(warehouse, add_metric)
    assert connect(warehouse).execute("SELECT recall_5 FROM retrieval_table").fetchall() == [(0.5,)]

    def fail(con):
        con.execute("DELETE FROM tools")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        update_warehouse(warehouse, fail)
    assert connect(warehouse).execute("SELECT count(*) FROM tools").fetchone()[0] == 6
    update_warehouse(warehouse, lambda con: con.execute("UPDATE schema_version SET version = 999"))
    with pytest.raises(WarehouseError, match="schema version"):
        connect(warehouse)
    with pytest.raises(WarehouseError, match="schema version"):
        build_warehouse(warehouse, [tiny_dataset("new")], DIM)


def readme_dataset(name: str, kinds: tuple[str, ...]) -> DatasetTables:
    """``tiny_dataset`` under a README dataset name, its tool d named AddAgenda (as the README's examples
    ask), with tool embeddings of ``kinds`` too: the macros refuse an unknown dataset, tool or kind."""
    data = tiny_dataset(name)
    for rows in data.rows.values():
        for row in rows:
            for column in ("tool_id", "dependent", "prerequisite"):
                if row.get(column) == "d":
                    row[column] = "AddAgenda"
    base = [r for r in data.rows["tool_embeddings"] if r["kind"] == "base"]
    data.rows["tool_embeddings"] += [r | {"kind": kind} for kind in kinds for r in base]
    with_dependency_kinds(data)
    return data


# Dependency kinds of tiny_dataset's manual edges (d renamed AddAgenda in readme_dataset): data but for b -> c.
MANUAL_KINDS = {("a", "b"): "data", ("b", "c"): "precondition", ("c", "a"): "data", ("d", "a"): "data",
                ("AddAgenda", "a"): "data"}


def with_dependency_kinds(data: DatasetTables) -> DatasetTables:
    for row in data.rows["edges"]:
        if row["source"] == "manual":
            row["kind"] = MANUAL_KINDS[row["dependent"], row["prerequisite"]]
    return data


def test_every_sql_example_in_the_readme_runs(tmp_path):
    """The README's SQL block is documentation users paste: each statement must run on a warehouse that has
    the datasets, tools and embedding kinds it names (the macros raise on unknown ones)."""
    import re

    from tests.conftest import REPO_ROOT

    warehouse = tmp_path / "wh" / "tgr.duckdb"
    build_warehouse(warehouse, [readme_dataset("apibank", ("tgr_manual",)),
                                readme_dataset("toolbench_stable", ("tgr_discriminator",))], DIM)
    readme = (REPO_ROOT / "README.md").read_text()
    block = re.search(r"```sql\n(.*?)```", readme, re.S).group(1)
    statements = [s.strip() for s in "\n".join(l for l in block.splitlines() if not l.strip().startswith("--")).split(";") if s.strip()]
    assert len(statements) >= 6
    con = connect(warehouse)
    assert con.execute(next(s for s in statements if "prerequisites_of(" in s)).fetchall() == [
        ("a", 1, ["a", "AddAgenda"]), ("b", 2, ["b", "a", "AddAgenda"]), ("c", 3, ["c", "b", "a", "AddAgenda"])]
    # the kind-filtered example: only data edges are followed, so c (behind the precondition b -> c) drops out
    assert con.execute(next(s for s in statements if "kind := 'data'" in s)).fetchall() == [
        ("a", 1, ["a", "AddAgenda"]), ("b", 2, ["b", "a", "AddAgenda"])]
    for sql in statements:
        sql = sql.replace("'apibank_edges.csv'", f"'{tmp_path / 'edges.csv'}'")
        params = [np.ones(DIM, dtype=np.float32).tolist()] if "$query_vec" in sql else None  # a zero vector is refused
        con.execute(sql.replace("$query_vec", "?::FLOAT[4]"), params)  # raises on any error
    assert (tmp_path / "edges.csv").exists()


def test_schema_and_fused_edges_calibration_and_pruning_recall_round_trip(tmp_path):
    ds = tiny_dataset()
    edge = ds.rows["edges"]
    edge.append({"dataset": "tiny", "tool_group": "g1", "dependent": "e", "prerequisite": "a", "prob": 1.0,
                 "predicted_class": 0, "source": "schema", "matched_params": ["token"]})
    edge.append({"dataset": "tiny", "tool_group": "g1", "dependent": "e", "prerequisite": "a", "prob": 1.0,
                 "predicted_class": 0, "source": "fused", "matched_params": ["token"], "fused_from": ["schema"]})
    ds.rows["candidate_pruning"] = [{"dataset": "tiny", "strategy": "params+text+neighbours", "pairs_in_groups": 10,
                                     "pairs_kept": 4, "known_edges": 4, "known_edges_in_groups": 4,
                                     "known_edges_kept": 3, "known_edge_recall": 0.75}]
    ds.rows["edge_calibration"] = [{"dataset": "tiny", "discriminator": "ckpt", "decision_rule": "threshold",
                                    "threshold": 0.4, "criterion": "max_f1", "threshold_source": "calibration.json",
                                    "both_orders": True, "min_prob": 0.0, "calibration_json": '{"threshold": 0.4}',
                                    "pairs_scored": 10, "edges_kept": 1}]
    path = tmp_path / "w.duckdb"
    out = build_warehouse(path, [ds], DIM)
    assert out["rows"]["edge_calibration"] == 1
    con = connect(path)
    assert con.execute("SELECT source, matched_params, fused_from FROM edge_list WHERE dependent = 'e' "
                       "AND source IN ('schema', 'fused') ORDER BY source").fetchall() == [
        ("fused", ["token"], ["schema"]), ("schema", ["token"], None)]
    assert con.execute("SELECT known_edge_recall FROM candidate_pruning").fetchone() == (0.75,)
    assert con.execute("SELECT threshold, calibration_json->>'threshold' FROM edge_calibration").fetchone() == (
        0.4, "0.4")
    con.close()
    # A schema edge must say which parameters matched; an argmax row must not carry a threshold.
    bad = tiny_dataset()
    bad.rows["edges"].append({"dataset": "tiny", "tool_group": "g1", "dependent": "e", "prerequisite": "a",
                              "prob": 1.0, "predicted_class": 0, "source": "schema"})
    with pytest.raises(WarehouseError, match="schema edges without matched parameters"):
        build_warehouse(tmp_path / "x.duckdb", [bad], DIM)
    bad = tiny_dataset()
    bad.rows["edge_calibration"] = [dict(ds.rows["edge_calibration"][0], decision_rule="argmax")]
    with pytest.raises(duckdb.ConstraintException):
        build_warehouse(tmp_path / "y.duckdb", [bad], DIM)


def test_an_old_schema_version_is_not_carried_over(warehouse):
    assert SCHEMA_VERSION == 4  # 4: edges.kind
    update_warehouse(warehouse, lambda con: con.execute("UPDATE schema_version SET version = 3"))
    with pytest.raises(WarehouseError, match="schema version 3, this code writes 4"):
        build_warehouse(warehouse, [tiny_dataset("new")], DIM)


def test_prerequisites_of_stays_fast_on_a_complete_graph(tmp_path):
    # every simple path of a complete 15-tool graph is about 10^11 paths; the walk must not enumerate them
    import time

    tools = [chr(ord("a") + i) for i in range(6)] + [f"x{i}" for i in range(9)]
    path = tmp_path / "o'neil" / "tgr.duckdb"  # a quote in the path: bound as a literal, not spliced
    dense = [(x, y) for x in tools for y in tools if x != y and (x, y) not in {("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")}]
    tables = tiny_dataset(extra_edges=[(x, y) for x, y in dense if x in "abcdef" and y in "abcdef"])
    # the tiny dataset knows tools a..f; add the x tools and their edges
    rows = tables.rows
    rows["tools"] += [{"dataset": "tiny", "tool_id": t, "name": t, "tool_group": "g1", "doc_json": "{}",
                       "embed_text": t} for t in tools[6:]]
    rows["tool_embeddings"] += [{"dataset": "tiny", "tool_id": t, "kind": "base", "embedding": [0.1] * DIM}
                                for t in tools[6:]]
    rows["edges"] += [{"dataset": "tiny", "tool_group": "g1", "dependent": x, "prerequisite": y, "prob": 1.0,
                       "predicted_class": 0, "source": "manual"} for x, y in dense if not (x in "abcdef" and y in "abcdef")]
    for r in rows["tools"]:
        r["tool_group"] = "g1"
    build_warehouse(path, [tables], DIM)
    con = connect(path)
    n_edges = con.execute("SELECT count(*) FROM edges WHERE source = 'manual'").fetchone()[0]
    assert n_edges == 15 * 14
    start = time.perf_counter()
    walk = con.execute("SELECT prerequisite, depth, call_order FROM prerequisites_of('tiny', 'manual', 'a') "
                       "ORDER BY prerequisite").fetchall()
    assert time.perf_counter() - start < 1.0
    assert len(walk) == 14 and all(depth == 1 and call == [p, "a"] for p, depth, call in walk)


@pytest.mark.parametrize("vec, k, message", [
    ("[1, 0, 0, 0]", 0, "k must be a positive integer"),
    ("[1, 0, 0, 0]", "NULL", "k must be a positive integer"),
    ("[0, 0, 0, 0]", 3, "cosine similarity is undefined"),
    ("[1, 'nan'::FLOAT, 0, 0]", 3, "cosine similarity is undefined"),
    ("[1, NULL, 0, 0]", 3, "cosine similarity is undefined"),
    ("NULL", 3, "cosine similarity is undefined"),
])
def test_tool_top_k_rejects_undefined_queries(warehouse, vec, k, message):
    con = connect(warehouse)
    with pytest.raises(duckdb.Error, match=message):
        con.execute(f"SELECT * FROM tool_top_k('tiny', 'base', {vec}, {k})").fetchall()
    assert len(con.execute("SELECT * FROM tool_top_k('tiny', 'base', [1, 0, 0, 0], 3)").fetchall()) == 3


def test_one_writer_per_warehouse_and_a_dead_builds_folder_is_cleaned(tmp_path):
    from tasks.common.locks import BusyError, exclusive_lock

    target = tmp_path / "wh" / "tgr.duckdb"
    stale = tmp_path / "wh" / ".tgr.duckdb.build-deadbeef"  # what a kill -9 mid-build leaves
    (stale / "inputs").mkdir(parents=True)
    build_warehouse(target, [tiny_dataset()], DIM)
    assert not stale.exists() and target.exists()
    with exclusive_lock(tmp_path / "wh" / ".tgr.duckdb.lock", "held by this test"):
        with pytest.raises(BusyError, match="being written by another run"):
            build_warehouse(target, [tiny_dataset()], DIM)
    assert connect(target).execute("SELECT count(*) FROM tools").fetchone()[0] == 6


# ------------------------------------------------------------------ each table declared once (warehouse/tables.py)


def with_column(table: str, *columns):
    """warehouse.tables.CORE_TABLES with ``columns`` appended to ``table``: the one edit of "Adding a column"."""
    import dataclasses

    from warehouse import tables

    return tuple(dataclasses.replace(t, columns=t.columns + columns) if t.name == table else t
                 for t in tables.CORE_TABLES)


def test_one_declaration_adds_a_column_with_its_type_constraint_and_comment(tmp_path, monkeypatch):
    from warehouse import tables
    from warehouse.build import core_table
    from warehouse.spec import Column

    path = tmp_path / "wh" / "tgr.duckdb"
    build_warehouse(path, [tiny_dataset("other")], DIM)  # a warehouse of the layout before the edit
    ds, other = tiny_dataset(), tiny_dataset("other")
    monkeypatch.setattr(tables, "CORE_TABLES", with_column(
        "edges", Column("n_sources", "INTEGER", check="n_sources >= 1", comment="how many sources found the edge"),
        Column("note", "VARCHAR", null=True)))
    # the Arrow schema of the staged Parquet and the DDL come from that one declaration
    assert core_table("edges").arrow_schema().field("n_sources").type == "int32"
    assert "n_sources INTEGER NOT NULL CHECK (n_sources >= 1)" in " ".join(core_sql().split())

    # rows made before the edit lack the NOT NULL column: an error naming table and column, no NULL
    with pytest.raises(WarehouseError, match=r"edges: row 0 has no value for the NOT NULL column n_sources"):
        build_warehouse(tmp_path / "x.duckdb", [ds], DIM)
    for n, edge in enumerate(ds.rows["edges"] + other.rows["edges"]):
        edge["n_sources"] = n % 5 + 1  # `note` may be left out: it is declared nullable
    # the old file has the old layout: its datasets are not carried over silently
    with pytest.raises(WarehouseError, match=r"another table layout .*edges\.n_sources \(INTEGER NOT NULL\) is not "
                                             r"in the file.*rebuild \['other'\] too"):
        build_warehouse(path, [ds], DIM)
    build_warehouse(path, [ds, other], DIM)  # rebuilding every dataset is fine
    con = connect(path)
    assert rows_of(con, "SELECT column_name, data_type, is_nullable, comment FROM duckdb_columns() "
                        "WHERE table_name = 'edges' AND column_name IN ('n_sources', 'note') "
                        "ORDER BY column_index") == [
        {"column_name": "n_sources", "data_type": "INTEGER", "is_nullable": False,
         "comment": "how many sources found the edge"},
        {"column_name": "note", "data_type": "VARCHAR", "is_nullable": True, "comment": None}]
    assert con.execute("SELECT expression FROM duckdb_constraints() WHERE table_name = 'edges' "
                       "AND constraint_type = 'CHECK' AND constraint_column_names = ['n_sources']").fetchone() == (
        "(n_sources >= 1)",)
    assert con.execute("SELECT list(n_sources ORDER BY n_sources), count(note) FROM edges WHERE dataset = 'tiny'"
                       ).fetchone() == ([1, 2, 3, 4, 5], 0)
    assert con.execute("SELECT count(*) FROM edge_list").fetchone() == (10,)  # marts and checks still run
    con.close()
    # the constraint is enforced
    bad = DatasetTables("tiny", ds.rows | {"edges": [dict(e, n_sources=0) for e in ds.rows["edges"]]})
    with pytest.raises(duckdb.ConstraintException, match="n_sources"):
        build_warehouse(tmp_path / "y.duckdb", [bad], DIM)


def test_row_dicts_are_checked_against_the_declared_columns(warehouse):
    from warehouse.build import insert_rows

    edge = {"dataset": "tiny", "tool_group": "g1", "dependent": "e", "prerequisite": "a", "prob": 1.0,
            "predicted_class": 0, "source": "manual"}
    # an unknown key, in a NOT NULL column or a nullable one, is an error naming table and column
    with pytest.raises(WarehouseError, match=r"edges: row 5 has unknown column probability and no value for the "
                                             r"NOT NULL column prob \(columns of edges in warehouse/tables.py"):
        typo = {("probability" if k == "prob" else k): v for k, v in edge.items()}
        DatasetTables("tiny", {"edges": [*tiny_dataset().rows["edges"], typo]})
    before = warehouse.read_bytes()
    ds = tiny_dataset()
    ds.rows["edges"].append({**edge, "p_directon": 0.5})  # added after the DatasetTables was made
    with pytest.raises(WarehouseError, match=r"edges: row 5 has unknown column p_directon"):
        build_warehouse(warehouse, [ds], DIM)
    ds = tiny_dataset()
    ds.rows["edges"].append({**edge, "prob": "high"})
    with pytest.raises(WarehouseError, match=r"edges\.prob: a value does not fit the declared type DOUBLE"):
        build_warehouse(warehouse, [ds], DIM)
    assert warehouse.read_bytes() == before

    # rows inserted into an existing warehouse go through the same declaration, by name
    metric = {"dataset": "tiny", "method": "BM25", "k": 5, "recall": 0.5, "ndcg": 0.4, "pass_rate": 0.3,
              "n_queries": 1, "evaluated_at": BUILT}
    with pytest.raises(WarehouseError, match=r"retrieval_metrics: row 0 has unknown column recal\b"):
        update_warehouse(warehouse, lambda con: insert_rows(con, "retrieval_metrics", [{**metric, "recal": 1}]))
    update_warehouse(warehouse, lambda con: insert_rows(con, "retrieval_metrics", [metric]))
    assert connect(warehouse).execute("SELECT query_split, recall_5 FROM retrieval_table").fetchall() == [
        ("all", 0.5)]  # the declared default


def test_declarations_refuse_what_the_build_could_not_honour(warehouse):
    from warehouse import tables
    from warehouse.spec import Column, Table

    with pytest.raises(ValueError, match="no Arrow type for the DuckDB type 'HUGEINT'"):
        Column("big", "HUGEINT")
    with pytest.raises(ValueError, match="a default needs a NOT NULL column"):
        Column("split", "VARCHAR", null=True, default="'all'")
    with pytest.raises(ValueError, match=r"primary key columns \['nope'\]"):
        Table("t", "x", (Column("a", "VARCHAR"),), primary_key=("nope",))
    with pytest.raises(ValueError, match=r"columns \['a'\] declared twice"):
        Table("t", "x", (Column("a", "VARCHAR"), Column("a", "BIGINT")))
    # every declared table is built (and only those), each with a primary key
    names = [t.name for t in tables.CORE_TABLES]
    built = {n for (n,) in connect(warehouse).execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert len(set(names)) == len(names) and built == {*names, "schema_version"}
    assert all(t.primary_key for t in tables.CORE_TABLES)


def _with_parameter_edges(rows: list[dict]) -> DatasetTables:
    ds = tiny_dataset()
    for tool in ds.rows["tools"]:
        if tool["tool_id"] == "e":
            tool["doc_json"] = '{"name": "e", "input_params": [{"name": "token"}, {"name": "city"}]}'
    ds.rows["parameter_edges"] = [{"dataset": "tiny", "dependent": "e", "consumer_param": "token", "producer_output": "tok",
                                   "probability": 1.0} | r for r in rows]
    return ds


def test_producers_of_lists_each_producer_best_first(tmp_path):
    path = tmp_path / "w.duckdb"
    build_warehouse(path, [_with_parameter_edges([
        {"prerequisite": "b", "source": "schema"},
        {"prerequisite": "a", "source": "discriminator", "probability": 0.7, "producer_output": None},
        {"prerequisite": "c", "source": "schema"},
        {"prerequisite": "c", "source": "manual"},
        {"prerequisite": "d", "source": "discriminator", "probability": 0.9},
        {"prerequisite": "a", "source": "schema", "consumer_param": "city"},
    ])], DIM)
    con = connect(path)
    rows = con.execute("SELECT producer, producer_name, source, producer_output, probability, rank "
                       "FROM producers_of('tiny', 'e', 'token')").fetchall()
    # probability first; at equal probability gold before the name rule; a producer's rows stay together
    assert rows == [("c", "C", "manual", "tok", 1.0, 1), ("c", "C", "schema", "tok", 1.0, 2),
                    ("b", "B", "schema", "tok", 1.0, 3), ("d", "D", "discriminator", "tok", 0.9, 4),
                    ("a", "A", "discriminator", None, 0.7, 5)]
    assert con.execute("SELECT producer FROM producers_of(?, ?, ?)", ["tiny", "e", "city"]).fetchall() == [("a",)]
    with pytest.raises(duckdb.Error, match="tiny has no tool nope"):
        con.execute("SELECT * FROM producers_of('tiny', 'nope', 'token')").fetchall()
    with pytest.raises(duckdb.Error, match="e takes no input parameter password"):
        con.execute("SELECT * FROM producers_of('tiny', 'e', 'password')").fetchall()
    with pytest.raises(duckdb.Error, match="a takes no input parameter token"):  # a declares no inputs at all
        con.execute("SELECT * FROM producers_of('tiny', 'a', 'token')").fetchall()


def test_parameter_edges_are_checked_by_the_build(tmp_path):
    with pytest.raises(WarehouseError, match="parameter edges whose tools are unknown"):
        build_warehouse(tmp_path / "a.duckdb", [_with_parameter_edges([{"prerequisite": "zz", "source": "manual"}])], DIM)
    no_lineage = _with_parameter_edges([{"prerequisite": "a", "source": "manual"}])
    no_lineage.rows["edge_lineage"] = [r for r in no_lineage.rows["edge_lineage"] if r["source"] != "manual"]
    no_lineage.rows["edges"] = [e for e in no_lineage.rows["edges"] if e["source"] != "manual"]
    with pytest.raises(WarehouseError, match="parameter edge sources without a lineage row"):
        build_warehouse(tmp_path / "b.duckdb", [no_lineage], DIM)
    for bad in ([{"prerequisite": "a", "source": "fused"}], [{"prerequisite": "a", "source": "manual", "probability": 2.0}],
                [{"prerequisite": "a", "source": "manual"}, {"prerequisite": "a", "source": "manual", "producer_output": "x"}]):
        with pytest.raises(duckdb.ConstraintException):  # unknown source, probability out of range, key repeated
            build_warehouse(tmp_path / "c.duckdb", [_with_parameter_edges(bad)], DIM)
    assert not any(p.suffix == ".duckdb" for p in tmp_path.iterdir())


# ---------------------------------------------------------------------------------------------
# Dependency kinds: edges.kind, prerequisites_of(..., kind), edge_list and prerequisite_closure


@pytest.fixture()
def kinds_warehouse(tmp_path):
    """tiny_dataset with kinds: d -> a, a -> b, c -> a data; b -> c precondition; the discriminator edge
    e -> d of unknown kind."""
    path = tmp_path / "wh" / "tgr.duckdb"
    build_warehouse(path, [with_dependency_kinds(tiny_dataset())], DIM)
    return path


def test_edges_kind_column_is_declared_and_checked(kinds_warehouse, tmp_path):
    con = connect(kinds_warehouse)
    assert con.execute("SELECT data_type, is_nullable FROM information_schema.columns "
                       "WHERE table_name = 'edges' AND column_name = 'kind'").fetchone() == ("VARCHAR", "YES")
    assert dict(con.execute("SELECT kind, count(*) FROM edges GROUP BY 1").fetchall()) == {
        "data": 3, "precondition": 1, None: 1}
    con.close()
    bad = tiny_dataset()
    bad.rows["edges"][0]["kind"] = "order"
    with pytest.raises(duckdb.ConstraintException, match="kind IN"):
        build_warehouse(tmp_path / "bad.duckdb", [bad], DIM)


@pytest.mark.parametrize("call, expected", [
    ("prerequisites_of('tiny', 'manual', 'd')", [("a", 1), ("b", 2), ("c", 3)]),  # the 3-argument call
    ("prerequisites_of('tiny', 'manual', 'd', kind := NULL)", [("a", 1), ("b", 2), ("c", 3)]),
    ("prerequisites_of('tiny', 'manual', 'd', kind := 'data')", [("a", 1), ("b", 2)]),  # b -> c is no data edge
    ("prerequisites_of('tiny', 'manual', 'd', kind := 'precondition')", []),  # d's one edge is data
    ("prerequisites_of('tiny', 'manual', 'b', kind := 'precondition')", [("c", 1)]),  # c -> a is data: stop
    ("prerequisites_of('tiny', 'discriminator', 'e', kind := 'data')", []),  # e -> d is of unknown kind
    ("prerequisites_of('tiny', 'discriminator', 'e')", [("d", 1)]),
])
def test_prerequisites_of_follows_only_edges_of_the_kind_asked(kinds_warehouse, call, expected):
    con = connect(kinds_warehouse)
    assert con.execute(f"SELECT prerequisite, depth FROM {call} ORDER BY depth").fetchall() == expected


@pytest.mark.parametrize("kind", ["'order'", "'Data'", "''"])
def test_prerequisites_of_refuses_a_kind_that_is_no_dependency_kind(kinds_warehouse, kind):
    con = connect(kinds_warehouse)
    with pytest.raises(duckdb.Error, match=f"prerequisites_of: dependency kind {kind.strip(chr(39))} is not one of "
                                           "data, precondition"):
        con.execute(f"SELECT * FROM prerequisites_of('tiny', 'manual', 'd', kind := {kind})").fetchall()
    # bound as a value too
    with pytest.raises(duckdb.Error, match="is not one of data, precondition"):
        con.execute("SELECT * FROM prerequisites_of('tiny', 'manual', 'd', kind := ?)", ["order"]).fetchall()


def test_edge_list_and_the_closure_show_the_kind(kinds_warehouse):
    con = connect(kinds_warehouse)
    assert con.execute("SELECT source, dependent, prerequisite, kind FROM edge_list ORDER BY 1, 2").fetchall() == [
        ("discriminator", "e", "d", None), ("manual", "a", "b", "data"), ("manual", "b", "c", "precondition"),
        ("manual", "c", "a", "data"), ("manual", "d", "a", "data")]
    closure = con.execute("SELECT prerequisite, kind FROM prerequisite_closure WHERE source = 'manual' "
                          "AND tool_id = 'd' ORDER BY 1").fetchall()
    # one row per prerequisite (as before kinds); d -> a -> b all data (a is also reached round the cycle
    # through b -> c, a mixed chain: data wins); c only behind the precondition b -> c: NULL
    assert closure == [("a", "data"), ("b", "data"), ("c", None)]
    for tool in "abcd":
        data_only = {p for (p,) in con.execute("SELECT prerequisite FROM prerequisite_closure WHERE source = 'manual' "
                                               "AND tool_id = ? AND kind = 'data'", [tool]).fetchall()}
        assert data_only == {p for (p,) in con.execute(
            "SELECT prerequisite FROM prerequisites_of('tiny', 'manual', ?, kind := 'data')", [tool]).fetchall()}
    assert con.execute("SELECT tool_id, list(prerequisite ORDER BY prerequisite) FROM prerequisite_closure "
                       "WHERE source = 'manual' GROUP BY 1 ORDER BY 1").fetchall() == [
        ("a", ["a", "b", "c"]), ("b", ["a", "b", "c"]), ("c", ["a", "b", "c"]), ("d", ["a", "b", "c"])]
    # b: c through the precondition alone; a and b itself only through chains that mix kinds
    assert con.execute("SELECT prerequisite, kind FROM prerequisite_closure WHERE source = 'manual' "
                       "AND tool_id = 'b' ORDER BY 1").fetchall() == [("a", None), ("b", None), ("c", "precondition")]


def test_the_kind_examples_in_docs_warehouse_md_run_and_answer(tmp_path):
    """docs/warehouse.md's dependency-kind examples, verbatim, on the README warehouse (AddAgenda -> a data,
    a -> b data, b -> c precondition)."""
    import re

    from tests.conftest import REPO_ROOT

    warehouse = tmp_path / "wh" / "tgr.duckdb"
    build_warehouse(warehouse, [readme_dataset("apibank", ("tgr_manual",))], DIM)
    text = (REPO_ROOT / "docs" / "warehouse.md").read_text()
    block = re.search(r"-- By dependency kind[^\n]*\n(.*?)(?:\n\n|```)", text, re.S).group(1)
    statements = [s.strip() for s in "\n".join(l for l in block.splitlines() if not l.startswith("--")).split(";")
                  if s.strip()]
    con = connect(warehouse)
    answers = [con.execute(sql).fetchall() for sql in statements]
    assert answers == [
        [("a", 1, ["a", "AddAgenda"]), ("b", 2, ["b", "a", "AddAgenda"])],  # kind := 'data'
        [],  # kind := 'precondition': AddAgenda's own edge is data, so nothing is reached
        [("discriminator", None, 1), ("manual", "data", 3), ("manual", "precondition", 1)],
    ]
