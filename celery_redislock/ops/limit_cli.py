"""``celery redislock limit show|set|reset|pause|resume``: the named rate limits of the app,
changed at run time for every worker (``ops.limits``). Each change says what is in force after it."""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar, cast

import click
from celery.bin.base import CeleryCommand, CeleryOption
from celery.exceptions import CeleryCommandException
from celery.platforms import EX_FAILURE

from ..engine.adaptive_in_flight import FlightState
from ..engine.rate_decisions import RateState
from ..errors import RedisLockError
from ..gates.rate_inventory import state_text
from .cli_common import cli_of, echo_listing, redis_errors, runtime_of
from .limits import LimitInfo, PartitionInfo, change_pause, reset_limit, set_limit, show_limits
from .terminal import printable

__all__ = ["limit"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _refused(command: _F) -> _F:
    """A name not declared, a rate not read: one ``Error:`` line naming it."""

    @functools.wraps(command)
    def wrapper(ctx: click.Context, *args: Any, **kwargs: Any) -> Any:
        runtime_of(ctx)  # a bad configuration says so first
        try:
            return command(ctx, *args, **kwargs)
        except RedisLockError as exc:
            raise CeleryCommandException(str(exc), EX_FAILURE) from None

    return cast(_F, wrapper)


def _rates(rates: Any) -> str:
    return ", ".join(map(str, rates))


def _bounds(info: LimitInfo) -> str:
    spec = info.adaptive
    assert spec is not None
    text = f"adaptive {spec.floor:g}/s to {spec.ceiling:g}/s, start {spec.start:g}/s"
    flight = spec.in_flight
    if flight is not None:
        text += f"; in flight {flight.floor} to {flight.ceiling} at once, start {flight.start}"
    return text


def _learnt(partition: PartitionInfo) -> str:
    """An adaptive partition's rate now and its last change, or that it is at its start."""
    state = partition.adaptive
    if state is None:
        return "at its start (no call has reported yet)"
    return f"rate {state.rate:.3f}/s ({state.changes} change(s), the last: {printable(state.reason)}); {_flying(partition)}"


def _flying(partition: PartitionInfo) -> str:
    """An in-flight partition's calls at once now and its last change ("" for none reported)."""
    flight = partition.flight
    if flight is None:
        return ""
    return (
        f"in flight {flight.limit} at once, {flight.running} running ({flight.changes} change(s), "
        f"the last: {printable(flight.reason)}); "
    )


def _lines(info: LimitInfo) -> list[str]:
    source = (
        f"runtime override (declared {_rates(info.declared)} in {info.source})"
        if info.overridden
        else info.source
    )
    shown = _bounds(info) if info.adaptive is not None else _rates(info.rates)
    lines = [f"{printable(info.name)}  {shown}  [{source}]"]
    for partition in info.partitions:
        if info.adaptive is not None:
            lines.append(f"  {printable(partition.key)}: {_learnt(partition)}{state_text(partition.state)}")
            continue
        if len(partition.states) == 1:
            lines.append(f"  {printable(partition.key)}: {state_text(partition.state)}")
            continue
        lines.append(f"  {printable(partition.key)}:")  # a line by each rate, in the limit's order
        lines.extend(f"    {rate}: {state_text(state)}" for rate, state in zip(info.rates, partition.states))
    return lines


def _info(ctx: click.Context, name: str) -> LimitInfo:
    return next(info for info in show_limits(cli_of(ctx).app) if info.name == name)


def _still_paused(info: LimitInfo) -> str:
    """What a change of rates leaves of a pause, or ""."""
    left = max((partition.states[0].paused for partition in info.partitions), default=0.0)
    if not left:
        return ""
    return f"; it stays paused for {left:.3f}s (`limit resume {info.name}` lifts the pause)"


def _adaptive_json(info: LimitInfo) -> dict[str, Any]:
    spec = info.adaptive
    if spec is None:
        return {}
    return {
        "adaptive": {
            "floor": spec.floor,
            "ceiling": spec.ceiling,
            "start": spec.start,
            "burst": spec.burst,
            "overload": list(spec.overload),
            "latency_target": spec.latency_target,
            "in_flight": None
            if spec.in_flight is None
            else {
                "floor": spec.in_flight.floor,
                "ceiling": spec.in_flight.ceiling,
                "start": spec.in_flight.start,
            },
        }
    }


def _learnt_json(partition: PartitionInfo) -> dict[str, Any]:
    state = partition.adaptive
    if state is None:
        return {}
    return {
        "adaptive": {
            "rate": state.rate,
            "reason": state.reason,
            "changed_at": state.changed_at,
            "changes": state.changes,
            "in_flight": None if partition.flight is None else _flight_json(partition.flight),
        }
    }


def _flight_json(flight: FlightState) -> dict[str, Any]:
    return {
        "limit": flight.limit,
        "running": flight.running,
        "floor": flight.floor,
        "ceiling": flight.ceiling,
        "reason": flight.reason,
        "changed_at": flight.changed_at,
        "changes": flight.changes,
    }


def _json(info: LimitInfo) -> dict[str, Any]:
    return {
        **_adaptive_json(info),
        "name": info.name,
        "rates": [str(rate) for rate in info.rates],
        "declared": [str(rate) for rate in info.declared],
        "source": info.source,
        "overridden": info.overridden,
        "partitions": [
            {
                "key": partition.key,
                **_state_json(partition.state),
                **_learnt_json(partition),
                "rates": [
                    {"rate": str(rate), **_state_json(state)}
                    for rate, state in zip(info.rates, partition.states)
                ],
            }
            for partition in info.partitions
        ],
    }


def _state_json(state: RateState) -> dict[str, Any]:
    """A partition's state by one rate (the partition's own fields are its first rate's)."""
    shown: dict[str, Any] = {"kind": "window" if state.burst is None else "bucket"}
    if state.burst is None:
        shown["started"] = state.started
    else:
        shown.update(burst=state.burst, tokens=state.tokens, full_in=state.full_in)
    shown.update(reserved=state.reserved, next_free=state.next_free, paused=state.paused)
    return shown


@click.group(name="limit")
def limit() -> None:
    """Show and change the named rate limits (redislock_limits, declare_limit).

    A change is obeyed by every worker at its next decision, without a restart,
    and lasts until `limit reset`.
    """


@limit.command(name="show", cls=CeleryCommand)
@click.option(
    "--json", "as_json", cls=CeleryOption, is_flag=True, help="Print a JSON array.", help_group="Show Options"
)
@click.pass_context
@redis_errors
@_refused
def show(ctx: click.Context, as_json: bool) -> None:
    """List the named limits: the rates in force and where they come from (the
    setting, the code, or a runtime override), and each partition's state."""
    infos = show_limits(cli_of(ctx).app)
    none = "No named limits (declare them in redislock_limits or with declare_limit)"
    echo_listing(cli_of(ctx), infos, as_json, _json, _lines, none)


@limit.command(name="set", cls=CeleryCommand)
@click.argument("name")
@click.argument("rate", nargs=-1, required=True)
@click.pass_context
@redis_errors
@_refused
def set_(ctx: click.Context, name: str, rate: tuple[str, ...]) -> None:
    """Set the limit NAME to RATE ('20/m', '10/s burst 50', '5/s, 20/m')
    for every worker, from its next decision until `limit reset NAME`."""
    rates = set_limit(cli_of(ctx).app, name, " ".join(rate))
    info = _info(ctx, name)
    said = f"Limit {name} is {_rates(rates)} (runtime override) until reset{_still_paused(info)}"
    most = min(each.capacity for each in rates)
    if most < min(each.capacity for each in info.declared):
        said += (
            f"\nA call costing more than {most} unit(s) of {name} waits, and is not failed, "
            "until the limit admits it (`limit reset`, or a higher rate)"
        )
    cli_of(ctx).echo(said)


@limit.command(name="reset", cls=CeleryCommand)
@click.argument("name")
@click.pass_context
@redis_errors
@_refused
def reset(ctx: click.Context, name: str) -> None:
    """Give the limit NAME its declared rates back (a pause stays: `limit resume`);
    an adaptive limit starts again from its start rate."""
    had = reset_limit(cli_of(ctx).app, name)
    info = _info(ctx, name)
    if info.adaptive is not None:
        learnt = "forgot what it had learnt" if had else "had learnt nothing yet"
        cli_of(ctx).echo(f"Adaptive limit {name} {learnt}: it starts again from {info.adaptive.start:g}/s")
        return
    said = (
        f"Limit {name} is back to its declared rates ({_rates(info.rates)})"
        if had
        else f"Limit {name} had no runtime override ({_rates(info.rates)})"
    )
    cli_of(ctx).echo(said + _still_paused(info))


#: ``--partition KEY`` of the commands that pause or resume one partition of a limit.
_partition_option = click.option(
    "--partition",
    cls=CeleryOption,
    default="",
    metavar="KEY",
    help="Only this partition (a key `show` lists).",
)


@limit.command(name="pause", cls=CeleryCommand)
@click.argument("name")
@click.argument("seconds", type=float)
@_partition_option
@click.pass_context
@redis_errors
@_refused
def pause(ctx: click.Context, name: str, seconds: float, partition: str) -> None:
    """Admit no call under the limit NAME for SECONDS from now, on every worker
    (calls asking are re-queued for after the pause; nothing is dropped). It
    replaces a pause in force, a longer one too."""
    change = change_pause(cli_of(ctx).app, name, seconds, partition)
    replaced = f" (replacing a pause with {change.was_paused:.3f}s left)" if change.was_paused else ""
    cli_of(ctx).echo(f"Paused limit {name} for {seconds:g}s{replaced}")


@limit.command(name="resume", cls=CeleryCommand)
@click.argument("name")
@_partition_option
@click.pass_context
@redis_errors
@_refused
def resume(ctx: click.Context, name: str, partition: str) -> None:
    """Lift the pause of the limit NAME now, on every worker (calls waiting for
    it are decided again when they come back)."""
    change = change_pause(cli_of(ctx).app, name, None, partition)
    cli_of(ctx).echo(
        f"Limit {name} is no longer paused (it had {change.was_paused:.3f}s left)"
        if change.was_paused
        else f"Limit {name} was not paused"
    )
