"""RedisLock without Celery: four threads do a read-modify-write that only the lock makes safe.

    python examples/redislock_example.py [REDIS_URL]

Without a URL it starts a throwaway redis-server (the ``test`` extra brings one).
"""

from __future__ import annotations

import sys
import threading
from contextlib import ExitStack

import redis

from celery_redislock import LockNotOwnedError, RedisLock
from celery_redislock.contrib.testing import RedisServer


def main(url: str) -> None:
    r = redis.Redis.from_url(url)
    r.delete("example:counter")

    def bump() -> None:
        for _ in range(25):
            # One object per holder; a blocking acquire waits on the release notice.
            with RedisLock(r, "example:counter-lock", timeout=10):
                value = int(r.get("example:counter") or 0)
                r.set("example:counter", value + 1)

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("counter:", int(r.get("example:counter") or 0), "(4 threads x 25, no update lost)")

    # A lock that expired (renew=False, a 0.1 s TTL) and was taken: release() says so.
    lapsed = RedisLock(r, "example:lapsed", timeout=0.1, renew=False)
    lapsed.acquire()
    other = RedisLock(r, "example:lapsed", timeout=10, acquire_timeout=5, retry_delay=0.05)
    other.acquire()
    try:
        lapsed.release()
    except LockNotOwnedError as exc:
        print(exc)
    other.release()


if __name__ == "__main__":
    with ExitStack() as stack:
        main(sys.argv[1] if len(sys.argv) > 1 else stack.enter_context(RedisServer()).url)
