"""The worker's metrics endpoint settings (``redislock_metrics_port``, ``redislock_metrics_host``),
read and validated."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ..errors import OptionError
from .options import APP_CONFIGURATION
from .settings import SETTING_DEFAULTS

__all__ = ["PORT_SETTING", "MetricsSettings", "read_metrics_settings"]

PORT_SETTING = "redislock_metrics_port"
HOST_SETTING = "redislock_metrics_host"


class MetricsSettings(NamedTuple):
    """Where the worker serves ``/metrics``: a loopback address unless told otherwise."""

    host: str
    port: int


def read_metrics_settings(conf: Mapping[str, Any]) -> MetricsSettings | None:
    """The endpoint to serve, or None when ``redislock_metrics_port`` is not set; an
    ``OptionError`` naming the setting for a port or host that cannot be served."""
    port = conf.get(PORT_SETTING, SETTING_DEFAULTS[PORT_SETTING])
    if port is None:
        return None
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise OptionError(
            PORT_SETTING, APP_CONFIGURATION, f"must be a TCP port from 1 to 65535, got {port!r}"
        )
    host = conf.get(HOST_SETTING, SETTING_DEFAULTS[HOST_SETTING])
    if not isinstance(host, str) or not host.strip():
        raise OptionError(
            HOST_SETTING, APP_CONFIGURATION, f"must be an address to listen on (a str), got {host!r}"
        )
    return MetricsSettings(host, port)
