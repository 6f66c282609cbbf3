"""What every ``celery redislock`` command shares: the app's runtime from the click context, and
a Redis failure as one ``Error:`` line and an exit code, never a traceback."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from typing import Any, Callable, TypeVar, cast

import click
import redis
from celery.bin.base import CLIContext
from celery.exceptions import CeleryCommandException
from celery.platforms import EX_FAILURE, EX_UNAVAILABLE

from ..config.settings import AppSettings
from ..config.urls import mask_url
from ..engine.leases import REDIS_ERRORS
from ..errors import RedisLockError
from ..integration.runtime import Runtime, runtime_for

__all__ = [
    "cli_of",
    "echo_listing",
    "redis_errors",
    "redis_failure",
    "redis_failure_text",
    "refused",
    "runtime_of",
]

_F = TypeVar("_F", bound=Callable[..., Any])
_T = TypeVar("_T")


def cli_of(ctx: click.Context) -> CLIContext:
    return cast(CLIContext, ctx.obj)


def runtime_of(ctx: click.Context) -> Runtime:
    try:
        return runtime_for(cli_of(ctx).app)
    except RedisLockError as exc:
        raise CeleryCommandException(f"{exc}", EX_FAILURE) from None
    except ValueError as exc:  # redis-py parsing the URL (a port that is not a number, ...)
        raise CeleryCommandException(f"redislock_url cannot be used: {exc}", EX_FAILURE) from None


def redis_failure_text(settings: AppSettings, exc: Exception, after: str = "") -> tuple[str, bool]:
    """What a Redis failure was, naming the (masked) URL, and whether Redis is unreachable."""
    tls_error = settings.tls_error(exc)
    if tls_error is not None:
        return str(tls_error), False
    url = mask_url(settings.url)
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return f"Redis at {url} is unreachable{after}: {exc}", True
    return f"Redis at {url}{after}: {type(exc).__name__}: {exc}", False


def redis_failure(ctx: click.Context, exc: Exception, after: str = "") -> CeleryCommandException:
    """One ``Error:`` line naming the (masked) URL; unreachable exits like Celery's own commands."""
    text, unreachable = redis_failure_text(runtime_of(ctx).settings, exc, after)
    return CeleryCommandException(text, EX_UNAVAILABLE if unreachable else EX_FAILURE)


def redis_errors(command: _F) -> _F:
    """Turn a Redis failure into one ``Error:`` line and an exit code, never a traceback."""

    @functools.wraps(command)
    def wrapper(ctx: click.Context, *args: Any, **kwargs: Any) -> Any:
        try:
            return command(ctx, *args, **kwargs)
        except REDIS_ERRORS as exc:
            raise redis_failure(ctx, exc) from None

    return cast(_F, wrapper)


def refused(command: _F) -> _F:
    """Bad input (``RedisLockError``: an unknown name, a value out of range) as one ``Error:``
    line naming it, after a bad configuration has said so."""

    @functools.wraps(command)
    def wrapper(ctx: click.Context, *args: Any, **kwargs: Any) -> Any:
        runtime_of(ctx)
        try:
            return command(ctx, *args, **kwargs)
        except RedisLockError as exc:
            raise CeleryCommandException(str(exc), EX_FAILURE) from None

    return cast(_F, wrapper)


def echo_listing(
    cli: CLIContext,
    infos: Sequence[_T],
    as_json: bool,
    as_dict: Callable[[_T], Any],
    lines: Callable[[_T], Iterable[str]],
    none: str,
) -> None:
    """A ``show`` command's output: ``--json`` a list of ``as_dict`` of each, else each one's
    ``lines``, or the sentence ``none`` when there is nothing to show."""
    if as_json:
        cli.echo(json.dumps([as_dict(info) for info in infos], indent=2))
    elif not infos:
        cli.echo(none)
    else:
        cli.echo("\n".join(line for info in infos for line in lines(info)))
