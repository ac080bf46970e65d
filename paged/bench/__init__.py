"""Benchmarks: `python -m paged.bench.<name>` prints its figures."""
