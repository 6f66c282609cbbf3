"""Fair share's lane assignment against a real redis-server: sticky while a tenant has a
backlog, least-loaded for a tenant without one, weights spread a tenant, each ticket counted
once in and once out, and every key of a queue in one cluster slot."""

from __future__ import annotations

import pytest
import redis

from celery_redislock.engine import fair_lanes
from celery_redislock.engine.fair_lanes import SWEEP, FairLanes, LaneState, hashed_lane
from celery_redislock.engine.keys import fair_keys
from celery_redislock.engine.script_runner import ScriptRunner

from .helpers import script_calls


def lanes_of(client: redis.Redis, queue: str = "q", prefix: str = "redislock") -> FairLanes:
    return FairLanes(ScriptRunner(client), prefix, queue)


def test_a_tenant_keeps_its_lane_while_it_has_a_backlog_and_another_gets_the_least_loaded(
    redislock_redis: redis.Redis,
) -> None:
    lanes = lanes_of(redislock_redis)
    flood = {lanes.assign("a", f"a{n}", 4) for n in range(50)}
    assert len(flood) == 1  # one lane: A's calls stay in their order
    (a_lane,) = flood
    b_lanes = {lanes.assign("b", f"b{n}", 4) for n in range(3)}
    assert len(b_lanes) == 1 and b_lanes != flood
    c_lane = lanes.assign("c", "c0", 4)
    assert c_lane not in flood | b_lanes  # an empty lane, not behind A nor B
    state = lanes.state()
    assert state.backlog("a") == 50 and state.backlog("b") == 3 and state.queued == 54
    assert state.load[a_lane] == 50
    # Three busy lanes: each tenant alone in its own gets a third of the starts.
    assert abs(state.share("b") - 1 / 3) < 1e-9


def test_a_tenant_whose_backlog_drained_may_move_to_the_least_loaded_lane(
    redislock_redis: redis.Redis,
) -> None:
    lanes = lanes_of(redislock_redis)
    lanes.assign("a", "a0", 2)
    for n in range(5):
        lanes.assign("b", f"b{n}", 2)
    lanes.assign("c", "c0", 2)  # the other lane, with less than A's
    assert lanes.started("a0")
    assert lanes.state().backlog("a") == 0 and "a" not in lanes.state().tenants
    again = lanes.assign("a", "a1", 2)
    assert lanes.state().load[again] == 2  # beside C's one call, not behind B's five


def test_a_ticket_is_counted_in_once_and_out_once(redislock_redis: redis.Redis) -> None:
    lanes = lanes_of(redislock_redis)
    lane = lanes.assign("a", "t1", 8)
    assert lanes.assign("a", "t1", 8) == lane  # sent again (a retried publish): counted once
    assert lanes.state().backlog("a") == 1
    assert lanes.started("t1")
    assert not lanes.started("t1")  # the broker gave it out again: not counted out twice
    assert not lanes.started("never-assigned")  # sent to a hashed lane while Redis was away
    assert lanes.state().load == {} and lanes.state().tenants == {} and lanes.state().queued == 0
    assert not redislock_redis.keys("*fair*")  # nothing kept once the backlogs are empty


def test_a_weight_spreads_a_tenant_over_that_many_lanes(redislock_redis: redis.Redis) -> None:
    lanes = lanes_of(redislock_redis)
    heavy = {lanes.assign("heavy", f"h{n}", 8, weight=3) for n in range(30)}
    light = {lanes.assign("light", f"l{n}", 8) for n in range(30)}
    assert len(heavy) == 3 and len(light) == 1 and not heavy & light
    state = lanes.state()
    assert sorted(state.tenants["heavy"].values()) == [10, 10, 10]  # least-loaded of its own first
    assert abs(state.share("heavy") - 3 / 4) < 1e-9


def test_fewer_lanes_than_before_keeps_calls_within_the_lanes(redislock_redis: redis.Redis) -> None:
    lanes = lanes_of(redislock_redis)
    eight = {lanes.assign(f"t{n}", f"x{n}", 8) for n in range(8)}
    assert eight == set(range(8))  # each alone in a lane of eight
    assert lanes.assign("t7", "y", 2) in (0, 1)  # its lane 7 no longer exists


def test_the_keys_of_a_queue_share_a_slot_and_keep_a_prefix_tag() -> None:
    plain = fair_keys("redislock", "q")
    assert all(key.startswith("{redislock:fair:q}:") for key in plain)
    tagged = fair_keys("{app}:locks", "q")
    assert all(key.startswith("{app}:locks:fair:q:") for key in tagged)


def test_the_hashed_lane_is_stable_and_in_range() -> None:
    assert hashed_lane("acme", 16) == hashed_lane("acme", 16)
    assert {hashed_lane(f"t{n}", 5) for n in range(200)} == set(range(5))


def test_many_tickets_are_counted_out_in_one_call_each_once(redislock_redis: redis.Redis) -> None:
    lanes = lanes_of(redislock_redis)
    for n in range(6):
        lanes.assign("a" if n % 2 else "b", f"t{n}", 4)
    # Two of them counted out already, one never counted in, one given twice: counted out once.
    assert lanes.started("t0") and lanes.started("t1")
    assert lanes.started_many(["t0", "t1", "t2", "t3", "t3", "never-assigned", "t4", "t5"]) == 4
    assert lanes.state() == LaneState({}, {}, 0)
    assert lanes.started_many([]) == 0


def expire(client: redis.Redis, lanes: FairLanes, tickets: list[str]) -> None:
    """Let the expiry of ``tickets`` pass: scored ten seconds ago by the server's clock."""
    past = float(client.time()[0]) - 10
    client.zadd(lanes.expiry_key, dict.fromkeys(tickets, past), xx=True)


def test_calls_whose_expiry_passed_are_swept_out_of_their_backlog(redislock_redis: redis.Redis) -> None:
    lanes = lanes_of(redislock_redis)
    later = float(redislock_redis.time()[0]) + 3600
    gone = [f"old{n}" for n in range(5)]
    for ticket in [*gone, "new"]:
        lanes.assign("gone" if ticket in gone else "live", ticket, 4, expires_at=later)
    lanes.assign("live", "plain", 4)
    expire(redislock_redis, lanes, gone)  # a broker may drop these unseen: nobody counts them out
    assert lanes.state().queued == 7
    # Each script call sweeps a few (SWEEP), at assign and at count-out alike.
    lanes.assign("live", "more", 4)
    assert lanes.state().backlog("gone") == 5 - SWEEP
    assert lanes.started_many(["plain"]) == 1
    assert lanes.state().backlog("gone") == 0 and "gone" not in lanes.state().tenants
    assert lanes.sweep() == 0  # nothing left expired
    assert lanes.started("new")  # counted out as it ran: its expiry forgotten too
    assert redislock_redis.zcard(lanes.expiry_key) == 0
    assert lanes.started("more") and lanes.state() == LaneState({}, {}, 0)


def test_fair_show_sweeps_every_expired_call(redislock_redis: redis.Redis) -> None:
    lanes = lanes_of(redislock_redis)
    later = float(redislock_redis.time()[0]) + 3600
    tickets = [f"old{n}" for n in range(50)]
    for ticket in tickets:
        lanes.assign("gone", ticket, 4, expires_at=later)
    expire(redislock_redis, lanes, tickets)
    assert lanes.sweep() == 50
    assert lanes.state() == LaneState({}, {}, 0) and not redislock_redis.keys("*fair*")


def test_a_full_sweep_takes_the_expired_calls_a_batch_a_script_call(
    redislock_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A script runs alone on its server: a sweep of many calls is many short script calls.
    monkeypatch.setattr(fair_lanes, "SWEEP_BATCH", 7)
    lanes = lanes_of(redislock_redis)
    later = float(redislock_redis.time()[0]) + 3600
    tickets = [f"old{n}" for n in range(50)]
    for ticket in tickets:
        lanes.assign("gone", ticket, 4, expires_at=later)
    lanes.sweep()  # nothing expired yet: the script is loaded, its calls counted from here
    before = script_calls(redislock_redis)
    expire(redislock_redis, lanes, tickets)
    assert lanes.sweep() == 50
    assert script_calls(redislock_redis) - before == 8  # seven full batches of 7, then one of 1
    assert lanes.state() == LaneState({}, {}, 0)
