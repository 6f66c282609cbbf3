"""The redis-py client of the locks, made from a lock URL (``config.urls`` chooses it): one
Redis, the master of a Sentinel set, or a Redis Cluster, over TLS when its settings ask."""

from __future__ import annotations

import functools
import inspect
import ssl
from collections.abc import Callable, Mapping
from typing import Any, Union
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import parse_url
from redis.exceptions import RedisClusterException
from redis.sentinel import Sentinel

from ..errors import short_repr
from .urls import CLUSTER_PARAM, mask_url, url_scheme, url_topology

__all__ = [
    "CERT_REQS",
    "SSL_OPTION_NAMES",
    "TRANSPORT_OPTION_DEFAULTS",
    "LockClient",
    "cert_reqs",
    "client_factory",
    "make_client",
    "tls_failure",
]


#: What the engine talks to: a client of one Redis (or of a Sentinel-managed master), or a cluster client.
LockClient = Union[redis.Redis, RedisCluster]

#: Sentinel's port when a ``sentinel://`` URL names none (kombu's default too).
SENTINEL_PORT = 26379

#: The transport options the lock client understands, as in ``broker_transport_options``
#: for a ``sentinel://`` broker (kombu's names), and their defaults.
TRANSPORT_OPTION_DEFAULTS: dict[str, Any] = {
    #: the name of the master in the Sentinels' ``sentinel monitor`` line; required for Sentinel
    "master_name": None,
    #: connection arguments for the Sentinels themselves (a ``password``, say)
    "sentinel_kwargs": None,
    #: Sentinels that must agree a master is the master before the client uses it
    "min_other_sentinels": 0,
}


def make_client(
    url: str,
    transport_options: Mapping[str, Any] | None = None,
    ssl_options: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> LockClient:
    """A client for the resolved lock ``url`` (see ``resolve_redis_url``).

    ``kwargs`` are connection arguments (socket timeouts...) for every connection made.
    ``ssl_options`` (redis-py's ``ssl_*`` arguments, as ``broker_use_ssl`` gives them) make every
    connection to Redis a TLS one, on a ``redis://`` URL too, as Celery does; None: TLS only for
    ``rediss://``. The URL's own ``ssl_*`` parameters win over them.
    ``sentinel://`` URLs give ``Sentinel(...).master_for(master_name)``, as kombu does for a
    Sentinel broker: password and database from the first URL, Sentinel options from
    ``transport_options``. A ``?cluster=true`` URL gives a ``RedisCluster`` with every listed
    node as a startup node; it reads the slot map now, so an unreachable cluster raises
    ``redis.ConnectionError``. Anything else is ``redis.Redis.from_url``.
    """
    return client_factory(url, transport_options, ssl_options, **kwargs)()


def client_factory(
    url: str,
    transport_options: Mapping[str, Any] | None = None,
    ssl_options: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Callable[[], LockClient]:
    """``make_client`` in two steps: the URL is parsed now (ValueError if it cannot be, a
    configuration error), the client is made (for a cluster: connected) when called."""
    options = {**TRANSPORT_OPTION_DEFAULTS, **(transport_options or {})}
    topology = url_topology(url)
    for part in url.split(";"):
        _check_part(part, topology)
    if ssl_options is not None and url_scheme(url) != "unix":
        tls = {name: cert_reqs(v) if name == "ssl_cert_reqs" else v for name, v in ssl_options.items()}
        if topology == "single":
            kwargs = {"connection_class": redis.SSLConnection, **tls, **kwargs}
        else:  # Sentinel's master connections and a cluster's nodes take ssl=True
            kwargs = {"ssl": True, **tls, **kwargs}
    if topology == "sentinel":
        return functools.partial(_sentinel_master, url, options, kwargs)
    if topology == "cluster":
        return functools.partial(_cluster, url, kwargs)
    return functools.partial(redis.Redis.from_url, _for_redis_py(url), **kwargs)


# --- TLS ---------------------------------------------------------------------------------------

#: ``ssl_cert_reqs`` as Celery spells it (``CERT_REQUIRED``...) and as redis-py does
#: (``required``...), and what it means.
CERT_REQS: dict[str, ssl.VerifyMode] = {
    "CERT_REQUIRED": ssl.CERT_REQUIRED,
    "CERT_OPTIONAL": ssl.CERT_OPTIONAL,
    "CERT_NONE": ssl.CERT_NONE,
    "required": ssl.CERT_REQUIRED,
    "optional": ssl.CERT_OPTIONAL,
    "none": ssl.CERT_NONE,
}
_REDIS_PY_CERT_REQS = {ssl.CERT_REQUIRED: "required", ssl.CERT_OPTIONAL: "optional", ssl.CERT_NONE: "none"}

#: The TLS connection arguments of the installed redis-py (``ssl_ca_certs``, ``ssl_certfile``...):
#: what ``broker_use_ssl`` and the like may hold for a Redis.
SSL_OPTION_NAMES: frozenset[str] = frozenset(
    name for name in inspect.signature(redis.SSLConnection.__init__).parameters if name.startswith("ssl_")
)


def cert_reqs(value: Any) -> ssl.VerifyMode:
    """``ssl_cert_reqs`` in Celery's or redis-py's spelling, or an ``ssl.CERT_*`` constant, as
    the constant; ValueError for anything else."""
    if isinstance(value, str) and value in CERT_REQS:
        return CERT_REQS[value]
    if isinstance(value, int) and not isinstance(value, bool) and value in _REDIS_PY_CERT_REQS:
        return ssl.VerifyMode(value)
    spellings = ", ".join(CERT_REQS)
    raise ValueError(
        f"ssl_cert_reqs must be one of {spellings} or an ssl.CERT_* constant, got {short_repr(value)}"
    )


#: TLS errors that mean the connection ended mid-handshake (a restart, a dropped link): an
#: outage like any other, not a configuration error.
_TLS_OUTAGES = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError, ssl.SSLWantReadError)


def tls_failure(exc: BaseException) -> BaseException | None:
    """What a connection error of a TLS client says about its TLS set-up, or None: a server
    certificate it does not trust, a handshake the server refused (it wants a client
    certificate), a certificate or key file it cannot read. redis-py keeps it as the error's context."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLError) and not isinstance(current, _TLS_OUTAGES):
            return current
        # Reading ssl_ca_certs / ssl_certfile / ssl_keyfile; a TCP connect raises none of these.
        if isinstance(current, (FileNotFoundError, PermissionError, IsADirectoryError)):
            return current
        current = current.__cause__ or current.__context__
    return None


def _check_part(part: str, topology: str) -> None:
    """ValueError, naming the (masked) URL, for what redis-py would only find when it connects
    (a port that is not a number, a query value it cannot read) or would silently ignore (a
    database that is not a number: redis-py then uses database 0)."""
    try:
        parts = urlsplit(part)
        parts.port  # noqa: B018  # urllib checks the port when it is read
        if parts.scheme != "unix":
            db = unquote(parts.path).strip("/")
            if db and not db.isdigit():
                raise ValueError(f"the database {db!r} is not a number")
        if topology != "sentinel":  # redis-py's parser knows redis://, rediss://, unix:// only
            query = [k for k, _ in parse_qsl(parts.query)]
            if parts.scheme != "rediss" and any(k in SSL_OPTION_NAMES for k in query):
                raise ValueError("ssl_* parameters need a rediss:// URL")
            parse_url(_for_redis_py(part))  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise ValueError(f"{mask_url(part)!r}: {exc}") from None


def _sentinel_master(url: str, options: Mapping[str, Any], kwargs: dict[str, Any]) -> redis.Redis:
    parts = [urlsplit(part) for part in url.split(";")]
    hosts = [(part.hostname or "localhost", part.port or SENTINEL_PORT) for part in parts]
    first = parts[0]
    master_kwargs = dict(kwargs)
    if first.username:
        master_kwargs["username"] = unquote(first.username)
    if first.password:
        master_kwargs["password"] = unquote(first.password)
    db = first.path.strip("/") or dict(parse_qsl(first.query)).get("db")
    if db:
        master_kwargs["db"] = int(db)
    sentinel_kwargs = options["sentinel_kwargs"]
    if sentinel_kwargs is not None:
        # The Sentinels get the socket timeouts too, unless sentinel_kwargs says otherwise.
        sentinel_kwargs = {**{k: v for k, v in kwargs.items() if k.startswith("socket_")}, **sentinel_kwargs}
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        hosts,
        min_other_sentinels=options["min_other_sentinels"],
        sentinel_kwargs=sentinel_kwargs,
        **master_kwargs,
    )
    # Every new connection asks the Sentinels where the master is; after a failover the old
    # master's READONLY reply drops the connection, so the next command reaches the new one.
    master: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
        options["master_name"], redis_class=redis.Redis
    )
    return master


def _cluster(url: str, kwargs: dict[str, Any]) -> RedisCluster:
    parts = [_for_redis_py(part) for part in url.split(";")]
    others = [urlsplit(part) for part in parts[1:]]
    startup = [ClusterNode(p.hostname or "localhost", p.port or 6379) for p in others]  # type: ignore[no-untyped-call]
    try:
        return RedisCluster.from_url(parts[0], startup_nodes=startup or None, **kwargs)
    except RedisClusterException as exc:
        # The cluster client reads the slot map as it is made; unreachable is a RedisError
        # like any other Redis outage, so on_redis_error applies.
        raise redis.ConnectionError(f"Redis Cluster at {mask_url(url)} cannot be reached: {exc}") from exc


def _for_redis_py(url: str) -> str:
    """The URL as redis-py reads it: no ``cluster`` parameter (redis-py would pass an unknown
    one on to every connection as a keyword: a TypeError at the first command), and
    ``ssl_cert_reqs`` in redis-py's spelling (it refuses Celery's ``CERT_REQUIRED``)."""
    parts = urlsplit(url)
    query = urlencode(
        [
            (k, _REDIS_PY_CERT_REQS[cert_reqs(v)] if k == "ssl_cert_reqs" else v)
            for k, v in parse_qsl(parts.query)
            if k != CLUSTER_PARAM
        ]
    )
    # Spelled out: urlunsplit drops the '//' of unix:///path, which redis-py then refuses.
    return f"{parts.scheme}://{parts.netloc}{parts.path}" + (f"?{query}" if query else "")
