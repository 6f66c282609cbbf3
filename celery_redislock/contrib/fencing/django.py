"""Fenced writes for Django's ORM (the ``django`` extra): a write a stale run cannot make.

::

    from celery_redislock.contrib.fencing.django import FenceField, FenceKeyField, fenced_update

    class Report(models.Model):
        body = models.TextField()
        fence = FenceField()          # the token of the last write applied
        fence_key = FenceKeyField()   # the lock key that token came from

    @app.task(base=SingletonTask, bind=True, fencing=True, lock_key=["report_id"])
    def render(self, report_id):
        report = Report.objects.get(pk=report_id)
        fenced_update(self, report, body=render_body(report))  # StaleWriteError: refused

``fenced_update`` is one ``UPDATE`` of the row, applied only where the stored token is smaller
than the running call's and the stored key is the call's (or empty: the first fenced write
claims the row). Refused, it raises ``StaleWriteError`` (or ``FenceKeyError``) and writes
nothing; the database decides, not the run's belief that it still holds its lock.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q

from . import FENCE_KEY_LENGTH, FenceColumnError, FenceKeyError, StaleWriteError, fence_of

__all__ = ["FenceField", "FenceKeyField", "fenced_update"]


class FenceField(models.BigIntegerField):  # type: ignore[misc]
    """The fencing token of the last fenced write applied to the row (0: none yet). Tokens
    are 64-bit: a ``BigIntegerField``. ``key_field`` names the model's ``FenceKeyField``."""

    description = "The fencing token of the last fenced write"

    def __init__(self, *args: Any, key_field: str = "fence_key", **kwargs: Any) -> None:
        self.key_field = key_field
        kwargs.setdefault("default", 0)
        kwargs.setdefault("editable", False)  # written by fenced_update only, not by a form
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        if self.key_field != "fence_key":
            kwargs["key_field"] = self.key_field
        return name, path, args, kwargs


class FenceKeyField(models.CharField):  # type: ignore[misc]
    """The lock key whose token the row's ``FenceField`` holds ('': no fenced write yet)."""

    description = "The lock key of the last fenced write"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", FENCE_KEY_LENGTH)
        kwargs.setdefault("default", "")
        kwargs.setdefault("blank", True)
        kwargs.setdefault("editable", False)
        super().__init__(*args, **kwargs)


def _fence_fields(model: Any) -> tuple[str, str]:
    """The names of ``model``'s fence field and its key field, or a FenceColumnError."""
    label = f"model {model._meta.label}"
    fences = [field for field in model._meta.concrete_fields if isinstance(field, FenceField)]
    if not fences:
        raise FenceColumnError(label, "fence", "add `fence = FenceField()` and `fence_key = FenceKeyField()`")
    if len(fences) > 1:
        names = ", ".join(field.name for field in fences)
        raise FenceColumnError(
            label, "fence", f"it has {len(fences)} FenceFields ({names}); a row has one fence"
        )
    fence = fences[0]
    try:
        key_field = model._meta.get_field(fence.key_field)
    except Exception:
        key_field = None
    if not isinstance(key_field, FenceKeyField):
        raise FenceColumnError(
            label,
            fence.key_field,
            f"its FenceField {fence.name!r} keeps its lock key in {fence.key_field!r}: add "
            f"`{fence.key_field} = FenceKeyField()` (or name another with FenceField(key_field=...))",
        )
    return fence.name, key_field.name


def fenced_update(task: Any, instance: Any, **values: Any) -> None:
    """Write ``values`` to ``instance``'s row with the running call's fence, in one atomic
    ``UPDATE ... WHERE pk = ... AND fence < token AND fence_key IN (key, '')``.

    ``task``: the bound task (``self``), its request, or a held ``RedisLock(fencing=True)``.
    Applied: the row and ``instance`` hold ``values``, the token and the key. Refused: nothing
    is written, and ``StaleWriteError`` (a later holder wrote the row) or ``FenceKeyError``
    (the row is fenced by another lock key) says why; ``NoFencingTokenError`` when ``task``
    has no token; ``FenceColumnError`` when the model has no ``FenceField``; the model's
    ``DoesNotExist`` when the row is gone.
    """
    fence = fence_of(task)
    model = type(instance)
    if not hasattr(model, "_meta"):
        raise TypeError(f"fenced_update writes a Django model instance's row, not {type(instance).__name__}")
    fence_name, key_name = _fence_fields(model)
    for name in values:
        if name in (fence_name, key_name):
            raise ValueError(f"fenced_update sets {name!r} itself: leave it out of the values")
    rows = model._base_manager.using(instance._state.db or "default").filter(pk=instance.pk)
    claimable = Q(**{key_name: fence.key}) | Q(**{key_name: ""})
    written = rows.filter(claimable, **{f"{fence_name}__lt": fence.token}).update(
        **values, **{fence_name: fence.token, key_name: fence.key}
    )
    if written != 1:
        _refused(model, rows, instance, fence.key, fence.token, fence_name, key_name)
    for name, value in {**values, fence_name: fence.token, key_name: fence.key}.items():
        setattr(instance, name, value)


def _refused(
    model: Any, rows: Any, instance: Any, key: str, token: int, fence_name: str, key_name: str
) -> None:
    # The UPDATE decided; this read only tells why, for the error (the row may change meanwhile).
    row = f"{model._meta.label} pk={instance.pk!r}"
    stored = rows.values_list(fence_name, key_name).first()
    if stored is None:
        raise model.DoesNotExist(f"fenced_update: {row} does not exist (a fenced write updates a row)")
    stored_token, stored_key = stored
    if stored_key not in (key, ""):
        raise FenceKeyError(row, stored_key, key)
    raise StaleWriteError(row, key, token, int(stored_token))
