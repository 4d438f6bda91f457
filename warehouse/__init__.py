"""The DuckDB tool graph warehouse: core tables declared once in ``warehouse/tables.py``, mart SQL in
``warehouse/sql``, and its atomic build."""
