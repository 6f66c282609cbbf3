"""Benchmarks: the lock's cost against plain Celery and celery-singleton / celery-once (python -m benchmarks)."""
