"""How a core table is declared, and what is generated from one declaration.

The declarations themselves are in ``warehouse/tables.py`` (one ``Table`` per core table, constraints
beside the columns, as a dbt model keeps its schema beside its SQL). From each ``Table`` this module
generates:

- ``arrow_schema()``: the Arrow schema the build writes the staged Parquet inputs with;
- ``create_sql()``: ``CREATE TABLE`` with types, NOT NULL, DEFAULT, CHECK and the primary key, and
  ``COMMENT ON`` for the table and its columns (so ``duckdb_columns().comment`` documents them);
- ``insert_sql(source)``: ``INSERT INTO <table> BY NAME`` from a relation (the staged Parquet or a
  registered Arrow table): columns are matched by name, never by position;
- ``row_problems(rows)``: the row dicts a flow made, checked against the columns (unknown keys, or a
  NOT NULL column left out), so a typo is an error naming table and column, not a silent NULL.

DuckDB types are written as DuckDB spells them (``VARCHAR``, ``DOUBLE``, ``VARCHAR[]``, ``JSON``...);
``FLOAT[{dim}]`` is an embedding, its size filled in per build.
"""
from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

EMBEDDING = "FLOAT[{dim}]"  # fixed-size embedding column; {dim} is the build's embedding size

# Arrow type of the staged Parquet per DuckDB type (JSON travels as text; the insert casts and
# validates it). A list type X[] (or X[n], X[{dim}]) is an Arrow list of X.
_ARROW_TYPES: dict[str, pa.DataType] = {
    "VARCHAR": pa.string(), "JSON": pa.string(), "BOOLEAN": pa.bool_(),
    "TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INTEGER": pa.int32(), "BIGINT": pa.int64(),
    "FLOAT": pa.float32(), "DOUBLE": pa.float64(), "TIMESTAMP": pa.timestamp("us"), "DATE": pa.date32(),
}
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")


def arrow_type(sql_type: str) -> pa.DataType:
    """The Arrow type that stages a column of DuckDB type ``sql_type``."""
    inner = re.fullmatch(r"(.+)\[(?:\d*|\{dim\})\]", sql_type)
    if inner:
        return pa.list_(arrow_type(inner.group(1)))
    try:
        return _ARROW_TYPES[sql_type]
    except KeyError:
        raise ValueError(f"no Arrow type for the DuckDB type {sql_type!r}; known: {sorted(_ARROW_TYPES)} "
                         "and lists of them (warehouse/spec.py)") from None


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _comment_lines(text: str, width: int = 100) -> list[str]:
    return [f"-- {line}" for line in textwrap.wrap(text, width - 3)]


@dataclass(frozen=True)
class Column:
    """One column. ``null``: NULL allowed (a row dict may then leave the column out: NULL is its
    declared meaning); otherwise NOT NULL. ``check``: a CHECK expression on this column.
    ``default``: an SQL expression used when a row leaves a NOT NULL column out or gives None."""

    name: str
    type: str
    null: bool = False
    check: str | None = None
    default: str | None = None
    comment: str = ""

    def __post_init__(self) -> None:
        if not _IDENTIFIER.fullmatch(self.name):
            raise ValueError(f"column name {self.name!r}: use lower case letters, digits and _")
        arrow_type(self.type)  # an unknown type fails when declared, not half-way through a build
        if self.default is not None and self.null:
            raise ValueError(f"column {self.name}: a default needs a NOT NULL column (with NULL allowed, a "
                             "row that leaves it out and a row that gives None would mean the same)")
        if "\n" in self.comment:
            raise ValueError(f"column {self.name}: a column comment is one line")

    @property
    def required(self) -> bool:
        """Every row dict must give it (NOT NULL, no default)."""
        return not self.null and self.default is None

    def ddl(self) -> str:
        parts = [self.name, self.type]
        if not self.null:
            parts.append("NOT NULL")
        if self.default is not None:
            parts.append(f"DEFAULT {self.default}")
        if self.check:
            parts.append(f"CHECK ({self.check})")
        return " ".join(parts)


@dataclass(frozen=True)
class Table:
    """One core table: its columns in order, primary key, table-level CHECKs, a comment, and
    ``select``: how the staged rows (the relation ``staged``, every column by name) become the
    table's rows; the default takes them as they are, ``SELECT DISTINCT * FROM staged`` drops repeats."""

    name: str
    comment: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    select: str = "SELECT * FROM staged"

    def __post_init__(self) -> None:
        if not _IDENTIFIER.fullmatch(self.name):
            raise ValueError(f"table name {self.name!r}: use lower case letters, digits and _")
        names = [c.name for c in self.columns]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"table {self.name}: columns {repeated} declared twice")
        unknown = [k for k in self.primary_key if k not in names]
        if unknown:
            raise ValueError(f"table {self.name}: primary key columns {unknown} are not columns")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([(c.name, arrow_type(c.type)) for c in self.columns])

    def create_sql(self, comments: bool = True) -> str:
        """CREATE TABLE with every constraint (``{dim}`` left for the build to fill), then COMMENT ON."""
        width = max(len(c.name) for c in self.columns)
        items = [(f"{c.name:<{width}} {c.ddl()[len(c.name) + 1:]}", c.comment) for c in self.columns]
        if self.primary_key:
            items.append((f"PRIMARY KEY ({', '.join(self.primary_key)})", ""))
        items += [(f"CHECK ({check})", "") for check in self.checks]
        lines = _comment_lines(self.comment) if comments else []
        lines.append(f"CREATE TABLE {self.name} (")
        texts = [f"    {item}{',' if n < len(items) - 1 else ''}" for n, (item, _) in enumerate(items)]
        pad = max(len(t) for t, (_, note) in zip(texts, items) if note) if any(n for _, n in items) else 0
        for text, (_, note) in zip(texts, items):
            lines.append(f"{text:<{pad}}  -- {note}" if note and comments else text)
        lines.append(");")
        if comments:
            lines.append(f"COMMENT ON TABLE {self.name} IS {_literal(self.comment)};")
            lines += [f"COMMENT ON COLUMN {self.name}.{c.name} IS {_literal(c.comment)};"
                      for c in self.columns if c.comment]
        return "\n".join(lines)

    def insert_sql(self, source: str) -> str:
        """INSERT ... BY NAME of the rows of ``source`` (a relation: a table function call or a name),
        through ``select``; a NOT NULL column with a default gets it where the row has NULL."""
        defaults = [f"coalesce({c.name}, {c.default}) AS {c.name}" for c in self.columns if c.default is not None]
        replace = f" REPLACE ({', '.join(defaults)})" if defaults else ""
        return (f"INSERT INTO {self.name} BY NAME\n"
                f"WITH staged AS (SELECT *{replace} FROM {source})\n"
                f"{self.select};")

    def row_problems(self, rows: Sequence[Mapping[str, Any]]) -> str | None:
        """What is wrong with the keys of ``rows`` (None when nothing): unknown columns or NOT NULL
        columns left out, naming the table, the columns and the first row concerned."""
        names = set(self.names)
        required = {c.name for c in self.columns if c.required}
        for keys in {frozenset(r) for r in rows}:
            unknown, missing = sorted(keys - names), sorted(required - keys)
            if unknown or missing:
                first = next(n for n, r in enumerate(rows) if frozenset(r) == keys)
                said = []
                if unknown:
                    said.append(f"unknown column{'s' * (len(unknown) > 1)} {', '.join(unknown)}")
                if missing:
                    said.append(f"no value for the NOT NULL column{'s' * (len(missing) > 1)} {', '.join(missing)}")
                return (f"{self.name}: row {first} has {' and '.join(said)} (columns of {self.name} in "
                        f"warehouse/tables.py: {', '.join(self.names)})")
        return None
