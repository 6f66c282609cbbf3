"""core.resp.kernel_timeouts: a socket's timeout, as the kernel keeps it (SO_RCVTIMEO and
SO_SNDTIMEO), and the timeouts it must leave to Python. A local socket pair, no server."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest

from celery_redislock.core.resp import KERNEL_TIMEOUTS, kernel_timeouts

pytestmark = pytest.mark.skipif(not KERNEL_TIMEOUTS, reason="Python's timeouts here")


@pytest.fixture
def sock() -> Iterator[socket.socket]:
    a, b = socket.socketpair()
    yield a
    a.close()
    b.close()


def kernel_timeout(sock: socket.socket, option: int) -> tuple[int, int]:
    seconds, micros = struct.unpack("ll", sock.getsockopt(socket.SOL_SOCKET, option, 16))
    return seconds, micros


@pytest.mark.parametrize(("timeout", "timeval"), [(5, (5, 0)), (0.2, (0, 200_000)), (2.5, (2, 500_000))])
def test_the_kernel_keeps_the_same_timeout(
    sock: socket.socket, timeout: float, timeval: tuple[int, int]
) -> None:
    sock.settimeout(timeout)
    kernel_timeouts(sock)
    assert sock.gettimeout() is None  # blocking: no poll() before each call
    assert kernel_timeout(sock, socket.SO_RCVTIMEO) == timeval
    assert kernel_timeout(sock, socket.SO_SNDTIMEO) == timeval


def test_a_timeout_under_a_microsecond_is_never_wait_forever(sock: socket.socket) -> None:
    sock.settimeout(1e-9)
    kernel_timeouts(sock)
    # A zero timeval would mean "no timeout" to the kernel (which rounds up to its tick).
    assert kernel_timeout(sock, socket.SO_RCVTIMEO) != (0, 0)
    assert kernel_timeout(sock, socket.SO_SNDTIMEO) != (0, 0)


@pytest.mark.parametrize("timeout", [None, 0.0])
def test_no_timeout_or_a_non_blocking_socket_is_left_as_it_is(
    sock: socket.socket, timeout: float | None
) -> None:
    sock.settimeout(timeout)
    kernel_timeouts(sock)
    assert sock.gettimeout() == timeout
    assert kernel_timeout(sock, socket.SO_RCVTIMEO) == (0, 0)


def test_a_timed_out_read_is_a_blocking_io_error_the_call_maps_to_a_timeout(sock: socket.socket) -> None:
    sock.settimeout(0.05)
    kernel_timeouts(sock)
    with pytest.raises(BlockingIOError):  # what core.resp.call turns into redis.TimeoutError
        sock.recv(1)
