"""``celery redislock hold set|lift|show``: an operator's holds of a task's calls, or of those of
one key value, on every worker (``ops.holds``). Each command says what is in force after it."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import click
from celery.bin.base import CeleryCommand, CeleryOption

from ..gates.hold_watch import REFRESH
from ..gates.task_holds import RECHECK
from .cli_common import cli_of, echo_listing, redis_errors, refused
from .holds import Hold, hold_calls, hold_key, lift_calls, show_holds
from .terminal import printable

__all__ = ["hold"]

_F = TypeVar("_F", bound=Callable[..., Any])

_KEY_HELP = (
    "Only the calls whose argument NAME has VALUE (compared as text; repeat for several, all must "
    "match). Default: every call of TASK."
)


def _what(task: str, key_text: str) -> str:
    return printable(f"{task} {key_text}" if key_text else task)


def _left(hold: Hold) -> str:
    return "until lifted" if hold.left is None else f"for {hold.left:.1f}s more"


def _lines(hold: Hold) -> list[str]:
    return [f"{_what(hold.task, hold.key_text())}  {_left(hold)}"]


def _json(hold: Hold) -> dict[str, Any]:
    return {"task": hold.task, "key": dict(hold.key), "left": hold.left}


def _key_option(group: str) -> Callable[[_F], _F]:
    return click.option(
        "--key",
        "key",
        cls=CeleryOption,
        multiple=True,
        metavar="NAME=VALUE",
        help=_KEY_HELP,
        help_group=group,
    )


@click.group(name="hold")
def hold() -> None:
    """Hold a task's calls, or those of one key value (a tenant, an account),
    on every worker; lift a hold; list the holds in force.

    A held call waits: it is re-queued, never run and never dropped, and runs
    once the hold ends or is lifted.
    """


@hold.command(name="set", cls=CeleryCommand)
@click.argument("task")
@_key_option("Hold Options")
@click.option(
    "--for",
    "seconds",
    cls=CeleryOption,
    type=float,
    default=None,
    metavar="SECONDS",
    help="End the hold by itself after SECONDS. Default: until `hold lift`.",
    help_group="Hold Options",
)
@click.pass_context
@redis_errors
@refused
def set_(ctx: click.Context, task: str, key: tuple[str, ...], seconds: float | None) -> None:
    """Hold the calls of TASK (its registered name) on every worker, for
    SECONDS or until lifted, replacing a hold of the same TASK and keys."""
    replaced = hold_calls(cli_of(ctx).app, task, key, seconds)
    how = "until lifted" if seconds is None else f"for {seconds:g}s"
    said = f"Held {_what(task, _key_text(key))} {how}"
    if replaced is not None:
        said += f" (replacing a hold {_left(replaced)})"
    cli_of(ctx).echo(f"{said}; every worker obeys it within {REFRESH:g}s")


def _key_text(key: tuple[str, ...]) -> str:
    """``--key`` options as a hold shows them (checked already: the command ran)."""
    return " ".join(f"{name}={value}" for name, value in hold_key(key, "--key"))


@hold.command(name="lift", cls=CeleryCommand)
@click.argument("task")
@_key_option("Lift Options")
@click.pass_context
@redis_errors
@refused
def lift(ctx: click.Context, task: str, key: tuple[str, ...]) -> None:
    """Lift the hold of TASK (and keys, as it was set) now: the calls it held
    run as each looks again, at most a re-check later."""
    lifted = lift_calls(cli_of(ctx).app, task, key)
    what = _what(task, _key_text(key))
    if lifted is None:
        cli_of(ctx).echo(f"{what} was not held")
        return
    cli_of(ctx).echo(
        f"Lifted the hold of {what} (it was {_left(lifted)}); the calls it held run as each looks "
        f"again, within {RECHECK:g}s"
    )


@hold.command(name="show", cls=CeleryCommand)
@click.option(
    "--json", "as_json", cls=CeleryOption, is_flag=True, help="Print a JSON array.", help_group="Show Options"
)
@click.pass_context
@redis_errors
@refused
def show(ctx: click.Context, as_json: bool) -> None:
    """List the holds in force: task, key values, and time left (or until lifted)."""
    echo_listing(cli_of(ctx), show_holds(cli_of(ctx).app), as_json, _json, _lines, "No holds in force")
