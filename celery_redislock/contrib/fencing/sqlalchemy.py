"""Fenced writes for SQLAlchemy (the ``sqlalchemy`` extra): a write a stale run cannot make.

::

    from celery_redislock.contrib.fencing.sqlalchemy import fence_columns, fenced_update

    reports = Table("report", metadata, Column("id", Integer, primary_key=True),
                    Column("body", Text), *fence_columns())

    @app.task(base=SingletonTask, bind=True, fencing=True, lock_key=["report_id"])
    def render(self, report_id):
        with engine.begin() as conn:
            fenced_update(self, conn, reports, reports.c.id == report_id, body=render_body(report_id))

An ORM class gets the columns from ``Fenced`` (a mixin of ``fence`` and ``fence_key``) and is
written with ``fenced_update(self, session, Report, Report.id == report_id, body=...)``.

``fenced_update`` is one ``UPDATE``, applied only to rows whose stored token is smaller than the
running call's and whose stored key is the call's (or empty: the first fenced write claims the
row). Refused, it raises ``StaleWriteError`` (or ``FenceKeyError``) and writes nothing.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Column, ColumnElement, String, Table, func, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Mapped, Session, mapped_column

from . import FENCE_KEY_LENGTH, FenceColumnError, FenceKeyError, StaleWriteError, fence_of

__all__ = ["Fenced", "fence_columns", "fenced_update"]


def fence_columns(fence: str = "fence", key: str = "fence_key") -> tuple[Column[int], Column[str]]:
    """The two columns of a fenced table: the last token applied (0: none yet) and its lock key."""
    return (
        Column(fence, BigInteger, nullable=False, default=0, server_default="0"),
        Column(key, String(FENCE_KEY_LENGTH), nullable=False, default="", server_default=""),
    )


class Fenced:
    """A mixin for a declarative ORM class: its ``fence`` and ``fence_key`` columns."""

    fence: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0, server_default="0")
    fence_key: Mapped[str] = mapped_column(
        String(FENCE_KEY_LENGTH), nullable=False, default="", server_default=""
    )


def fenced_update(
    task: Any,
    connection: Connection | Session,
    table: Any,
    where: ColumnElement[bool],
    *,
    fence: str = "fence",
    fence_key: str = "fence_key",
    **values: Any,
) -> int:
    """Write ``values`` to the rows of ``table`` that ``where`` selects, with the running call's
    fence, in one ``UPDATE ... WHERE <where> AND fence < token AND fence_key IN (key, '')``.

    ``task``: the bound task (``self``), its request, or a held ``RedisLock(fencing=True)``;
    ``connection``: a Connection or a Session (its transaction is the caller's); ``table``: a
    ``Table`` or a mapped class. Returns how many rows were written. Refused (no row written
    though ``where`` selects some): ``StaleWriteError`` or ``FenceKeyError``, and nothing is
    written; ``where`` selecting no row is a ``LookupError``. ``NoFencingTokenError`` when
    ``task`` has no token; ``FenceColumnError`` when the table has no such columns.
    """
    held = fence_of(task)
    target = _table(table)
    for name in (fence, fence_key):
        if name not in target.c:
            raise FenceColumnError(
                f"table {target.name!r}", name, "add the columns of fence_columns() (or the Fenced mixin)"
            )
    fence_column, key_column = target.c[fence], target.c[fence_key]
    for name in values:
        if name in (fence, fence_key):
            raise ValueError(f"fenced_update sets {name!r} itself: leave it out of the values")
    claimable = or_(key_column == held.key, key_column == "")
    statement = (
        update(target)
        .where(where, fence_column < held.token, claimable)
        .values(**values, **{fence: held.token, fence_key: held.key})
    )
    written = int(getattr(connection.execute(statement), "rowcount", 0))
    if written == 0:
        _refused(connection, target, where, fence_column, key_column, held.key, held.token)
    return written


def _table(table: Any) -> Table:
    found = getattr(table, "__table__", table)  # a mapped class's table
    if not isinstance(found, Table):
        raise TypeError(f"fenced_update writes a Table or a mapped class, not {type(table).__name__}")
    return found


def _refused(
    connection: Connection | Session,
    target: Table,
    where: ColumnElement[bool],
    fence_column: Column[Any],
    key_column: Column[Any],
    key: str,
    token: int,
) -> None:
    # The UPDATE decided; this read only tells why, for the error.
    row = f"table {target.name!r} where {where}"
    other = connection.execute(select(key_column).where(where, key_column.not_in([key, ""]))).first()
    if other is not None:
        raise FenceKeyError(row, str(other[0]), key)
    stored = connection.execute(select(func.count(), func.max(fence_column)).where(where)).one()
    if not stored[0]:
        raise LookupError(f"fenced_update: {row} selects no row (a fenced write updates rows)")
    raise StaleWriteError(row, key, token, int(stored[1]))
