"""Reports: rendered by a fenced Celery task, whose late write a stale run cannot make."""
