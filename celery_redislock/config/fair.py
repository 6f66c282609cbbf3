"""Fair share's own option values: the number of lanes a queue has, the tenants' weights."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any, Callable, Union

from ..engine.checks import BadValue, check_count, got
from ..errors import short_repr

__all__ = ["MAX_LANES", "Weights", "check_lanes", "check_weights", "weight_of"]

#: Most lanes a queue may have: each is a queue every worker of it consumes.
MAX_LANES = 256

#: ``fair_weights`` once checked: tenant -> weight (a tuple of pairs, hashable), or a callable.
Weights = Union[tuple[tuple[str, int], ...], Callable[[str], int], None]


def check_lanes(value: Any) -> int:
    """An int from 1 to ``MAX_LANES``."""
    lanes = check_count(value)
    if lanes > MAX_LANES:
        raise BadValue(f"must be an int from 1 to {MAX_LANES}, {got(value, wrong_type=False)}")
    return lanes


def check_weights(value: Any) -> Weights:
    """None, a dict of tenant name -> int >= 1, or a callable ``(tenant) -> int``."""
    what = "must be None, a dict of tenant name -> int >= 1, or a callable (tenant) -> int"
    if value is None:
        return None
    if isinstance(value, tuple) and all(
        isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str) for pair in value
    ):
        value = dict(value)  # checked already (validation is idempotent)
    if isinstance(value, Mapping):
        pairs = []
        for tenant, weight in value.items():
            if not isinstance(tenant, str):
                raise BadValue(f"{what}, got {short_repr(value)}: the key {short_repr(tenant)} is not a str")
            try:
                pairs.append((tenant, check_count(weight)))
            except BadValue as bad:
                raise BadValue(f"{what}, got {short_repr(value)}: {tenant!r} {bad}") from None
        return tuple(sorted(pairs))
    if callable(value):
        func: Callable[[str], int] = value
        return func
    raise BadValue(f"{what}, {got(value, wrong_type=True)}")


def weight_of(weights: Weights, tenant: str, where: str) -> int:
    """``tenant``'s weight (1 unless ``weights`` say more). A callable's answer that is not an
    int >= 1 raises ``BadValue`` naming ``where`` (the task) and the tenant."""
    if weights is None:
        return 1
    if callable(weights):
        answer = weights(tenant)
        if isinstance(answer, bool) or not isinstance(answer, numbers.Integral) or answer < 1:
            raise BadValue(
                f"fair_weights of {where} returned {short_repr(answer)} for tenant {tenant!r}: "
                "an int >= 1 is needed"
            )
        return int(answer)
    return dict(weights).get(tenant, 1)
