"""The conditional-delete commands as data: which one a server's answer picks, what a reply error
means, and each command's arguments (no server here: the behaviour against real servers is
tests/integration/test_conditional_delete.py)."""

from __future__ import annotations

import pytest
from redis.exceptions import NoPermissionError, ReadOnlyError, ResponseError

from celery_redislock.engine.conditional_delete import COMMANDS, choose, unavailable

DELIFEQ, DELEX = COMMANDS


@pytest.mark.parametrize(
    ("reply", "chosen"),
    [
        ([b"del", b"delifeq"], DELIFEQ),  # Valkey 9
        ([b"delex", b"del"], DELEX),  # Redis 8.4
        ([b"DELEX", b"DELIFEQ"], DELIFEQ),  # both: the first of COMMANDS
        (["delex"], DELEX),  # a client that decodes replies
        ([b"del"], None),  # Redis 7, Valkey 8
        ([], None),
        (None, None),
        (b"delifeq", None),  # not a list of names
    ],
)
def test_the_servers_answer_picks_its_command(reply: object, chosen: object) -> None:
    assert choose(reply) is chosen


def test_only_an_unknown_or_denied_command_turns_back_to_the_script() -> None:
    assert unavailable(ResponseError("unknown command 'DELIFEQ', with args beginning with: 'k' 'v' "))
    assert unavailable(NoPermissionError("User locker has no permissions to run the 'delex' command"))
    assert not unavailable(ReadOnlyError("You can't write against a read only replica."))
    assert not unavailable(ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"))


def test_each_command_puts_its_condition_between_the_key_and_the_value() -> None:
    assert DELIFEQ.args("k", "v") == ("DELIFEQ", "k", "v")
    assert DELEX.args("k", "v") == ("DELEX", "k", "IFEQ", "v")
