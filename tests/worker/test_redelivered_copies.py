"""Messages given out again after their worker died (``acks_late``), on real solo workers:

- a plain ``SingletonTask`` message whose body had finished (the worker killed after the result
  was stored, before the acknowledgement) is dropped, not run again: the lock was released as
  the body returned, so only the result backend knows it ran;
- a rate-limited one whose body had started and not finished reads the result backend once,
  though the rate limit's gate and the lock's mode both ask whether it finished.

The worker kills itself from Celery's ``task_postrun`` (sent after the result is stored, before
a solo pool acknowledges an ``acks_late`` message) or from the body, while a one-shot flag is
set in the coordination database: the window is hit on purpose, every run, not by timing. A
Redis broker gives the message out again once unacknowledged for its visibility timeout (the
test asks it to, as its consumers do); RabbitMQ as the dead worker's connection closes. Both
mark it redelivered.
"""

from __future__ import annotations

from collections.abc import Callable

import redis
from celery import Celery

from celery_redislock.contrib.testing import WorkerProcess, poll
from celery_redislock.integration.liveness import process_alive

from .conftest import restore_visible
from .mode_harness import ModeTask, node
from .test_rate_postpone import queued

TRANSPORT = {"broker_transport_options": {"visibility_timeout": 4}}

KILLER = f"""
import signal

from celery.signals import task_postrun

app.conf.update({TRANSPORT!r})


@task_postrun.connect
def kill_after_the_result(task_id=None, **kwargs):
    if coord.delete("kill-after-result"):
        coord.rpush("killed", f"{{task_id}} {{os.getpid()}}")
        os.kill(os.getpid(), signal.SIGKILL)
"""

BODY = """
coord.rpush("runs", self.request.id)
return n
"""


def redeliver(app: Celery, urls: dict[str, str]) -> None:
    """Give out again what a dead worker left unacknowledged on a Redis broker (RabbitMQ did as
    its connection closed)."""
    if urls["broker"].startswith("redis"):
        restore_visible(app)


def test_a_message_redelivered_after_its_body_finished_is_dropped_not_run_again(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    task = ModeTask("redelivered.once", "n", BODY, {"acks_late": True})
    coord.set("kill-after-result", 1)
    first = task.start(worker_process, urls, "-c", "1", "-n", node("killed"), pool="solo", module=KILLER)
    app = make_app(**TRANSPORT)
    call = task.sender(app).delay(7)
    assert poll(lambda: coord.llen("killed") == 1, 30), first.log()[-3000:]
    assert coord.lrange("killed", 0, -1)[0].decode().split()[0] == call.id
    first.process.wait(10)
    assert not process_alive(first.pid)
    # The result was stored before the kill: the body's run is over, its message not acknowledged.
    assert call.get(timeout=5) == 7
    assert coord.lrange("runs", 0, -1) == [call.id.encode()]

    second = task.start(worker_process, urls, "-c", "1", "-n", node("after"), pool="solo")
    dropped = f"Dropped redelivered redelivered.once[{call.id}]: it has finished already"

    def decided() -> bool:
        redeliver(app, urls)
        return dropped in second.log() or coord.llen("runs") > 1

    assert poll(decided, 60, interval=0.3), second.log()[-3000:]
    assert coord.lrange("runs", 0, -1) == [call.id.encode()], second.log()[-3000:]
    # Acknowledged when dropped: nothing left to give out again.
    assert poll(lambda: queued(app) == 0, 10)
    assert call.state == "SUCCESS"


# Every read of a task's state from the result backend, recorded with the delivery that read it
# (marked redelivered or not, its retries), and the worker killed in the body on a one-shot flag.
READS = f"""
import signal

from celery import current_task

app.conf.update({TRANSPORT!r})
backend_class = type(app.backend)
read_state = backend_class.get_task_meta


def recorded_read(backend, task_id, *args, **kwargs):
    request = current_task.request if current_task else None
    redelivered = bool(request is not None and (request.delivery_info or {{}}).get("redelivered"))
    retries = None if request is None else request.retries
    coord.rpush("reads", f"{{task_id}} {{redelivered}} {{retries}}")
    return read_state(backend, task_id, *args, **kwargs)


backend_class.get_task_meta = recorded_read


def die_once():
    if coord.delete("kill-in-body"):
        os.kill(os.getpid(), signal.SIGKILL)
"""

STARTED_BODY = """
coord.rpush("runs", self.request.id)
die_once()
return n
"""


def test_a_redelivered_copy_whose_run_started_reads_the_result_backend_once(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    # Its start is in the rate limit's log (kept a period: a minute) and it has no result: the
    # gate asks the backend (a redelivered message, whose start the log holds) and so does the
    # lock's plain mode; each delivery reads it once. Its
    # lock, left by the dead worker, expires within the second: a delivery refused by it (on
    # RabbitMQ, given out again at once) is re-queued, and that copy is another delivery.
    task = ModeTask(
        "redelivered.started",
        "n",
        STARTED_BODY,
        {"acks_late": True, "global_rate_limit": "10/m", "lock_timeout": 1},
    )
    coord.set("kill-in-body", 1)
    first = task.start(worker_process, urls, "-c", "1", "-n", node("started"), pool="solo", module=READS)
    app = make_app(**TRANSPORT)
    call = task.sender(app).delay(3)
    assert poll(lambda: coord.llen("runs") == 1, 30), first.log()[-3000:]
    first.process.wait(10)
    assert not process_alive(first.pid)
    assert call.state == "PENDING"

    second = task.start(worker_process, urls, "-c", "1", "-n", node("again"), pool="solo", module=READS)

    def ran() -> bool:
        redeliver(app, urls)
        return bool(call.ready())

    assert poll(ran, 60, interval=0.3), second.log()[-3000:]
    assert call.get(timeout=1) == 3
    assert coord.lrange("runs", 0, -1) == [call.id.encode()] * 2  # killed mid-run: run again
    reads = [entry.decode() for entry in coord.lrange("reads", 0, -1)]
    assert f"{call.id} True 0" in reads, second.log()[-3000:]
    assert sorted(reads) == sorted(set(reads)), (reads, second.log()[-3000:])
