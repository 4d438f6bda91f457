"""A TDI dataset folder, shared by build-tdi and mine-tdi: three balanced classes split without doc
leakage, seeded Parquet shards, manifest and card, the great-expectations gate, the books
(``records.duckdb``) and publish-or-nothing; the gate and publish as the Prefect tasks both flows run
(``gate``).

May import: schemas/, tasks.common, tasks.sources. Never the LLM layer: mine-tdi uses it without one.
"""
