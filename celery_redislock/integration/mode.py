"""The protocol a mode speaks to the Celery glue (how its calls are sent, ask for their key, end
when refused, release it), the protocol of a gate (a check that composes with any mode, asked
before it), the plan that carries a task's mode and gates, and the registry both register into.
``plain.py`` is the default mode; ``celery_redislock.modes`` registers the others.

The glue asks only ``plan.mode`` and ``plan.gates``, resolved once per plan: it names no mode
and tests no mode's option. Registering a mode or a gate adds its options to the schema
(``config.schema``), its combination rules to the options' validation (``config.mode_rules``),
so registration-time errors name both options, its counters to those a worker keeps
(``engine.counting``) and its Celery signals to the package's (``registered_signals``;
``celery_redislock.signals`` is their public path). That a plan has one mode is the
registry's own rule (``one_mode``): no mode names the others it excludes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, NoReturn, Protocol

from celery.utils.dispatch import Signal

from ..config.arguments import KeyBuilder
from ..config.lock_only import add_lock_only
from ..config.mode_rules import Clash, add_rule
from ..config.options import LockOptions
from ..config.schema import OptionSpec, add_options
from ..engine.counting import TaskTallies, add_counters

__all__ = [
    "Gate",
    "Mode",
    "Plan",
    "Publish",
    "Send",
    "gates_for",
    "mode_for",
    "one_mode",
    "register",
    "register_gate",
    "registered",
    "registered_gates",
    "registered_signals",
]

#: ``Task.apply_async`` of the task's Celery base: what finally publishes.
Publish = Callable[..., Any]


class Mode(Protocol):
    """One mode's hooks, called by the glue in this order for an execution: ``before_acquire``,
    ``acquire``, then ``on_refused`` (a duplicate) or, when the run ends, ``on_release``; and
    ``send`` for a call made with ``apply_async``. Types the glue owns (its execution, holding
    and runtime) are ``Any`` here: this module sits below them."""

    #: The mode's name, as its option is named (``"plain"`` for the default).
    name: ClassVar[str]
    #: The option whose value selects the mode (``selected_by``); None for the default.
    option: ClassVar[str | None]
    #: The options the mode owns (``config.schema``): registering the mode registers them.
    options: ClassVar[tuple[OptionSpec, ...]]
    #: A retried run takes over this mode's lock (``release_on_retry=False`` whatever it says):
    #: a throttle's window must outlive its run's retry.
    retry_keeps_lock: ClassVar[bool]
    #: What the mode keeps beside its lock key (``keys.slot_key`` suffix -> how ``celery
    #: redislock list`` describes the key's value, ``{}`` taking the value).
    key_suffixes: ClassVar[Mapping[str, str]]
    #: The counters the mode counts beside the core's (name -> what it counts), registered with
    #: the mode (``engine.counting``; ``inspect redislock_stats`` reports them).
    counters: ClassVar[Mapping[str, str]]
    #: The Celery signals the mode sends (public name -> signal), registered with the mode.
    signals: ClassVar[Mapping[str, Signal]]

    def selected_by(self, value: Any) -> bool:
        """Whether ``option`` set to ``value`` (in a task, a layer, or merged) selects the mode."""

    def selects(self, options: LockOptions) -> bool:
        """Whether a plan with ``options`` is this mode's (at most one mode selects any)."""

    def describe_key(
        self, runtime: Any, key: str, task_name: str, suffix: str, value: str | None
    ) -> str | None:
        """How ``celery redislock list`` describes ``key``, kept beside a lock key of
        ``task_name`` under one of ``key_suffixes`` (``value``: its string value, None when it
        holds none), or None to leave it out."""

    def sends_through(self, task: Any) -> bool:
        """Whether a call of ``task`` may need this mode's ``send``, decided without resolving
        the plan (the task's own option, else any app or queue layer's)."""

    def clash(self, options: Mapping[str, Any], limit: int, *, merged: bool) -> Clash | None:
        """``(option, problem, other option)`` when ``options`` combine this mode with an
        option it cannot go with (``config.mode_rules``), else None."""

    def send(self, call: Send) -> Any:
        """``apply_async`` of one call of a task planned with this mode."""

    def before_acquire(self, task: Any, execution: Any) -> None:
        """Before the key is asked for: raise to end the call here."""

    def acquire(self, task: Any, execution: Any) -> Any:
        """Ask for the key: a ``Holding``, a ``Refused``, or None (the body runs unlocked).
        Raises ``redis.RedisError`` when Redis is unreachable."""

    def on_refused(self, task: Any, options: LockOptions, key: str, holder: str) -> NoReturn:
        """Another call holds ``key``: how this call ends (never by running)."""

    def on_refused_at_send(self, task: Any, options: LockOptions, key: str, holder: str) -> None:
        """A new call was refused at send (its key held): before the caller is answered."""

    def on_release(self, held: Any) -> bool:
        """The run ended: True when the mode has released the key its own way."""


class Gate(Protocol):
    """A check that composes with whatever mode a plan has (a rate limit): ``admit`` is asked
    in the worker before the mode's ``before_acquire``.

    Two hooks a gate may have (looked up, so a gate without them is one): ``check_plan(runtime,
    task, options)``, asked as a plan is made (at worker start), raises ``OptionError`` for what
    the options cannot be checked for alone (a name the app must declare); ``on_paused(task,
    runtime, options, paused, elapsed)``, asked when the body raised ``RateLimitPaused`` (``elapsed``
    seconds after it started), ends the call (re-queued) or returns to let it fail;
    ``on_outcome(task, runtime, options, error, elapsed)``, told how any other run of the body
    ended (``error``: what it raised, None: it returned), must not raise; ``other_keys(runtime, task)``, the ``(key, task
    column, suffix)`` of keys it keeps apart from any lock key (of ``task`` if given), which
    ``celery redislock list`` describes by ``describe_key`` as the others; ``sends_through(task)``,
    whether a call of ``task`` may pass through it, so its send must be planned, and then
    ``on_send(call)``, the ``Send`` to hand the mode instead (one that publishes elsewhere);
    ``consumes(task, options, queue)``, the names of queues a worker consuming ``queue`` must
    consume too, for ``task``'s calls (``bootstep.GateQueues`` adds them); ``held_slots(runtime,
    task, options, context)``, the ``(key, name)`` of each semaphore slot a running call (its
    request's ``context``) took by its execution's holder id, which the worker's parent gives back
    with its lock when its process died (``parent_release``)."""

    name: ClassVar[str]
    #: The options the gate owns (``config.schema``): registering the gate registers them.
    options: ClassVar[tuple[OptionSpec, ...]]
    #: As ``Mode.counters``.
    counters: ClassVar[Mapping[str, str]]
    #: As ``Mode.signals``.
    signals: ClassVar[Mapping[str, Signal]]
    #: As ``Mode.key_suffixes``.
    key_suffixes: ClassVar[Mapping[str, str]]

    def describe_key(
        self, runtime: Any, key: str, task_name: str, suffix: str, value: str | None
    ) -> str | None:
        """As ``Mode.describe_key``."""

    def selects(self, options: LockOptions) -> bool:
        """Whether a plan with ``options`` passes through this gate."""

    def clash(self, options: Mapping[str, Any], limit: int, *, merged: bool) -> Clash | None:
        """As ``Mode.clash``."""

    def admit(self, task: Any, execution: Any) -> None:
        """Let the call go on, or end it here by raising (e.g. re-published for later)."""


@dataclass(frozen=True)
class Plan:
    """What a task needs to lock one execution: its resolved options, its key builder, its mode
    and the gates it passes through first; ``tallies``, the task's counts of every locked run,
    bound once (None: an execution binds its own); ``locked``, False for ``lock=False`` (the
    gates only: no key, no lock); ``told``, the gates told how a run of the body ended
    (``on_outcome``, ``on_paused``): with none, the body runs untimed (a gate that only admits,
    an operator's holds, costs a call its ``admit`` alone)."""

    options: LockOptions
    keys: KeyBuilder
    mode: Mode
    gates: tuple[Gate, ...] = ()
    tallies: TaskTallies | None = None
    locked: bool = True
    told: tuple[Gate, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        told = tuple(gate for gate in self.gates if hasattr(gate, "on_outcome") or hasattr(gate, "on_paused"))
        object.__setattr__(self, "told", told)

    def key(self, task: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        return self.keys.key(args, kwargs, task)


@dataclass(frozen=True)
class Send:
    """One ``apply_async`` of a task whose plan was resolved to send it (``runtime``: its app's
    runtime; ``publish``: the Celery base's ``apply_async``; ``options``: the send's own, which
    a mode may take headers or a countdown out of; ``queue``: the queue Celery routes it to,
    when ``send_plan`` asked the router, so a gate need not ask again)."""

    task: Any
    runtime: Any
    plan: Plan
    publish: Publish
    args: Any
    kwargs: Any
    task_id: str | None
    options: dict[str, Any]
    queue: str | None = None

    def as_is(self) -> Any:
        """Publish it as Celery would, nothing locked or recorded."""
        return self.publish(self.args, self.kwargs, self.task_id, **self.options)


_modes: list[Mode] = []
_default: list[Mode] = []
_gates: list[Gate] = []
_signals: dict[str, Signal] = {}


def register(mode: Mode, *, default: bool = False) -> None:
    """Register ``mode``: plans whose options it selects get it, its rules join the options'
    validation, its counters those kept. ``default``: the mode of every plan no other mode
    selects (the plain mode, which counts only the core's counters)."""
    if default:
        _default[:] = [mode]
        return
    if any(known.name == mode.name for known in _modes):
        return  # registered already (a module imported again)
    if mode.option is None:
        raise ValueError(f"mode {mode.name!r} names no option that selects it (its 'option')")
    _check_signals(mode.signals, f"the {mode.name} mode")
    add_options(mode.options)
    # A mode is a way of holding the lock: none of its options means anything with lock=False.
    add_lock_only({spec.name: f"the {mode.name} mode works through the lock" for spec in mode.options})
    add_counters(mode.counters, f"the {mode.name} mode")
    _signals.update(mode.signals)
    _modes.append(mode)
    add_rule(mode.clash)


def register_gate(gate: Gate, *, first: bool = False, before: str | None = None) -> None:
    """Register ``gate``: plans whose options it selects pass through it, its options join the
    schema, its rules the options' validation and its counters those kept. ``first``: asked
    before the gates registered already; ``before``: just before the registered gate of that
    name (its counters still come after theirs, either way)."""
    if any(known.name == gate.name for known in _gates):
        return
    place = 0 if first else len(_gates)
    if before is not None:
        place = next((i for i, known in enumerate(_gates) if known.name == before), -1)
        if place < 0:
            raise ValueError(f"the {gate.name} gate is to be asked before gate {before!r}, not registered")
    _check_signals(gate.signals, f"the {gate.name} gate")
    add_options(gate.options)
    add_counters(gate.counters, f"the {gate.name} gate")
    _signals.update(gate.signals)
    _gates.insert(place, gate)
    add_rule(gate.clash)


def _check_signals(signals: Mapping[str, Signal], owner: str) -> None:
    taken = [name for name, signal in signals.items() if _signals.get(name, signal) is not signal]
    if taken:
        raise ValueError(f"{owner} declares signals another mode or gate has: {', '.join(taken)}")


def registered() -> tuple[Mode, ...]:
    """The registered modes, the default one not among them."""
    return tuple(_modes)


def registered_gates() -> tuple[Gate, ...]:
    """The registered gates, in the order they are asked."""
    return tuple(_gates)


def registered_signals() -> Mapping[str, Signal]:
    """The registered modes' and gates' signals, by public name."""
    return dict(_signals)


def gates_for(options: LockOptions) -> tuple[Gate, ...]:
    """The gates a plan with ``options`` passes through, in order. Asked once per plan."""
    return tuple(gate for gate in _gates if gate.selects(options))


def one_mode(options: Mapping[str, Any], limit: int, *, merged: bool) -> Clash | None:
    """The registry's rule, asked before any mode's own (which assume their mode is the only
    one): options that select two modes clash, the later registered naming the earlier."""
    chosen = [
        mode for mode in _modes if mode.option is not None and mode.selected_by(options.get(mode.option))
    ]
    if len(chosen) < 2:
        return None
    earlier, later = chosen[0], chosen[-1]
    assert earlier.option is not None and later.option is not None
    value, other = options.get(later.option), options.get(earlier.option)
    # A flag or a choice says its value ("True cannot be used with lock_until='started'"); a
    # number of seconds does not.
    shown = f"{value!r} " if isinstance(value, (bool, str)) else ""
    named = f"{earlier.option}={other!r}" if isinstance(other, str) else earlier.option
    return later.option, f"{shown}cannot be used with {named} (choose one mode)", earlier.option


add_rule(one_mode)


def mode_for(options: LockOptions) -> Mode:
    """The mode of a plan with ``options``: the registered one that selects them, else the
    default. Asked once per plan. Options are validated as they are made, so ``one_mode`` has
    refused any that select two."""
    for mode in _modes:
        if mode.selects(options):
            return mode
    if not _default:
        raise LookupError("no default mode registered: import celery_redislock.integration.plain")
    return _default[0]
