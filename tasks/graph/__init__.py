"""Dependency edges of a tool set: candidate pruning, discriminator scoring, the name rule as an edge
source, fused edges and the rows build-graph writes to the warehouse.

May import: schemas/, models/, warehouse/, tasks.common, tasks.toolsets, tasks.training.
"""
