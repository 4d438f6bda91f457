"""Every input record ends accepted or rejected with a reason; the books live in a DuckDB file."""
from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from tasks.common.outcome import OUTCOME_SCHEMA  # the books' columns, with the Outcome they hold

LEDGER_SCHEMA = pa.schema(
    [
        pa.field("agent", pa.string()),
        pa.field("item_id", pa.string()),
        pa.field("cache_key", pa.string()),
        pa.field("attempt", pa.int32()),
        pa.field("outcome", pa.string()),
        pa.field("latency_s", pa.float64()),
        pa.field("tokens_in", pa.int64()),
        pa.field("tokens_out", pa.int64()),
        pa.field("cost_usd", pa.float64()),
        pa.field("detail", pa.string()),
    ]
)


# DuckDB types of the ledger columns, to read JSON-lines journals (tasks.llm.ledger.LedgerJournal) as typed rows
_DUCKDB_TYPES = {pa.string(): "VARCHAR", pa.int32(): "INTEGER", pa.int64(): "BIGINT", pa.float64(): "DOUBLE"}


class AccountingError(RuntimeError):
    pass


@dataclass(frozen=True)
class AccountingSummary:
    read: int
    accepted: int
    rejected: int
    by_reason: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {"read": self.read, "accepted": self.accepted, "rejected": self.rejected, "by_reason": self.by_reason}


def write_records_db(
    path: Path, outcomes: Sequence[dict[str, Any]] | pa.Table, ledger: Sequence[dict[str, Any]], n_read: int
) -> AccountingSummary:
    """Write ``record_outcomes`` and ``llm_calls`` atomically, then check the books balance.

    ``outcomes`` may be an Arrow table with OUTCOME_SCHEMA (millions of mined candidates: columns
    are far cheaper than one dict per row)."""
    outcome_table = outcomes if isinstance(outcomes, pa.Table) else pa.Table.from_pylist(list(outcomes), schema=OUTCOME_SCHEMA)
    ledger_table = pa.Table.from_pylist(list(ledger), schema=LEDGER_SCHEMA)

    def fill(con: duckdb.DuckDBPyConnection) -> None:
        con.register("outcome_table", outcome_table)
        con.register("ledger_table", ledger_table)
        con.execute("CREATE TABLE record_outcomes AS SELECT * FROM outcome_table")
        con.execute("CREATE TABLE llm_calls AS SELECT * FROM ledger_table")

    return _write_books(path, fill, n_read)


def sql_string(text: str | Path) -> str:
    """``text`` as one SQL string literal (a path named o'neil stays one literal)."""
    return "'" + str(text).replace("'", "''") + "'"


def write_records_db_from_parquet(path: Path, outcome_files: Sequence[Path], ledger_files: Sequence[Path], n_read: int,
                                  memory_limit: str = "256MB") -> AccountingSummary:
    """The same books from Parquet files (build-tdi's chunk outputs), built by DuckDB out of core.
    Ledger files ending in ``.jsonl`` are call journals (``tasks.llm.ledger.LedgerJournal``): every call
    of every attempt, appended as it ended; a line torn by a kill is skipped."""

    def fill(con: duckdb.DuckDBPyConnection) -> None:
        con.execute(f"SET memory_limit = {sql_string(memory_limit)}")
        con.execute("SET threads = 2")
        con.execute("SET preserve_insertion_order = false")  # books are queried, not read in order; it bounds memory
        con.execute(f"SET temp_directory = {sql_string(path.parent / '.duckdb-tmp')}")
        for table, schema, files in (("record_outcomes", OUTCOME_SCHEMA, outcome_files), ("llm_calls", LEDGER_SCHEMA, ledger_files)):
            con.register(f"empty_{table}", schema.empty_table())
            cols = ", ".join(f.name for f in schema)
            sources = [f"empty_{table}"]
            parquet = [f for f in files if not str(f).endswith(".jsonl")]
            journals = [f for f in files if str(f).endswith(".jsonl")]
            if parquet:
                sources.append(f"read_parquet([{', '.join(sql_string(f) for f in parquet)}], union_by_name = true)")
            if journals:
                types = ", ".join(f"{sql_string(f.name)}: {sql_string(_DUCKDB_TYPES[f.type])}" for f in schema)
                sources.append(f"(SELECT * FROM read_json([{', '.join(sql_string(f) for f in journals)}], format = 'newline_delimited', "
                               f"columns = {{{types}}}, ignore_errors = true) WHERE outcome IS NOT NULL AND cache_key IS NOT NULL)")
            union = " UNION ALL ".join(f"SELECT {cols} FROM {source}" for source in sources)
            con.execute(f"CREATE TABLE {table} AS {union}")

    return _write_books(path, fill, n_read)


def ledger_usage(path: Path) -> dict[str, Any]:
    """``tasks.llm.ledger.usage_summary`` of the books' ``llm_calls``, in SQL (millions of rows)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        sent, hits, tokens_in, tokens_out, cost = con.execute(
            """SELECT count(*) FILTER (WHERE outcome <> 'cache_hit'), count(*) FILTER (WHERE outcome = 'cache_hit'),
                      coalesce(sum(tokens_in) FILTER (WHERE outcome <> 'cache_hit'), 0),
                      coalesce(sum(tokens_out) FILTER (WHERE outcome <> 'cache_hit'), 0),
                      coalesce(sum(cost_usd) FILTER (WHERE outcome <> 'cache_hit'), 0)
               FROM llm_calls"""
        ).fetchone()
    finally:
        con.close()
    return {"requests_sent": sent, "cache_hits": hits, "tokens_in": int(tokens_in), "tokens_out": int(tokens_out), "cost_usd": round(float(cost), 6)}


def _write_books(path: Path, fill: Callable[[duckdb.DuckDBPyConnection], None], n_read: int) -> AccountingSummary:
    """Build ``records.duckdb`` in a temp file (``fill`` makes the two tables), add ``run_info`` and
    the ``llm_usage`` view, check the books balance, and only then move it into place."""
    tmp = path.with_suffix(".duckdb.tmp")
    tmp.unlink(missing_ok=True)
    con = duckdb.connect(str(tmp))
    try:
        fill(con)
        con.execute("CREATE TABLE run_info AS SELECT ?::BIGINT AS records_read", [n_read])
        con.execute(
            """CREATE VIEW llm_usage AS
               SELECT agent, outcome, count(*) AS calls, sum(tokens_in) AS tokens_in,
                      sum(tokens_out) AS tokens_out, round(avg(latency_s), 3) AS mean_latency_s,
                      sum(cost_usd) AS cost_usd
               FROM llm_calls GROUP BY ALL ORDER BY agent, outcome"""
        )
        summary = check_accounting(con)
    finally:
        con.close()
    os.replace(tmp, path)
    return summary


def check_read_ids(record_ids: list[str], n_read: int, where: str = "") -> None:
    """Before any LLM call: every record read has one distinct id (the books count distinct ids,
    so a repeated id would fail the run only at the end, after every call was paid for)."""
    if len(record_ids) != n_read or len(set(record_ids)) != n_read:
        repeated = sorted(i for i, n in Counter(record_ids).items() if n > 1)[:5]
        raise AccountingError(f"{where}read {n_read} records but got {len(record_ids)} outcomes with "
                              f"{len(set(record_ids))} distinct ids (repeated, first 5: {repeated}); fix the reader "
                              "before spending LLM calls")


def check_accounting(con: duckdb.DuckDBPyConnection) -> AccountingSummary:
    """accepted + rejected = read, and each record has exactly one final outcome."""
    n_read = con.execute("SELECT records_read FROM run_info").fetchone()[0]
    accepted, rejected, distinct = con.execute(
        """SELECT count(*) FILTER (WHERE status = 'accepted'), count(*) FILTER (WHERE status = 'rejected'),
                  count(DISTINCT record_id) FROM record_outcomes"""
    ).fetchone()
    if accepted + rejected != n_read or distinct != n_read:
        raise AccountingError(
            f"books do not balance: read {n_read}, accepted {accepted} + rejected {rejected} = "
            f"{accepted + rejected}, distinct records with an outcome {distinct}"
        )
    unexplained = con.execute("SELECT count(*) FROM record_outcomes WHERE status = 'rejected' AND coalesce(reason, '') = ''").fetchone()[0]
    if unexplained:
        raise AccountingError(f"{unexplained} rejected records have no reason")
    by_reason = dict(con.execute("SELECT reason, count(*) FROM record_outcomes WHERE status = 'rejected' GROUP BY reason ORDER BY reason").fetchall())
    return AccountingSummary(n_read, accepted, rejected, by_reason)
