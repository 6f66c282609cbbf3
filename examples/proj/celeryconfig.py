"""Settings of the example project: Redis from ``$REDIS_URL``, lock options app-wide and per queue."""

from __future__ import annotations

import os

# One Redis for everything in the example: the broker, the results and (by default, since the
# broker is Redis) the locks. Set redislock_url to keep the locks elsewhere.
_redis_url = os.environ.get("REDIS_URL", "redis://localhost:6379/0")

broker_url = _redis_url
result_backend = _redis_url
result_expires = 3600
task_track_started = True  # a STARTED state: the demo sends duplicates once the first call runs
broker_connection_retry_on_startup = True

task_default_queue = "celery"
task_routes = {"proj.tasks.send_report": {"queue": "reports"}}

# Defaults for every SingletonTask of the app (the task's own options win over these).
redislock_options = {
    "lock_timeout": 30,  # a crashed worker's lock outlives it by at most this
    "retry_countdown": 5,
}

# Options by the queue a worker consumed the task from: reports are slow and worth sending,
# so a duplicate report is re-queued until the one running finishes, instead of being skipped.
redislock_queues = {
    "reports": {"lock_timeout": 120, "on_duplicate": "retry", "retry_countdown": 1},
}
