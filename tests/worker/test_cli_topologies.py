"""`celery redislock list|purge` on a Redis Cluster (every primary's keys) and through Sentinel."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from redis.cluster import RedisCluster

from celery_redislock.config.lock_client import make_client
from celery_redislock.contrib.testing import ClusterSet, SentinelSet
from tests.harness import free_port

from .test_cli import ADD, REPORT, Run, celery_cmd, lock_key

__all__ = ["celery_cmd"]  # the fixture, imported to be found here


def test_list_and_purge_cover_every_primary_of_a_cluster(
    cluster: ClusterSet, celery_cmd: Callable[..., Run]
) -> None:
    client = make_client(cluster.url)
    assert isinstance(client, RedisCluster)
    keys = [lock_key(ADD, str(n)) for n in range(30)] + [lock_key(REPORT, "r")]
    assert len({client.get_node_from_key(key).name for key in keys}) == 3
    for key in keys:
        client.set(key, f"holder-of-{key}", px=60_000)
    client.set("otherapp:proj.add:x", "kept")
    celery = celery_cmd(redislock_url=cluster.url)

    listed = celery("redislock", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert sorted(row["key"] for row in rows) == sorted(keys)
    assert all(row["holder"] == f"holder-of-{row['key']}" for row in rows)

    purged = celery("redislock", "purge", "--task", ADD, "--yes")
    assert purged.returncode == 0, purged.stderr
    assert purged.stdout.strip() == "Purged 30 lock(s)"
    assert [row["key"] for row in json.loads(celery("redislock", "list", "--json").stdout)] == [
        lock_key(REPORT, "r")
    ]
    assert client.get("otherapp:proj.add:x") == b"kept"
    client.close()


def test_list_through_sentinel(sentinels: SentinelSet, celery_cmd: Callable[..., Run]) -> None:
    key = lock_key(ADD, "s")
    with sentinels.master().client() as master:
        master.set(key, "holder-s", px=60_000)
    extra: dict[str, Any] = {"redislock_transport_options": sentinels.transport_options}
    listed = celery_cmd(redislock_url=sentinels.url, **extra)("redislock", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(row["key"], row["holder"]) for row in json.loads(listed.stdout)] == [(key, "holder-s")]


def test_an_unreachable_cluster_is_one_error_line(celery_cmd: Callable[..., Run]) -> None:
    result = celery_cmd(redislock_url=f"redis://:hunter2@127.0.0.1:{free_port()}/0?cluster=true")(
        "redislock", "list"
    )
    assert result.returncode != 0
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "unreachable" in lines[0] and "hunter2" not in lines[0]
