"""Redis URLs of the locks: which setting gives one, what it names (one Redis, a Sentinel set,
a cluster), and how it is shown (passwords masked). ``config.lock_client`` makes the client."""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit

from ..errors import RedisURLError, short_repr

__all__ = [
    "CLUSTER_PARAM",
    "REDIS_URL_SCHEMES",
    "Topology",
    "failover_urls",
    "mask_url",
    "resolve_redis_url",
    "resolve_url_and_setting",
    "url_scheme",
    "url_topology",
]

#: What a lock URL names: one Redis, a master found through Sentinels, or a Redis Cluster.
Topology = Literal["single", "sentinel", "cluster"]

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


def url_scheme(url: str) -> str:
    """The scheme of ``url`` in lower case (``redis``, ``sentinel``...), or "" for none."""
    scheme, sep, _ = url.strip().partition("://")
    return scheme.lower() if sep else ""


def failover_urls(value: Any) -> list[str]:
    """The failover list of a broker_url / result_backend setting (a list or 'a;b'); empty
    when it names none (not a str or a list of str)."""
    if isinstance(value, str):
        return [u.strip() for u in value.split(";") if u.strip()]
    if isinstance(value, (list, tuple)) and all(isinstance(u, str) for u in value):
        return [u.strip() for u in value if u.strip()]
    return []


def _usable(value: Any) -> str | None:
    """The Redis URL a setting names, or None when it names none."""
    urls = failover_urls(value)
    if not urls or url_scheme(urls[0]) not in REDIS_URL_SCHEMES:
        return None
    first = urls[0]
    if url_scheme(first) == "sentinel":
        # Sentinel needs every sentinel host, not just the first failover entry.
        return ";".join(u for u in urls if url_scheme(u) == "sentinel")
    if url_scheme(first) == "redis+socket":
        return _socket_to_unix(first)
    if _cluster_flag(first):
        # Every node listed is a startup node of the one cluster.
        return ";".join(u for u in urls if url_scheme(u) in _CLUSTER_SCHEMES)
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
    if url_scheme(first) == "sentinel":
        return "sentinel"
    if url_scheme(first) in _CLUSTER_SCHEMES and _cluster_flag(first):
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
    """The Redis URL the locks use (docs/operations/deployment.md).

    ``redislock_url`` when set (it must be a Redis URL), else ``broker_url`` when Redis,
    else ``result_backend`` when Redis. A failover ``broker_url`` (a list or ``'a;b'``) gives
    its first URL, or all its sentinel URLs joined by ';' for Sentinel (likewise every node of
    a ``?cluster=true`` URL). ``redis+socket://`` is returned as the ``unix://`` URL redis-py
    understands. An empty ``redislock_url`` is treated as unset, as Celery treats an empty
    ``broker_url``.

    Raises ``RedisURLError``; its message never shows a password.
    """
    return resolve_url_and_setting(redislock_url, broker_url, result_backend)[0]


def resolve_url_and_setting(
    redislock_url: str | None, broker_url: Any, result_backend: Any
) -> tuple[str, str]:
    """``resolve_redis_url``'s URL and the name of the setting it came from (``redislock_url``,
    ``broker_url`` or ``result_backend``): errors about the URL name that setting."""
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
