"""What /healthz reports."""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, connection

from django.conf import settings

from automation.loop import stall_seconds
from automation.selectors import dispatcher_last_tick_age_seconds, dispatcher_servers_signing_otherwise
from core.clock import now_ms
from core.keys import other_key_report
from ingest.selectors import plugin_clients_connected


def database_error_text(exc: DatabaseError) -> str:
    """The error's first line, to show a monitor without a traceback."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def health_report() -> dict[str, Any]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        return {
            "database": False,
            "database_error": database_error_text(exc),
            "dispatcher_last_tick_age_seconds": None,
            "connected_clients": None,
            "other_secret_key": None,
        }
    now = now_ms()
    stalled_before = now - int(stall_seconds(settings.CONDUCTOR_TICK_SECONDS) * 1000)
    return {
        "database": True,
        "dispatcher_last_tick_age_seconds": dispatcher_last_tick_age_seconds(now_ms=now),
        "connected_clients": plugin_clients_connected().count(),
        # A server of this installation that signs with another SECRET_KEY (core.keys), or null.
        "other_secret_key": other_key_report(dispatcher_servers_signing_otherwise(stalled_before=stalled_before)),
    }
