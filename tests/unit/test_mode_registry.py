"""A mode or a gate is one module: registering it adds its options to the schema (validated on
the task, in ``redislock_options`` and ``redislock_queues``, listed as known), its combination
rule to the options' validation, and it to the plans that select it. Run in a fresh interpreter:
the registry is process-wide, and a throwaway mode must not reach the other tests."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from celery_redislock.config.options import option_names
from celery_redislock.config.schema import LOCK, OptionSpec, add_options, option_specs
from celery_redislock.engine.checks import check_flag
from celery_redislock.engine.counting import counter_names

SCRIPT = textwrap.dedent(
    """
    from typing import Any, ClassVar
    from celery import Celery
    from celery.utils.dispatch import Signal
    import celery_redislock.modes  # the package's modes first: a later one names them in a clash
    import celery_redislock.gates  # noqa: F401  (registers the gates)
    from celery_redislock import OptionError, SingletonTask
    from celery_redislock.config.options import LockOptions, option_names
    from celery_redislock.config.schema import OptionSpec
    from celery_redislock.engine.checks import check_flag
    from celery_redislock.engine.counting import count, counter_names
    from celery_redislock.integration.mode import register, register_gate, registered_signals
    from celery_redislock.integration.plain import PlainMode
    from celery_redislock.integration.runtime import runtime_for

    class StampMode(PlainMode):
        name = "stamp"
        option = "stamp"
        options: ClassVar[tuple[OptionSpec, ...]] = (
            OptionSpec("stamp", False, check_flag, "Stamp it.", "bool", "stamp"),
        )
        counters: ClassVar[dict[str, str]] = {"stamped": "calls stamped"}

        def selected_by(self, value: Any) -> bool:
            return bool(value)

        def clash(self, options: Any, limit: int, *, merged: bool) -> Any:
            if options.get("stamp") and limit > 1:
                return "stamp", f"cannot be used with max_concurrency={limit}", "max_concurrency"
            return None

    class AuditGate:
        name = "audit"
        options: ClassVar[tuple[OptionSpec, ...]] = (
            OptionSpec("audited", False, check_flag, "Audit it.", "bool", "audit"),
        )
        counters: ClassVar[dict[str, str]] = {"audit_refused": "calls the audit refused"}
        signals: ClassVar[dict[str, Signal]] = {"task_audited": Signal(name="audit.task_audited")}

        def selects(self, options: LockOptions) -> bool:
            return bool(options.value("audited"))

        def clash(self, options: Any, limit: int, *, merged: bool) -> Any:
            return None

        def admit(self, task: Any, execution: Any) -> None: ...

    assert not hasattr(SingletonTask, "stamp")
    register(StampMode())
    register_gate(AuditGate())
    assert {"stamp", "audited"} <= option_names()
    assert counter_names()[-2:] == ("stamped", "audit_refused"), counter_names()
    assert registered_signals()["task_audited"] is AuditGate.signals["task_audited"]
    from celery_redislock.ops.stats import counters
    count("stamped", 2)
    assert counters.snapshot()["stamped"] == 2 and counters.snapshot()["audit_refused"] == 0
    # The task class reads the schema: a registered mode's option is its attribute, None.
    assert SingletonTask.stamp is None and SingletonTask.audited is None

    class RateMode(StampMode):  # an option named as Celery's Task.rate_limit: refused
        name = "rate"
        options: ClassVar[tuple[OptionSpec, ...]] = (
            OptionSpec("rate_limit", None, str, "Clash.", "str", "rate"),
        )

    try:
        register(RateMode())
    except ValueError as exc:
        assert "option 'rate_limit' of 'rate' is named as a Celery task attribute" in str(exc), exc
    else:
        raise AssertionError("an option shadowing Task.rate_limit was accepted")
    assert "rate_limit" not in option_names() and "rate_limit" not in vars(SingletonTask)

    app = Celery("registry", broker="memory://", set_as_current=False)
    app.conf.redislock_url = "redis://127.0.0.1:1/0"  # never connected: plans need no Redis
    app.conf.redislock_queues = {"audited": {"audited": True}}

    @app.task(base=SingletonTask, shared=False, stamp=True)
    def stamped() -> None: ...

    task = stamped._get_current_object()
    plan = runtime_for(app).plan(task, None)
    assert plan.mode.name == "stamp" and [g.name for g in plan.gates] == ["operator_holds"]
    plan = runtime_for(app).plan(task, "audited")
    assert plan.mode.name == "stamp" and [g.name for g in plan.gates] == ["operator_holds", "audit"]

    for number, bad in enumerate(({"stamp": "yes"}, {"stamp": True, "max_concurrency": 2})):
        try:
            @app.task(base=SingletonTask, shared=False, name=f"bad{number}", **bad)
            def bad_task() -> None: ...

            bad_task._get_current_object()
        except OptionError as exc:
            assert "stamp" in str(exc) and f"task 'bad{number}'" in str(exc), exc
        else:
            raise AssertionError(f"{bad} was accepted")

    # Two modes at once: the registry refuses them, though neither mode names the other.
    try:
        @app.task(base=SingletonTask, shared=False, name="two", stamp=True, throttle=5)
        def two() -> None: ...

        two._get_current_object()
    except OptionError as exc:
        assert "option 'stamp' True cannot be used with throttle (choose one mode)" in str(exc), exc
    else:
        raise AssertionError("stamp and throttle were both accepted")

    class NamelessMode(PlainMode):
        name = "nameless"

    try:
        register(NamelessMode())
    except ValueError as exc:
        assert "mode 'nameless' names no option that selects it" in str(exc), exc
    else:
        raise AssertionError("a mode no option selects was registered")

    class EchoGate(AuditGate):  # a signal name another gate has: refused
        name = "echo"
        options: ClassVar[tuple[OptionSpec, ...]] = ()
        counters: ClassVar[dict[str, str]] = {}
        signals: ClassVar[dict[str, Signal]] = {"task_audited": Signal(name="echo.task_audited")}

    try:
        register_gate(EchoGate())
    except ValueError as exc:
        assert "the echo gate declares signals another mode or gate has: task_audited" in str(exc), exc
    else:
        raise AssertionError("a second signal named task_audited was registered")
    print("ok")
    """
)


def test_a_registered_mode_and_gate_bring_their_options_rules_counters_and_plans() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert not {"stamp", "audited"} & option_names()  # this process never saw them
    assert not {"stamped", "audit_refused"} & set(counter_names())


def test_an_option_name_has_one_owner() -> None:
    with pytest.raises(ValueError, match="'lock_timeout' of 'stamp' is already an option of 'lock'"):
        add_options([OptionSpec("lock_timeout", False, check_flag, "x", "bool", "stamp")])
    assert option_specs()[0].owner == LOCK
