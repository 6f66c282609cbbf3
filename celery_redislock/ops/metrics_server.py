"""The worker's Prometheus endpoint: a bootstep of the main process that serves ``/metrics``
when ``redislock_metrics_port`` is set, on ``redislock_metrics_host`` (loopback by default)."""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery, bootsteps, signals
from celery.exceptions import CeleryCommandException

from ..config.metrics import PORT_SETTING, MetricsSettings, read_metrics_settings
from ..errors import RedisLockError
from ..integration.bootstep import EX_CONFIG

__all__ = ["MetricsServer"]

logger = logging.getLogger(__name__)


class MetricsServer(bootsteps.StartStopStep):
    """Serve the lock metrics from the worker's main process, which sums every pool child's
    counts (``ops.stats``): started once the pool is up, stopped with the worker."""

    name = "celery_redislock.MetricsServer"
    requires = ("celery.worker.components:Pool",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.server: Any = None
        try:
            self.settings = read_metrics_settings(parent.app.conf)
            if self.settings is not None:
                import prometheus_client  # noqa: F401  (said now, not at start: the extra)
        except RedisLockError as exc:
            raise CeleryCommandException(
                f"celery_redislock cannot start this worker: {exc}", EX_CONFIG
            ) from exc
        except ImportError as exc:
            raise CeleryCommandException(
                f"celery_redislock cannot start this worker: {PORT_SETTING} is set, but prometheus_client "
                f"is not installed (pip install 'celery-redislock[metrics]')",
                EX_CONFIG,
            ) from exc

    def start(self, parent: Any) -> None:
        if self.settings is not None:
            self.server = serve(self.settings, parent.app)

    def stop(self, parent: Any) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    shutdown = stop


def serve(settings: MetricsSettings, app: Any = None) -> Any:
    """Serve ``/metrics`` on ``settings``' address in a thread; the server (``shutdown()``).
    ``app``: its adaptive limits' gauges are served too."""
    from prometheus_client import start_http_server

    from .metrics import lock_registry

    server, thread = start_http_server(settings.port, settings.host, registry=lock_registry(app=app))
    thread.name = "redislock-metrics"
    logger.info("Serving lock metrics on http://%s:%d/metrics", settings.host, settings.port)
    return server


@signals.worker_init.connect(weak=False)
def _add_metrics_step(sender: Any = None, **_: Any) -> None:
    # Sent just before the worker builds its blueprint from app.steps["worker"].
    app: Celery | None = getattr(sender, "app", None)
    if app is not None:
        app.steps["worker"].add(MetricsServer)
