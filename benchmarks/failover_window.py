"""Measure the window in which a Sentinel failover lets a duplicate take a held lock.

A holder takes a lock and renews it from the package's renewal timer, on one long-lived
client (a worker). A prober, as a freshly started worker would, makes a new client every
50 ms and reads the lock on whatever master the Sentinels name. Then the master fails over,
either planned (``SENTINEL FAILOVER``) or by a crash (SIGKILL of the master). For each
``lock_timeout`` the script prints for how long (and when, in seconds after the failover
began) the lock was missing on the master a new client reaches: the window in which a
duplicate could take it. It also prints what the holder's renewal reported.

    python benchmarks/failover_window.py            # lock_timeout 30 (the default) and 3

Nothing here is a test assertion: the figures go in docs/benchmarks.md with this command.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import redis

from celery_redislock.config.lock_client import make_client
from celery_redislock.contrib.testing import SentinelSet
from celery_redislock.engine import Lease, make_engine
from celery_redislock.engine.renewal import Renewer
from celery_redislock.ops.stats import counters

KEY = "redislock:bench.failover:window"
WATCH = 40.0  # seconds the contender keeps trying after the failover began


def measure(lock_timeout: float, how: str) -> str:
    with SentinelSet() as sentinels:
        opts = sentinels.transport_options
        holder = make_engine(make_client(sentinels.url, opts, socket_timeout=5, socket_connect_timeout=5))
        ttl_ms = int(lock_timeout * 1000)
        assert holder.acquire(KEY, "holder", ttl_ms).acquired
        renewer = Renewer()
        renewer.add(holder, Lease(KEY, "holder", ttl_ms), lock_timeout / 3)
        before = counters.snapshot()
        started = time.monotonic()
        if how == "planned":
            with sentinels.sentinel_client() as client:
                client.execute_command("SENTINEL", "FAILOVER", sentinels.master_name)
        else:
            master = sentinels.master()
            assert master.process is not None
            os.kill(master.process.pid, signal.SIGKILL)
        missing: list[float] = []  # probe times at which the lock was not there
        failed: list[float] = []  # probe times at which no master answered
        while time.monotonic() - started < WATCH:
            probe = time.monotonic()
            client = make_client(sentinels.url, opts, socket_timeout=2, socket_connect_timeout=2)
            try:
                if make_engine(client).holder_of(KEY) is None:
                    missing.append(probe - started)
            except redis.RedisError:
                failed.append(probe - started)
            finally:
                client.close()
            time.sleep(0.05)  # a benchmark's pacing, not synchronisation
        renewer.stop()
        after = counters.snapshot()
        outcome = (
            f"lock missing from {missing[0]:.1f} s to {missing[-1]:.1f} s ({len(missing)} probes)"
            if missing
            else f"lock never missing in {WATCH:.0f} s"
        )
        errors = f"from {failed[0]:.1f} s to {failed[-1]:.1f} s" if failed else "never"
        return (
            f"{how:8} failover, lock_timeout {lock_timeout:>4g} s: {outcome}; "
            f"new clients got errors {errors}; "
            f"holder's renewal: retaken {after['retaken'] - before['retaken']}, lost {after['lost'] - before['lost']}, "
            f"errors {after['redis_errors'] - before['redis_errors']}"
        )


def main() -> None:
    timeouts = [float(a) for a in sys.argv[1:]] or [30.0, 3.0]
    for how in ("planned", "crash"):
        for lock_timeout in timeouts:
            print(measure(lock_timeout, how), flush=True)


if __name__ == "__main__":
    main()
