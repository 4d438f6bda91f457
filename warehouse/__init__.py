"""The DuckDB tool graph warehouse: core tables declared once in ``warehouse/tables.py``, mart SQL in
``warehouse/sql``, its atomic build, and a SQL shell on it (``shell``, ``make sql``)."""
