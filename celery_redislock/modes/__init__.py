"""The modes (docs/user-guide/modes.md), one module each, registered with the Celery glue
(``integration.mode``) as this package is imported: the order is the order their combination
rules are asked in. A new mode is one module here, its Lua in ``lua/``, and one line below; a gate
(the rate limit) registers the same way."""

from __future__ import annotations

from ..integration.mode import register, register_gate, registered
from . import debounce, fair_share, keep_latest, rate_limit, throttle, until_started

__all__ = ["registered"]

# The order names a clash of two modes (the later registered names the earlier one), and
# until_started's own rules (lock_on, fencing), once the lock's, are asked before other modes'.
for _module in (until_started, throttle, keep_latest, debounce):
    register(_module.MODE)
register_gate(rate_limit.GATE)
# Asked first: a call is counted out of its backlog as it starts, whatever a later gate decides.
register_gate(fair_share.GATE, first=True)
