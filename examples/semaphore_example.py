"""RedisSemaphore without Celery: ten threads share three slots, served in arrival order.

    python examples/semaphore_example.py [REDIS_URL]

Without a URL it starts a throwaway redis-server (the ``test`` extra brings one).
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import ExitStack

import redis

from celery_redislock import RedisSemaphore
from celery_redislock.contrib.testing import RedisServer


def main(url: str) -> None:
    r = redis.Redis.from_url(url)
    mutex = threading.Lock()
    inside, most = 0, 0

    def call_api() -> None:
        nonlocal inside, most
        # At most 3 at once across every thread, process and host using this Redis.
        with RedisSemaphore(r, "example:api-slots", limit=3, timeout=10):
            with mutex:
                inside += 1
                most = max(most, inside)
            time.sleep(0.05)  # the rate-limited call
            with mutex:
                inside -= 1

    threads = [threading.Thread(target=call_api) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("most inside at once:", most, "of limit 3")


if __name__ == "__main__":
    with ExitStack() as stack:
        main(sys.argv[1] if len(sys.argv) > 1 else stack.enter_context(RedisServer()).url)
