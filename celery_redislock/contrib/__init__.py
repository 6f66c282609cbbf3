"""Optional parts of celery_redislock that the runtime never imports (test harnesses, plugins)."""
