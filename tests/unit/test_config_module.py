"""Settings given in a celeryconfig module (``config_from_object``) are the ones used."""

from __future__ import annotations

import types

import pytest
from celery import Celery

from celery_redislock.integration.runtime import reset_runtime, runtime_for


@pytest.mark.parametrize("loaded_first", [True, False], ids=["config-loaded", "config-pending"])
def test_redislock_settings_of_a_config_module_win_over_the_plugin_defaults(loaded_first: bool) -> None:
    # Celery keeps a config_from_object module among its *defaults*: the plugin's own
    # defaults must not be put above it (they were, and a worker ignored celeryconfig's
    # redislock_options and redislock_queues).
    config = types.ModuleType("redislock_example_celeryconfig")
    config.broker_url = "redis://127.0.0.1:1/0"  # type: ignore[attr-defined]
    config.redislock_key_prefix = "locks"  # type: ignore[attr-defined]
    config.redislock_options = {"lock_timeout": 7}  # type: ignore[attr-defined]
    config.redislock_queues = {"reports": {"on_duplicate": "retry"}}  # type: ignore[attr-defined]
    app = Celery("config_module_app", set_as_current=False)
    app.config_from_object(config)
    if loaded_first:  # as in a worker, which has read its configuration before any task runs
        assert app.conf.broker_url == "redis://127.0.0.1:1/0"
    try:
        settings = runtime_for(app).settings
        assert settings.key_prefix == "locks"
        assert dict(settings.options) == {"lock_timeout": 7.0}
        assert {name: dict(layer) for name, layer in settings.queues.items()} == {
            "reports": {"on_duplicate": "retry"}
        }
        assert settings.url == "redis://127.0.0.1:1/0"  # not given: the broker's
        assert app.conf["redislock_url"] is None  # the default added for the one not given
        assert app.conf["redislock_queues"] == {"reports": {"on_duplicate": "retry"}}
    finally:
        reset_runtime(app)
        app.close()


def test_redislock_settings_under_a_namespace_are_read_as_django_projects_give_them() -> None:
    # config_from_object("django.conf:settings", namespace="CELERY"): the package's settings
    # are CELERY_REDISLOCK_*, and read as redislock_* like Celery's own.
    config = types.ModuleType("redislock_example_django_settings")
    config.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # type: ignore[attr-defined]
    config.CELERY_REDISLOCK_URL = "redis://127.0.0.1:2/2"  # type: ignore[attr-defined]
    config.CELERY_REDISLOCK_KEY_PREFIX = "shop"  # type: ignore[attr-defined]
    config.CELERY_REDISLOCK_OPTIONS = {"lock_timeout": 7}  # type: ignore[attr-defined]
    config.REDISLOCK_KEY_PREFIX = "not-in-the-namespace"  # type: ignore[attr-defined]
    app = Celery("namespaced_app", set_as_current=False)
    app.config_from_object(config, namespace="CELERY")
    try:
        settings = runtime_for(app).settings
        assert (settings.url, settings.key_prefix) == ("redis://127.0.0.1:2/2", "shop")
        assert dict(settings.options) == {"lock_timeout": 7.0}
        assert app.conf["redislock_key_prefix"] == "shop"  # not the default added after
    finally:
        reset_runtime(app)
        app.close()
