"""The Celery glue: the task class, sending, one execution's acquisition and outcomes, worker handlers."""
