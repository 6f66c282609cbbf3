"""What postponed calls cost the worker that holds them: Celery keeps every message with an ETA
(a countdown) in the worker's main process until it is due, whatever the prefetch settings;
unless native delayed delivery keeps it in the broker.

    python -m benchmarks.eta_memory [--calls 10000] [--broker redis|rabbitmq|rabbitmq-quorum]
                                    [--window 10] [--redis-server ...]

One redis-server (results, and the broker with ``--broker redis``), one prefork worker (-c 1).
``--calls`` messages are sent as a postponed call's copy is (countdown an hour away, the gate's
two headers); once they are where the broker puts them, the worker's main process' resident
memory (``VmRSS`` of ``/proc/<pid>/status``) is compared with what it was before, and its CPU
time (``utime + stime`` of ``/proc/<pid>/stat``) is read over the next ``--window`` seconds.

- ``redis``: the broker's queue is empty and every message is held unacknowledged by the worker.
- ``rabbitmq``: a RabbitMQ node, classic queues: the worker has received every message and the
  queue has them unacknowledged (its prefetch multiplier 0: bounded, it takes ETA messages a few
  every 5 seconds).
- ``rabbitmq-quorum``: quorum queues on a topic exchange with publisher confirms, Celery's
  recommended set-up, where Celery (5.5 and later) sends each countdown through RabbitMQ's
  native delayed delivery: the ``celery_delayed_N`` queues hold every message and the worker
  has received none of them (its log says so).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from celery import Celery

from celery_redislock.contrib.testing import RedisServer, WorkerProcess, poll
from celery_redislock.gates.rate_limit import HOP_HEADER, LOG_HEADER
from tests.harness import RabbitMQServer

from .harness import cpu_seconds
from .servers import add_server_option, server_executable

#: What ``--broker`` accepts.
BROKERS = {
    "redis": "a redis-server; the worker holds every postponed call (the default)",
    "rabbitmq": "RabbitMQ, classic queues; the worker holds every postponed call",
    "rabbitmq-quorum": "RabbitMQ, quorum queues on a topic exchange with publisher confirms; "
    "native delayed delivery holds every postponed call in the broker",
}

#: Celery's recommended RabbitMQ set-up, under which it sends a countdown through RabbitMQ's
#: native delayed delivery (a direct exchange is refused).
QUORUM: dict[str, Any] = {
    "task_default_queue_type": "quorum",
    "task_default_exchange_type": "topic",
    "broker_transport_options": {"confirm_publish": True},
}

#: Classic queues: the worker takes ETA messages a few every 5 s under a bounded prefetch (Celery
#: raises it for each one held, the broker hears of it late): unbounded, it takes them all at once.
CLASSIC: dict[str, Any] = {"worker_prefetch_multiplier": 0}

WORKER_MODULE = """
from celery import Celery

app = Celery("bench_eta", broker={broker!r}, backend={backend!r})
app.conf.update(broker_connection_retry_on_startup=False, task_default_queue="celery")
app.conf.update({conf!r})


@app.task(name="bench_eta.call")
def call(account, n):
    return n
"""


def rss_kb(pid: int) -> int:
    """Resident memory of ``pid`` in kB, as the kernel counts it."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def received(worker: WorkerProcess) -> int:
    """How many calls the worker has logged as received (``Task ...[id] received``)."""
    return worker.log().count("] received")


class Placement:
    """Where the postponed calls are, on one broker: ``done()`` once all ``calls`` are where
    that broker keeps them, ``where()`` says so."""

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def done(self) -> bool:
        raise NotImplementedError

    def where(self) -> str:
        raise NotImplementedError


class RedisHeld(Placement):
    def __init__(self, calls: int, server: RedisServer) -> None:
        super().__init__(calls)
        self.broker = server.client(db=0)

    def done(self) -> bool:
        return bool(self.broker.llen("celery") == 0 and self.broker.hlen("unacked") >= self.calls)

    def where(self) -> str:
        return (
            f"the broker's queue holds {self.broker.llen('celery')}, "
            f"{self.broker.hlen('unacked')} are unacknowledged, held by the worker"
        )


class RabbitMQPlacement(Placement):
    def __init__(self, calls: int, server: RabbitMQServer, url: str, worker: WorkerProcess) -> None:
        super().__init__(calls)
        self.server, self.url, self.worker = server, url, worker

    def counts(self) -> tuple[int, int, int]:
        """Messages ready in the ``celery`` queue, unacknowledged there, in ``celery_delayed_*``."""
        ready = unacked = delayed = 0
        for queue in self.server.queues(self.url):
            if queue["name"] == "celery":
                ready = queue.get("messages_ready", 0)
                unacked = queue.get("messages_unacknowledged", 0)
            elif queue["name"].startswith("celery_delayed_"):
                delayed += queue.get("messages", 0)
        return ready, unacked, delayed


class RabbitMQHeld(RabbitMQPlacement):
    def done(self) -> bool:
        # The worker's log, not the management API, whose counts lag behind by seconds.
        return received(self.worker) - 1 >= self.calls

    def where(self) -> str:
        poll(lambda: self.counts()[1] >= self.calls, 30, interval=1.0)  # the API's counts catch up
        ready, unacked, _ = self.counts()
        return f"the celery queue holds {ready} ready, {unacked} unacknowledged, held by the worker"


class RabbitMQDelayed(RabbitMQPlacement):
    def done(self) -> bool:
        ready, unacked, delayed = self.counts()
        return ready == 0 and unacked == 0 and delayed >= self.calls

    def where(self) -> str:
        ready, unacked, delayed = self.counts()
        return (
            f"the celery_delayed_* queues hold {delayed}, the celery queue {ready} ready and "
            f"{unacked} unacknowledged; the worker received {received(self.worker) - 1} of them"
        )


def run(args: argparse.Namespace, rabbitmq: RabbitMQServer | None = None) -> dict[str, Any]:
    """One run: the servers, a worker, ``args.calls`` postponed calls; what they cost it. On
    RabbitMQ, a vhost of its own on ``rabbitmq`` when given (dropped after), else a node of its own."""
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(RedisServer(server_executable(args.redis_server)))
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        base = f"redis://127.0.0.1:{server.port}"
        urls = {"broker": f"{base}/0", "backend": f"{base}/1"}
        conf: dict[str, Any] = {"redis": {}, "rabbitmq": CLASSIC, "rabbitmq-quorum": QUORUM}[args.broker]
        if args.broker == "redis":
            rabbitmq = None
        else:
            if rabbitmq is None:
                rabbitmq = stack.enter_context(RabbitMQServer(workdir=str(Path(tmp, "rabbitmq"))))
            vhost = f"etabench-{uuid.uuid4().hex[:8]}"
            urls["broker"] = rabbitmq.add_vhost(vhost)
            stack.callback(rabbitmq.delete_vhost, vhost)
        Path(tmp, "bench_eta_worker.py").write_text(textwrap.dedent(WORKER_MODULE.format(conf=conf, **urls)))
        worker = WorkerProcess(Path(tmp), "bench_eta_worker", ["-c", "1", "-n", "eta@bench"])
        stack.callback(worker.kill)
        app = Celery("bench_eta_caller", broker=urls["broker"], backend=urls["backend"], set_as_current=False)
        app.conf.update(conf)
        stack.callback(app.close)
        placement: Placement
        if rabbitmq is None:
            placement = RedisHeld(args.calls, server)
            stack.callback(placement.broker.close)
        elif args.broker == "rabbitmq":
            placement = RabbitMQHeld(args.calls, rabbitmq, urls["broker"], worker)
        else:
            placement = RabbitMQDelayed(args.calls, rabbitmq, urls["broker"], worker)
        worker.wait_ready(timeout=60)
        # Settled: the main process has served a call and its pool child is up.
        app.send_task("bench_eta.call", ("warm", 0)).get(timeout=30)
        before = rss_kb(worker.pid)
        log = "{redislock:bench_eta.call:" + "0" * 32 + "}:rate"
        began = time.monotonic()
        for n in range(args.calls):
            app.send_task(
                "bench_eta.call",
                ("acme", n),
                countdown=3600,
                headers={HOP_HEADER: uuid.uuid4().hex, LOG_HEADER: log},
                ignore_result=True,
            )
        sent = time.monotonic() - began
        assert poll(placement.done, 300, interval=0.5), (
            f"the calls did not all reach where {args.broker} keeps them: {placement.where()}"
        )
        taken = time.monotonic() - began
        after = rss_kb(worker.pid)
        cpu = cpu_seconds(worker.pid)
        time.sleep(args.window)
        cpu = cpu_seconds(worker.pid) - cpu
        return {
            "before": before,
            "after": after,
            "received": taken,
            "sent": sent,
            "cpu": cpu,
            "where": placement.where(),
            "calls_received": received(worker) - 1,
        }
    raise AssertionError("unreachable")  # mypy: ExitStack may swallow an exception


def report(outcome: dict[str, Any], args: argparse.Namespace) -> str:
    grown = outcome["after"] - outcome["before"]
    memory = (
        f"its main process' VmRSS {outcome['before'] / 1024:.1f} MB -> {outcome['after'] / 1024:.1f} MB "
        f"(+{grown / 1024:.1f} MB, {grown * 1024 / args.calls:.0f} bytes a call; "
    )
    if args.broker == "rabbitmq-quorum":
        first = (
            f"{args.calls} postponed calls held by RabbitMQ (quorum queues, native delayed delivery), "
            f"none by the worker: {memory}all published in {outcome['sent']:.1f} s)."
        )
    else:
        on = "" if args.broker == "redis" else " on RabbitMQ (classic queues)"
        first = f"{args.calls} postponed calls held by one worker{on}: {memory}all taken in {outcome['received']:.1f} s)."
    return (
        f"{first}\nWhere they are: {outcome['where']}. The worker's main process over the next "
        f"{args.window:g} s: {outcome['cpu']:.2f} s CPU ({100 * outcome['cpu'] / args.window:.1f} % of a core)."
    )


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's options (``main``'s)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.eta_memory",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--calls", type=int, default=10_000, help="postponed calls held")
    parser.add_argument(
        "--broker",
        choices=list(BROKERS),
        default="redis",
        help="; ".join(f"{name}: {what}" for name, what in BROKERS.items()),
    )
    parser.add_argument(
        "--window",
        type=float,
        default=10.0,
        help="seconds the worker's CPU is read over once they are placed",
    )
    parser.add_argument(
        "--runs", type=int, default=1, help="runs, each with its own servers; medians reported"
    )
    add_server_option(parser)
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error("--calls must be >= 1")
    if args.window <= 0 or args.runs < 1:
        parser.error("--window must be > 0 and --runs >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    outcomes = [run(args) for _ in range(args.runs)]
    for outcome in outcomes if args.runs > 1 else []:
        print(f"  run: {report(outcome, args).splitlines()[0]}")
    print(report(median(outcomes), args))
    return 0


def median(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the runs (the last run's ``where``)."""
    if len(outcomes) == 1:
        return outcomes[0]
    pick: Callable[[str], float] = lambda key: statistics.median(o[key] for o in outcomes)  # noqa: E731
    growth = statistics.median(o["after"] - o["before"] for o in outcomes)
    before = pick("before")
    return {
        **outcomes[-1],
        **{key: pick(key) for key in ("received", "sent", "cpu")},
        "before": before,
        "after": before + growth,
    }


if __name__ == "__main__":
    sys.exit(main())
