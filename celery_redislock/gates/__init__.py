"""The gates: checks every call passes before its mode and its lock, whatever its mode, one
module each (with the modules they share), registered with the Celery glue
(``integration.mode.register_gate``) after the modes: the rate limits (``rate_limit``) and fair
share per tenant (``fair_share``), an operator's holds (``task_holds``). A call a gate makes wait
is put off by ``waits.put_off``."""

from __future__ import annotations

from .. import modes  # noqa: F401  (the modes register first: the counters keep one order everywhere)
from ..engine.counting import add_counters
from ..integration.mode import register_gate, registered_gates
from . import fair_share, rate_in_flight, rate_limit, rate_reports, task_holds

__all__ = ["registered_gates"]

register_gate(rate_limit.GATE)
# Asked first: a call is counted out of its backlog as it starts, whatever a later gate decides.
register_gate(fair_share.GATE, first=True)
# Before the rate limits: a held call must not take, or reserve, a slot it will not use.
register_gate(task_holds.GATE, before=rate_limit.GATE.name)
# Counters added since go last: the order of those before is every worker's shared layout.
add_counters(rate_reports.COUNTERS, f"the {rate_limit.GATE.name} gate")
add_counters(rate_in_flight.COUNTERS, f"the {rate_limit.GATE.name} gate")
