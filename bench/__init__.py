"""Benchmarks: ``python -m bench.engine_bench``, ``python -m bench.facade_bench``."""
