"""`celery -A app redislock list|release|purge` through the real celery program, on a real Redis."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from celery_redislock.config.arguments import digest
from celery_redislock.engine.keys import format_key, released_key
from tests.harness import TestCA, TLSRedisServer, free_port, module_env

from .conftest import poll


class Run:
    """``run("redislock", "list")`` runs ``celery -A <module> redislock list`` to its end;
    ``run.start(...)`` starts it (a ``Popen``) for a test that talks to it while it runs."""

    def __init__(self, module: str, cwd: Path) -> None:
        self.module = module
        self.cwd = cwd

    def __call__(self, *args: str, stdin: Any = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self._argv(args),
            cwd=self.cwd,
            env=self._env(),
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def start(self, *args: str, stdin: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self._argv(args),
            cwd=self.cwd,
            env=self._env(),
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def _argv(self, args: tuple[str, ...]) -> list[str]:
        return [sys.executable, "-m", "celery", "-A", self.module, *args]

    def _env(self) -> dict[str, str]:
        return module_env(self.cwd)


APP_SOURCE = """
from celery import Celery

app = Celery("cliapp")
app.conf.update(broker_url={broker!r}, result_backend={backend!r}, redislock_url={locks!r}, **{extra!r})
"""

ADD = "proj.add"
REPORT = "proj.report"


def lock_key(task: str, name: str, prefix: str = "redislock") -> str:
    return format_key(prefix, task, digest(name))


@pytest.fixture
def celery_cmd(tmp_path: Path, urls: dict[str, str]) -> Callable[..., Run]:
    """``celery_cmd(**conf)`` writes an app module; calling the result runs ``celery -A it ...``."""
    modules = iter(range(1000))

    def make(**conf: Any) -> Run:
        settings = {"broker": urls["broker"], "backend": urls["backend"], "locks": urls["locks"]}
        if "redislock_url" in conf:
            settings["locks"] = conf.pop("redislock_url")
        module = f"cliapp{next(modules)}"
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(APP_SOURCE.format(extra=conf, **settings)))
        return Run(module, tmp_path)

    return make


@pytest.fixture
def celery(celery_cmd: Callable[..., Run]) -> Run:
    """``celery("redislock", "list")``: runs the real celery program on an app using the test Redis."""
    return celery_cmd()


@pytest.fixture
def held(locks: redis.Redis) -> dict[str, str]:
    """Three locks (two of ADD with TTLs, one of REPORT without) and keys that are not locks."""
    holders = {
        lock_key(ADD, "a"): "task-a@worker1:101:1",
        lock_key(ADD, "b"): "task-b@worker2:202:7",
        lock_key(REPORT, "c"): "task-c@handover",
    }
    locks.set(lock_key(ADD, "a"), holders[lock_key(ADD, "a")], px=60_000)
    locks.set(lock_key(ADD, "b"), holders[lock_key(ADD, "b")], px=30_000)
    locks.set(lock_key(REPORT, "c"), holders[lock_key(REPORT, "c")])
    for key in NOT_LOCKS:
        locks.set(key, "x")
    return holders


NOT_LOCKS = [
    lock_key(ADD, "a") + ":released",  # a release channel's name, should it ever be a key
    "redislock:junk",  # under the prefix, but not '<prefix>:<task>:<digest>'
    lock_key(ADD, "z", prefix="otherapp"),  # another app's prefix
    lock_key(ADD, "y", prefix="redislock:nested"),  # a longer prefix starting with ours
]


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single line a failed command writes on stderr (asserting there is exactly one)."""
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


def remaining(locks: redis.Redis) -> set[str]:
    return {key.decode() for key in locks.scan_iter("*")}


# -- list --------------------------------------------------------------------------------------


def test_list_prints_an_aligned_table_of_the_held_locks(celery: Run, held: dict[str, str]) -> None:
    result = celery("redislock", "list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["KEY", "TASK", "HOLDER", "TTL"]
    assert lines[-1] == "3 lock(s) held"
    rows = {line.split()[0]: line.split() for line in lines[1:-1]}
    assert set(rows) == set(held)  # sorted by key, and nothing that is not a lock
    assert [line.split()[0] for line in lines[1:-1]] == sorted(held)
    for key, (_, task, holder, ttl) in rows.items():
        assert task == (REPORT if REPORT in key else ADD)
        assert holder == held[key]
        if key == lock_key(REPORT, "c"):
            assert ttl == "none"
        else:
            assert ttl.count(".") == 1 and len(ttl.split(".")[1]) == 1  # seconds, one decimal
            assert 0 < float(ttl) <= (60.0 if key == lock_key(ADD, "a") else 30.0)
    # Aligned: every column starts at the same offset on every line.
    for column in ("TASK", "HOLDER"):
        offset = lines[0].index(column)
        assert all(line[offset - 2 : offset] == "  " and line[offset] != " " for line in lines[:-1])
    ttl_end = len(lines[0])
    assert all(len(line) == ttl_end for line in lines[:-1])  # TTL right-aligned


def test_list_json_is_an_array_of_locks_and_nothing_else(celery: Run, held: dict[str, str]) -> None:
    result = celery("redislock", "list", "--json")
    assert result.returncode == 0, result.stderr
    items = json.loads(result.stdout)  # the whole of stdout
    assert [item["key"] for item in items] == sorted(held)
    by_key = {item["key"]: item for item in items}
    for key, item in by_key.items():
        assert set(item) == {"key", "task", "holder", "ttl"}
        assert item["holder"] == held[key]
        assert item["task"] == (REPORT if REPORT in key else ADD)
    assert 55.0 < by_key[lock_key(ADD, "a")]["ttl"] <= 60.0
    assert 25.0 < by_key[lock_key(ADD, "b")]["ttl"] <= 30.0
    assert isinstance(by_key[lock_key(ADD, "b")]["ttl"], float)
    assert by_key[lock_key(REPORT, "c")]["ttl"] is None


def test_list_task_shows_only_that_tasks_locks(celery: Run, held: dict[str, str]) -> None:
    result = celery("redislock", "list", "--task", ADD, "--json")
    assert result.returncode == 0, result.stderr
    assert [item["key"] for item in json.loads(result.stdout)] == sorted(
        [lock_key(ADD, "a"), lock_key(ADD, "b")]
    )

    result = celery("redislock", "list", "--task", REPORT)
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()[1:-1]] == [lock_key(REPORT, "c")]
    assert result.stdout.splitlines()[-1] == "1 lock(s) held"


def test_list_task_escapes_glob_characters(celery: Run, locks: redis.Redis) -> None:
    # Unescaped, the SCAN pattern 'redislock:proj.x[1]:*' would match 'proj.x1' and not 'proj.x[1]'.
    locks.set(lock_key("proj.x[1]", "a"), "h1", px=60_000)
    locks.set(lock_key("proj.x1", "a"), "h2", px=60_000)
    locks.set(lock_key("proj.*", "a"), "h3", px=60_000)
    for name, holder in (("proj.x[1]", "h1"), ("proj.*", "h3")):
        result = celery("redislock", "list", "--task", name, "--json")
        assert result.returncode == 0, result.stderr
        assert [(item["task"], item["holder"]) for item in json.loads(result.stdout)] == [(name, holder)]


#: Escape sequences a name read from Redis may carry: cursor up and erase the line, a window
#: title, a right-to-left override; printed raw they erase a row, forge one, retitle the window.
HOSTILE = "\x1b[1A\x1b[2K\x1b]0;pwned\x07\u202e"
HOSTILE_SHOWN = "\\x1b[1A\\x1b[2K\\x1b]0;pwned\\x07\\u202e"


def test_list_escapes_control_characters_of_keys_and_holders(celery: Run, locks: redis.Redis) -> None:
    key = lock_key(f"proj.{HOSTILE}", "a")
    locks.set(key, f"task-{HOSTILE}@worker1:1:1", px=60_000)
    result = celery("redislock", "list")
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout and "\u202e" not in result.stdout
    [row] = [line for line in result.stdout.splitlines() if line.startswith("redislock:")]
    assert row.startswith(f"redislock:proj.{HOSTILE_SHOWN}:") and f"task-{HOSTILE_SHOWN}@worker1:1:1" in row
    # JSON keeps the names as they are, escaped by JSON itself.
    [shown] = json.loads(celery("redislock", "list", "--json").stdout)
    assert shown["key"] == key


def test_list_with_no_locks(celery: Run, locks: redis.Redis) -> None:
    locks.set("redislock:junk", "x")
    result = celery("redislock", "list")
    assert (result.returncode, result.stdout) == (0, "0 lock(s) held\n")
    result = celery("redislock", "list", "--json")
    assert (result.returncode, json.loads(result.stdout)) == (0, [])


# -- release -----------------------------------------------------------------------------------


def test_release_deletes_the_lock_and_wakes_waiters(
    celery: Run, held: dict[str, str], locks: redis.Redis
) -> None:
    key = lock_key(ADD, "a")
    waiter = locks.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    waiter.subscribe(f"{key}:released")
    try:
        result = celery("redislock", "release", key, "--yes")
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"Released {key} (held by {held[key]})\n"
        # Its holder is noted as released by an operator, for its renewal should it still run,
        # for twice the TTL the lock had left.
        note = released_key(key)
        assert remaining(locks) == (set(held) | set(NOT_LOCKS) | {note}) - {key}
        assert locks.hgetall(note) == {held[key].encode(): b"1"}
        assert 60_000 < locks.pttl(note) <= 120_000
        message = poll(lambda: waiter.get_message(timeout=0.1), timeout=5)
        assert message and message["data"] == key.encode()
    finally:
        waiter.close()


def test_release_without_yes_and_stdin_not_a_terminal_refuses(
    celery: Run, held: dict[str, str], locks: redis.Redis
) -> None:
    # As purge does: a script deletes only when it says so with --yes.
    key = lock_key(REPORT, "c")
    result = celery("redislock", "release", key)
    assert result.returncode == 2
    assert error_line(result) == (
        f"Error: refusing to release {key} without confirmation: stdin is not a terminal; pass --yes"
    )
    assert result.stdout == ""
    assert remaining(locks) == set(held) | set(NOT_LOCKS)


def test_release_and_purge_help_say_what_they_do(celery: Run) -> None:
    release = " ".join(celery("redislock", "release", "--help").stdout.split())
    assert "Free the lock KEY if its holder is unchanged." in release
    assert "whoever holds it" not in release
    for command in ("release", "purge"):
        text = " ".join(celery("redislock", command, "--help").stdout.split())
        assert "When stdin is not a terminal it refuses (exit code 2) unless --yes is given." in text
        assert "-y, --yes Do not ask for confirmation; required when stdin is not a terminal." in text


def test_release_of_a_missing_key_fails_in_one_line(celery: Run, held: dict[str, str]) -> None:
    key = lock_key(ADD, "never taken")
    result = celery("redislock", "release", key, "--yes")
    assert result.returncode == 1
    assert error_line(result) == f"Error: No lock {key}"
    assert result.stdout == ""


@pytest.mark.parametrize("key", ["redislock:junk", lock_key(ADD, "z", prefix="otherapp"), "somekey"])
def test_release_refuses_a_key_that_is_not_a_lock_of_the_app(
    celery: Run, held: dict[str, str], locks: redis.Redis, key: str
) -> None:
    locks.set(key, "x")
    result = celery("redislock", "release", key, "--yes")
    assert result.returncode == 1
    assert "is not a lock key under prefix 'redislock'" in error_line(result)
    assert locks.get(key) == b"x"


# -- purge -------------------------------------------------------------------------------------


def test_purge_task_removes_only_that_tasks_locks(
    celery: Run, held: dict[str, str], locks: redis.Redis
) -> None:
    result = celery("redislock", "purge", "--task", ADD, "--yes")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Purged 2 lock(s)\n"
    assert remaining(locks) == {lock_key(REPORT, "c"), *NOT_LOCKS}


def test_purge_removes_every_lock_and_leaves_other_keys(
    celery: Run, held: dict[str, str], locks: redis.Redis
) -> None:
    result = celery("redislock", "purge", "--yes", "--verbose")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "Purged 3 lock(s)"
    assert sorted(lines[:-1]) == sorted(held)
    assert remaining(locks) == set(NOT_LOCKS)


def test_purge_in_batches(celery: Run, locks: redis.Redis) -> None:
    # More keys than one SCAN step / pipeline holds (1000).
    pipe = locks.pipeline(transaction=False)
    for number in range(2500):
        pipe.set(lock_key(ADD, str(number)), f"holder-{number}", px=60_000)
    pipe.set("redislock:junk", "x")
    pipe.execute()
    listed = celery("redislock", "list", "--json")
    assert len(json.loads(listed.stdout)) == 2500
    result = celery("redislock", "purge", "--yes")
    assert result.stdout == "Purged 2500 lock(s)\n"
    assert remaining(locks) == {"redislock:junk"}


def test_purge_without_yes_and_stdin_not_a_terminal_refuses(
    celery: Run, held: dict[str, str], locks: redis.Redis
) -> None:
    result = celery("redislock", "purge")
    assert result.returncode == 2
    assert "pass --yes" in error_line(result)
    assert remaining(locks) == set(held) | set(NOT_LOCKS)


def run_on_terminal(celery: Run, answer: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run with stdin on a pseudo-terminal, ``answer`` typed in advance."""
    master, slave = pty.openpty()
    try:
        os.write(master, answer.encode() + b"\n")
        return celery(*args, stdin=slave)
    finally:
        os.close(slave)
        os.close(master)


def test_purge_on_a_terminal_asks_first(celery: Run, held: dict[str, str], locks: redis.Redis) -> None:
    result = run_on_terminal(celery, "n", "redislock", "purge")
    assert "Remove 3 lock(s)? [y/N]" in result.stdout
    assert result.returncode == 1  # click's Abort
    assert remaining(locks) == set(held) | set(NOT_LOCKS)

    result = run_on_terminal(celery, "y", "redislock", "purge", "--task", REPORT)
    assert "Remove 1 lock(s)? [y/N]" in result.stdout
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith("Purged 1 lock(s)\n")
    assert remaining(locks) == (set(held) | set(NOT_LOCKS)) - {lock_key(REPORT, "c")}


def test_release_on_a_terminal_asks_first(celery: Run, held: dict[str, str], locks: redis.Redis) -> None:
    key = lock_key(ADD, "b")
    result = run_on_terminal(celery, "n", "redislock", "release", key)
    assert f"Release {key} (held by {held[key]})? [y/N]" in result.stdout
    assert result.returncode == 1
    assert locks.exists(key) == 1


def test_release_leaves_a_lock_whose_holder_changed_while_it_asked(
    celery: Run, held: dict[str, str], locks: redis.Redis
) -> None:
    key = lock_key(ADD, "b")
    master, slave = pty.openpty()
    try:
        proc = celery.start("redislock", "release", key, stdin=slave)
        assert proc.stdout is not None
        asked = b""
        while b"[y/N]" not in asked:  # the prompt, once the holder has been read
            chunk = proc.stdout.read1(1024)
            assert chunk, f"no prompt: {asked!r} {proc.stderr.read() if proc.stderr else b''!r}"
            asked += chunk
        locks.set(key, "thief@worker3:303:1", px=30_000)  # taken by another since it was read
        os.write(master, b"y\n")
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(slave)
        os.close(master)
    assert f"Release {key} (held by {held[key]})? [y/N]" in (asked + out).decode()
    assert proc.returncode == 1
    assert err.decode().splitlines() == [
        f"Error: Lock {key} was not released: it is now held by thief@worker3:303:1"
    ]
    assert locks.get(key) == b"thief@worker3:303:1"


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args", [["list"], ["list", "--json"], ["release", lock_key(ADD, "a"), "--yes"], ["purge", "--yes"]]
)
def test_redis_unreachable_is_one_error_line(celery_cmd: Callable[..., Run], args: list[str]) -> None:
    celery = celery_cmd(redislock_url=f"redis://:hunter2@127.0.0.1:{free_port()}/2")
    result = celery("redislock", *args)
    assert result.returncode != 0
    line = error_line(result)
    assert "unreachable" in line and "hunter2" not in line and ":****@" in line
    assert result.stdout == ""


def test_a_failed_tls_set_up_is_one_error_line_naming_the_setting(
    celery_cmd: Callable[..., Run], tls_server: TLSRedisServer, other_ca: TestCA
) -> None:
    celery = celery_cmd(
        redislock_url=tls_server.tls_url, redislock_use_ssl={"ssl_ca_certs": str(other_ca.ca_certs)}
    )
    result = celery("redislock", "list")
    assert result.returncode == 1
    line = error_line(result)
    assert "CERTIFICATE_VERIFY_FAILED" in line and "come from redislock_use_ssl" in line


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        ({"redislock_key_prefix": "has space"}, "redislock_key_prefix"),
        ({"redislock_url": "redis://:hunter2@127.0.0.1:notaport/2"}, "redislock_url"),
    ],
)
def test_configuration_errors_are_one_error_line(
    celery_cmd: Callable[..., Run], conf: dict[str, Any], expected: str
) -> None:
    result = celery_cmd(**conf)("redislock", "list")
    assert result.returncode == 1
    line = error_line(result)
    assert expected in line and "hunter2" not in line


def test_celery_help_lists_the_redislock_command(celery: Run) -> None:
    result = celery("--help")
    assert result.returncode == 0, result.stderr
    assert any(line.split()[:1] == ["redislock"] for line in result.stdout.splitlines())
    result = celery("redislock", "--help")
    assert result.returncode == 0, result.stderr
    assert {"list", "release", "purge"} <= {
        line.split()[0] for line in result.stdout.splitlines() if line.startswith("  ")
    }


def test_list_shows_what_each_dedup_mode_keeps(celery: Run, locks: redis.Redis) -> None:
    window = lock_key(ADD, "w")
    locks.set(window, "task-w@throttled", px=60_000)  # throttle: the window, a lock key
    latest, debounce, burst = (
        "{" + lock_key(REPORT, name) + "}:" + suffix
        for name, suffix in (("l", "latest"), ("d", "debounce"), ("d", "burst"))
    )
    locks.set(latest, "task-l", px=60_000)
    locks.set(debounce, "task-d", px=60_000)
    locks.set(burst, "1700000000000", px=60_000)
    locks.set("{" + lock_key(REPORT, "s") + "}:queue", "x")  # a semaphore's own key: not listed
    result = celery("redislock", "list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "1 lock(s) held, 3 mode key(s)"
    assert lines[1].split()[:3] == [window, ADD, "task-w@throttled"]
    rows = {line.split()[0]: line for line in lines[2:-1]}
    assert set(rows) == {latest, debounce, burst}
    assert "keep_latest: latest call task-l" in rows[latest]
    assert "debounce: latest call task-d" in rows[debounce]
    assert "debounce: burst began at 1700000000000" in rows[burst]
    result = celery("redislock", "list", "--task", ADD, "--json")
    assert [item["key"] for item in json.loads(result.stdout)] == [window]
