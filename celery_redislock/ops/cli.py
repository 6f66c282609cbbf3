"""The ``celery redislock list|release|purge`` commands (click, via the celery.commands entry point)."""

from __future__ import annotations

import json
import json.encoder
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import click
from celery.bin.base import CeleryCommand, CeleryOption, CLIContext, handle_preload_options
from celery.exceptions import CeleryCommandException
from celery.platforms import EX_FAILURE

from ..engine.keys import parse_key
from ..engine.leases import REDIS_ERRORS
from ..integration.runtime import Runtime
from .cli_common import cli_of, redis_errors, redis_failure, runtime_of
from .explain import explain as explain_call
from .fair_cli import fair
from .hold_cli import hold
from .inventory import mode_keys
from .limit_cli import limit
from .listing import Lock, held_locks, lock_pattern, purge_locks, release_held, scan_locks
from .terminal import printable
from .web_cli import web

__all__ = ["redislock"]

#: Lines printed per write: a million rows print in a second, not a minute.
LINES_PER_WRITE = 1000

#: A release or purge that was not confirmed (stdin not a terminal, no --yes): click's
#: usage-error code.
EXIT_NOT_CONFIRMED = 2

_quote = json.encoder.encode_basestring_ascii
_F = TypeVar("_F", bound=Callable[..., Any])


def _interactive() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def _refuse_unconfirmed(yes: bool, action: str) -> None:
    """A command that deletes asks on a terminal; elsewhere (a script, cron, CI) it deletes only
    when told to with --yes, so that a script never deletes without having said so."""
    if not yes and not _interactive():
        raise CeleryCommandException(
            f"refusing to {action} without confirmation: stdin is not a terminal; pass --yes",
            EXIT_NOT_CONFIRMED,
        )


def _check_task_name(name: str | None) -> None:
    if name is not None and (not name or ":" in name):
        # KeyBuilder refuses such names, so no lock can exist under them.
        raise click.BadParameter(f"{name!r} is not a task name (task names are non-empty, without ':')")


# -- output ---------------------------------------------------------------------------------


def _by_key(lock: Lock) -> str:
    return lock.key


def _ttl_text(lock: Lock) -> str:
    ttl = lock.ttl
    return "none" if ttl is None else f"{ttl:.1f}"


def _table(locks: list[Lock]) -> Iterator[str]:
    header = Lock("KEY", "TASK", "HOLDER", 0)
    locks = [
        Lock(printable(lock.key), printable(lock.task), printable(lock.holder), lock.ttl_ms) for lock in locks
    ]
    ttl_texts = ["TTL", *map(_ttl_text, locks)]
    key_width = max(len(lock.key) for lock in [header, *locks])
    task_width = max(len(lock.task) for lock in [header, *locks])
    holder_width = max(len(lock.holder) for lock in [header, *locks])
    ttl_width = max(map(len, ttl_texts))
    for lock, ttl in zip([header, *locks], ttl_texts):
        yield (
            f"{lock.key:<{key_width}}  {lock.task:<{task_width}}  "
            f"{lock.holder:<{holder_width}}  {ttl:>{ttl_width}}"
        )


def _json_object(lock: Lock) -> str:
    # Written by hand with json's C string escaper: json.dumps per row costs seconds per million.
    ttl = lock.ttl
    return (
        f'{{"key": {_quote(lock.key)}, "task": {_quote(lock.task)}, "holder": {_quote(lock.holder)}, '
        f'"ttl": {"null" if ttl is None else float.__repr__(ttl)}}}'
    )


def _json_lines(locks: list[Lock]) -> Iterator[str]:
    if not locks:
        yield "[]"
        return
    last = len(locks) - 1
    yield "["
    for index, lock in enumerate(locks):
        yield "  " + _json_object(lock) + ("," if index < last else "")
    yield "]"


def _echo_lines(cli: CLIContext, lines: Iterable[str]) -> None:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= LINES_PER_WRITE:
            cli.echo("\n".join(chunk))
            chunk = []
    if chunk:
        cli.echo("\n".join(chunk))


def _plural(count: int) -> str:
    return f"{count} lock(s)"


# -- commands -------------------------------------------------------------------------------


def _task_option(group: str) -> Callable[[_F], _F]:
    return click.option(
        "--task",
        cls=CeleryOption,
        metavar="NAME",
        help="Only the locks of this task (its registered name).",
        help_group=group,
    )


def _flag(*decls: str, text: str, group: str) -> Callable[[_F], _F]:
    return click.option(*decls, cls=CeleryOption, is_flag=True, help=text, help_group=group)


def _yes_flag(group: str) -> Callable[[_F], _F]:
    return _flag(
        "-y",
        "--yes",
        text="Do not ask for confirmation; required when stdin is not a terminal.",
        group=group,
    )


@click.group(name="redislock")
@click.pass_context
@handle_preload_options
def redislock(ctx: click.Context, **kwargs: Any) -> None:
    """List, release and purge celery_redislock locks; hold calls; serve a page of them.

    A lock removed here while its task still runs is taken back by that
    task's next renewal; these commands are for locks left behind.
    """


@redislock.command(name="list", cls=CeleryCommand)
@_task_option("List Options")
@_flag(
    "--json",
    "as_json",
    text='Print a JSON array of {"key", "task", "holder", "ttl"} (ttl in seconds, null: none).',
    group="List Options",
)
@click.pass_context
@redis_errors
def list_(ctx: click.Context, task: str | None, as_json: bool) -> None:
    """Show the held locks: key, task, holder id and TTL left in seconds; then what the dedup
    modes keep (keep_latest's and debounce's latest call, a debounced burst's start) and each
    rate-limited partition (starts in the current window, reserved slots, next free slot)."""
    _check_task_name(task)
    runtime = runtime_of(ctx)
    locks = sorted(held_locks(runtime, task), key=_by_key)
    pattern = lock_pattern(runtime.settings.key_prefix, task)
    modes = sorted((Lock(*row) for row in mode_keys(runtime, pattern, task)), key=_by_key)
    cli = cli_of(ctx)
    if as_json:
        _echo_lines(cli, _json_lines(locks + modes))
        return
    if locks or modes:
        _echo_lines(cli, _table(locks + modes))
    cli.echo(f"{_plural(len(locks))} held" + (f", {len(modes)} mode key(s)" if modes else ""))


@redislock.command(cls=CeleryCommand)
@click.argument("key")
@_yes_flag("Release Options")
@click.pass_context
@redis_errors
def release(ctx: click.Context, key: str, yes: bool) -> None:
    """Free the lock KEY if its holder is unchanged.

    Reads who holds KEY, then deletes it only if that holder still holds it
    (compare-and-delete: a lock taken since is left alone), and wakes the
    tasks waiting for it. For a max_concurrency key, gives back the slots of
    the holders it read. Asks for confirmation when stdin is a terminal,
    unless --yes. When stdin is not a terminal it refuses (exit code 2)
    unless --yes is given.
    """
    runtime = runtime_of(ctx)
    prefix = runtime.settings.key_prefix
    try:
        key_prefix, _, _ = parse_key(key)
    except ValueError:
        key_prefix = None
    if key_prefix != prefix:
        raise CeleryCommandException(
            f"{key!r} is not a lock key under prefix {prefix!r} (keys look like {prefix}:<task>:<digest>)",
            EX_FAILURE,
        )
    _refuse_unconfirmed(yes, f"release {key}")
    if _release_slots(ctx, runtime, key, yes):
        return
    engine = runtime.engine
    holder = engine.holder_of(key)
    if holder is None:
        raise CeleryCommandException(f"No lock {key}", EX_FAILURE)
    if not yes and _interactive():
        click.confirm(f"Release {printable(key)} (held by {printable(holder)})?", abort=True)
    # Compare-and-delete: a lock that changed hands since it was shown is left alone.
    if not release_held(runtime, key, [holder]):
        now = engine.holder_of(key)
        state = "has expired" if now is None else f"is now held by {printable(now)}"
        raise CeleryCommandException(f"Lock {printable(key)} was not released: it {state}", EX_FAILURE)
    cli_of(ctx).echo(f"Released {printable(key)} (held by {printable(holder)})")


def _release_slots(ctx: click.Context, runtime: Runtime, key: str, yes: bool) -> bool:
    """``release`` of a semaphore's key (max_concurrency > 1): give back the slots of the
    holders it shows (compare-and-remove: a holder that came since stays). False: not one."""
    state = runtime.semaphores.state(key)
    if state is None or not state.holders:
        return False
    holders = [holder for holder, _ in state.holders]
    shown = ", ".join(map(printable, holders))
    if not yes and _interactive():
        click.confirm(f"Release {printable(key)} (held by {shown})?", abort=True)
    released = release_held(runtime, key, holders)
    cli_of(ctx).echo(f"Released {released} of {len(holders)} holder(s) of {printable(key)} ({shown})")
    return True


@redislock.command(cls=CeleryCommand)
@_task_option("Purge Options")
@_yes_flag("Purge Options")
@_flag("-v", "--verbose", text="Print each removed key.", group="Purge Options")
@click.pass_context
@redis_errors
def purge(ctx: click.Context, task: str | None, yes: bool, verbose: bool) -> None:
    """Delete every lock of the app (or of one task).

    Asks "Remove N lock(s)?" when stdin is a terminal, unless --yes. When
    stdin is not a terminal it refuses (exit code 2) unless --yes is given.
    The modes' keys (those `list` shows after the locks) are left: each
    ends with the calls or the window it records.
    """
    _check_task_name(task)
    _refuse_unconfirmed(yes, "purge locks")
    runtime = runtime_of(ctx)
    cli = cli_of(ctx)
    if not yes:
        found = sum(len(batch) for batch in scan_locks(runtime, task))
        if not found:
            cli.echo(f"Purged {_plural(0)}")
            _say_left(cli, runtime, task)
            return
        click.confirm(f"Remove {_plural(found)}?", abort=True)
    count = 0

    def removed(key: str) -> None:
        nonlocal count
        count += 1
        if verbose:
            cli.echo(printable(key))

    try:
        purge_locks(runtime, task, removed)
    except REDIS_ERRORS as exc:
        raise redis_failure(
            ctx, exc, f" ({_plural(count)} purged before the error)" if count else ""
        ) from None
    cli.echo(f"Purged {_plural(count)}")
    _say_left(cli, runtime, task)


def _say_left(cli: CLIContext, runtime: Runtime, task: str | None) -> None:
    """Name what ``purge`` leaves: the modes' keys, which end with what they record. Deleting
    them would run what they hold back (a superseded call, a call over the rate)."""
    left = sum(1 for _ in mode_keys(runtime, lock_pattern(runtime.settings.key_prefix, task), task))
    if left:
        cli.echo(
            f"Left {left} mode key(s): each records calls still queued or a window not over, and "
            "ends with them; deleting one would run calls its mode holds back ('list' shows them)"
        )


@redislock.command(cls=CeleryCommand)
@click.argument("task_id")
@_flag("--json", "as_json", text="Print the explanation as one JSON object.", group="Explain Options")
@click.pass_context
@redis_errors
def explain(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """Say what the package decided each time it saw the call TASK_ID, newest first, with the
    lock Redis's time: took its lock (still held?), skipped it as a duplicate (of whom, and that
    call's state now), re-queued it to retry, postponed it to a slot of a limit, held it by a
    pause, put it in a fair-share lane, debounced it, dropped a copy. For a call it never saw:
    what the result backend and the broker can tell."""
    explanation = explain_call(runtime_of(ctx).app, task_id)
    cli = cli_of(ctx)
    if as_json:
        cli.echo(json.dumps(explanation.as_dict(), indent=2))
        return
    _echo_lines(cli, explanation.lines())


redislock.add_command(limit)
redislock.add_command(fair)
redislock.add_command(hold)
redislock.add_command(web)
