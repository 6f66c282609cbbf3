"""Unit tests of celery_redislock.engine.keys: canonical form, digests, key format, KeyBuilder."""

from __future__ import annotations

import collections
import contextlib
import copy
import enum
import inspect
import io
import json
import os
import re
import subprocess
import sys
import uuid
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from celery_redislock.config import arguments
from celery_redislock.config.arguments import MAX_DEPTH, KeyBuilder, canonical, digest
from celery_redislock.config.options import source_task, validate
from celery_redislock.engine import keys
from celery_redislock.engine.keys import format_key, grant_member, parse_key
from celery_redislock.errors import LockKeyError, OptionError
from celery_redislock.modes.debounce import debounce_keys
from celery_redislock.modes.keep_latest import latest_key

KEY_RE = re.compile(r"^redislock:proj\.f:[0-9a-f]{32}$")


def f(x: Any, y: Any = 2) -> None:
    """The task function most tests build keys for."""


def g(a: Any, *rest: Any, flag: bool = False, **extra: Any) -> None:
    """A task with every kind of parameter."""


def any_args(*args: Any, **kwargs: Any) -> None:
    """A task that accepts anything, to feed key() arbitrary values."""


def canon(value: Any) -> str:
    return canonical(value, task="proj.f", argument="x")


class Color(enum.Enum):
    RED = "r"
    BLUE = 2


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Name(str):
    pass


class Count(int):
    pass


class Ratio(float):
    pass


class Opaque:
    """An object with no canonical form."""


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class BrokenZone(tzinfo):
    def utcoffset(self, dt: datetime | None) -> timedelta:
        raise RuntimeError("zone database unavailable")

    def dst(self, dt: datetime | None) -> timedelta:
        return timedelta(0)

    def tzname(self, dt: datetime | None) -> str:
        return "broken"


Point = collections.namedtuple("Point", "x y")

# --- strategies ------------------------------------------------------------------

offsets = st.integers(min_value=-23 * 60, max_value=23 * 60).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)
zones = st.none() | offsets
hashable_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers().map(lambda n: n << 6000),  # past the int-to-str digit limit
    st.floats(allow_nan=False),
    # Lone surrogates included: json.dumps(ensure_ascii) must escape them, not crash.
    st.text(st.characters(exclude_categories=())),
    st.binary(),
    st.decimals(allow_nan=False),
    st.uuids(),
    st.dates(),
    st.datetimes(timezones=zones),
    st.times(timezones=zones),
    st.sampled_from([*Color, *Level]),
    st.text().map(Name),
)
# NaNs are kept out of sets and dict keys: hypothesis cannot tell them apart when deduplicating.
leaves = hashable_leaves | st.floats() | st.decimals(allow_nan=True) | st.binary().map(bytearray)
hashables = st.recursive(
    hashable_leaves,
    lambda children: st.lists(children, max_size=3).map(tuple) | st.frozensets(children, max_size=3),
    max_leaves=6,
)


def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(hashables, children, max_size=4),
        st.sets(hashables, max_size=4),
        st.frozensets(hashables, max_size=4),
    )


supported = st.recursive(leaves, containers, max_leaves=12)

unsupported_leaves = st.one_of(
    st.builds(Opaque),
    st.builds(BadRepr),
    st.builds(object),
    st.just(f),
    st.complex_numbers(),
    st.just(range(3)),
    st.binary().map(lambda raw: memoryview(raw)),
)


def with_cycle(value: Any) -> list[Any]:
    outer = [value]
    outer.append({"back": outer})
    return outer


def nested(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = [value]
    return value


anything = st.recursive(leaves | unsupported_leaves, containers, max_leaves=12)
anything = (
    anything
    | anything.map(with_cycle)
    | st.builds(nested, anything, st.integers(min_value=MAX_DEPTH - 2, max_value=3 * MAX_DEPTH))
)


def as_tuples(value: Any) -> Any:
    """The same value with every list a tuple (what JSON makes of both)."""
    if isinstance(value, (list, tuple)):
        return tuple(as_tuples(item) for item in value)
    if isinstance(value, dict):
        return {key: as_tuples(item) for key, item in value.items()}
    return value


# --- canonical form: properties ---------------------------------------------------


@given(supported)
def test_equal_values_have_one_canonical_ascii_text(value: Any) -> None:
    text = canon(value)
    assert text.isascii()
    json.loads(text)  # well-formed JSON, so the form stays easy to reason about
    assert canon(copy.deepcopy(value)) == text


@given(supported)
def test_lists_and_tuples_are_the_same(value: Any) -> None:
    assert canon(as_tuples(value)) == canon(value)


@given(st.dictionaries(hashables, supported, max_size=6), st.randoms())
def test_dict_insertion_order_does_not_matter(mapping: dict[Any, Any], rnd: Any) -> None:
    items = list(mapping.items())
    rnd.shuffle(items)
    shuffled = dict(items)
    assert list(shuffled) == [key for key, _ in items]
    assert canon(shuffled) == canon(mapping)


@given(st.lists(st.text(), unique=True, max_size=20), st.randoms())
def test_set_iteration_order_does_not_matter(elements: list[str], rnd: Any) -> None:
    # Sets with colliding hashes iterate in insertion order, so shuffling changes iteration.
    forward: set[Any] = set()
    for element in elements:
        forward.add(element)
    rnd.shuffle(elements)
    backward: set[Any] = set()
    for element in elements:
        backward.add(element)
    assert canon(forward) == canon(backward) == canon(frozenset(elements))


@given(anything)
def test_any_input_gives_a_key_or_a_lock_key_error(value: Any) -> None:
    builder = KeyBuilder("redislock", "proj.f", any_args)
    try:
        key = builder.key((value,), {"kw": value})
    except LockKeyError as exc:
        assert exc.task == "proj.f"
        assert exc.argument.startswith(("args", "kwargs"))
        assert "lock_key" in str(exc)
    else:
        assert KEY_RE.match(key)


def test_deep_nesting_is_a_lock_key_error_not_a_recursion_error() -> None:
    with pytest.raises(LockKeyError, match="levels deep"):
        canon(nested(0, 100_000))
    with pytest.raises(LockKeyError, match="levels deep"):
        canon(nested({"a": 0}, MAX_DEPTH + 1))
    assert canon(nested(0, MAX_DEPTH))


# --- canonical form: decisions ----------------------------------------------------

CONFUSABLE = [
    1,
    "1",
    1.0,
    True,
    b"1",
    Decimal("1"),
    Decimal("1.0"),
    0,
    False,
    0.0,
    "",
    b"",
    None,
    "None",
    "null",
    [],
    {},
    set(),
    "[]",
    [1],
    {1},
    {1: None},
    [[1, None]],
    ["a", "b"],
    ["ab"],
    [["a"], "b"],
    ["a", ["b"]],
    {"a": 1},
    [["a", 1]],
    date(2024, 1, 2),
    datetime(2024, 1, 2),
    datetime(2024, 1, 2, tzinfo=timezone.utc),
    "2024-01-02",
    time(0, 0),
    uuid.UUID(int=1),
    str(uuid.UUID(int=1)),
    float("nan"),
    "nan",
    float("inf"),
    float("-inf"),
]


def test_type_confusable_values_differ() -> None:
    texts = [canon(value) for value in CONFUSABLE]
    assert len(set(texts)) == len(texts)
    builder = KeyBuilder("redislock", "proj.f", f, ["x"])
    built = {builder.key((value,), {}) for value in CONFUSABLE}
    assert len(built) == len(CONFUSABLE)


@pytest.mark.parametrize(
    ("value", "same_as"),
    [
        ((1, (2, 3)), [1, [2, 3]]),
        (Point(1, 2), [1, 2]),
        (bytearray(b"ab"), b"ab"),
        (frozenset({1, "a"}), {"a", 1}),
        (Color.RED, "r"),
        (Color.BLUE, 2),
        (Level.HIGH, 2),
        (Name("a"), "a"),
        (Count(3), 3),
        (Ratio(1.5), 1.5),
        (collections.OrderedDict([("b", 1), ("a", 2)]), {"a": 2, "b": 1}),
        ({Level.LOW: "x"}, {1: "x"}),
    ],
)
def test_values_merged_by_a_json_round_trip_are_equal(value: Any, same_as: Any) -> None:
    assert canon(value) == canon(same_as)


def test_floats_use_their_shortest_repr() -> None:
    assert canon(0.1) == '["float","0.1"]'
    assert canon(1e100) == '["float","1e+100"]'
    assert canon(float("nan")) == canon(-float("nan")) == '["float","nan"]'


def test_decimal_form_does_not_follow_the_context() -> None:
    import decimal

    with decimal.localcontext() as context:
        context.capitals = 0
        lower = canon(Decimal("1E+5"))
    assert lower == canon(Decimal("1E+5")) == '["decimal","1E+5"]'


def test_huge_ints_do_not_hit_the_int_to_str_limit() -> None:
    assert canon(10**5000) != canon(10**5000 + 1)
    assert canon(-(10**5000)) != canon(10**5000)


def test_aware_datetimes_keep_their_offset() -> None:
    utc = datetime(2024, 1, 2, 12, tzinfo=timezone.utc)
    paris = utc.astimezone(timezone(timedelta(hours=1)))
    assert utc == paris
    assert canon(utc) != canon(paris)


# --- digest and key format --------------------------------------------------------


def test_digest_is_32_hex_digits_of_sha256() -> None:
    assert digest("") == "e3b0c44298fc1c149afbf4c8996fb924"
    assert re.fullmatch(r"[0-9a-f]{32}", digest("\ud800 lone surrogate"))


@given(
    st.text(min_size=1),
    st.text(st.characters(exclude_characters=":"), min_size=1),
    st.text(),
)
def test_parse_key_inverts_format_key(prefix: str, task_name: str, text: str) -> None:
    key = format_key(prefix, task_name, digest(text))
    assert parse_key(key) == (prefix, task_name, digest(text))


@pytest.mark.parametrize(
    "key",
    [
        "",
        "redislock",
        "redislock:proj.f",
        "redislock:proj.f:",
        ":proj.f:" + "0" * 32,
        "redislock::" + "0" * 32,
        "redislock:proj.f:" + "0" * 31,
        "redislock:proj.f:" + "A" * 32,
    ],
)
def test_parse_key_rejects_what_format_key_cannot_make(key: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(key))):
        parse_key(key)


def test_golden_keys() -> None:
    # Pinned: a change here changes every lock key in production. Change on purpose only.
    builder = KeyBuilder("redislock", "proj.f", f)
    assert builder.key((1,), {}) == "redislock:proj.f:431cef7d381dd9314e7f088a856aa0ee"
    # That digest, spelled out: the canonical dict of all arguments, defaults applied.
    assert digest('["dict",[[["str","x"],["int",1]],[["str","y"],["int",2]]]]') == (
        "431cef7d381dd9314e7f088a856aa0ee"
    )
    assert builder.key(("1",), {}) == "redislock:proj.f:64d8beeab7792f7cac169519fcbe5c66"
    assert (
        builder.key(({"b": [1.5, None], "a": {b"x"}}, date(2024, 1, 2)), {})
        == "redislock:proj.f:ba9300f41c6b0bc205148521a893cc05"
    )
    only_x = KeyBuilder("app:locks", "proj.f", f, ["x"])
    assert only_x.key((Decimal("3.10"),), {"y": 9}) == "app:locks:proj.f:6062434ac7683e3cd51c28712f0ae796"
    assert canon({"a": [1, (2.0, True)], 3: None}) == (
        '["dict",[[["int",3],["none"]],'
        '[["str","a"],["list",[["int",1],["list",[["float","2.0"],["bool",true]]]]]]]]'
    )


STABILITY_SCRIPT = """
import datetime, decimal, sys, uuid
from celery_redislock.config.arguments import KeyBuilder, canonical

def task(a, b=None, *rest, **extra):
    pass

value = {
    "tags": {"alpha", "beta", "gamma", "delta", "epsilon"},
    "frozen": frozenset({("x", 1), ("y", 2), ("z", 3)}),
    frozenset({"k1", "k2"}): [1, 2.5, b"raw", decimal.Decimal("1.10")],
    "when": datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.timezone.utc),
    "id": uuid.UUID(int=42),
}
builder = KeyBuilder("redislock", "proj.task", task)
print(canonical(value, task="proj.task", argument="a"))
print(builder.key((value, {"s": {"p", "q", "r"}}), {"zeta": 1, "alpha": 2}))
"""


def test_keys_are_stable_across_processes_and_hash_seeds() -> None:
    root = Path(arguments.__file__).resolve().parents[2]
    outputs = []
    for seed in ("1", "2", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(root)}
        run = subprocess.run(
            [sys.executable, "-c", STABILITY_SCRIPT],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        outputs.append(run.stdout)
    assert outputs[0] == outputs[1] == outputs[2]
    here = io.StringIO()
    with contextlib.redirect_stdout(here):
        exec(STABILITY_SCRIPT, {})
    assert here.getvalue() == outputs[0]


# --- KeyBuilder: binding and selection --------------------------------------------


def test_defaults_are_applied_so_equivalent_calls_share_a_key() -> None:
    builder = KeyBuilder("redislock", "proj.f", f)
    key = builder.key((1,), {})
    assert builder.key((), {"x": 1}) == key
    assert builder.key((1, 2), {}) == key
    assert builder.key((), {"y": 2, "x": 1}) == key
    assert builder.key((1, 3), {}) != key
    assert KEY_RE.match(key)


def test_key_is_the_digest_of_the_canonical_dict_of_arguments() -> None:
    builder = KeyBuilder("redislock", "proj.g", g)
    expected = canonical(
        {"a": 1, "rest": [2, 3], "flag": True, "extra": {"z": 4}}, task="proj.g", argument="*"
    )
    assert builder.key((1, 2, 3), {"flag": True, "z": 4}) == format_key(
        "redislock", "proj.g", digest(expected)
    )
    assert builder.key((1,), {}) == builder.key((), {"a": 1, "flag": False})
    assert builder.key((1,), {"z": 4}) != builder.key((1,), {"z": 5})


def test_lock_key_names_select_the_arguments() -> None:
    builder = KeyBuilder("redislock", "proj.f", f, ["x"])
    assert builder.names == ("x",)
    assert builder.key((1, 2), {}) == builder.key((1,), {"y": 99})
    assert builder.key((1,), {}) != builder.key((2,), {})
    expected = canonical({"x": 1}, task="proj.f", argument="*")
    assert builder.key((1,), {}) == format_key("redislock", "proj.f", digest(expected))
    both = KeyBuilder("redislock", "proj.f", f, ("y", "x"))
    assert both.names == ("x", "y")
    assert both.key((1,), {}) == KeyBuilder("redislock", "proj.f", f).key((1,), {})


def test_binding_without_inspect_gives_what_signature_bind_gives() -> None:
    def h(a: Any, b: Any = 2, c: Any = None) -> None:
        pass

    fast = KeyBuilder("redislock", "proj.h", h)
    slow = KeyBuilder("redislock", "proj.h", h)
    slow._plain_names = None  # always Signature.bind
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((1,), {}),
        ((1, 2), {}),
        ((1, 2, 3), {}),
        ((1,), {"c": 3}),
        ((), {"a": 1, "b": 5}),
        ((), {"c": 1, "a": 0}),
    ]
    for args, kwargs in calls:
        assert fast.key(args, kwargs) == slow.key(args, kwargs)
    assert fast._bind_plain((1, 2, 3, 4), {}) is None  # too many: Signature.bind names it


@pytest.mark.parametrize("empty", [[], ()])
def test_an_empty_lock_key_gives_one_key_whatever_the_arguments(empty: Any) -> None:
    builder = KeyBuilder("redislock", "proj.f", f, empty)
    assert builder.names == ()
    one = builder.key((1,), {})
    assert KEY_RE.match(one)
    assert builder.key((2, 3), {}) == builder.key((), {"x": [1, 2]}) == one
    assert one == format_key("redislock", "proj.f", digest(canonical({}, task="proj.f", argument="*")))
    assert one != KeyBuilder("redislock", "proj.f", f).key((1,), {})
    # The arguments must still fit the signature: a wrong call is an error, not the task's key.
    with pytest.raises(LockKeyError, match="do not match the signature"):
        builder.key((1, 2, 3), {})


def test_bound_methods_drop_self() -> None:
    class Task:
        def run(self, x: Any, y: Any = 2) -> None:
            pass

    builder = KeyBuilder("redislock", "proj.f", Task().run, ["x"])
    assert builder.key((1,), {}) == KeyBuilder("redislock", "proj.f", f, ["x"]).key((1,), {})


def test_callable_lock_key_gets_task_args_kwargs_and_its_str_is_hashed() -> None:
    calls = []

    def lock_key(task: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        calls.append((task, args, kwargs))
        return f"user:{args[0]}"

    builder = KeyBuilder("redislock", "proj.f", f, lock_key)
    task = object()
    assert builder.key([7], {"y": 1}, task) == format_key("redislock", "proj.f", digest("user:7"))
    assert calls == [(task, (7,), {"y": 1})]
    assert builder.names == ()


def test_signature_is_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    builder = KeyBuilder("redislock", "proj.f", f)

    def fail(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("inspect.signature called on the hot path")

    monkeypatch.setattr(inspect, "signature", fail)
    assert KEY_RE.match(builder.key((1,), {}))


# --- errors -----------------------------------------------------------------------


def test_unknown_lock_key_name_names_task_option_and_name() -> None:
    with pytest.raises(OptionError) as info:
        KeyBuilder("redislock", "proj.f", f, ["x", "user_id"])
    assert info.value.option == "lock_key"
    assert info.value.source == "task 'proj.f'"
    message = str(info.value)
    assert "proj.f(x, y)" in message
    assert "'user_id'" in message
    assert "lock_key" in message


def test_source_is_used_in_option_errors() -> None:
    with pytest.raises(OptionError, match=r"^redislock_queues\['q'\]: option 'lock_key'"):
        KeyBuilder("redislock", "proj.f", f, ["nope"], source="redislock_queues['q']")


def test_str_lock_key_is_rejected_with_the_list_to_write() -> None:
    with pytest.raises(OptionError, match=re.escape("['x']")):
        KeyBuilder("redislock", "proj.f", f, "x")


@pytest.mark.parametrize(
    ("lock_key", "said"),
    [
        (42, "int"),
        ({"x": 1}, "dict"),
        (["x", 1], "1 is not an argument name"),
        ([b"x"], "b'x' is not an argument name"),
        (["x", "y", "x"], "'x' is listed twice"),
        ("x", "write ['x']"),
    ],
)
def test_lock_key_of_a_wrong_type_is_rejected(lock_key: Any, said: str) -> None:
    with pytest.raises(OptionError, match=re.escape(said)) as info:
        KeyBuilder("redislock", "proj.f", f, lock_key)
    assert info.value.option == "lock_key"
    # One rule, one message: the key builder says what validating the option says.
    with pytest.raises(OptionError) as validated:
        validate({"lock_key": lock_key}, source_task("proj.f"))
    assert str(info.value) == str(validated.value)


def test_task_name_with_a_colon_is_rejected() -> None:
    with pytest.raises(OptionError, match="':'"):
        KeyBuilder("redislock", "proj:f", f)


@pytest.mark.parametrize(
    ("args", "kwargs", "argument", "said"),
    [
        ((Opaque(),), {}, "x", "test_keys.Opaque, which has no canonical form"),
        (({"items": [0, 1, 2, Opaque()]},), {}, "x['items'][3]", "Opaque"),
        ((1, {Opaque(): 1}), {}, "y (key <", "Opaque, which"),
        ((1, [{BadRepr()}]), {}, "y[0] (element <", "BadRepr, which"),
        ((Color,), {}, "x", "has type enum."),
        ((1,), {"y": 2j}, "y", "has type complex"),
    ],
)
def test_unsupported_argument_names_task_path_and_lock_key(
    args: tuple[Any, ...], kwargs: dict[str, Any], argument: str, said: str
) -> None:
    builder = KeyBuilder("redislock", "proj.f", f)
    with pytest.raises(LockKeyError) as info:
        builder.key(args, kwargs)
    assert info.value.task == "proj.f"
    assert info.value.argument.startswith(argument)
    assert said in str(info.value)
    assert "lock_key" in str(info.value)


def test_cycles_are_lock_key_errors() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    looped: dict[str, Any] = {}
    looped["me"] = [looped]
    for value, path in ((loop, "x[1]"), (looped, "x['me'][0]")):
        with pytest.raises(LockKeyError, match="cycle") as info:
            KeyBuilder("redislock", "proj.f", f).key((value,), {})
        assert info.value.argument == path
    shared = [1]
    assert canon([shared, shared]) == canon([[1], [1]])


def test_misbehaving_supported_types_are_lock_key_errors() -> None:
    with pytest.raises(LockKeyError, match="zone database unavailable") as info:
        canon(datetime(2024, 1, 1, tzinfo=BrokenZone()))
    assert info.value.argument == "x"


def test_callable_lock_key_must_return_a_str() -> None:
    builder = KeyBuilder("redislock", "proj.f", f, lambda task, args, kwargs: args[0])
    with pytest.raises(LockKeyError, match="returned int, not a str") as info:
        builder.key((1,), {})
    assert (info.value.task, info.value.argument) == ("proj.f", "lock_key")


def test_callable_lock_key_errors_are_wrapped_and_chained() -> None:
    builder = KeyBuilder("redislock", "proj.f", f, lambda task, args, kwargs: args[5])
    with pytest.raises(LockKeyError, match="raised IndexError") as info:
        builder.key((1,), {})
    assert isinstance(info.value.__cause__, IndexError)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((), {}), ((1, 2, 3), {}), ((1,), {"z": 3}), ((1,), {"x": 1})],
)
def test_arguments_not_matching_the_signature(args: Any, kwargs: Any) -> None:
    builder = KeyBuilder("redislock", "proj.f", f, ["x"])
    with pytest.raises(LockKeyError, match=r"do not match the signature proj\.f\(x, y\): ") as info:
        builder.key(args, kwargs)
    assert info.value.task == "proj.f"


# -- Redis Cluster slots: every key beside a lock is in the lock key's slot -----------------------

#: Prefixes a deployment may use: none with a tag, a tenant's tag (one shard), a tag inside,
#: a lone '{' (no tag: the key hashes whole).
PREFIXES = ["redislock", "{tenant1}", "{tenant1}:locks", "app:{t}:x", "half{open"]


def _beside(key: str) -> list[str]:
    return [
        keys.fence_key(key),
        keys.released_key(key),
        *keys.semaphore_keys(key),
        latest_key(key),
        *debounce_keys(key),
    ]


@pytest.mark.parametrize("prefix", PREFIXES)
def test_every_key_beside_a_lock_is_in_its_cluster_slot(prefix: str) -> None:
    key = KeyBuilder(prefix, "proj.f", f).key((1, 2), {})
    for other in _beside(key):
        assert key_slot(other.encode()) == key_slot(key.encode()), (key, other)
        assert keys.slot_key_owner(other) == (key, other.rsplit(":", 1)[1])


def test_a_tagged_prefix_keeps_its_tag_in_the_mode_keys() -> None:
    # Wrapping "{tenant1}:..." again would make its tag "{tenant1": another slot (CROSSSLOT).
    key = KeyBuilder("{tenant1}", "proj.f", f).key((1, 2), {})
    assert keys.slot_key(key, "latest") == key + ":latest"
    assert keys.slot_key("redislock:proj.f:00", "latest") == "{redislock:proj.f:00}:latest"


@pytest.mark.parametrize(
    ("prefix", "name"), [("odd}prefix", "proj.f"), ("redislock", "odd}name"), ("a{}b", "f"), ("{}{t}", "f")]
)
def test_a_prefix_or_name_whose_keys_cannot_share_a_slot_is_refused(prefix: str, name: str) -> None:
    with pytest.raises(OptionError, match=r"'}' outside a \{hash tag\}.*redislock_key_prefix"):
        KeyBuilder(prefix, name, f)


def test_a_rate_limiters_log_is_its_name_under_its_prefix() -> None:
    assert keys.rate_limiter_key("redislock:rate", "brief") == "redislock:rate:brief"
    assert keys.rate_limiter_key("", "brief") == "brief"
    assert keys.rate_keys("{t}:rate:brief")[1:] == ("{t}:rate:brief:reserved", "{t}:rate:brief:hops")


def test_a_grant_is_keyed_by_the_retries_and_the_pauses_of_its_call() -> None:
    # A call's attempt is what it means: retries, and after a pause the pauses apart from them
    # (no number of retries can stand for a pause).
    assert grant_member("t", 2) == "g:t:2"  # the form grants had before pauses: still read
    assert grant_member("t", 0, 1) == "g:t:0.p1"
    assert len({grant_member("t", retries, pauses) for retries in range(3) for pauses in range(3)}) == 9


@pytest.mark.parametrize(("prefix", "queue"), [("redislock", "celery"), ("{t}:app", "orders.x")])
def test_a_queues_lane_backlogs_are_named_back_to_their_queue(prefix: str, queue: str) -> None:
    load, tenants, _ = keys.fair_keys(prefix, queue)
    assert keys.fair_queue_of(prefix, load) == queue
    assert keys.fair_queue_of(prefix, tenants) is None  # another of its keys
    assert keys.fair_queue_of(prefix, format_key(prefix, "task", "0" * 32)) is None


def test_the_glob_of_every_queues_lane_backlogs_escapes_the_prefix() -> None:
    assert keys.fair_load_glob("redislock") == "{redislock:fair:*}:load"
    assert keys.fair_load_glob("{t}:a*b") == "{t}:a\\*b:fair:*:load"
