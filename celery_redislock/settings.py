"""The ``redislock_*`` app settings: their defaults, read and validated once per app."""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .errors import OptionError, RedisURLError
from .options import LockOptions, _Bad, _got, _show, resolve, source_queue, source_task, validate
from .urls import TRANSPORT_OPTION_DEFAULTS, Topology, _resolve_redis_url, mask_url, url_topology

__all__ = ["SETTING_DEFAULTS", "AppSettings", "read_settings", "validate_transport_options"]


# --- app settings ---------------------------------------------------------------------------

#: The celeryconfig keys of this package and their defaults; the glue passes this to
#: ``app.conf.add_defaults`` (the one place these defaults live).
SETTING_DEFAULTS: dict[str, Any] = {
    "redislock_url": None,
    "redislock_key_prefix": "redislock",
    "redislock_options": {},
    "redislock_queues": {},
    # None: inherit the Sentinel options of the setting the URL came from (broker_url's
    # broker_transport_options, result_backend's result_backend_transport_options).
    "redislock_transport_options": None,
}

_APP = "app configuration"


@dataclass(frozen=True)
class AppSettings:
    """The validated ``redislock_*`` settings of one app; read once and cached by the glue."""

    url: str
    key_prefix: str
    options: Mapping[str, Any]
    queues: Mapping[str, Mapping[str, Any]]
    #: validated transport options (``TRANSPORT_OPTION_DEFAULTS`` keys) for the lock client
    transport_options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def topology(self) -> Topology:
        return url_topology(self.url)

    def __repr__(self) -> str:
        # Settings end up in logs and tracebacks; the URL (and sentinel_kwargs) may carry a password.
        return (
            f"AppSettings(url={mask_url(self.url)!r}, key_prefix={self.key_prefix!r}, "
            f"options={dict(self.options)!r}, "
            f"queues={ {name: dict(layer) for name, layer in self.queues.items()}!r}, "
            f"transport_options={sorted(self.transport_options)!r})"
        )

    def options_for(self, task_name: str, task_options: Mapping[str, Any], queue: str | None) -> LockOptions:
        """Resolve the options of ``task_name`` consumed from ``queue`` (None: no queue layer)."""
        queue_options = self.queues.get(queue, {}) if queue is not None else {}
        return resolve(
            task_options,
            queue_options,
            self.options,
            task_source=source_task(task_name),
            queue_source=source_queue(queue if queue is not None else ""),
        )


def _setting(conf: Mapping[str, Any], name: str) -> Any:
    # Works before add_defaults too: app.conf[name] raises KeyError until then.
    return conf.get(name, SETTING_DEFAULTS.get(name))


def _conf_url(conf: Mapping[str, Any], name: str) -> Any:
    # Celery's Settings resolves CELERY_BROKER_URL / CELERY_RESULT_BACKEND from the
    # environment and old setting names in properties; a plain mapping has neither.
    value = getattr(conf, name, None)
    return value if value is not None else conf.get(name)


def read_settings(conf: Mapping[str, Any]) -> AppSettings:
    """Read and validate the ``redislock_*`` settings (``conf`` is ``app.conf`` or a dict).

    Raises ``OptionError`` (the setting's name as option) or ``RedisURLError``.
    """
    prefix = _setting(conf, "redislock_key_prefix")
    if not isinstance(prefix, str) or not prefix or any(c.isspace() for c in prefix):
        got = _got(prefix, wrong_type=not isinstance(prefix, str))
        raise OptionError("redislock_key_prefix", _APP, f"must be a non-empty str without whitespace, {got}")

    options = _setting(conf, "redislock_options")
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise OptionError(
            "redislock_options",
            _APP,
            f"must be a dict of option name -> value, {_got(options, wrong_type=True)}",
        )
    app_layer = validate(options, "redislock_options")

    queues = _setting(conf, "redislock_queues")
    if queues is None:
        queues = {}
    if not isinstance(queues, Mapping):
        raise OptionError(
            "redislock_queues",
            _APP,
            f"must be a dict of queue name -> dict of options, {_got(queues, wrong_type=True)}",
        )
    queue_layers: dict[str, Mapping[str, Any]] = {}
    for name, layer in queues.items():
        if not isinstance(name, str) or not name:
            raise OptionError(
                "redislock_queues",
                _APP,
                f"must be keyed by queue name (a non-empty str), got key {_show(name)}",
            )
        if not isinstance(layer, Mapping):
            raise OptionError(
                "redislock_queues",
                _APP,
                f"must map each queue name to a dict of options, got {_show(layer)} "
                f"(a {type(layer).__name__}) for queue {name!r}",
            )
        queue_layers[name] = MappingProxyType(validate(layer, source_queue(name)))

    url, url_setting = _resolve_redis_url(
        _setting(conf, "redislock_url"),
        _conf_url(conf, "broker_url"),
        _conf_url(conf, "result_backend"),
    )
    transport = _transport_options(conf, url, url_setting)
    # Read-only views: the result is cached per app and shared by every task.
    return AppSettings(
        url=url,
        key_prefix=prefix,
        options=MappingProxyType(app_layer),
        queues=MappingProxyType(queue_layers),
        transport_options=MappingProxyType(transport),
    )


# --- transport options (Sentinel) -----------------------------------------------------------

#: Where the lock client inherits transport options from, by the setting its URL came from.
_INHERITED_TRANSPORT = {
    "broker_url": "broker_transport_options",
    "result_backend": "result_backend_transport_options",
}


def validate_transport_options(value: Any, source: str, *, inherited: bool = False) -> dict[str, Any]:
    """Check transport options for the lock client; returns the ones given (defaults are
    ``TRANSPORT_OPTION_DEFAULTS``).

    ``source`` names the setting in errors. ``inherited`` options (the broker's) also carry
    settings of the broker's own (``visibility_timeout``...): those are ignored, while an
    unknown name in ``redislock_transport_options`` is an error.
    """
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise OptionError(
            source, _APP, f"must be a dict of option name -> value, {_got(value, wrong_type=True)}"
        )
    result: dict[str, Any] = {}
    for name, item in value.items():
        if name not in TRANSPORT_OPTION_DEFAULTS:
            if inherited:
                continue
            known = ", ".join(sorted(TRANSPORT_OPTION_DEFAULTS))
            close = difflib.get_close_matches(str(name), TRANSPORT_OPTION_DEFAULTS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise OptionError(str(name), source, f"is unknown{hint}; known transport options: {known}")
        try:
            result[name] = _TRANSPORT_CHECKS[name](item)
        except _Bad as bad:
            raise OptionError(name, source, str(bad)) from None
    return result


def _check_master_name(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value and not any(c.isspace() for c in value)):
        return value
    raise _Bad(
        f"must be the master's name in the Sentinels' configuration (a str), {_got(value, wrong_type=not isinstance(value, str))}"
    )


def _check_sentinel_kwargs(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _Bad(
            f"must be None or a dict of connection arguments for the Sentinels, {_got(value, wrong_type=True)}"
        )
    return dict(value)


def _check_min_other_sentinels(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise _Bad(f"must be an int >= 0, {_got(value, wrong_type=not isinstance(value, numbers.Integral))}")
    return int(value)


_TRANSPORT_CHECKS: dict[str, Callable[[Any], Any]] = {
    "master_name": _check_master_name,
    "sentinel_kwargs": _check_sentinel_kwargs,
    "min_other_sentinels": _check_min_other_sentinels,
}
assert set(_TRANSPORT_CHECKS) == set(TRANSPORT_OPTION_DEFAULTS), "every transport option needs a check"


def _transport_options(conf: Mapping[str, Any], url: str, url_setting: str) -> dict[str, Any]:
    own = _setting(conf, "redislock_transport_options")
    if own is not None:
        source = "redislock_transport_options"
        options = validate_transport_options(own, source)
    else:
        source = _INHERITED_TRANSPORT.get(url_setting, "redislock_transport_options")
        inherited = conf.get(source) if source != "redislock_transport_options" else None
        options = validate_transport_options(inherited, source, inherited=True)
    if url_topology(url) == "sentinel" and options.get("master_name") is None:
        raise RedisURLError(
            f"{url_setting} is a Sentinel URL ({mask_url(url)!r}) but {source} has no 'master_name': "
            f"set redislock_transport_options = {{'master_name': 'mymaster'}}, the name the "
            f"Sentinels monitor the master under"
        )
    return options
