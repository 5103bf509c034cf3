"""The engine bench's parts, by job; ``python -m bench.engine_bench`` runs it."""
