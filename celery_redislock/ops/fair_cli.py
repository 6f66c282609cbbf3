"""``celery redislock fair show``: each fair queue's tenants with a backlog, their lanes, share
and running calls (``ops.fair``)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import click
from celery.bin.base import CeleryCommand, CeleryOption

from .cli_common import cli_of, echo_listing, redis_errors, runtime_of
from .fair import QueueInfo, reset_fair, show_fair
from .terminal import printable

__all__ = ["fair"]


def _lanes(lanes: dict[int, int]) -> str:
    return ", ".join(f"{lane}:{count}" for lane, count in lanes.items()) or "-"


def _lines(info: QueueInfo) -> list[str]:
    busy = sum(1 for load in info.load.values() if load)
    lines = [
        f"{printable(info.queue)}  {info.queued} queued in {busy} of {info.lanes} lanes  [lane:calls {_lanes(info.load)}]"
    ]
    for tenant in info.tenants:
        running = "" if tenant.running is None else f", {tenant.running} running"
        lines.append(
            f"  {printable(tenant.tenant)}: {tenant.backlog} queued in lane(s) {_lanes(tenant.lanes)}, "
            f"share {tenant.share:.0%}{running}"
        )
    return lines


def _json(info: QueueInfo) -> dict[str, Any]:
    shown = asdict(info)
    shown["tenants"] = [asdict(tenant) for tenant in info.tenants]
    return shown


@click.group(name="fair")
def fair() -> None:
    """Show fair share's tenants (fair_key): backlog, lanes, share; reset
    the counts a purged queue left behind."""


@fair.command(name="show", cls=CeleryCommand)
@click.option(
    "--queue",
    "queues",
    cls=CeleryOption,
    multiple=True,
    metavar="QUEUE",
    help="Only this queue (repeatable); default: every queue the app declares or configures.",
    help_group="Show Options",
)
@click.option(
    "--json", "as_json", cls=CeleryOption, is_flag=True, help="Print a JSON array.", help_group="Show Options"
)
@click.pass_context
@redis_errors
def show(ctx: click.Context, queues: tuple[str, ...], as_json: bool) -> None:
    """List each fair queue's tenants with a backlog, largest first: calls
    queued by lane, the part of the starts each gets while the backlogs last,
    and (where a fair_cap counts them) its calls running now."""
    runtime_of(ctx)  # a bad configuration says so first
    infos = show_fair(cli_of(ctx).app, queues)
    none = "No fair queues (no SingletonTask has fair_key for the queues asked)"
    echo_listing(cli_of(ctx), infos, as_json, _json, _lines, none)


@fair.command(name="reset", cls=CeleryCommand)
@click.argument("queue")
@click.pass_context
@redis_errors
def reset(ctx: click.Context, queue: str) -> None:
    """Forget QUEUE's backlog counts, left behind when its messages were
    removed without running (celery purge). Queued calls still run; lanes are
    assigned from counts made afresh."""
    runtime_of(ctx)
    had = reset_fair(cli_of(ctx).app, queue)
    shown = printable(queue)
    cli_of(ctx).echo(f"Reset the backlog counts of {shown}" if had else f"{shown} had no backlog counts")
