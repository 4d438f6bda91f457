"""Real tool sets: importers for the annotated benchmarks and the documented on-disk format
(docs/toolsets.md), and their gold call trajectories (read, validate, split, order).

May import: schemas/, tasks.common.
"""
