import os

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
