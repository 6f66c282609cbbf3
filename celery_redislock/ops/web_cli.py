"""``celery redislock web``: serve the page of the app's locks (``ops.web``) with waitress; Flask
and waitress (the ``web`` extra) are imported only when the command runs."""

from __future__ import annotations

import ipaddress

import click
from celery.bin.base import CeleryCommand, CeleryOption
from celery.exceptions import CeleryCommandException
from celery.platforms import EX_FAILURE

from ..errors import ConfigurationError
from .cli_common import cli_of, runtime_of

__all__ = ["web"]

#: What ``pip install`` needs for the page.
EXTRA_HINT = "pip install 'celery-redislock[web]'"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command(cls=CeleryCommand)
@click.option(
    "--host",
    cls=CeleryOption,
    default="127.0.0.1",
    show_default=True,
    help_group="Web Options",
    help="Address to listen on; anything but loopback serves the page to the network.",
)
@click.option(
    "--port",
    cls=CeleryOption,
    type=click.IntRange(0, 65535),
    default=8000,
    show_default=True,
    help_group="Web Options",
    help="Port to listen on.",
)
@click.option(
    "--auth",
    cls=CeleryOption,
    envvar="REDISLOCK_WEB_AUTH",
    metavar="USER:PASSWORD|TOKEN",
    help_group="Web Options",
    help="Ask for HTTP Basic credentials USER:PASSWORD, or a TOKEN (Bearer, or the password "
    "of Basic with any user). Also read from REDISLOCK_WEB_AUTH (kept out of `ps`).",
)
@click.option(
    "--allow-release",
    cls=CeleryOption,
    is_flag=True,
    help_group="Web Options",
    help="Let the page release locks (a confirmed POST with a CSRF token); read-only without. "
    "Off loopback it needs --auth.",
)
@click.option(
    "--allow-holds",
    cls=CeleryOption,
    is_flag=True,
    help_group="Web Options",
    help="Let the page hold calls and lift holds (a POST with a CSRF token); read-only without. "
    "Off loopback it needs --auth.",
)
@click.option(
    "--poll-interval",
    cls=CeleryOption,
    type=click.FloatRange(min=0.5),
    default=5.0,
    show_default=True,
    help_group="Web Options",
    help="Seconds between two reads of the workers' counters (inspect redislock_stats).",
)
@click.option(
    "--refresh",
    cls=CeleryOption,
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help_group="Web Options",
    help="Seconds between the browser's reloads of the page (0: none).",
)
@click.pass_context
def web(
    ctx: click.Context,
    host: str,
    port: int,
    auth: str | None,
    allow_release: bool,
    allow_holds: bool,
    poll_interval: float,
    refresh: int,
) -> None:
    """Serve a page of the held locks, the rate limits and the workers'
    counters over time, on http://HOST:PORT/ (127.0.0.1:8000 by default).

    Read-only unless --allow-release or --allow-holds (each needs --auth on
    any address but loopback). Every value read from Redis is shown as text. The page is a
    WSGI app: to mount it in a Django, Flask or FastAPI app, see
    celery_redislock.ops.web.create_app.
    """
    try:
        import waitress

        from .web import create_app, parse_auth
    except ImportError as exc:
        raise CeleryCommandException(
            f"celery redislock web needs the web extra ({exc.name} is missing): {EXTRA_HINT}", EX_FAILURE
        ) from None
    runtime_of(ctx)  # a bad configuration says so before the page is served
    try:
        credentials = parse_auth(auth)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="--auth") from None
    cli = cli_of(ctx)
    if not _loopback(host) and credentials is None:
        for flag, allowed, what in (
            ("--allow-release", allow_release, "release locks"),
            ("--allow-holds", allow_holds, "hold calls"),
        ):
            if allowed:
                # Anyone who reaches the page could read its CSRF token and post it.
                raise click.UsageError(
                    f"{flag} on --host {host} needs --auth: without it anyone who reaches "
                    f"the page could {what} (give --auth USER:PASSWORD or a TOKEN, or serve on "
                    "127.0.0.1)"
                )
        cli.error(
            f"Warning: serving on {host} without --auth: anyone who reaches it sees the locks, "
            "their keys and holders (read-only)"
        )
    # On loopback the page answers to loopback names only (``create_app``'s hosts say why).
    hosts = [host, "localhost", "127.0.0.1", "::1"] if _loopback(host) else None
    page = create_app(
        cli.app,
        allow_release=allow_release,
        allow_holds=allow_holds,
        auth=credentials,
        poll_interval=poll_interval,
        refresh=refresh,
        hosts=hosts,
    )
    kinds = [what for what, on in (("releases", allow_release), ("holds", allow_holds)) if on]
    mode = " and ".join(kinds) + " allowed" if kinds else "read-only"
    cli.echo(f"celery_redislock web: http://{host}:{port}/ ({mode})")
    try:
        waitress.serve(page, host=host, port=port, threads=4, ident="celery_redislock")
    finally:
        page.extensions["redislock"].stop()
