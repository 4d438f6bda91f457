"""Benchmarks; results and how to rerun them are in bench/RESULTS.md."""
