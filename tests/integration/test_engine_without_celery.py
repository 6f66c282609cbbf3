"""RedisLock and RedisSemaphore work in a process that cannot import Celery at all."""

from __future__ import annotations

import subprocess
import sys

from celery_redislock.contrib.testing import RedisServer

# Installed before anything else is imported: importing celery or kombu (or anything of theirs)
# raises, as it would where they are not installed.
NO_CELERY = """
import sys

class NoCelery:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("celery", "kombu"):
            raise ImportError(f"{name} is blocked: the engine must not need it")
        return None

sys.meta_path.insert(0, NoCelery())
"""

PROBE = """
import redis
from celery_redislock import RedisLock, RedisSemaphore

client = redis.Redis.from_url(URL)
lock = RedisLock(client, "standalone:lock", timeout=5)
with lock:
    assert client.get("standalone:lock") == lock.holder.encode()
    assert not RedisLock(client, "standalone:lock").acquire(blocking=False)
assert client.exists("standalone:lock") == 0
with RedisSemaphore(client, "standalone:sem", limit=2) as semaphore:
    assert client.zscore("standalone:sem", semaphore.holder) is not None
assert client.zcard("standalone:sem") == 0
print(sorted(m for m in sys.modules if m.split(".")[0] in ("celery", "kombu")))
"""


def test_a_lock_and_a_semaphore_acquire_and_release_where_celery_cannot_be_imported(
    redislock_server: RedisServer,
) -> None:
    blocked = subprocess.run(
        [sys.executable, "-c", NO_CELERY + "import celery"], capture_output=True, text=True
    )
    assert blocked.returncode != 0 and "celery is blocked" in blocked.stderr  # the block works
    code = NO_CELERY + f"URL = {redislock_server.url!r}\n" + PROBE
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
