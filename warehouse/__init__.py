"""The DuckDB tool graph warehouse: layered SQL in ``warehouse/sql`` and its atomic build."""
