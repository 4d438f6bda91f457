"""Dependency edges of a tool set: candidate pruning (and the run that trains its dependency retriever),
discriminator scoring in one or two levels, the name rule as an edge source, fused edges and the rows
build-graph writes to the warehouse.

May import: schemas/, models/, warehouse/, tasks.common, tasks.toolsets, tasks.training.
"""
