"""A SQL shell on the warehouse (``make sql``) with the project's own ``duckdb`` package, so it opens the
file this version wrote (the ``duckdb`` Python package ships no CLI). Read-only unless ``--write``.

    python -m warehouse.shell [artifacts/warehouse/tgr.duckdb] [-c "SELECT ..."] [--write]
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import duckdb

DEFAULT_WAREHOUSE = "artifacts/warehouse/tgr.duckdb"
MAX_ROWS = 40  # rows shown per result (DuckDB's own box rendering says how many more there are)
HELP = """Statements end with ';' (several lines are fine). Dot commands: .tables  .schema NAME  .help  .quit
Examples:  SELECT * FROM graph_density;   SELECT * FROM prerequisites_of('apibank', 'manual', 'TaxCalculator');"""


def statements(lines: Iterable[str]) -> Iterator[str]:
    """SQL statements (each ending with ';') and dot commands (one line each) from ``lines``."""
    buffer: list[str] = []
    for line in lines:
        stripped = line.strip()
        if not buffer and stripped.startswith("."):
            yield stripped
            continue
        if stripped:
            buffer.append(line.rstrip("\n"))
        if stripped.endswith(";"):
            yield "\n".join(buffer)
            buffer = []
    if buffer and "\n".join(buffer).strip():
        yield "\n".join(buffer)  # the last statement may lack its ';'


def run_one(con: duckdb.DuckDBPyConnection, text: str) -> None:
    """Run one statement or dot command; print its result. Raises ``duckdb.Error`` on a bad statement."""
    if text.startswith("."):
        command, _, arg = text[1:].partition(" ")
        if command in ("quit", "exit", "q"):
            raise EOFError
        if command == "help":
            print(HELP)
            return
        if command == "tables":
            text = "SELECT table_name, table_type FROM information_schema.tables ORDER BY table_type, table_name"
        elif command == "schema" and arg.strip():
            relation = con.sql("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = $name "
                               "ORDER BY ordinal_position", params={"name": arg.strip()})
            if not relation.fetchall():
                raise duckdb.CatalogException(f"no table or view named {arg.strip()!r} (see .tables)")
            relation.show(max_rows=MAX_ROWS)
            return
        else:
            raise duckdb.ParserException(f"unknown command .{command} (.help lists them)")
    relation = con.sql(text)
    if relation is not None:
        relation.show(max_rows=MAX_ROWS)
        sys.stdout.flush()


def interactive(con: duckdb.DuckDBPyConnection, path: str) -> int:
    try:
        import readline  # noqa: F401 - line editing and history where the platform has it
    except ImportError:  # pragma: no cover
        pass
    print(f"{path} (DuckDB {duckdb.__version__}, {'read-only' if _read_only(con) else 'read-write'}). {HELP}")
    buffer: list[str] = []
    while True:
        try:
            line = input("  -> " if buffer else "tgr> ")
        except EOFError:
            print()
            return 0
        except KeyboardInterrupt:
            print()
            buffer = []
            continue
        buffer.append(line)
        if not (line.strip().endswith(";") or (len(buffer) == 1 and line.strip().startswith("."))):
            continue
        texts, buffer = list(statements(buffer)), []
        for text in texts:
            if run_statement(con, text) == "quit":
                return 0


def say_error(exc: Exception) -> None:
    """DuckDB's message on one line, as its own shell prints it."""
    print(f"Error: {' '.join(str(exc).split())}", file=sys.stderr)


def run_statement(con: duckdb.DuckDBPyConnection, text: str) -> str:
    """Run one statement or dot command: 'ok', 'quit' (.quit, .exit) or 'error' (said on stderr)."""
    try:
        run_one(con, text)
    except EOFError:
        return "quit"
    except duckdb.Error as exc:
        say_error(exc)
        return "error"
    return "ok"


def _read_only(con: duckdb.DuckDBPyConnection) -> bool:
    try:
        return bool(con.execute("SELECT current_setting('access_mode')").fetchone()[0] == "read_only")
    except duckdb.Error:  # pragma: no cover
        return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m warehouse.shell", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("warehouse", nargs="?", default=DEFAULT_WAREHOUSE, help=f"the DuckDB file (default: {DEFAULT_WAREHOUSE})")
    parser.add_argument("-c", "--command", action="append", default=[],
                        help="run this SQL (or dot command) and exit; repeatable")
    parser.add_argument("--write", action="store_true", help="open read-write (default: read-only)")
    args = parser.parse_args(argv)
    path = Path(args.warehouse)
    if not path.is_file():
        parser.exit(2, f"{parser.prog}: error: {path}: no warehouse file there (build one: make graph-gold or make graph)\n")
    try:
        con = duckdb.connect(str(path), read_only=not args.write)
    except duckdb.Error as exc:
        parser.exit(2, f"{parser.prog}: error: {path}: {' '.join(str(exc).split())}\n")
    try:
        if args.command or not sys.stdin.isatty():
            source = args.command if args.command else statements(sys.stdin)
            for text in (s for c in source for s in (statements([c]) if args.command else [c])):
                outcome = run_statement(con, text)
                if outcome != "ok":
                    return 0 if outcome == "quit" else 1
            return 0
        return interactive(con, str(path))
    finally:
        con.close()


if __name__ == "__main__":
    sys.exit(main())
