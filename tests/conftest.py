import os
import time

import pytest
from channels.layers import channel_layers
from django.conf import settings
from django.test import override_settings

import tests.kinds  # noqa: F401  (registers the test-only task kinds)


@pytest.fixture
def channel_layer():
    """A fresh instance of the configured channel layer (channels-lite or Redis).

    Layers bind to the event loop that first receives on them, and each async
    test runs its own loop, so no instance is shared between tests.
    """
    channel_layers.backends.pop("default", None)
    layer = channel_layers["default"]
    yield layer
    channel_layers.backends.pop("default", None)


@pytest.fixture(scope="session", autouse=True)
def channel_prefix_of_this_worker():
    """On Redis, each xdist worker's channel layer has a prefix of its own, and so do the servers it starts.

    Workers share one Redis: an owner's group (``plugin-owner.default``) or a
    client's (two workers' databases give out the same primary keys) would
    otherwise carry one worker's frames to another's sockets.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    config = settings.CHANNEL_LAYERS["default"].get("CONFIG", {})
    if worker and "prefix" in config:
        config["prefix"] = f"{config['prefix']}-{worker}"
        # The processes it starts (servers, spawned children) read it from their environment.
        os.environ["CONDUCTOR_CHANNEL_PREFIX"] = config["prefix"]
        channel_layers.backends.pop("default", None)
    yield


@pytest.fixture(autouse=True, scope="session")
def flush_retries_a_deadlock():
    """A transactional test's flush, run again when PostgreSQL chose it as a deadlock's victim.

    A server a test started in a process of its own (``tests/server.py``)
    may still be running a statement over several tables (a claim, a status
    push round) when the test ends, and the flush's ``TRUNCATE`` of every
    table can take their locks in the other order. The flush is rolled back
    whole, so running it again is safe.
    """
    from django.core.management.base import CommandError
    from django.test import testcases

    original = testcases.TransactionTestCase._fixture_teardown

    def teardown(self):
        for attempt in range(1, 4):
            try:
                return original(self)
            except CommandError as exc:
                if attempt == 3 or "deadlock detected" not in str(exc.__cause__ or ""):
                    raise
                time.sleep(0.2 * attempt)

    testcases.TransactionTestCase._fixture_teardown = teardown
    yield
    testcases.TransactionTestCase._fixture_teardown = original


@pytest.fixture(autouse=True)
def status_push_off(request):
    """The side panel's pushes (``ingest/panel/push.py``) are off unless a test asks for ``status_push``.

    A socket test that reads its next frame would otherwise find an
    ``instruction.status`` among them, at a moment it cannot choose. Servers
    the tests start in processes of their own push as in production.
    """
    from automation.changes import task_changes
    from ingest.panel.push import tasks_changed

    if "status_push" in request.fixturenames:
        yield
        return
    task_changes.unsubscribe(tasks_changed)
    yield
    task_changes.subscribe(tasks_changed)


@pytest.fixture
def status_push(monkeypatch):
    """A fresh ``StatusPush`` of this test's own, whose thread sends what the test's changes mark."""
    from ingest.panel import push

    fresh = push.StatusPush()
    monkeypatch.setattr(push, "status_push", fresh)
    yield fresh
    fresh.stop()  # its connection closed: the test database can go


@pytest.fixture(autouse=True)
def answer_listener(request):
    """The answer wake-ups' listener (``ingest/answer_wakes.py``) goes with the test database.

    In production it lives as long as its process. Here, on the channel
    layer, the flush after a test drops its group membership with the layer
    database's rows, so it is stopped after each test (in milliseconds, when
    the test started one). PostgreSQL's listener listens on across tests, and
    is stopped before the test database is dropped, which it would prevent
    (``answer_listener_of_the_session``).
    """
    from automation.wake import wakes_by_notify
    from ingest.answer_wakes import answer_waiters

    if request.node.get_closest_marker("django_db"):
        request.getfixturevalue("answer_listener_of_the_session")
    yield
    if not wakes_by_notify():
        answer_waiters.stop()


@pytest.fixture(scope="session")
def answer_listener_of_the_session(django_db_setup):
    """Set up after the test databases, so torn down before they are dropped."""
    from ingest.answer_wakes import answer_waiters

    yield
    answer_waiters.stop()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """Close connections after each use in tests.

    Consumers run their queries in a worker thread whose persistent connection
    (CONN_MAX_AGE) would outlive the test and keep PostgreSQL from dropping
    the test database at the end of the run.
    """
    from django.db import connections

    for alias in connections:
        connections.settings[alias]["CONN_MAX_AGE"] = 0


@pytest.fixture(scope="session", autouse=True)
def fast_password_hashing():
    """Hash the tests' passwords cheaply (tests/hashers.py); the production hashers still verify."""
    with override_settings(PASSWORD_HASHERS=["tests.hashers.FastPBKDF2PasswordHasher", *settings.PASSWORD_HASHERS]):
        yield


def pytest_collection_modifyitems(config, items):
    """Skip ``database_free`` tests when the suite runs against PostgreSQL or Redis.

    They test code that touches no database and no channel layer (the
    plugin in Chromium against a scripted peer), so a second run on another
    database would repeat the first; CI runs the suite once per configuration.
    """
    if not (os.environ.get("DATABASE_URL") or os.environ.get("REDIS_URL")):
        return
    skip = pytest.mark.skip(reason="uses no database: runs in the embedded configuration only")
    for item in items:
        if item.get_closest_marker("database_free"):
            item.add_marker(skip)
