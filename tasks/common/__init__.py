"""Plumbing every stage shares: atomic folder swaps, file locks, checksums, the CLI generated from a
flow's config dataclass and the runner of a flow's command line (flow_cli: analytics off, fast --help, a failure
said once), the accepted-or-rejected ``Outcome`` shape, the Prefect temporary-server guard, and the background
services of ``make prefect-up`` (services), matplotlib on its headless backend (plots), and build-tdi's
progress lines and bars (progress).

Owns no pipeline logic. May import: schemas/ only.
"""
