"""What an operator's view costs the lock Redis: ``fair show``, ``limit show`` and a view of the
web page make as many round trips with many tenants and partitions as with a few (their states
are read in batches), and the page reads the running calls and rate states of the rows it shows
only. Counted by a client that counts what it writes (``tests.harness.counting_client``) and
by the server's own ``INFO commandstats``, on a real redis-server, the calls sent through the
real broker."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from celery import Celery

from celery_redislock import SingletonTask
from celery_redislock.contrib.testing import RedisServer
from celery_redislock.engine.lock_engine import LockEngine
from celery_redislock.engine.rate_decisions import Limit, decide_limits
from celery_redislock.gates.rate_calls import catalog_of, named_log, overrides_of
from celery_redislock.integration.runtime import runtime_for
from celery_redislock.ops.fair import show_fair
from celery_redislock.ops.limits import show_limits
from celery_redislock.ops.web import create_app
from celery_redislock.ops.web.app import PAGE_ROWS
from tests.harness import counting_client


class Views:
    """An app with a fair task (``fair_cap``) and a named limit, its lock client counting its
    round trips; ``add(n)`` sends calls of ``n`` more tenants and decides ``n`` more partitions."""

    def __init__(self, app: Celery, url: str) -> None:
        self.app = app
        self.client, self.trips = counting_client(url)
        runtime_for(app).engine = LockEngine(self.client)

        @app.task(base=SingletonTask, shared=False, name="views.fair", fair_key=["tenant"], fair_cap=2)
        def fair(tenant: str) -> None: ...

        self.fair = fair
        self.tenants = 0
        self.page = create_app(app, poll_interval=3600)
        self.view = self.page.test_client()

    def add(self, n: int) -> None:
        runtime = runtime_for(self.app)
        prefix = runtime.settings.key_prefix
        rates = catalog_of(runtime)["api"].rates
        for number in range(self.tenants, self.tenants + n):
            self.fair.delay(f"tenant-{number:04d}")
            limit = Limit(named_log(prefix, "api", f"{number:032x}"), rates, "api", overrides_of(prefix))
            decide_limits(runtime.scripts, [limit], f"call-{number}", reserve=False)
        self.tenants += n

    def page_view(self) -> str:
        response = self.view.get("/")
        assert response.status_code == 200
        return str(response.get_data(as_text=True))

    def costs(self) -> dict[str, int]:
        """Round trips of each view, each run once before it is counted (its scripts loaded)."""
        views: dict[str, Callable[[], object]] = {
            "fair show": lambda: show_fair(self.app),
            "limit show": lambda: show_limits(self.app),
            "page": self.page_view,
        }
        found = {}
        for name, view in views.items():
            view()
            self.trips.reset()
            view()
            found[name] = self.trips.count
        return found


@pytest.fixture
def views(make_app: Callable[..., Celery], lock_server: RedisServer) -> Iterator[Views]:
    """On a lock Redis of its own: the server's command counts are the views' alone (not the
    broker's, on the session's server), and its many tenants are not left to other tests."""
    url = lock_server.url
    made = Views(make_app(redislock_limits={"api": "100000/h"}, redislock_url=url), url)
    yield made
    made.page.extensions["redislock"].stop()
    made.client.close()


def test_the_views_round_trips_do_not_grow_with_the_tenants_and_partitions(views: Views) -> None:
    views.add(5)
    few = views.costs()
    views.add(PAGE_ROWS + 20)  # more than a page of each
    assert views.costs() == few
    assert [len(info.tenants) for info in show_fair(views.app)] == [PAGE_ROWS + 25]
    [limit] = show_limits(views.app)
    assert (len(limit.partitions), limit.found) == (PAGE_ROWS + 25, PAGE_ROWS + 25)


def test_the_page_reads_the_rows_it_shows_only(views: Views, lock_server: RedisServer) -> None:
    locks = lock_server.client()
    views.add(PAGE_ROWS + 20)
    views.page_view()  # the scripts loaded
    before = locks.info("commandstats")["cmdstat_evalsha"]
    page = views.page_view()
    after = locks.info("commandstats")["cmdstat_evalsha"]
    scripts = after["calls"] - before["calls"]
    # A running count per tenant shown, a rate state per partition shown, the fair queue's sweep,
    # the operator's holds.
    assert scripts == 2 * PAGE_ROWS + 2, scripts
    assert page.count("<tr><td>celery</td>") == PAGE_ROWS
    assert "Page 1 of 2" in page
