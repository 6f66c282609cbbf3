"""The ``redislock_*`` app settings: their defaults, read and validated once per app."""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..engine.checks import BadValue, got, positive_seconds
from ..errors import OptionError, RedisTLSError, RedisURLError, short_repr
from .limits import LIMITS_SETTING, NamedLimit, read_limits
from .lock_client import SSL_OPTION_NAMES, TRANSPORT_OPTION_DEFAULTS, cert_reqs, tls_failure
from .options import APP_CONFIGURATION, LockOptions, resolve, source_queue, source_task, validate
from .postpone import max_postpone
from .urls import Topology, mask_url, resolve_url_and_setting, url_scheme, url_topology

__all__ = [
    "SETTING_DEFAULTS",
    "AppSettings",
    "read_settings",
    "validate_ssl_options",
    "validate_transport_options",
]


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
    # None: inherit the SSL options of the setting the URL came from (broker_url's
    # broker_use_ssl, result_backend's redis_backend_use_ssl).
    "redislock_use_ssl": None,
    # None: half of what the broker holds an unacknowledged message for (config.postpone).
    "redislock_max_postpone": None,
    # Named rate limits, name -> rate(s) (config.limits).
    "redislock_limits": None,
    # The worker's Prometheus endpoint (config.metrics): None serves none.
    "redislock_metrics_port": None,
    "redislock_metrics_host": "127.0.0.1",
    # The record of each call's decisions that ``explain`` reads (engine.decision_record): kept
    # or not, and how long after a call's last decision, in seconds.
    "redislock_explain": True,
    "redislock_explain_ttl": 24 * 3600,
}


@dataclass(frozen=True)
class AppSettings:
    """The validated ``redislock_*`` settings of one app; read once and cached by the glue."""

    url: str
    key_prefix: str
    options: Mapping[str, Any]
    queues: Mapping[str, Mapping[str, Any]]
    #: validated transport options (``TRANSPORT_OPTION_DEFAULTS`` keys) for the lock client
    transport_options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: validated SSL options (redis-py's ``ssl_*`` arguments) for the lock client; None: none given
    ssl_options: Mapping[str, Any] | None = None
    #: the setting ``ssl_options`` came from, or would have (named in TLS errors)
    ssl_source: str = "redislock_use_ssl"
    #: seconds a postponed call waits in the broker at most at one hop (``config.postpone``)
    max_postpone: float = 900.0
    #: the named rate limits of ``redislock_limits`` (``config.limits``; code may declare more)
    limits: Mapping[str, NamedLimit] = field(default_factory=lambda: MappingProxyType({}))
    #: the setting ``url`` came from (named in errors about the URL)
    url_setting: str = "redislock_url"
    #: seconds a call's record of decisions is kept after its last one; None: no record
    #: (``redislock_explain = False``)
    explain_ttl: float | None = 24 * 3600.0

    @property
    def topology(self) -> Topology:
        return url_topology(self.url)

    def __repr__(self) -> str:
        # Settings end up in logs and tracebacks; the URL (and sentinel_kwargs) may carry a password.
        return (
            f"AppSettings(url={mask_url(self.url)!r}, key_prefix={self.key_prefix!r}, "
            f"options={dict(self.options)!r}, "
            f"queues={ {name: dict(layer) for name, layer in self.queues.items()}!r}, "
            f"transport_options={sorted(self.transport_options)!r}, "
            f"ssl_options={None if self.ssl_options is None else sorted(self.ssl_options)!r})"
        )

    @property
    def uses_tls(self) -> bool:
        """Whether the lock client talks TLS to Redis (a ``rediss://`` URL, or SSL options)."""
        if url_scheme(self.url) == "unix":
            return False
        return self.ssl_options is not None or any(
            url_scheme(part) == "rediss" for part in self.url.split(";")
        )

    def tls_error(self, exc: BaseException) -> RedisTLSError | None:
        """The configuration error a Redis error of the lock client is, when TLS's set-up failed
        (see ``tls_failure``), naming the setting the SSL options came from; else None."""
        failure = tls_failure(exc) if self.uses_tls else None
        if failure is None:
            return None
        given = None if self.ssl_options is None else sorted(self.ssl_options)
        return RedisTLSError(
            mask_url(self.url), self.ssl_source, given, f"{type(failure).__name__}: {failure}"
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
        shown = got(prefix, wrong_type=not isinstance(prefix, str))
        raise OptionError(
            "redislock_key_prefix", APP_CONFIGURATION, f"must be a non-empty str without whitespace, {shown}"
        )

    options = _setting(conf, "redislock_options")
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise OptionError(
            "redislock_options",
            APP_CONFIGURATION,
            f"must be a dict of option name -> value, {got(options, wrong_type=True)}",
        )
    app_layer = validate(options, "redislock_options")

    queues = _setting(conf, "redislock_queues")
    if queues is None:
        queues = {}
    if not isinstance(queues, Mapping):
        raise OptionError(
            "redislock_queues",
            APP_CONFIGURATION,
            f"must be a dict of queue name -> dict of options, {got(queues, wrong_type=True)}",
        )
    queue_layers: dict[str, Mapping[str, Any]] = {}
    for name, layer in queues.items():
        if not isinstance(name, str) or not name:
            raise OptionError(
                "redislock_queues",
                APP_CONFIGURATION,
                f"must be keyed by queue name (a non-empty str), got key {short_repr(name)}",
            )
        if not isinstance(layer, Mapping):
            raise OptionError(
                "redislock_queues",
                APP_CONFIGURATION,
                f"must map each queue name to a dict of options, got {short_repr(layer)} "
                f"(a {type(layer).__name__}) for queue {name!r}",
            )
        queue_layers[name] = MappingProxyType(validate(layer, source_queue(name)))

    url, url_setting = resolve_url_and_setting(
        _setting(conf, "redislock_url"),
        _conf_url(conf, "broker_url"),
        _conf_url(conf, "result_backend"),
    )
    transport = _transport_options(conf, url, url_setting)
    ssl_options, ssl_source = _ssl_options(conf, url, url_setting)
    # Read-only views: the result is cached per app and shared by every task.
    return AppSettings(
        url=url,
        key_prefix=prefix,
        options=MappingProxyType(app_layer),
        queues=MappingProxyType(queue_layers),
        transport_options=MappingProxyType(transport),
        ssl_options=None if ssl_options is None else MappingProxyType(ssl_options),
        ssl_source=ssl_source,
        max_postpone=max_postpone(conf),
        url_setting=url_setting,
        limits=MappingProxyType(read_limits(_setting(conf, LIMITS_SETTING))),
        explain_ttl=_explain_ttl(conf),
    )


def _explain_ttl(conf: Mapping[str, Any]) -> float | None:
    """``redislock_explain_ttl`` in seconds, or None when ``redislock_explain`` is False."""
    enabled = _setting(conf, "redislock_explain")
    if not isinstance(enabled, bool):
        raise OptionError(
            "redislock_explain", APP_CONFIGURATION, f"must be True or False, {got(enabled, wrong_type=True)}"
        )
    if not enabled:
        return None
    try:
        return positive_seconds(_setting(conf, "redislock_explain_ttl"))
    except BadValue as bad:
        raise OptionError("redislock_explain_ttl", APP_CONFIGURATION, str(bad)) from None


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
            source,
            APP_CONFIGURATION,
            f"must be a dict of option name -> value, {got(value, wrong_type=True)}",
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
        except BadValue as bad:
            raise OptionError(name, source, str(bad)) from None
    return result


def _check_master_name(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value and not any(c.isspace() for c in value)):
        return value
    raise BadValue(
        f"must be the master's name in the Sentinels' configuration (a str), {got(value, wrong_type=not isinstance(value, str))}"
    )


def _check_sentinel_kwargs(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise BadValue(
            f"must be None or a dict of connection arguments for the Sentinels, {got(value, wrong_type=True)}"
        )
    return dict(value)


def _check_min_other_sentinels(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise BadValue(
            f"must be an int >= 0, {got(value, wrong_type=not isinstance(value, numbers.Integral))}"
        )
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


# --- SSL options (TLS) ------------------------------------------------------------------------

#: Where the lock client inherits SSL options from, by the setting its URL came from.
_INHERITED_SSL = {
    "broker_url": "broker_use_ssl",
    "result_backend": "redis_backend_use_ssl",
}


def validate_ssl_options(value: Any, source: str) -> dict[str, Any] | None:
    """Check SSL options for the lock client, given as Celery takes ``broker_use_ssl``: None
    when none are given (None, False or an empty dict, as Celery reads them), ``{}`` for True
    (TLS with redis-py's defaults), else the dict with ``ssl_cert_reqs`` as an ``ssl.CERT_*``
    constant (Celery's ``CERT_REQUIRED`` and redis-py's ``required`` spellings are accepted).

    ``source`` names the setting in errors.
    """
    if value is None or value is False:
        return None
    if value is True:
        return {}
    if not isinstance(value, Mapping):
        raise OptionError(
            source,
            APP_CONFIGURATION,
            f"must be a dict of redis-py's ssl_* connection arguments (ssl_ca_certs, ssl_certfile, "
            f"ssl_keyfile, ssl_cert_reqs...), True or None, {got(value, wrong_type=True)}",
        )
    result: dict[str, Any] = {}
    for name, item in value.items():
        if name not in SSL_OPTION_NAMES:
            close = difflib.get_close_matches(
                f"ssl_{name}", SSL_OPTION_NAMES, n=1
            ) or difflib.get_close_matches(str(name), SSL_OPTION_NAMES, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise OptionError(
                str(name),
                source,
                f"is not an SSL option of redis-py{hint}; known: {', '.join(sorted(SSL_OPTION_NAMES))}",
            )
        if name == "ssl_cert_reqs":
            try:
                item = cert_reqs(item)
            except ValueError as exc:
                raise OptionError(name, source, str(exc).removeprefix("ssl_cert_reqs ")) from None
        result[name] = item
    return result or None


def _ssl_options(conf: Mapping[str, Any], url: str, url_setting: str) -> tuple[dict[str, Any] | None, str]:
    """The lock client's SSL options and the setting they came from (or would have)."""
    own = _setting(conf, "redislock_use_ssl")
    source = "redislock_use_ssl" if own is not None else _INHERITED_SSL.get(url_setting, "redislock_use_ssl")
    value = own if own is not None else conf.get(source) if source != "redislock_use_ssl" else None
    options = validate_ssl_options(value, source)
    if options is not None and url_scheme(url) == "unix":
        if own is not None:
            raise OptionError(
                source,
                APP_CONFIGURATION,
                f"sets TLS options, but the lock URL {mask_url(url)!r} is a unix socket",
            )
        return None, source  # the broker's TLS is for its TCP URLs; a socket has none
    return options, source
