"""A partner API on loopback for the adaptive-limit tests and benchmark: a real HTTP server
(stdlib ``http.server``, in a thread) that serves ``capacity`` calls a second (a token bucket)
and at most ``concurrency`` at once, and answers ``429`` with a ``Retry-After`` above that.
Its capacity may change while it runs; it records every answer, so a test reads the rate it
served and its 429s over time. A worker calls ``GET /call?n=<call>``."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Answer", "Partner"]


@dataclass(frozen=True)
class Answer:
    """One answer: when (the partner's monotonic clock, seconds), its status, and the call."""

    at: float
    status: int
    call: str


class Partner:
    """The partner: ``with Partner(capacity=10) as partner: partner.url`` ... ``partner.capacity = 20``.

    ``bucket``: seconds of capacity the bucket holds (a burst after an idle spell);
    ``service``: seconds each call takes to answer; ``fractional``: Retry-After in ms-precise
    seconds (``"0.137"``) rather than whole ones."""

    def __init__(
        self,
        capacity: float,
        concurrency: int = 64,
        *,
        bucket: float = 0.25,
        service: float = 0.01,
        fractional: bool = True,
    ) -> None:
        self._lock = threading.Lock()
        self._capacity = float(capacity)
        self.concurrency = concurrency
        self.bucket_seconds = bucket
        self.service = service
        self.fractional = fractional
        self._tokens = self._size()
        self._refilled = time.monotonic()
        self._in_flight = 0
        self.answers: list[Answer] = []
        self.started = time.monotonic()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="partner", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/call"

    @property
    def capacity(self) -> float:
        return self._capacity

    @capacity.setter
    def capacity(self, value: float) -> None:
        with self._lock:
            self._refill(time.monotonic())
            self._capacity = float(value)
            self._tokens = min(self._tokens, self._size())

    def __enter__(self) -> Partner:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def _size(self) -> float:
        return max(1.0, self._capacity * self.bucket_seconds)

    def _refill(self, now: float) -> None:
        self._tokens = min(self._size(), self._tokens + (now - self._refilled) * self._capacity)
        self._refilled = now

    def take(self, call: str) -> tuple[int, float]:
        """Answer one call: ``(200, 0)``, or ``(429, seconds to wait)``; recorded."""
        now = time.monotonic()
        with self._lock:
            self._refill(now)
            if self._in_flight >= self.concurrency:
                status, wait = 429, self.service
            elif self._tokens >= 1:
                self._tokens -= 1
                self._in_flight += 1
                status, wait = 200, 0.0
            else:
                status, wait = 429, (1 - self._tokens) / self._capacity
            self.answers.append(Answer(now - self.started, status, call))
        return status, wait

    def done(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def served(self, start: float, end: float) -> tuple[int, int]:
        """``(200s, 429s)`` answered from ``start`` to ``end`` (seconds since it started)."""
        with self._lock:
            answers = [a for a in self.answers if start <= a.at < end]
        return sum(a.status == 200 for a in answers), sum(a.status == 429 for a in answers)

    def now(self) -> float:
        """Seconds since it started, on its clock (what ``served`` reads)."""
        return time.monotonic() - self.started

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        partner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                call = self.path.partition("n=")[2]
                status, wait = partner.take(call)
                if status == 200:
                    try:
                        time.sleep(partner.service)  # the call's work: what keeps it in flight
                    finally:
                        partner.done()
                    self.send_response(200)
                else:
                    self.send_response(429)
                    # Never "0.000" (a token almost refilled): a Retry-After of 0 is no wait.
                    after = f"{max(wait, 0.001):.3f}" if partner.fractional else str(max(1, math.ceil(wait)))
                    self.send_header("Retry-After", after)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: a test reads the answers, not a log line a call."""

        return Handler
