"""Hypothesis profiles for the whole suite.

- ``ci`` (the default): each property runs a hundred examples, or what its ``@settings`` says.
- ``fuzz``: 100 000 examples a property (``$REDISLOCK_FUZZ_EXAMPLES`` to change it), for the
  long fuzz run: ``pytest tests/unit/test_fuzz.py --hypothesis-profile=fuzz`` (see the README).

No deadline in either: the machine running the suite may be busy, and a slow example is not a bug.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None)
settings.register_profile(
    "fuzz",
    max_examples=int(os.environ.get("REDISLOCK_FUZZ_EXAMPLES", "100000")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
