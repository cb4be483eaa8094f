"""The PostgreSQL backend: no health check for a connection used a moment ago, and one cut meanwhile is replaced."""

import threading
import time

import pytest
from django.db import DatabaseError, close_old_connections, connection

from automation.models import DispatcherState
from conductor_site.db.postgresql import base

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the PostgreSQL backend"),
]


@pytest.fixture(autouse=True)
def kept_connections(monkeypatch):
    """Connections kept between uses, as a server keeps them (the suite closes them after each use)."""
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 60)
    connection.close()
    yield
    connection.close()


@pytest.fixture
def asked(monkeypatch):
    """How often the connection is asked whether it still works (Django's ``SELECT 1``)."""
    calls = []
    real = connection.is_usable

    def is_usable():
        calls.append(time.monotonic())
        return real()

    monkeypatch.setattr(connection, "is_usable", is_usable)
    return calls


def cut(pid: int) -> None:
    """End the server process of connection ``pid``, from another connection (a thread's own)."""
    def terminate():
        from django.db import connection as own
        try:
            with own.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        finally:
            own.close()

    thread = threading.Thread(target=terminate)
    thread.start()
    thread.join(10)


def read() -> bool:
    return DispatcherState.objects.exists()


def test_a_connection_used_a_moment_ago_is_not_asked_after_close_old_connections(asked):
    read()
    close_old_connections()
    read()
    assert asked == []


def test_a_connection_idle_past_the_window_is_asked_once(asked, monkeypatch):
    monkeypatch.setattr(base, "HEALTH_CHECK_BYPASS_SECONDS", 0.05)
    read()
    time.sleep(0.1)
    close_old_connections()
    read()
    read()
    assert len(asked) == 1


def test_a_connection_cut_while_idle_past_the_window_is_replaced_before_its_next_statement(monkeypatch):
    monkeypatch.setattr(base, "HEALTH_CHECK_BYPASS_SECONDS", 0.05)
    read()
    pid = connection.connection.info.backend_pid
    cut(pid)
    time.sleep(0.1)
    close_old_connections()
    read()  # no error: the check found it dead and a new one was opened
    assert connection.connection.info.backend_pid != pid


def test_a_connection_cut_within_the_window_fails_one_statement_and_is_replaced_at_the_next_close():
    read()
    pid = connection.connection.info.backend_pid
    cut(pid)
    close_old_connections()
    with pytest.raises(DatabaseError):
        read()
    close_old_connections()
    read()
    assert connection.connection.info.backend_pid != pid
