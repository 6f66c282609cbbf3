"""What postponed calls cost the worker that holds them: Celery keeps every message with an ETA
(a countdown) in the worker's main process until it is due, whatever the prefetch settings.

    python -m benchmarks.eta_memory [--calls 10000] [--redis-server ...]

One redis-server (broker and results), one prefork worker (-c 1). ``--calls`` messages are sent
as a postponed call's copy is (countdown an hour away, the gate's two headers); once the broker's
queue is empty and all of them are held unacknowledged by the worker, the worker's main process'
resident memory (``VmRSS`` of ``/proc/<pid>/status``) is compared with what it was before.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

from celery import Celery

from celery_redislock.contrib.testing import RedisServer, WorkerProcess, poll
from celery_redislock.gates.rate_limit import HOP_HEADER, LOG_HEADER

from .servers import add_server_option, server_executable

WORKER_MODULE = """
from celery import Celery

app = Celery("bench_eta", broker={broker!r}, backend={backend!r})
app.conf.update(broker_connection_retry_on_startup=False, task_default_queue="celery")


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


def run(args: argparse.Namespace) -> dict[str, Any]:
    with RedisServer(server_executable(args.redis_server)) as server, tempfile.TemporaryDirectory() as tmp:
        base = f"redis://127.0.0.1:{server.port}"
        urls = {"broker": f"{base}/0", "backend": f"{base}/1"}
        Path(tmp, "bench_eta_worker.py").write_text(textwrap.dedent(WORKER_MODULE.format(**urls)))
        worker = WorkerProcess(Path(tmp), "bench_eta_worker", ["-c", "1", "-n", "eta@bench"])
        app = Celery("bench_eta_caller", broker=urls["broker"], backend=urls["backend"], set_as_current=False)
        broker = server.client(db=0)
        try:
            worker.wait_ready()
            # Settled: the main process has served a call and its pool child is up.
            app.send_task("bench_eta.call", ("warm", 0)).get(timeout=30)
            before = rss_kb(worker.pid)
            log = "{redislock:bench_eta.call:" + "0" * 32 + "}:rate"
            for n in range(args.calls):
                app.send_task(
                    "bench_eta.call",
                    ("acme", n),
                    countdown=3600,
                    headers={HOP_HEADER: uuid.uuid4().hex, LOG_HEADER: log},
                    ignore_result=True,
                )

            def all_held() -> bool:
                return broker.llen("celery") == 0 and broker.hlen("unacked") >= args.calls

            began = time.monotonic()
            assert poll(all_held, 300, interval=0.5), "the worker did not take every message"
            received = time.monotonic() - began
            after = rss_kb(worker.pid)
        finally:
            worker.kill()
            broker.close()
            app.close()
    return {"before": before, "after": after, "received": received}


def report(outcome: dict[str, Any], args: argparse.Namespace) -> str:
    grown = outcome["after"] - outcome["before"]
    return (
        f"{args.calls} postponed calls held by one worker: its main process' VmRSS "
        f"{outcome['before'] / 1024:.1f} MB -> {outcome['after'] / 1024:.1f} MB "
        f"(+{grown / 1024:.1f} MB, {grown * 1024 / args.calls:.0f} bytes a call; all taken in "
        f"{outcome['received']:.1f} s)."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.eta_memory", description=__doc__)
    parser.add_argument("--calls", type=int, default=10_000, help="postponed calls held")
    add_server_option(parser)
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error("--calls must be >= 1")
    print(report(run(args), args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
