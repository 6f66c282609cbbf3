"""The redis-py client for a lock URL: one Redis, the master a Sentinel set names, or a Redis Cluster."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Union
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import parse_url
from redis.exceptions import RedisClusterException
from redis.sentinel import Sentinel

from .options import CLUSTER_PARAM, TRANSPORT_OPTION_DEFAULTS, mask_url, url_topology

__all__ = ["LockClient", "client_factory", "make_client"]

#: What the engine talks to: a client of one Redis (or of a Sentinel-managed master), or a cluster client.
LockClient = Union[redis.Redis, RedisCluster]

#: Sentinel's port when a ``sentinel://`` URL names none (kombu's default too).
SENTINEL_PORT = 26379


def make_client(url: str, transport_options: Mapping[str, Any] | None = None, **kwargs: Any) -> LockClient:
    """A client for the resolved lock ``url`` (see ``options.resolve_redis_url``).

    ``kwargs`` are connection arguments (socket timeouts...) for every connection made.
    ``sentinel://`` URLs give ``Sentinel(...).master_for(master_name)``, as kombu does for a
    Sentinel broker: password and database from the first URL, Sentinel options from
    ``transport_options``. A ``?cluster=true`` URL gives a ``RedisCluster`` with every listed
    node as a startup node; it reads the slot map now, so an unreachable cluster raises
    ``redis.ConnectionError``. Anything else is ``redis.Redis.from_url``.
    """
    return client_factory(url, transport_options, **kwargs)()


def client_factory(
    url: str, transport_options: Mapping[str, Any] | None = None, **kwargs: Any
) -> Callable[[], LockClient]:
    """``make_client`` in two steps: the URL is parsed now (ValueError if it cannot be, a
    configuration error), the client is made (for a cluster: connected) when called."""
    options = {**TRANSPORT_OPTION_DEFAULTS, **(transport_options or {})}
    topology = url_topology(url)
    for part in url.split(";"):
        _check_part(part, topology)
    if topology == "sentinel":
        return functools.partial(_sentinel_master, url, options, kwargs)
    if topology == "cluster":
        return functools.partial(_cluster, url, kwargs)
    return functools.partial(redis.Redis.from_url, _without_cluster_param(url), **kwargs)


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
            parse_url(_without_cluster_param(part))  # type: ignore[no-untyped-call]
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
    parts = [_without_cluster_param(part) for part in url.split(";")]
    others = [urlsplit(part) for part in parts[1:]]
    startup = [ClusterNode(p.hostname or "localhost", p.port or 6379) for p in others]  # type: ignore[no-untyped-call]
    try:
        return RedisCluster.from_url(parts[0], startup_nodes=startup or None, **kwargs)
    except RedisClusterException as exc:
        # The cluster client reads the slot map as it is made; unreachable is a RedisError
        # like any other Redis outage, so on_redis_error applies.
        raise redis.ConnectionError(f"Redis Cluster at {mask_url(url)} cannot be reached: {exc}") from exc


def _without_cluster_param(url: str) -> str:
    # redis-py would pass an unknown query parameter on to every connection as a keyword
    # (``?cluster=false`` too: a TypeError at the first command).
    parts = urlsplit(url)
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != CLUSTER_PARAM])
    # Spelled out: urlunsplit drops the '//' of unix:///path, which redis-py then refuses.
    return f"{parts.scheme}://{parts.netloc}{parts.path}" + (f"?{query}" if query else "")
