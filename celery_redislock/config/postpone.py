"""How long a postponed call may wait in the broker at one hop (``redislock_max_postpone``): the
setting where given, else half of what the app's broker holds an unacknowledged message for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..engine.checks import BadValue, optional_seconds, positive_seconds
from ..errors import OptionError
from .options import APP_CONFIGURATION
from .urls import failover_urls, url_scheme

__all__ = ["BROKER_HOLDS", "OTHER_BROKER_HOLD", "broker_transport", "max_postpone"]

#: Seconds an unacknowledged message is held before it is given out again, by the broker's
#: transport: Redis-like transports redeliver after ``broker_transport_options``'
#: ``visibility_timeout`` (kombu's defaults here when unset); RabbitMQ closes the channel of a
#: consumer holding a message past its ``consumer_timeout``, a server setting the app cannot read
#: (RabbitMQ's default).
BROKER_HOLDS: Mapping[str, float] = {
    "redis": 3600.0,
    "rediss": 3600.0,
    "sentinel": 3600.0,
    "sqs": 1800.0,
    "amqp": 1800.0,
    "amqps": 1800.0,
    "pyamqp": 1800.0,
    "librabbitmq": 1800.0,
}
#: What the visibility timeout sets, where a transport has one.
_VISIBILITY = frozenset({"redis", "rediss", "sentinel", "sqs"})
#: Seconds a hop lasts on a transport of no known hold.
OTHER_BROKER_HOLD = 900.0


def broker_transport(conf: Mapping[str, Any]) -> str:
    """The name of the app's broker transport (``amqp``, ``redis``, ``sqs`` ...), lower case."""
    given = conf.get("broker_transport")
    if given:
        return str(given).lower()
    # Celery's Settings resolves CELERY_BROKER_URL and old names in a property. A fail-over list
    # has one transport for all; a value naming no URL is Celery's to refuse (its default here).
    urls = failover_urls(getattr(conf, "broker_url", None) or conf.get("broker_url"))
    return (url_scheme(urls[0]) if urls else "") or "amqp"


def max_postpone(conf: Mapping[str, Any]) -> float:
    """Seconds a postponed call may wait in the broker at one hop, read from ``conf`` (``app.conf``
    or a dict). Half of the broker's hold, so a worker busy for a while still takes the message
    well before it is given out again. Raises ``OptionError`` naming the setting that is wrong."""
    try:
        own = optional_seconds(conf.get("redislock_max_postpone"))
    except BadValue as bad:
        raise OptionError("redislock_max_postpone", APP_CONFIGURATION, str(bad)) from None
    transport = broker_transport(conf)
    hold = BROKER_HOLDS.get(transport)
    if hold is not None and transport in _VISIBILITY:
        options = conf.get("broker_transport_options") or {}
        visibility = options.get("visibility_timeout") if isinstance(options, Mapping) else None
        if visibility is not None:
            try:
                hold = positive_seconds(visibility)
            except BadValue as bad:
                raise OptionError("visibility_timeout", "broker_transport_options", str(bad)) from None
        if own is not None and own >= hold:
            # A call would wait past the visibility timeout and be given out again while it
            # waits: two copies of it could come due at once, in two processes.
            raise OptionError(
                "redislock_max_postpone",
                APP_CONFIGURATION,
                f"must be below the broker's visibility_timeout ({hold:g}s), is {own:g}: a call waiting "
                f"longer is given out again while it waits",
            )
    if own is not None:
        return own
    return OTHER_BROKER_HOLD if hold is None else hold / 2
