"""The modes (docs/user-guide/modes.md): what a duplicate call does, one module each, registered
with the Celery glue (``integration.mode``) as this package is imported: the order is the order
their combination rules are asked in. A new mode is one module here, its Lua in ``lua/``, and
one line below. The gates (rate limits, fair share) register the same way from ``gates/``."""

from __future__ import annotations

from ..integration.mode import register, registered
from . import debounce, keep_latest, throttle, until_started

__all__ = ["registered"]

# The order names a clash of two modes (the later registered names the earlier one), and
# until_started's own rules (lock_on, fencing), once the lock's, are asked before other modes'.
for _module in (until_started, throttle, keep_latest, debounce):
    register(_module.MODE)
