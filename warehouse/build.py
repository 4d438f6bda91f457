"""Atomic, re-runnable build of the tool graph warehouse (one DuckDB file).

A build writes every input table as Parquet into a temporary folder next to the target, runs the
versioned SQL files in ``warehouse/sql`` (staging views over that Parquet -> core tables -> mart
views) against a new DuckDB file in the same folder, checks referential integrity, and only then
moves the file over the target with ``os.replace`` (atomic on one file system): readers see the
old warehouse or the new one, never a half-built file. A failed build leaves the old file as is.

Re-running is safe: datasets being built replace their rows; rows of other datasets are carried
over from the current warehouse (same schema version only), so building ``tmdb`` alone does not
drop ``apibank``.
"""
from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.locks import exclusive_lock

SCHEMA_VERSION = 3  # 2: schema/fused edges, edge_calibration, pruning recall; 3: ToolNet transitions, lineage

_EMB = pa.list_(pa.float32())
ARROW_SCHEMAS: dict[str, pa.Schema] = {
    "datasets": pa.schema([("dataset", pa.string()), ("embed_style", pa.string()), ("encoder", pa.string()),
                           ("discriminator", pa.string()), ("built_at", pa.timestamp("us"))]),
    "tools": pa.schema([("dataset", pa.string()), ("tool_id", pa.string()), ("name", pa.string()),
                        ("tool_group", pa.string()), ("doc_json", pa.string()), ("embed_text", pa.string())]),
    "queries": pa.schema([("dataset", pa.string()), ("query_id", pa.string()), ("query_text", pa.string()),
                          ("query_group", pa.string())]),
    "query_gold_tools": pa.schema([("dataset", pa.string()), ("query_id", pa.string()), ("tool_id", pa.string())]),
    "edges": pa.schema([("dataset", pa.string()), ("tool_group", pa.string()), ("dependent", pa.string()),
                        ("prerequisite", pa.string()), ("prob", pa.float64()), ("predicted_class", pa.int8()),
                        ("source", pa.string()), ("p_direction", pa.float64()),
                        ("matched_params", pa.list_(pa.string())), ("fused_from", pa.list_(pa.string())),
                        ("weight", pa.float64()), ("n_transitions", pa.int64())]),
    "scored_pairs": pa.schema([("dataset", pa.string()), ("tool_group", pa.string()), ("tool_a", pa.string()),
                               ("tool_b", pa.string()), ("p_a_depends_on_b", pa.float64()),
                               ("p_no_dependency", pa.float64()), ("p_b_depends_on_a", pa.float64()),
                               ("predicted_class", pa.int8())]),
    "candidate_pruning": pa.schema([("dataset", pa.string()), ("strategy", pa.string()),
                                    ("pairs_in_groups", pa.int64()), ("pairs_kept", pa.int64()),
                                    ("known_edges", pa.int64()), ("known_edges_in_groups", pa.int64()),
                                    ("known_edges_kept", pa.int64()), ("known_edge_recall", pa.float64())]),
    "edge_calibration": pa.schema([("dataset", pa.string()), ("discriminator", pa.string()),
                                   ("decision_rule", pa.string()), ("threshold", pa.float64()),
                                   ("criterion", pa.string()), ("threshold_source", pa.string()),
                                   ("both_orders", pa.bool_()), ("min_prob", pa.float64()),
                                   ("calibration_json", pa.string()), ("pairs_scored", pa.int64()),
                                   ("edges_kept", pa.int64())]),
    "tool_embeddings": pa.schema([("dataset", pa.string()), ("tool_id", pa.string()), ("kind", pa.string()),
                                  ("embedding", _EMB)]),
    "query_embeddings": pa.schema([("dataset", pa.string()), ("query_id", pa.string()), ("embedding", _EMB)]),
    "retrieval_metrics": pa.schema([("dataset", pa.string()), ("method", pa.string()), ("k", pa.int32()),
                                    ("recall", pa.float64()), ("ndcg", pa.float64()), ("pass_rate", pa.float64()),
                                    ("n_queries", pa.int32()), ("evaluated_at", pa.timestamp("us")),
                                    ("query_split", pa.string())]),
    # ToolNet (tasks/trajectories.py, tasks/transitions.py)
    "trajectories": pa.schema([("dataset", pa.string()), ("origin", pa.string()), ("run_id", pa.string()),
                               ("line", pa.int64()), ("source", pa.string()), ("query_id", pa.string()),
                               ("success", pa.bool_()), ("split", pa.string()), ("tools", pa.list_(pa.string())),
                               ("given_scores", pa.string()), ("stream_iteration", pa.int64())]),
    "trajectory_rejections": pa.schema([("dataset", pa.string()), ("origin", pa.string()), ("line", pa.int64()),
                                        ("run_id", pa.string()), ("reason", pa.string())]),
    "transition_builds": pa.schema([("dataset", pa.string()), ("seed", pa.int64()),
                                    ("split_fractions", pa.list_(pa.float64())), ("runs_train", pa.int64()),
                                    ("runs_validation", pa.int64()), ("runs_test", pa.int64()),
                                    ("failed_train_runs", pa.int64()), ("alpha", pa.float64()), ("beta", pa.float64()),
                                    ("evaluator", pa.string()), ("rule_score", pa.int64()), ("chosen_on", pa.string()),
                                    ("sweep_json", pa.string()), ("stream_iterations", pa.int64())]),
    "transition_weight_versions": pa.schema([("dataset", pa.string()), ("iteration", pa.int64()),
                                             ("prerequisite", pa.string()), ("dependent", pa.string()),
                                             ("weight", pa.float64())]),
    "transition_scores": pa.schema([("dataset", pa.string()), ("iteration", pa.int64()), ("run_id", pa.string()),
                                    ("tool_id", pa.string()), ("score", pa.int64()), ("accumulated", pa.float64())]),
    "next_tool_metrics": pa.schema([("dataset", pa.string()), ("method", pa.string()), ("k", pa.int32()),
                                    ("hit_rate", pa.float64()), ("n_steps", pa.int64()), ("query_split", pa.string()),
                                    ("evaluated_at", pa.timestamp("us"))]),
    # what produced each (dataset, edge source): every edge joins to one row
    "edge_lineage": pa.schema([("dataset", pa.string()), ("source", pa.string()), ("producer", pa.string()),
                               ("input_files", pa.list_(pa.string())), ("input_sha256", pa.list_(pa.string())),
                               ("checkpoint", pa.string()), ("checkpoint_sha256", pa.string()),
                               ("tdi_manifest", pa.string()), ("tdi_manifest_sha256", pa.string()),
                               ("tdi_manifest_newer_than_checkpoint", pa.bool_()), ("threshold", pa.float64()),
                               ("params_json", pa.string()), ("flow_run_id", pa.string()),
                               ("built_at", pa.timestamp("us"))]),
}
TABLES = tuple(ARROW_SCHEMAS)


class WarehouseError(RuntimeError):
    """The inputs or the existing warehouse cannot make a consistent warehouse; says why."""


@dataclass
class DatasetTables:
    """Rows of every core table for one dataset (each row a dict keyed by column name)."""

    dataset: str
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.rows) - set(TABLES)
        if unknown:
            raise WarehouseError(f"unknown warehouse tables {sorted(unknown)}; known: {list(TABLES)}")
        for table, rows in self.rows.items():
            bad = [r for r in rows if r.get("dataset") != self.dataset]
            if bad:
                raise WarehouseError(f"{table}: {len(bad)} rows belong to another dataset than {self.dataset!r}")


def sql_files() -> list[tuple[str, str]]:
    """(file name, text) of the versioned SQL files, in execution order."""
    folder = resources.files("warehouse").joinpath("sql")
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".sql"))
    return [(n, folder.joinpath(n).read_text(encoding="utf-8")) for n in names]


def render_sql(text: str, inputs: Path, dim: int) -> str:
    # {inputs} sits inside SQL string literals that read_parquet expands as globs: bracket the glob
    # characters (a folder named runs[1] is a name, not a pattern) and double any quote (o'neil)
    folder = re.sub(r"[\[*?]", lambda m: f"[{m.group()}]", inputs.as_posix()).replace("'", "''")
    return text.replace("{inputs}", folder).replace("{dim}", str(int(dim)))


def _check_db_path(target: Path) -> None:
    """DuckDB reads a '?' in a database path as the start of options and a backslash as a folder
    separator, so it would write somewhere else or fail half-way: refuse such a path up front."""
    bad = sorted({c for c in str(target.absolute()) if c in "?\\"})
    if bad:
        raise WarehouseError(f"{target}: DuckDB cannot keep a database at a path containing {bad}; "
                             "choose a folder and file name without them")


def embedding_dim_of(con: duckdb.DuckDBPyConnection) -> int:
    """The FLOAT[n] size of an existing warehouse."""
    dtype = con.execute(
        "SELECT data_type FROM information_schema.columns "
        "WHERE table_name = 'tool_embeddings' AND column_name = 'embedding'"
    ).fetchone()
    if dtype is None:
        raise WarehouseError("not a tool graph warehouse: no tool_embeddings table")
    return int(dtype[0].split("[")[1].rstrip("]"))


def schema_version_of(con: duckdb.DuckDBPyConnection) -> int:
    try:
        row = con.execute("SELECT max(version) FROM schema_version").fetchone()
    except duckdb.CatalogException as exc:
        raise WarehouseError("not a tool graph warehouse: no schema_version table") from exc
    return int(row[0])


def _write_inputs(inputs: Path, datasets: Sequence[DatasetTables], dim: int) -> None:
    for table, schema in ARROW_SCHEMAS.items():
        folder = inputs / table
        folder.mkdir(parents=True, exist_ok=True)
        rows = [r for d in datasets for r in d.rows.get(table, [])]
        if "embedding" in schema.names:
            wrong = {len(r["embedding"]) for r in rows} - {dim}
            if wrong:
                raise WarehouseError(f"{table}: embeddings of size {sorted(wrong)}, expected {dim}")
        # An empty file with the schema still makes the staging view typed and queryable.
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / "built.parquet")


def _carry_over(old: Path, inputs: Path, rebuilt: set[str], dim: int) -> list[str]:
    """Copy rows of datasets not being rebuilt from the current warehouse into the inputs."""
    con = duckdb.connect(str(old), read_only=True)
    try:
        version = schema_version_of(con)
        if version != SCHEMA_VERSION:
            raise WarehouseError(
                f"{old} has schema version {version}, this code writes {SCHEMA_VERSION}: rebuild every "
                "dataset into a new file (or delete the old one) instead of carrying rows over"
            )
        old_dim = embedding_dim_of(con)
        kept = [d for (d,) in con.execute("SELECT dataset FROM datasets ORDER BY 1").fetchall() if d not in rebuilt]
        if kept and old_dim != dim:
            raise WarehouseError(f"{old} stores FLOAT[{old_dim}] embeddings, this build FLOAT[{dim}]: "
                                 f"rebuild {kept} too or use a new warehouse file")
        for table in TABLES:
            target = (inputs / table / "carried.parquet").as_posix()
            # the table name is one of TABLES; the values (a folder may be named o'neil) are bound
            con.execute(
                f"COPY (SELECT * FROM {table} WHERE NOT list_contains($rebuilt, dataset)) TO $target (FORMAT parquet)",
                {"rebuilt": sorted(rebuilt), "target": target},
            )
        return kept
    finally:
        con.close()


INTEGRITY_CHECKS = {
    "edges whose tools are unknown": """
        SELECT count(*) FROM edges e WHERE source <> 'transition' AND (NOT EXISTS (SELECT 1 FROM tools t
          WHERE t.dataset = e.dataset AND t.tool_id = e.dependent) OR NOT EXISTS (SELECT 1 FROM tools t
          WHERE t.dataset = e.dataset AND t.tool_id = e.prerequisite))""",
    "gold tools that are not tools": """
        SELECT count(*) FROM query_gold_tools g ANTI JOIN tools t USING (dataset, tool_id)""",
    "gold rows of unknown queries": """
        SELECT count(*) FROM query_gold_tools g ANTI JOIN queries q USING (dataset, query_id)""",
    "tools without a base embedding": """
        SELECT count(*) FROM tools t ANTI JOIN (SELECT * FROM tool_embeddings WHERE kind = 'base') e
          USING (dataset, tool_id)""",
    "embeddings of unknown tools": """
        SELECT count(*) FROM tool_embeddings e ANTI JOIN tools t USING (dataset, tool_id)""",
    "tools of datasets not in the datasets table": """
        SELECT count(*) FROM tools t ANTI JOIN datasets d USING (dataset)""",
    "edge calibrations of datasets not in the datasets table": """
        SELECT count(*) FROM edge_calibration c ANTI JOIN datasets d USING (dataset)""",
    "schema edges without matched parameters": """
        SELECT count(*) FROM edges WHERE source = 'schema' AND coalesce(len(matched_params), 0) = 0""",
    "transition edges naming unknown tools": """
        SELECT count(*) FROM edges e WHERE source = 'transition' AND (
          (e.dependent NOT IN ('<start>', '<end>') AND NOT EXISTS (SELECT 1 FROM tools t
             WHERE t.dataset = e.dataset AND t.tool_id = e.dependent))
          OR (e.prerequisite NOT IN ('<start>', '<end>') AND NOT EXISTS (SELECT 1 FROM tools t
             WHERE t.dataset = e.dataset AND t.tool_id = e.prerequisite)))""",
    "transition rows whose weights do not sum to 1": """
        SELECT count(*) FROM (SELECT dataset, prerequisite, sum(weight) AS total FROM edges
          WHERE source = 'transition' GROUP BY ALL) WHERE abs(total - 1) > 1e-9""",
    "trajectory tools that are not tools": """
        SELECT count(*) FROM (SELECT dataset, unnest(tools) AS tool_id FROM trajectories)
          ANTI JOIN tools USING (dataset, tool_id)""",
    "weight versions of edges that are not transition edges": """
        SELECT count(*) FROM transition_weight_versions v ANTI JOIN (SELECT * FROM edges WHERE source = 'transition')
          e USING (dataset, prerequisite, dependent)""",
    "edge sources without a lineage row": """
        SELECT count(*) FROM (SELECT DISTINCT dataset, source FROM edges) ANTI JOIN edge_lineage USING (dataset, source)""",
}


def check_integrity(con: duckdb.DuckDBPyConnection) -> None:
    problems = {name: con.execute(sql).fetchone()[0] for name, sql in INTEGRITY_CHECKS.items()}
    bad = {k: v for k, v in problems.items() if v}
    if bad:
        raise WarehouseError(f"warehouse inputs are inconsistent: {bad}")


def build_warehouse(
    target: str | Path, datasets: Sequence[DatasetTables], dim: int, carry_over: bool = True
) -> dict[str, Any]:
    """Build ``target`` from ``datasets`` atomically; returns row counts per table and carried datasets."""
    target = Path(target)
    _check_db_path(target)
    names = [d.dataset for d in datasets]
    if len(set(names)) != len(names):
        raise WarehouseError(f"dataset names repeat: {names}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(target.parent / f".{target.name}.lock", str(target)):
        # holding the lock, any build folder left here belongs to a run that died (kill -9)
        for stale in target.parent.glob(f".{glob.escape(target.name)}.build-*"):
            shutil.rmtree(stale, ignore_errors=True)
        return _build_locked(target, datasets, names, dim, carry_over)


def _build_locked(target: Path, datasets: Sequence[DatasetTables], names: list[str], dim: int,
                  carry_over: bool) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f".{target.name}.build-", dir=target.parent))
    try:
        inputs = workdir / "inputs"
        _write_inputs(inputs, datasets, dim)
        carried = _carry_over(target, inputs, set(names), dim) if carry_over and target.exists() else []
        db = workdir / target.name
        con = duckdb.connect(str(db))
        try:
            for name, text in sql_files():
                con.execute(render_sql(text, inputs, dim))
                con.execute("INSERT INTO schema_version (version, sql_file, sha256) VALUES (?, ?, ?)",
                            [SCHEMA_VERSION, name, hashlib.sha256(text.encode()).hexdigest()])
            check_integrity(con)
            counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
            con.execute("CHECKPOINT")
        finally:
            con.close()
        os.replace(db, target)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {"warehouse": str(target), "datasets": names, "carried_over": carried, "rows": counts}


def update_warehouse(target: str | Path, change: Callable[[duckdb.DuckDBPyConnection], Any]) -> Any:
    """Apply ``change`` to a copy of ``target`` and move the copy over it (same atomicity as a build)."""
    target = Path(target)
    if not target.exists():
        raise FileNotFoundError(f"{target}: no warehouse (run make graph first)")
    _check_db_path(target)
    with exclusive_lock(target.parent / f".{target.name}.lock", str(target)):
        for stale in target.parent.glob(f".{glob.escape(target.name)}.update-*"):
            stale.unlink(missing_ok=True)
        return _update_locked(target, change)


def _update_locked(target: Path, change: Callable[[duckdb.DuckDBPyConnection], Any]) -> Any:
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.update-", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        shutil.copy2(target, tmp)
        con = duckdb.connect(str(tmp))
        try:
            if schema_version_of(con) != SCHEMA_VERSION:
                raise WarehouseError(f"{target}: schema version differs from {SCHEMA_VERSION}; rebuild it")
            result = change(con)
            con.execute("CHECKPOINT")
        finally:
            con.close()
        os.replace(tmp, target)
        return result
    finally:
        tmp.unlink(missing_ok=True)


def connect(target: str | Path, read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """Open a built warehouse, refusing files of another schema version."""
    target = Path(target)
    if not target.exists():
        raise FileNotFoundError(f"{target}: no warehouse (run make graph first)")
    con = duckdb.connect(str(target), read_only=read_only)
    version = schema_version_of(con)
    if version != SCHEMA_VERSION:
        con.close()
        raise WarehouseError(f"{target}: schema version {version}, this code reads {SCHEMA_VERSION}")
    return con


def rows_of(con: duckdb.DuckDBPyConnection, sql: str, params: Iterable[Any] | Mapping[str, Any] = ()) -> list[dict]:
    """Result rows as dicts (small helper for flows and tests)."""
    cur = con.execute(sql, params)
    cols = [c[0] for c in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]
