"""The hot path's own RESP packing and parsing (``core.resp``) against a real redis-server: every
reply kind on RESP2 and RESP3, long replies, errors, a broken or paused server, an interrupted
call and a server push, each leaving the connection's next reply the right one."""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from celery_redislock.core import resp
from celery_redislock.core.scripts import DirectConnection


@pytest.fixture
def direct_on(redislock_url: str) -> Iterator[Callable[..., DirectConnection]]:
    """A DirectConnection on a new client of the test server (``protocol``, timeouts...); the
    server is flushed after the test."""
    clients: list[redis.Redis] = []

    def make(**options: Any) -> DirectConnection:
        clients.append(redis.Redis.from_url(redislock_url, **options))
        direct = DirectConnection.for_client(clients[-1])
        assert direct is not None
        return direct

    yield make
    for client in clients:
        client.close()


def kernel_timeout(sock: socket.socket, option: int) -> tuple[int, int]:
    """``(seconds, microseconds)`` of the socket's ``SO_RCVTIMEO`` or ``SO_SNDTIMEO``."""
    seconds, micros = struct.unpack("ll", sock.getsockopt(socket.SOL_SOCKET, option, 16))
    return seconds, micros


def client_id(direct: DirectConnection) -> int:
    reply = direct.execute("CLIENT", "ID")
    assert isinstance(reply, int)
    return reply


@pytest.mark.parametrize("protocol", [2, 3])
def test_every_reply_kind_the_lock_calls_can_get(
    direct_on: Callable[..., DirectConnection], protocol: int
) -> None:
    direct = direct_on(protocol=protocol)
    assert direct.execute("SET", "resp:k", "v", "NX", "PX", "5000") == b"OK"
    assert direct.execute("SET", "resp:k", "w", "NX", "PX", "5000") is None  # RESP3: "_"
    assert direct.execute("GET", "resp:k") == b"v"
    assert direct.execute("GET", "resp:none") is None
    assert direct.execute("INCRBY", "resp:n", 41) == 41
    assert direct.execute(
        "EVAL", "return {1, 'two', {3, false}, redis.call('GET', KEYS[1])}", 1, "resp:k"
    ) == [
        1,
        b"two",
        [3, None],
        b"v",
    ]
    assert direct.execute("EVAL", "return false", 0) is None
    assert direct.execute("SET", "resp:é", "ünïcode") == b"OK"
    assert direct.execute("GET", "resp:é") == "ünïcode".encode()
    with pytest.raises(redis.ResponseError, match="unknown command"):
        direct.execute("NO-SUCH-COMMAND")
    # The error left nothing behind: the next reply is the next command's.
    assert direct.execute("ECHO", "after") == b"after"


def test_a_script_unknown_to_the_server_is_a_noscript_error_then_sent_whole(
    direct_on: Callable[..., DirectConnection], redislock_redis: redis.Redis
) -> None:
    direct = direct_on()
    script = redislock_redis.register_script("return ARGV[1] .. '!'")
    redislock_redis.script_flush()
    with pytest.raises(redis.exceptions.NoScriptError):
        direct.execute("EVALSHA", script.sha, 0, "x")
    assert direct.script(script, [], ["hi"]) == b"hi!"  # EVAL after the NOSCRIPT
    assert direct.execute("EVALSHA", script.sha, 0, "again") == b"again!"


def test_a_reply_longer_than_one_read_is_read_whole(direct_on: Callable[..., DirectConnection]) -> None:
    direct = direct_on()
    value = bytes(range(256)) * 1200  # 300 KiB, CRLFs inside: several recv() calls
    assert direct.execute("SET", "resp:big", value) == b"OK"
    assert direct.execute("GET", "resp:big") == value
    assert direct.execute("EVAL", "return {ARGV[1], ARGV[1]}", 0, value) == [value, value]
    assert direct.execute("ECHO", "next") == b"next"


def test_a_connection_the_server_closed_is_made_again_once(
    direct_on: Callable[..., DirectConnection], redislock_redis: redis.Redis
) -> None:
    direct = direct_on(retry=redis.retry.Retry(redis.backoff.NoBackoff(), 1))
    first = client_id(direct)
    assert redislock_redis.client_kill_filter(_id=first) == 1
    assert direct.execute("ECHO", "back") == b"back"  # failed on the dead socket, retried
    assert client_id(direct) != first


def test_a_server_that_does_not_answer_in_time_is_a_timeout_and_a_clean_connection_after(
    direct_on: Callable[..., DirectConnection], redislock_redis: redis.Redis
) -> None:
    direct = direct_on(socket_timeout=0.2, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))
    first = client_id(direct)
    if resp.KERNEL_TIMEOUTS:  # here the kernel times the call out, not Python's poll()
        sock = direct.connection()._sock
        assert sock.gettimeout() is None
        assert kernel_timeout(sock, socket.SO_RCVTIMEO) == (0, 200_000)
    redislock_redis.execute_command("CLIENT", "PAUSE", 1500, "ALL")
    try:
        with pytest.raises(redis.TimeoutError):
            direct.execute("ECHO", "late")
    finally:
        redislock_redis.execute_command("CLIENT", "UNPAUSE")
    # The late reply is never read as the next command's: the connection was dropped.
    assert direct.execute("ECHO", "on time") == b"on time"
    assert client_id(direct) != first


@pytest.mark.skipif(not resp.KERNEL_TIMEOUTS, reason="Python's timeouts here")
def test_a_timeout_set_on_the_socket_again_moves_to_the_kernel_at_the_next_call(
    direct_on: Callable[..., DirectConnection],
) -> None:
    direct = direct_on(socket_timeout=5)
    client_id(direct)
    sock = direct.connection()._sock
    sock.settimeout(0.5)  # as redis-py does after a read with a timeout of its own
    assert direct.execute("ECHO", "x") == b"x"
    assert sock.gettimeout() is None
    assert kernel_timeout(sock, socket.SO_SNDTIMEO) == (0, 500_000)


GEVENT_TIMEOUT = """
from gevent import monkey; monkey.patch_all()
import sys, redis
from celery_redislock.core.scripts import DirectConnection
client = redis.Redis.from_url(sys.argv[1], socket_timeout=0.2, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))
direct = DirectConnection.for_client(client)
direct.execute("PING")
print("ready", flush=True)
sys.stdin.readline()  # the server is paused now
try:
    direct.execute("ECHO", "late")
except redis.TimeoutError:
    print("timeout")
"""


def test_a_cooperative_socket_keeps_its_own_timeout(redislock_url: str, redislock_redis: redis.Redis) -> None:
    # gevent's socket keeps its descriptor non-blocking, where SO_RCVTIMEO never applies: made
    # blocking, a call to a server that does not answer would wait forever.
    pytest.importorskip("gevent")
    child = subprocess.Popen(
        [sys.executable, "-c", GEVENT_TIMEOUT, redislock_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        redislock_redis.execute_command("CLIENT", "PAUSE", 1500, "ALL")
        child.stdin.write("go\n")
        child.stdin.flush()
        out, _ = child.communicate(timeout=10)  # its 0.2 s timeout, before the pause ends
        assert out.strip() == "timeout"
    finally:
        redislock_redis.execute_command("CLIENT", "UNPAUSE")
        if child.poll() is None:
            child.kill()
            child.wait()


class Interrupted(BaseException):
    """What a soft time limit looks like to code it interrupts: raised from a signal handler."""


def test_a_call_interrupted_while_waiting_for_its_reply_leaves_no_reply_behind(
    direct_on: Callable[..., DirectConnection], redislock_redis: redis.Redis
) -> None:
    direct = direct_on()
    first = client_id(direct)
    previous = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(Interrupted()))
    redislock_redis.execute_command("CLIENT", "PAUSE", 1000, "ALL")
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(Interrupted):
            direct.execute("ECHO", "interrupted")  # its reply comes after the pause
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        redislock_redis.execute_command("CLIENT", "UNPAUSE")
    assert direct.execute("ECHO", "mine") == b"mine"
    assert client_id(direct) != first


def test_a_server_push_before_the_reply_is_skipped_and_the_connection_made_again(
    direct_on: Callable[..., DirectConnection], redislock_redis: redis.Redis
) -> None:
    # RESP3 client-side caching: the server pushes an invalidation on the tracking connection
    # itself, ahead of the next reply.
    direct = direct_on(protocol=3)
    first = client_id(direct)
    assert direct.execute("CLIENT", "TRACKING", "ON") == b"OK"
    redislock_redis.set("resp:tracked", "1")
    assert direct.execute("GET", "resp:tracked") == b"1"
    # Invalidates: the push is written to our socket now, ahead of the next command's reply.
    redislock_redis.set("resp:tracked", "2")
    assert direct.execute("ECHO", "reply") == b"reply"
    assert client_id(direct) != first  # a connection with a push in it is not kept


def test_an_idle_connection_is_health_checked_before_its_next_command(
    direct_on: Callable[..., DirectConnection], redislock_redis: redis.Redis
) -> None:
    direct = direct_on(health_check_interval=30)
    direct.execute("ECHO", "connect")
    pings = ping_calls(redislock_redis)
    direct.execute("ECHO", "fresh")  # used just now: no PING
    assert ping_calls(redislock_redis) == pings
    connection = direct.connection()
    connection.next_health_check = 0  # as if idle for longer than the interval
    assert direct.execute("ECHO", "idle") == b"idle"
    assert ping_calls(redislock_redis) == pings + 1


def ping_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats").get("cmdstat_ping")
    return int(stats["calls"]) if stats else 0


def test_the_task_commands_templates_pack_as_the_generic_packer_does() -> None:
    # Key and holder as a client encodes them (UTF-8 here, a non-ASCII task name included).
    key, holder = "redislock:tâche:0123".encode(), b"id@celery@h:ab:12:3"
    assert resp.set_nx_px(key, holder, b"60000") == resp.pack(("SET", key, holder, "NX", "PX", "60000"))
    sha = "a" * 40
    assert resp.evalsha(sha, key, holder) == resp.pack(("EVALSHA", sha, 1, key, holder))
