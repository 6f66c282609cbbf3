"""How a task's call becomes its lock key: the canonical form of its arguments, their digest,
and ``KeyBuilder`` (the ``lock_key`` option); the key's own grammar is ``engine.keys``."""

from __future__ import annotations

import enum
import hashlib
import inspect
import json.encoder
import uuid
from collections.abc import Mapping, Sequence
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any, Callable, Optional, Union

from ..engine.checks import BadValue, got
from ..engine.keys import DIGEST_LENGTH, format_key, untaggable
from ..errors import LockKeyError, OptionError, short_repr

__all__ = [
    "KEY_HEADER",
    "MAX_DEPTH",
    "KeyBuilder",
    "LockKey",
    "LockKeyFunc",
    "LockKeySpec",
    "canonical",
    "check_lock_key",
    "digest",
]

#: ``lock_key`` as a callable: ``(task, args, kwargs) -> str``.
LockKeyFunc = Callable[[Any, tuple[Any, ...], dict[str, Any]], str]
#: What the ``lock_key`` option accepts.
LockKeySpec = Union[None, Sequence[str], LockKeyFunc]
#: ``lock_key`` once checked (``check_lock_key``): a list of names is a tuple.
LockKey = Optional[Union[tuple[str, ...], LockKeyFunc]]

#: Containers nested deeper than this are refused (and recursion stays far from Python's limit).
MAX_DEPTH = 100

# The C escaper json.dumps uses: pure ASCII out, lone surrogates escaped instead of crashing,
# without json.dumps' per-call keyword handling on the hot path.
_quote = json.encoder.encode_basestring_ascii
# Below the smallest limit sys.set_int_max_str_digits accepts (640 digits), so str(int)
# never raises and an int's form does not depend on the process's setting.
_DECIMAL_INT_BITS = 2000

#: The message header carrying a task's lock key from where it was computed (``apply_async``
#: of a task locked at enqueue, the first execution of any other) to every later run of that
#: message, whose JSON-decoded arguments may no longer give the same key.
KEY_HEADER = "redislock_key"


class _Unsupported(Exception):
    """A value has no canonical form; ``path`` collects positions innermost first."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path: list[str] = []


def _type_name(value: object) -> str:
    cls = type(value)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _canon(value: Any, depth: int, active: set[int]) -> str:
    # Exact types first: they are nearly all real task arguments, and subclasses
    # (IntEnum, StrEnum) must reach the Enum branch before the int/str ones.
    cls = type(value)
    if cls is str:
        return '["str",' + _quote(value) + "]"
    if cls is int:
        if value.bit_length() <= _DECIMAL_INT_BITS:
            return '["int",' + int.__repr__(value) + "]"
        return '["int","' + hex(value) + '"]'
    if value is None:
        return '["none"]'
    if cls is bool:
        return '["bool",true]' if value else '["bool",false]'
    if cls is float:
        return '["float","' + float.__repr__(value) + '"]'

    if depth >= MAX_DEPTH:
        raise _Unsupported(f"is nested more than {MAX_DEPTH} levels deep")

    if isinstance(value, enum.Enum):
        # A member reaches the worker as its value (JSON), so both sides must agree on it.
        try:
            return _canon(value.value, depth + 1, active)
        except _Unsupported as exc:
            exc.path.append(".value")
            raise
    # A subclass of str, int or float: as an exact copy of its value (the branches above).
    if isinstance(value, str):
        return _canon(str.__str__(value), depth, active)
    if isinstance(value, int):  # bool is handled above: it cannot be subclassed
        return _canon(int.__index__(value), depth, active)
    if isinstance(value, float):
        return _canon(float.__float__(value), depth, active)
    if isinstance(value, (bytes, bytearray)):
        return '["bytes","' + bytes(value).hex() + '"]'

    if isinstance(value, (list, tuple, dict, set, frozenset)):
        if id(value) in active:
            raise _Unsupported("contains itself (a reference cycle)")
        active.add(id(value))
        if isinstance(value, (list, tuple)):
            text = '["list",[' + _items(value, depth, active) + "]]"
        elif isinstance(value, dict):
            text = '["dict",[' + _entries(value, depth, active) + "]]"
        else:
            text = '["set",[' + _elements(value, depth, active) + "]]"
        active.discard(id(value))
        return text

    if isinstance(value, Decimal):
        # str() follows the thread's context for 'e' vs 'E'; upper() removes that dependency.
        return '["decimal","' + str(value).upper() + '"]'
    if isinstance(value, uuid.UUID):
        return '["uuid","' + str(value) + '"]'
    if isinstance(value, datetime):  # before date: datetime is a date subclass
        return '["datetime","' + datetime.isoformat(value) + '"]'
    if isinstance(value, date):
        return '["date","' + date.isoformat(value) + '"]'
    if isinstance(value, time):
        return '["time","' + time.isoformat(value) + '"]'
    raise _Unsupported(f"has type {_type_name(value)}, which has no canonical form")


def _items(value: Sequence[Any], depth: int, active: set[int]) -> str:
    parts = []
    for index, item in enumerate(value):
        try:
            parts.append(_canon(item, depth + 1, active))
        except _Unsupported as exc:
            exc.path.append(f"[{index}]")
            raise
    return ",".join(parts)


def _entries(value: Mapping[Any, Any], depth: int, active: set[int]) -> str:
    pairs = []
    for key, item in value.items():
        try:
            key_text = _canon(key, depth + 1, active)
        except _Unsupported as exc:
            exc.path.append(f" (key {short_repr(key)})")
            raise
        try:
            pairs.append((key_text, _canon(item, depth + 1, active)))
        except _Unsupported as exc:
            exc.path.append(f"[{short_repr(key)}]")
            raise
    # Keys with one canonical text (an Enum member and its value) are ordered by value too.
    pairs.sort()
    return _join_pairs(pairs)


def _join_pairs(pairs: list[tuple[str, str]]) -> str:
    return ",".join([_entry(key, item) for key, item in pairs])


def _entry(key_text: str, item_text: str) -> str:
    """One entry of a canonical dict: its key's and its value's canonical texts."""
    return "[" + key_text + "," + item_text + "]"


def _elements(value: set[Any] | frozenset[Any], depth: int, active: set[int]) -> str:
    parts = []
    for element in value:
        try:
            parts.append(_canon(element, depth + 1, active))
        except _Unsupported as exc:
            exc.path.append(f" (element {short_repr(element)})")
            raise
    parts.sort()
    return ",".join(parts)


def canonical(value: Any, *, task: str, argument: str) -> str:
    """Return the canonical text of ``value``: ASCII JSON with a type tag on every value.

    Deterministic across processes, hosts and Python versions. Values differing in type
    differ (``1``, ``"1"``, ``1.0``, ``True``, ``b"1"``), except where a JSON round trip
    through Celery would merge them: list = tuple, bytes = bytearray, set = frozenset,
    an Enum member = its value, a str/int/float subclass = its base type. Floats use
    ``repr`` (``-0.0`` differs from ``0.0``); Decimals their string (``Decimal("1.0")``
    differs from ``Decimal("1")``); dates and times ``isoformat`` (an aware datetime keeps
    its offset, so one instant in two time zones gives two texts).

    Raises :class:`LockKeyError` naming ``task`` and the path inside ``argument`` for a
    value of another type, a reference cycle or nesting deeper than :data:`MAX_DEPTH`.
    """
    try:
        return _canon(value, 0, set())
    except _Unsupported as exc:
        path = argument + "".join(reversed(exc.path))
        raise LockKeyError(task, path, exc.problem) from None
    except Exception as exc:
        # A supported type whose subclass misbehaves (an isoformat that raises, a tzinfo
        # that fails): still a key error, so callers have a single exception to handle.
        problem = f"could not be put in canonical form ({type(exc).__name__}: {exc})"
        raise LockKeyError(task, argument, problem) from exc


def digest(text: str) -> str:
    """Return the first 32 hex digits of the SHA-256 of ``text`` (UTF-8)."""
    # surrogatepass: a lock_key callable may return a str with lone surrogates.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_LENGTH]


def _describe(task_name: str, signature: inspect.Signature) -> str:
    names = []
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            names.append("*" + parameter.name)
        elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
            names.append("**" + parameter.name)
        else:
            names.append(parameter.name)
    return f"{task_name}({', '.join(names)})"


def check_lock_key(value: Any) -> LockKey:
    """``lock_key``'s forms, checked (raising ``BadValue``): the one rule for it, whether the
    option is validated or a ``KeyBuilder`` is made, and for a mode's option that takes them.
    Whether the names are the body's arguments is ``KeyBuilder``'s to say."""
    what = "must be None, a list of argument names or a callable (task, args, kwargs) -> str"
    if value is None:
        return None
    if isinstance(value, str):
        # A str is a sequence of one-letter names; almost surely ["name"] was meant.
        shown = got(value, wrong_type=True)
        raise BadValue(f"{what}, {shown}; write [{value!r}] to lock on that argument")
    if isinstance(value, (list, tuple)):
        # Empty is allowed: no argument in the key, so one execution of the task at a time
        # whatever its arguments (celery-once's ``keys: []``).
        seen: set[str] = set()
        for item in value:
            if not isinstance(item, str) or not item:
                raise BadValue(f"{what}, got {short_repr(value)}: {short_repr(item)} is not an argument name")
            if item in seen:
                raise BadValue(f"{what}, got {short_repr(value)}: {item!r} is listed twice")
            seen.add(item)
        return tuple(value)
    if callable(value):
        func: LockKeyFunc = value
        return func
    raise BadValue(f"{what}, {got(value, wrong_type=True)}")


class KeyBuilder:
    """Make the lock key of one task's calls, according to its ``lock_key`` option.

    The option is validated here, once, so that a mistake shows at task registration.
    """

    def __init__(
        self,
        prefix: str,
        task_name: str,
        func: Callable[..., Any],
        lock_key: LockKeySpec = None,
        *,
        source: str | None = None,
        option: str = "lock_key",
    ) -> None:
        self.prefix = prefix
        #: The option the key is made by, as errors name it (``rate_limit_key`` for a partition).
        self.option = option
        self.task_name = task_name
        # Every key of the task starts so: a key is this and a digest (format_key, made once).
        self._head = format_key(prefix, task_name, "")
        self.source = source if source is not None else f"task {task_name!r}"
        if ":" in task_name:
            # parse_key splits on the last two ':'; the name's head would be read as the prefix.
            raise OptionError("name", self.source, "contains ':', which separates the parts of a lock key")
        if untaggable(self._head):
            # Its fence, semaphore and mode keys could not share its cluster slot (CROSSSLOT).
            raise OptionError(
                "name",
                self.source,
                f"makes lock keys {self._head}<digest> with a '}}' outside a {{hash tag}}, whose "
                "other keys Redis Cluster could not keep in their slot: use a task name and "
                "redislock_key_prefix without '}', or with one non-empty {tag}",
            )
        self._signature = inspect.signature(func)
        self._described = _describe(task_name, self._signature)
        self._func: LockKeyFunc | None = None
        # (canonical text of the name, name), sorted like the entries of a canonical dict.
        self._names: list[tuple[str, str]] = []

        try:
            checked = check_lock_key(lock_key)
        except BadValue as bad:
            raise OptionError(option, self.source, str(bad)) from None
        parameters = self._signature.parameters
        if callable(checked):
            self._func = checked
            return
        if checked is None:
            selected: Sequence[str] = list(parameters)
        else:
            # An empty tuple selects no argument: one key for every call of the task.
            unknown = next((name for name in checked if name not in parameters), None)
            if unknown is not None:
                raise OptionError(
                    option, self.source, f"names unknown argument {unknown!r} of {self._described}"
                )
            selected = checked
        self._names = sorted((_canon(name, 0, set()), name) for name in selected)
        # Binding without inspect for the common signature (named parameters only, no *args,
        # **kwargs or positional-only ones): Signature.bind costs more than the digest itself.
        plain = all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters.values())
        self._plain_names: tuple[str, ...] | None = tuple(parameters) if plain else None
        self._defaults = {n: p.default for n, p in parameters.items() if p.default is not p.empty}

    @property
    def names(self) -> tuple[str, ...]:
        """The argument names the key is made of (empty when ``lock_key`` is a callable or
        ``[]``: one key for the task, whatever its arguments)."""
        return tuple(name for _, name in self._names)

    def key(self, args: Sequence[Any], kwargs: Mapping[str, Any], task: Any = None) -> str:
        """Return the lock key of the call ``(*args, **kwargs)``; ``task`` is for a callable.

        Raises :class:`LockKeyError` when the arguments do not fit the signature, cannot be
        put in canonical form, or the callable does not return a str.
        """
        func = self._func
        if func is not None:
            text = self._call(func, task, args, kwargs)
            return self._head + digest(text)
        arguments = self._bind_plain(args, kwargs)
        arguments = self._bind(args, kwargs) if arguments is None else arguments
        task_name = self.task_name
        entries = []  # a loop, not a comprehension: before Python 3.12 a comprehension is a call
        for name_text, name in self._names:
            value = canonical(arguments[name], task=task_name, argument=name)
            entries.append("[" + name_text + "," + value + "]")  # _entry's text, a call less
        # self._names is sorted: the same text as canonical() of the dict {name: value}.
        text = '["dict",[' + ",".join(entries) + "]]"
        return self._head + digest(text)

    def name(self, args: Sequence[Any], kwargs: Mapping[str, Any], task: Any = None) -> str:
        """The call's selection readable (fair share's tenant): the callable's str, else the values
        of ``names`` joined by ``:`` (a str or int as is, others canonical). Raises as ``key``."""
        if self._func is not None:
            return self._call(self._func, task, args, kwargs)
        arguments = self._bind_plain(args, kwargs) or self._bind(args, kwargs)  # {} binds to {}
        return ":".join(self._readable(name, arguments[name]) for _, name in self._names)

    def _readable(self, name: str, value: Any) -> str:
        plain = isinstance(value, (str, int)) and not isinstance(value, bool)
        return str(value) if plain else canonical(value, task=self.task_name, argument=name)

    def _bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            problem = f"do not match the signature {self._described}: {exc}"
            raise LockKeyError(self.task_name, "(args, kwargs)", problem) from None
        # Defaults filled in, so f(1), f(x=1) and f(1, y=<default>) are one call.
        bound.apply_defaults()
        return dict(bound.arguments)

    def _bind_plain(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
        """What ``Signature.bind`` then ``apply_defaults`` give for a signature of named
        parameters only; None for any other signature, or a call that does not fit it (then
        Signature.bind runs, and names the mismatch)."""
        names = self._plain_names
        if names is None or len(args) > len(names):
            return None
        arguments = dict(zip(names, args))
        for name, value in kwargs.items():
            if name in arguments or name not in names:
                return None
            arguments[name] = value
        if len(arguments) < len(names):
            for name in names:
                if name not in arguments:
                    if name not in self._defaults:
                        return None
                    arguments[name] = self._defaults[name]
        return arguments

    def _call(self, func: LockKeyFunc, task: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        try:
            result = func(task, tuple(args), dict(kwargs))
        except Exception as exc:
            # Wrapped (and chained) so that key() has a single error type for its callers.
            raise LockKeyError(self.task_name, self.option, f"raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(result, str):
            raise LockKeyError(self.task_name, self.option, f"returned {_type_name(result)}, not a str")
        return str.__str__(result)
