"""Directives that write reference tables from the code, so the pages cannot drift from it:
``redislock-options`` (every task option of the option schema, the modes' included),
``redislock-settings`` (the ``redislock_*`` app settings and their defaults) and
``redislock-counters`` (the counters ``inspect redislock_stats`` reports, the modes' included)."""

from __future__ import annotations

from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import Directive, directives
from sphinx.application import Sphinx

#: What each app setting is for. The names and defaults come from the code; a setting the code
#: has and this map lacks (or the reverse) fails the build.
SETTING_DOCS = {
    "redislock_url": "The lock store's Redis URL (``redis://``, ``rediss://``, ``unix://``, "
    "``sentinel://``, ``redis://...?cluster=true``). None: ``broker_url`` when it is a Redis URL, "
    "else ``result_backend`` when it is one, else the worker refuses to start.",
    "redislock_key_prefix": "The first part of every lock key (``{prefix}:{task name}:{digest}``).",
    "redislock_options": "Task options for every ``SingletonTask`` of the app (the last layer "
    "before the defaults).",
    "redislock_queues": "Task options by the queue a worker consumed the task from: "
    "``{queue name: {option: value}}``.",
    "redislock_transport_options": "Sentinel options of the lock client (``master_name``, "
    "``sentinel_kwargs``, ``min_other_sentinels``). None: those of the setting the URL came from.",
    "redislock_use_ssl": "TLS options of the lock client: a dict of redis-py's ``ssl_*`` "
    "arguments, True (redis-py's defaults) or False (none). None: those of the setting the URL "
    "came from (``broker_use_ssl``, ``redis_backend_use_ssl``).",
    "redislock_max_postpone": "Seconds a call postponed by ``global_rate_limit`` waits in the "
    "broker at most at one hop; a longer wait is split into hops. None: half of "
    "``broker_transport_options['visibility_timeout']`` on Redis and SQS (kombu's default when "
    "unset), 900 on RabbitMQ (half its default ``consumer_timeout``: set this when the server's "
    "is lower) and on other brokers.",
    "redislock_limits": "Named rate limits, ``{name: rate}`` (``'10/s'``, ``['5/s', '20/m']``, "
    "``'10/s burst 50'``), shared by the tasks that name them in ``rate_limits``.",
    "redislock_metrics_port": "The TCP port the worker's main process serves Prometheus "
    "``/metrics`` on (the ``metrics`` extra). None: no endpoint.",
    "redislock_metrics_host": "The address the metrics endpoint listens on: loopback unless told "
    "otherwise (``0.0.0.0`` for a scraper on another host).",
    "redislock_explain": "Keep a record of each call's decisions for ``celery redislock explain`` "
    "(:doc:`/operations/stuck`), written in the round trip each decision makes anyway. False: "
    "none is kept, and ``explain`` says so.",
    "redislock_explain_ttl": "Seconds a call's record of decisions is kept after its last "
    "decision (a day by default).",
    "redislock_compat_legacy_keys": "The compat bases also honour and clear the old libraries' "
    "keys (a rolling switch from celery-once / celery-singleton).",
}


def _literal(text: str) -> nodes.Node:
    return nodes.literal(text, text)


def _rst_cell(state: Any, text: str) -> list[nodes.Node]:
    # The docs are written with ``double backticks``: parse them as reStructuredText inline.
    paragraph, messages = state.inline_text(text, 0)
    return [nodes.paragraph("", "", *paragraph), *messages]


def _table(state: Any, header: list[str], rows: list[list[Any]], widths: list[int]) -> nodes.table:
    table = nodes.table(classes=["redislock-reference"])
    group = nodes.tgroup(cols=len(header))
    table += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    group += head
    row = nodes.row()
    for title in header:
        row += nodes.entry("", nodes.paragraph(text=title))
    head += row
    body = nodes.tbody()
    group += body
    for cells in rows:
        row = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            if isinstance(cell, str):
                entry.extend(_rst_cell(state, cell))
            else:
                entry += nodes.paragraph("", "", cell)
            row += entry
        body += row
    return table


class OptionsDirective(Directive):
    """The task options table: ``option_specs()`` once every mode has registered."""

    has_content = False
    option_spec: ClassVar[dict[str, Any]] = {"owner": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        import celery_redislock.modes  # noqa: F401  (the modes add their options on import)
        from celery_redislock.config.schema import option_specs

        owner = self.options.get("owner")
        specs = [spec for spec in option_specs() if owner is None or spec.owner == owner]
        if not specs:
            raise self.error(f"no option is owned by {owner!r}")
        undocumented = [spec.name for spec in specs if not spec.doc.strip()]
        if undocumented:
            raise self.error(f"options without a doc in their OptionSpec: {', '.join(undocumented)}")
        rows = [
            [
                _literal(spec.name),
                _literal(spec.kind),
                _literal(repr(spec.default)),
                spec.doc,
                _literal(spec.owner),
            ]
            for spec in specs
        ]
        return [
            _table(self.state, ["option", "type", "default", "meaning", "owner"], rows, [14, 14, 10, 52, 10])
        ]


def setting_defaults() -> dict[str, Any]:
    """Every ``redislock_*`` setting the code reads, with its default."""
    from celery_redislock.compat import LEGACY_SETTING
    from celery_redislock.config.settings import SETTING_DEFAULTS

    # The compat bases read their one setting with a default of False (compat/_common.py).
    return {**SETTING_DEFAULTS, LEGACY_SETTING: False}


class SettingsDirective(Directive):
    """The app settings table: names and defaults from the code, one sentence each from here."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        defaults = setting_defaults()
        missing = sorted(set(defaults) - set(SETTING_DOCS))
        stale = sorted(set(SETTING_DOCS) - set(defaults))
        if missing or stale:
            raise self.error(
                f"docs/_ext/redislock_docs.py SETTING_DOCS: undocumented settings {missing}, "
                f"settings the code no longer has {stale}"
            )
        rows = [
            [_literal(name), _literal(repr(default)), SETTING_DOCS[name]]
            for name, default in defaults.items()
        ]
        return [_table(self.state, ["setting", "default", "meaning"], rows, [22, 12, 66])]


class CountersDirective(Directive):
    """The counters table: ``registered_counters()`` once every mode and gate has registered,
    in the order ``inspect redislock_stats`` reports them."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        import celery_redislock.modes  # noqa: F401  (the modes add their counters on import)
        from celery_redislock.engine.counting import registered_counters

        rows = [[_literal(c.name), c.doc, c.owner.removeprefix("the ")] for c in registered_counters()]
        return [_table(self.state, ["counter", "counts", "owner"], rows, [20, 64, 16])]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("redislock-options", OptionsDirective)
    app.add_directive("redislock-settings", SettingsDirective)
    app.add_directive("redislock-counters", CountersDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
