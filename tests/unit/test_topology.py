"""Sentinel and Cluster lock URLs and transport options: resolution, validation, clear errors."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from celery_redislock.config.lock_client import client_factory
from celery_redislock.config.settings import read_settings, validate_transport_options
from celery_redislock.config.urls import resolve_redis_url, url_topology
from celery_redislock.errors import OptionError, RedisURLError

SENTINELS = "sentinel://:pw@s1:26379/0;sentinel://:pw@s2:26379/0;sentinel://:pw@s3:26379/0"
NODES = "redis://n1:7000/0?cluster=true;redis://n2:7001;redis://n3:7002"


@pytest.mark.parametrize(
    ("url", "topology"),
    [
        ("redis://h:6379/0", "single"),
        ("unix:///tmp/r.sock?db=1", "single"),
        (SENTINELS, "sentinel"),
        ("redis://n1:7000/0?cluster=true", "cluster"),
        ("rediss://n1:7000?cluster=yes", "cluster"),
        ("redis://n1:7000/0?cluster=false", "single"),
        (NODES, "cluster"),
    ],
)
def test_url_topology(url: str, topology: str) -> None:
    assert url_topology(url) == topology


def test_a_cluster_url_keeps_every_node() -> None:
    assert resolve_redis_url(NODES, None, None) == NODES
    assert resolve_redis_url(None, NODES.split(";"), None) == NODES


def test_an_unclear_cluster_flag_is_an_error() -> None:
    with pytest.raises(
        RedisURLError, match=r"cluster='maybe' in 'redis://:\*\*\*\*@n1:7000/0\?cluster=maybe'"
    ):
        resolve_redis_url("redis://:secret@n1:7000/0?cluster=maybe", None, None)


@pytest.mark.parametrize("url", ["redis://n1:7000/2?cluster=true", "redis://n1:7000?cluster=true&db=1"])
def test_a_cluster_has_only_database_0(url: str) -> None:
    with pytest.raises(RedisURLError, match="redislock_url names a Redis Cluster, which has only database 0"):
        read_settings({"redislock_url": url})


def test_a_sentinel_broker_lends_its_transport_options() -> None:
    settings = read_settings(
        {
            "broker_url": SENTINELS,
            "broker_transport_options": {"master_name": "mymaster", "visibility_timeout": 3600},
        }
    )
    assert settings.url == SENTINELS
    assert dict(settings.transport_options) == {"master_name": "mymaster"}  # the broker's own dropped


def test_a_sentinel_result_backend_lends_its_transport_options() -> None:
    settings = read_settings(
        {
            "broker_url": "amqp://rabbit//",
            "result_backend": SENTINELS,
            "result_backend_transport_options": {"master_name": "results"},
        }
    )
    assert settings.transport_options["master_name"] == "results"


def test_redislock_transport_options_win_over_the_brokers() -> None:
    settings = read_settings(
        {
            "broker_url": SENTINELS,
            "broker_transport_options": {"master_name": "broker-master"},
            "redislock_transport_options": {"master_name": "locks", "sentinel_kwargs": {"password": "s"}},
        }
    )
    assert dict(settings.transport_options) == {"master_name": "locks", "sentinel_kwargs": {"password": "s"}}
    assert "'s'" not in repr(settings)  # a Sentinel password is not shown


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"redislock_url": SENTINELS}, "redislock_url is a Sentinel URL"),
        ({"broker_url": SENTINELS}, "broker_transport_options has no 'master_name'"),
        ({"broker_url": SENTINELS, "broker_transport_options": {"visibility_timeout": 10}}, "master_name"),
    ],
)
def test_sentinel_without_a_master_name(conf: dict[str, Any], message: str) -> None:
    with pytest.raises(RedisURLError, match=message) as info:
        read_settings(conf)
    assert "pw" not in str(info.value)
    assert "redislock_transport_options = {'master_name': 'mymaster'}" in str(info.value)


@pytest.mark.parametrize(
    ("options", "option", "problem"),
    [
        ({"master_nam": "m"}, "master_nam", "did you mean 'master_name'?"),
        ({"master_name": ""}, "master_name", "must be the master's name"),
        ({"master_name": 5}, "master_name", "(a int)"),
        ({"sentinel_kwargs": "password=x"}, "sentinel_kwargs", "must be None or a dict"),
        ({"min_other_sentinels": -1}, "min_other_sentinels", "must be an int >= 0"),
        ({"min_other_sentinels": True}, "min_other_sentinels", "must be an int >= 0"),
    ],
)
def test_bad_transport_options_name_the_option(options: dict[str, Any], option: str, problem: str) -> None:
    with pytest.raises(OptionError) as info:
        read_settings({"redislock_url": SENTINELS, "redislock_transport_options": options})
    assert info.value.option == option and info.value.source == "redislock_transport_options"
    assert problem in str(info.value)


def test_transport_options_must_be_a_dict() -> None:
    with pytest.raises(OptionError, match="must be a dict"):
        validate_transport_options(["master_name"], "redislock_transport_options")


def test_a_bad_port_is_a_configuration_error_before_any_connection() -> None:
    with pytest.raises(ValueError):
        client_factory("redis://n1:notaport/0?cluster=true")


def test_clients_are_made_only_when_asked() -> None:
    # Nothing listens on port 1: making the factory does not connect; calling it does, for a cluster.
    make = client_factory("redis://127.0.0.1:1/0?cluster=true", socket_connect_timeout=0.5)
    with pytest.raises(redis.ConnectionError, match=re.escape("Redis Cluster at redis://127.0.0.1:1/0")):
        make()
    single = client_factory("redis://127.0.0.1:1/0")()
    assert isinstance(single, redis.Redis) and not isinstance(single, RedisCluster)
    sentinel = client_factory(SENTINELS, {"master_name": "m"})()
    assert isinstance(sentinel, redis.Redis)


@pytest.mark.parametrize(
    ("conf", "setting"),
    [
        ({"redislock_url": "redis://h:6379/2", "broker_url": "redis://b:6379/0"}, "redislock_url"),
        ({"broker_url": "redis://b:6379/0", "result_backend": "redis://r:6379/1"}, "broker_url"),
        ({"broker_url": "amqp://guest@b//", "result_backend": "redis://r:6379/1"}, "result_backend"),
    ],
)
def test_settings_name_the_setting_their_url_came_from(conf: dict[str, Any], setting: str) -> None:
    assert read_settings(conf).url_setting == setting


@pytest.mark.parametrize("setting", ["broker_url", "result_backend"])
def test_the_worker_check_names_the_setting_of_a_url_redis_py_cannot_parse(setting: str) -> None:
    # Parsed when the app's runtime is made, not connected: no server needed. A process of its
    # own: finalizing an app here would also register the other tests' shared tasks.
    probe = f"""
from celery import Celery
from celery_redislock import SingletonTask
from celery_redislock.integration.bootstep import check_app
app = Celery("topology", set_as_current=False)
app.conf.update({{"broker_url": "amqp://guest@b//", "result_backend": "rpc://", {setting!r}: "redis://h:notaport/0"}})

@app.task(base=SingletonTask, shared=False)
def f(): ...

print(check_app(app, []))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    problem = done.stdout.strip()
    assert problem.startswith(f"{setting}: the Redis URL for the locks cannot be parsed"), problem
    assert "notaport" in problem
