"""Atomic, re-runnable build of the tool graph warehouse (one DuckDB file).

A build checks every row dict against the table declarations of ``warehouse/tables.py``, writes
every input table as Parquet (Arrow schema generated from the declaration) into a temporary folder
next to the target, runs the SQL steps (``warehouse/sql/000_schema_version.sql``; the core tables,
``CREATE TABLE`` with constraints and ``INSERT ... BY NAME`` from that Parquet, generated from
``warehouse/tables.py``; the mart views of ``warehouse/sql/030_marts.sql``) against a new DuckDB file
in the same folder, checks referential integrity, and only then moves the file over the target with
``os.replace`` (atomic on one file system): readers see the old warehouse or the new one, never a
half-built file. A failed build leaves the old file as is.

Re-running is safe: datasets being built replace their rows; rows of other datasets are carried
over from the current warehouse (same schema version and table layout only), so building ``tmdb``
alone does not drop ``apibank``.
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.common.locks import exclusive_lock
from warehouse import tables as _tables
from warehouse.spec import EMBEDDING, Table

# DuckDB's memory limit while a build assembles (its default is 80% of the RAM, kept, not evicted to the file);
# 256MB: a 10^5-tool write takes +0.32 GB over its inputs, +0.58 GB at 512MB (issue 21 item 6: peak <= 2 GB)
BUILD_MEMORY_LIMIT = os.environ.get("TGR_WAREHOUSE_MEMORY_LIMIT", "256MB")
STAGED_ROW_GROUP = 32_768  # rows per row group of the staged Parquet
# 2: schema/fused edges, edge_calibration, pruning recall; 3: ToolNet transitions, lineage; 4: edges.kind (an old
# file would read every gold edge as of unknown kind, and its prerequisites_of takes no kind)
SCHEMA_VERSION = 4


class WarehouseError(RuntimeError):
    """The inputs or the existing warehouse cannot make a consistent warehouse; says why."""


# The core step among the SQL files: generated from warehouse/tables.py, recorded in schema_version
# under this name (with the sha256 of the generated text, so a changed declaration shows).
CORE_STEP = "020_core.sql (generated from warehouse/tables.py)"


def core_tables() -> tuple[Table, ...]:
    """The core table declarations (``warehouse.tables.CORE_TABLES``, read at each call)."""
    return _tables.CORE_TABLES


def core_table(name: str) -> Table:
    for table in core_tables():
        if table.name == name:
            return table
    raise WarehouseError(f"unknown warehouse table {name!r}; known: {[t.name for t in core_tables()]}")


def table_names() -> tuple[str, ...]:
    return tuple(t.name for t in core_tables())


def core_sql() -> str:
    """Layer 2, core: CREATE TABLE (with constraints) and INSERT ... BY NAME from the staged Parquet
    ({inputs}/<table>/*.parquet) for every declared table. Placeholders: {inputs}, {dim}."""
    parts = ["-- Layer 2, core: typed tables with keys and checks, generated from warehouse/tables.py (do not",
             "-- edit here), filled by name from the Parquet files the build wrote ({inputs}/<table>/*.parquet:",
             "-- the datasets being built plus rows carried over from the previous warehouse).",
             "-- Edge direction everywhere: `dependent` depends on `prerequisite`."]
    for table in core_tables():
        parts += ["", table.create_sql(),
                  table.insert_sql(f"read_parquet('{{inputs}}/{table.name}/*.parquet', union_by_name = true)")]
    return "\n".join(parts) + "\n"


@dataclass
class DatasetTables:
    """Rows of every core table for one dataset: each row a dict keyed by column name (``rows``) and, for
    large tables, column-wise Arrow tables of the declared schema (``arrow``, made by ``arrow_columns``: no
    Python object per value, e.g. the embeddings); a table may have both, the build writes the two."""

    dataset: str
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    arrow: dict[str, pa.Table] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Known tables, rows of this dataset, and row keys that are columns of warehouse/tables.py
        (every NOT NULL column given): the build calls it again, rows may be added in between."""
        names = table_names()
        unknown = set(self.rows) - set(names)
        if unknown:
            raise WarehouseError(f"unknown warehouse tables {sorted(unknown)}; known: {list(names)}")
        for table, rows in self.rows.items():
            bad = [r for r in rows if r.get("dataset") != self.dataset]
            if bad:
                raise WarehouseError(f"{table}: {len(bad)} rows belong to another dataset than {self.dataset!r}")
            check_rows(table, rows)
        unknown = set(self.arrow) - set(names)
        if unknown:
            raise WarehouseError(f"unknown warehouse tables {sorted(unknown)}; known: {list(names)}")
        for table, data in self.arrow.items():
            check_arrow(table, data)
            other = len(data) - pc.sum(pc.equal(data.column("dataset"), self.dataset)).as_py() if len(data) else 0
            if other:
                raise WarehouseError(f"{table}: {other} rows belong to another dataset than {self.dataset!r}")

    def row_count(self, table: str) -> int:
        return len(self.rows.get(table, [])) + (len(self.arrow[table]) if table in self.arrow else 0)


def check_rows(table: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """Raise WarehouseError naming the table and column when a row dict has a key that is no
    column of ``table`` or leaves out a NOT NULL column (a left-out nullable column is NULL)."""
    problem = core_table(table).row_problems(rows)
    if problem:
        raise WarehouseError(problem)


_CONVERSION_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


def arrow_rows(table: Table, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """The rows as an Arrow table of the declared schema; a value of the wrong type names its column."""
    schema = table.arrow_schema()
    try:
        return pa.Table.from_pylist(list(rows), schema=schema)
    except _CONVERSION_ERRORS as exc:
        for field in schema:  # find the column (pyarrow's message does not name it)
            try:
                pa.array([r.get(field.name) for r in rows], type=field.type)
            except _CONVERSION_ERRORS as col_exc:
                raise WarehouseError(f"{table.name}.{field.name}: a value does not fit the declared type "
                                     f"{table.column(field.name).type}: {col_exc}") from exc
        raise WarehouseError(f"{table.name}: rows do not fit the declared columns: {exc}") from exc


def arrow_columns(table: str, columns: Mapping[str, Any]) -> pa.Table:
    """Rows of a core table given column-wise (lists or 1-D arrays; a 2-D float array for a FLOAT[{dim}]
    column, one row each), as an Arrow table of the declared schema, checked like ``check_arrow``: the bulk
    path for large tables, with no dict per row and no Python float per embedding value. A left-out column
    is NULL (so it must be nullable)."""
    spec = core_table(table)
    schema = spec.arrow_schema()
    unknown = sorted(set(columns) - set(schema.names))
    if unknown:
        raise WarehouseError(f"{table}: unknown columns {unknown} (columns of {table} in warehouse/tables.py: "
                             f"{', '.join(spec.names)})")
    lengths = {name: len(value) for name, value in columns.items()}
    if len(set(lengths.values())) > 1:
        raise WarehouseError(f"{table}: columns of different lengths {lengths}")
    n = next(iter(lengths.values()), 0)
    arrays = []
    for f in schema:
        value = columns.get(f.name)
        try:
            if value is None:
                arrays.append(pa.nulls(n, f.type))
            elif isinstance(value, np.ndarray) and value.ndim == 2:
                flat = pa.array(np.ascontiguousarray(value, dtype=np.float32).reshape(-1))
                offsets = pa.array(np.arange(n + 1, dtype=np.int64) * value.shape[1])
                arrays.append(pa.LargeListArray.from_arrays(offsets, flat).cast(f.type))
            else:
                arrays.append(pa.array(value, type=f.type))
        except _CONVERSION_ERRORS as exc:
            raise WarehouseError(f"{table}.{f.name}: a value does not fit the declared type "
                                 f"{spec.column(f.name).type}: {exc}") from exc
    data = pa.Table.from_arrays(arrays, schema=schema)
    check_arrow(table, data)
    return data


def check_arrow(table: str, data: pa.Table) -> None:
    """Raise WarehouseError unless ``data`` has the declared Arrow schema of ``table`` and no NULL in a
    NOT NULL column without a default."""
    spec = core_table(table)
    if not data.schema.equals(spec.arrow_schema()):
        raise WarehouseError(f"{table}: Arrow schema {data.schema} is not the declared {spec.arrow_schema()}")
    nulls = [c.name for c in spec.columns if c.required and data.column(c.name).null_count]
    if nulls:
        raise WarehouseError(f"{table}: NULL in the NOT NULL column{'s' * (len(nulls) > 1)} {', '.join(nulls)}")


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert row dicts into a core table of an open warehouse (checked against warehouse/tables.py,
    inserted by column name with the table's defaults), e.g. in an ``update_warehouse`` change."""
    spec = core_table(table)
    check_rows(table, rows)
    if not rows:
        return
    view = f"_insert_{table}"
    finish = getattr(con, "complete", None)  # DuckDB 2 takes no new work while a result of execute() is unread
    if finish is not None:
        finish()
    con.register(view, arrow_rows(spec, rows))
    try:
        con.execute(spec.insert_sql(view))
    finally:
        con.unregister(view)


def sql_files() -> list[tuple[str, str]]:
    """(name, text) of the SQL steps in execution order: the files of ``warehouse/sql`` and, between
    them, the core step generated from ``warehouse/tables.py`` (``CORE_STEP``)."""
    folder = resources.files("warehouse").joinpath("sql")
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".sql"))
    return sorted([(n, folder.joinpath(n).read_text(encoding="utf-8")) for n in names] + [(CORE_STEP, core_sql())])


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


def _write_inputs(inputs: Path, datasets: Sequence[DatasetTables], dim: int, say: Callable[[str], None]) -> None:
    for dataset in datasets:
        dataset.validate()  # rows may have been added since the DatasetTables was made
    for table in core_tables():
        folder = inputs / table.name
        folder.mkdir(parents=True, exist_ok=True)
        rows = [r for d in datasets for r in d.rows.get(table.name, [])]
        parts = [arrow_rows(table, rows)] + [d.arrow[table.name] for d in datasets if table.name in d.arrow]
        data = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        for column in (c.name for c in table.columns if c.type == EMBEDDING):
            sizes = pc.list_value_length(data.column(column)).unique().drop_null().to_pylist()
            wrong = set(sizes) - {dim}
            if wrong:
                raise WarehouseError(f"{table.name}: embeddings of size {sorted(wrong)}, expected {dim}")
        # An empty file with the schema still gives the insert every column, typed.
        # small row groups: DuckDB reads them block by block within its memory limit
        pq.write_table(data, folder / "built.parquet", row_group_size=STAGED_ROW_GROUP)
        del data, parts
        pa.default_memory_pool().release_unused()  # the staged copy is on disk now: give its memory back
        if len(rows) or any(table.name in d.arrow for d in datasets):
            say(f"warehouse: staged {table.name} ({sum(d.row_count(table.name) for d in datasets)} rows)")


def _layout_differences(con: duckdb.DuckDBPyConnection, dim: int) -> list[str]:
    """How the core tables of an open warehouse differ from warehouse/tables.py: tables or columns
    missing or extra, other types or nullability."""
    def columns(c: duckdb.DuckDBPyConnection) -> dict[str, dict[str, tuple[str, str]]]:
        out: dict[str, dict[str, tuple[str, str]]] = {}
        for table, column, dtype, nullable in c.execute(
                "SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns "
                "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position").fetchall():
            out.setdefault(table, {})[column] = (dtype, "NULL" if nullable == "YES" else "NOT NULL")
        return out

    declared = duckdb.connect()
    try:
        for table in core_tables():
            declared.execute(table.create_sql(comments=False).replace("{dim}", str(int(dim))))
        want = columns(declared)
    finally:
        declared.close()
    have = columns(con)
    found = []
    for table, cols in want.items():
        if table not in have:
            found.append(f"no table {table}")
            continue
        found += [f"{table}.{c} ({' '.join(t)}) is not in the file" for c, t in cols.items() if c not in have[table]]
        found += [f"{table}.{c} is in the file, not in warehouse/tables.py" for c in have[table] if c not in cols]
        found += [f"{table}.{c} is {' '.join(have[table][c])} in the file, {' '.join(t)} now"
                  for c, t in cols.items() if c in have[table] and have[table][c] != t]
    return found


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
        changed = _layout_differences(con, old_dim)
        if changed and kept:
            raise WarehouseError(f"{old} has another table layout than warehouse/tables.py declares "
                                 f"({'; '.join(changed)}): rebuild {kept} too or use a new warehouse file")
        if changed:
            return kept  # every dataset is rebuilt: nothing to carry in the old layout
        for table in table_names():
            target = (inputs / table / "carried.parquet").as_posix()
            # the table name is a declared one; the values (a folder may be named o'neil) are bound
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
    "parameter edges whose tools are unknown": """
        SELECT count(*) FROM parameter_edges e WHERE NOT EXISTS (SELECT 1 FROM tools t
          WHERE t.dataset = e.dataset AND t.tool_id = e.dependent) OR NOT EXISTS (SELECT 1 FROM tools t
          WHERE t.dataset = e.dataset AND t.tool_id = e.prerequisite)""",
    "parameter edge sources without a lineage row": """
        SELECT count(*) FROM (SELECT DISTINCT dataset, source FROM parameter_edges) ANTI JOIN edge_lineage
          USING (dataset, source)""",
}


def check_integrity(con: duckdb.DuckDBPyConnection) -> None:
    problems = {name: con.execute(sql).fetchone()[0] for name, sql in INTEGRITY_CHECKS.items()}
    bad = {k: v for k, v in problems.items() if v}
    if bad:
        raise WarehouseError(f"warehouse inputs are inconsistent: {bad}")


def build_warehouse(
    target: str | Path, datasets: Sequence[DatasetTables], dim: int, carry_over: bool = True,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Build ``target`` from ``datasets`` atomically; returns row counts per table and carried datasets.
    ``progress``: called with a line per staged table and per SQL step."""
    say = progress or (lambda _line: None)
    target = Path(target)
    _check_db_path(target)
    names = [d.dataset for d in datasets]
    if len(set(names)) != len(names):
        raise WarehouseError(f"dataset names repeat: {names}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with _build_folder(target) as workdir:
        inputs = workdir / "inputs"
        _write_inputs(inputs, datasets, dim, say)
        carried = _carry_over(target, inputs, set(names), dim) if carry_over and target.exists() else []
        if carried:
            say(f"warehouse: carried over {carried} from {target}")
        counts = _assemble(target, workdir, inputs, dim, say)
    return {"warehouse": str(target), "datasets": names, "carried_over": carried, "rows": counts}


@contextlib.contextmanager
def _build_folder(target: Path) -> Iterator[Path]:
    """Under the warehouse's lock, a fresh build folder beside ``target``, removed afterwards."""
    with exclusive_lock(target.parent / f".{target.name}.lock", str(target)):
        # holding the lock, any build folder left here belongs to a run that died (kill -9)
        for stale in target.parent.glob(f".{glob.escape(target.name)}.build-*"):
            shutil.rmtree(stale, ignore_errors=True)
        workdir = Path(tempfile.mkdtemp(prefix=f".{target.name}.build-", dir=target.parent))
        try:
            yield workdir
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


def _assemble(target: Path, workdir: Path, inputs: Path, dim: int,
              say: Callable[[str], None] = lambda _line: None) -> dict[str, int]:
    """Run the SQL steps over the staged ``inputs`` into a new file in ``workdir``, check integrity,
    and move it over ``target``; row counts per table."""
    db = workdir / target.name
    con = duckdb.connect(str(db))
    try:
        # the build's buffers are evicted to the new file beyond this (DuckDB's default: 80% of the RAM)
        con.execute(f"SET memory_limit = '{BUILD_MEMORY_LIMIT}'")
        for name, text in sql_files():
            say(f"warehouse: SQL step {name}")
            con.execute(render_sql(text, inputs, dim))
            con.execute("INSERT INTO schema_version (version, sql_file, sha256) VALUES (?, ?, ?)",
                        [SCHEMA_VERSION, name, hashlib.sha256(text.encode()).hexdigest()])
        say("warehouse: integrity checks")
        check_integrity(con)
        counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in table_names()}
        con.execute("CHECKPOINT")
    finally:
        con.close()
    os.replace(db, target)
    say(f"warehouse: {target} replaced")
    return counts


def replace_rows(target: str | Path, rows: Mapping[str, Sequence[Mapping[str, Any]]],
                 drop: Mapping[str, Mapping[str, Sequence[Any]]]) -> dict[str, Any]:
    """Rebuild ``target`` atomically with every row carried over except those ``drop`` selects, plus
    ``rows`` (table -> row dicts, checked against warehouse/tables.py). ``drop``: table -> {column:
    values}; a row is dropped when each named column holds one of its values, e.g. ``{"edges":
    {"dataset": ["tmdb"], "source": ["predicted"]}}``. A rebuild, not an in-place update, so the file
    gets the current declarations' constraints (a new edge source, say) whatever file it was built
    as; the same schema version and table layout are required, as for carrying datasets over."""
    target = Path(target)
    if not target.exists():
        raise FileNotFoundError(f"{target}: no warehouse (run make graph first)")
    _check_db_path(target)
    for table, where in drop.items():
        spec = core_table(table)
        unknown = [c for c in where if c not in spec.names]
        if unknown or not where:
            raise WarehouseError(f"drop {table}: columns {unknown or '(none)'} are not columns of {table}")
    for table, table_rows in rows.items():
        check_rows(table, table_rows)
    with _build_folder(target) as workdir:
        inputs = workdir / "inputs"
        con = duckdb.connect(str(target), read_only=True)
        try:
            version = schema_version_of(con)
            if version != SCHEMA_VERSION:
                raise WarehouseError(f"{target} has schema version {version}, this code writes {SCHEMA_VERSION}: "
                                     "rebuild it (make graph)")
            dim = embedding_dim_of(con)
            changed = _layout_differences(con, dim)
            if changed:
                raise WarehouseError(f"{target} has another table layout than warehouse/tables.py declares "
                                     f"({'; '.join(changed)}): rebuild it (make graph)")
            for table in core_tables():
                folder = inputs / table.name
                folder.mkdir(parents=True, exist_ok=True)
                where = drop.get(table.name, {})
                cond = " AND ".join(f"list_contains($v{n}, {col})" for n, col in enumerate(where))
                params = {f"v{n}": list(values) for n, values in enumerate(where.values())}
                params["target"] = (folder / "carried.parquet").as_posix()
                # table and column names are declared ones; the values are bound
                con.execute(f"COPY (SELECT * FROM {table.name}{f' WHERE NOT ({cond})' if cond else ''}) "
                            "TO $target (FORMAT parquet)", params)
                pq.write_table(arrow_rows(table, list(rows.get(table.name, []))), folder / "built.parquet")
        finally:
            con.close()
        for table in core_tables():
            for column in (c.name for c in table.columns if c.type == EMBEDDING):
                wrong = {len(v) for r in rows.get(table.name, []) if (v := r.get(column)) is not None} - {dim}
                if wrong:
                    raise WarehouseError(f"{table.name}: embeddings of size {sorted(wrong)}, expected {dim}")
        counts = _assemble(target, workdir, inputs, dim)
    return {"warehouse": str(target), "rows": counts, "added": {t: len(r) for t, r in rows.items()}}


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


if __name__ == "__main__":  # python -m warehouse.build: print the generated core DDL
    print(core_sql())
