"""Plumbing every stage shares: atomic folder swaps, file locks, checksums, the CLI generated from a
flow's config dataclass, the accepted-or-rejected ``Outcome`` shape, and the Prefect temporary-server guard.

Owns no pipeline logic. May import: schemas/ only.
"""
