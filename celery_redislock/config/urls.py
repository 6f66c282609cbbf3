"""Redis URLs of the locks: which setting gives one, what it names (one Redis, a Sentinel set,
a cluster), how it is shown (passwords masked), and the redis-py client made from it."""

from __future__ import annotations

import functools
import inspect
import re
import ssl
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import parse_url
from redis.exceptions import RedisClusterException
from redis.sentinel import Sentinel

from ..errors import RedisURLError, short_repr

__all__ = [
    "CERT_REQS",
    "CLUSTER_PARAM",
    "REDIS_URL_SCHEMES",
    "SSL_OPTION_NAMES",
    "TRANSPORT_OPTION_DEFAULTS",
    "LockClient",
    "Topology",
    "cert_reqs",
    "client_factory",
    "make_client",
    "mask_url",
    "resolve_redis_url",
    "tls_failure",
    "url_topology",
]

#: What a lock URL names: one Redis, a master found through Sentinels, or a Redis Cluster.
Topology = Literal["single", "sentinel", "cluster"]

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

#: URL schemes that name a Redis server (or its Sentinels) in Celery's settings.
REDIS_URL_SCHEMES: frozenset[str] = frozenset({"redis", "rediss", "sentinel", "unix", "redis+socket"})

_PASSWORD_PARAM = re.compile(r"(?i)((?:^|[?&;])[^=&;?]*password=)[^&;]*")


def _mask_one(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _PASSWORD_PARAM.sub(r"\1****", url)
    # The last '@' ends the userinfo even when the password has an unquoted '@' or '/';
    # masking too much of a malformed URL is better than showing any of a password.
    userinfo, at, hostpart = rest.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        # No ':' may still be a password: kombu and users write redis://secret@host.
        rest = f"{user}:****@{hostpart}" if colon else f"****@{hostpart}"
    return f"{scheme}://" + _PASSWORD_PARAM.sub(r"\1****", rest)


def mask_url(url: Any) -> str:
    """Show a URL (or a list or ';'-list of them) with every password replaced by ``****``."""
    if isinstance(url, (list, tuple)):
        return "[" + ", ".join(repr(mask_url(u)) for u in url) + "]"
    if not isinstance(url, str):
        return short_repr(url)
    return ";".join(_mask_one(part) for part in url.split(";"))


def _shown(value: Any) -> str:
    return repr(mask_url(value)) if isinstance(value, str) else mask_url(value)


def _scheme(url: str) -> str:
    scheme, sep, _ = url.strip().partition("://")
    return scheme.lower() if sep else ""


def _urls(value: Any) -> list[str]:
    """The failover list of a broker_url / result_backend setting (a list or 'a;b')."""
    if isinstance(value, str):
        return [u.strip() for u in value.split(";") if u.strip()]
    if isinstance(value, (list, tuple)) and all(isinstance(u, str) for u in value):
        return [u.strip() for u in value if u.strip()]
    return []


def _usable(value: Any) -> str | None:
    """The Redis URL a setting names, or None when it names none."""
    urls = _urls(value)
    if not urls or _scheme(urls[0]) not in REDIS_URL_SCHEMES:
        return None
    first = urls[0]
    if _scheme(first) == "sentinel":
        # Sentinel needs every sentinel host, not just the first failover entry.
        return ";".join(u for u in urls if _scheme(u) == "sentinel")
    if _scheme(first) == "redis+socket":
        return _socket_to_unix(first)
    if _cluster_flag(first):
        # Every node listed is a startup node of the one cluster.
        return ";".join(u for u in urls if _scheme(u) in _CLUSTER_SCHEMES)
    return first


#: The URL query parameter that marks a Redis Cluster: ``redis://node:7000/0?cluster=true``.
CLUSTER_PARAM = "cluster"
_CLUSTER_SCHEMES = frozenset({"redis", "rediss"})
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def _cluster_flag(url: str) -> bool:
    """Whether ``url`` asks for a Redis Cluster (``?cluster=true``); RedisURLError if unclear."""
    values = [v for k, v in parse_qsl(urlsplit(url).query, keep_blank_values=True) if k == CLUSTER_PARAM]
    if not values:
        return False
    value = values[-1].lower()
    if value not in _TRUE | _FALSE:
        raise RedisURLError(f"{CLUSTER_PARAM}={values[-1]!r} in {mask_url(url)!r} must be true or false")
    return value in _TRUE


def url_topology(url: str) -> Topology:
    """What a resolved lock URL names: ``"sentinel"``, ``"cluster"`` or ``"single"``."""
    first = url.split(";", 1)[0]
    if _scheme(first) == "sentinel":
        return "sentinel"
    if _scheme(first) in _CLUSTER_SCHEMES and _cluster_flag(first):
        return "cluster"
    return "single"


def _check_cluster(url: str, setting: str) -> None:
    for part in url.split(";"):
        path = urlsplit(part).path.strip("/")
        query_db = [v for k, v in parse_qsl(urlsplit(part).query) if k == "db"]
        if path not in ("", "0") or any(v != "0" for v in query_db):
            raise RedisURLError(
                f"{setting} names a Redis Cluster, which has only database 0, got {mask_url(part)!r}; "
                f"drop the database number, or use a redislock_key_prefix to keep apps apart"
            )


def _socket_to_unix(url: str) -> str:
    # Celery/kombu spell a socket redis+socket:///path?virtual_host=N; redis-py's
    # Redis.from_url only knows unix:///path?db=N.
    parts = urlsplit(url)
    query = urlencode([("db" if k == "virtual_host" else k, v) for k, v in parse_qsl(parts.query)])
    # Spelled out: urlunsplit drops the '//' of a scheme it does not know to have a netloc.
    return f"unix://{parts.netloc}{parts.path}" + (f"?{query}" if query else "")


def resolve_redis_url(redislock_url: str | None, broker_url: Any, result_backend: Any) -> str:
    """The Redis URL the locks use (SPEC section 1).

    ``redislock_url`` when set (it must be a Redis URL), else ``broker_url`` when Redis,
    else ``result_backend`` when Redis. A failover ``broker_url`` (a list or ``'a;b'``) gives
    its first URL, or all its sentinel URLs joined by ';' for Sentinel (likewise every node of
    a ``?cluster=true`` URL). ``redis+socket://`` is returned as the ``unix://`` URL redis-py
    understands. An empty ``redislock_url`` is treated as unset, as Celery treats an empty
    ``broker_url``.

    Raises ``RedisURLError``; its message never shows a password.
    """
    return _resolve_redis_url(redislock_url, broker_url, result_backend)[0]


def _resolve_redis_url(redislock_url: str | None, broker_url: Any, result_backend: Any) -> tuple[str, str]:
    """The lock URL and the name of the setting it came from."""
    if redislock_url is not None and redislock_url != "":
        found = _usable(redislock_url)
        if found is None:
            schemes = ", ".join(f"{s}://" for s in sorted(REDIS_URL_SCHEMES))
            raise RedisURLError(f"redislock_url must be a Redis URL ({schemes}), got {_shown(redislock_url)}")
        return _checked(found, "redislock_url")
    for value, name in ((broker_url, "broker_url"), (result_backend, "result_backend")):
        found = _usable(value)
        if found is not None:
            return _checked(found, name)
    raise RedisURLError(
        "no Redis URL for the locks: none of redislock_url, broker_url, result_backend is a "
        f"Redis URL (redislock_url={_shown(redislock_url)}, "
        f"broker_url={_shown(broker_url)}, result_backend={_shown(result_backend)}); "
        'set redislock_url = "redis://host:6379/0" in the Celery configuration'
    )


def _checked(url: str, setting: str) -> tuple[str, str]:
    if url_topology(url) == "cluster":
        _check_cluster(url, setting)
    return url, setting


# --- the client ------------------------------------------------------------------------------


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
    if ssl_options is not None and _scheme(url) != "unix":
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
