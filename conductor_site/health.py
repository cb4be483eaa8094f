"""What /healthz reports."""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, connection

from automation.selectors import dispatcher_last_tick_age_seconds
from core.clock import now_ms
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
        }
    return {
        "database": True,
        "dispatcher_last_tick_age_seconds": dispatcher_last_tick_age_seconds(now_ms=now_ms()),
        "connected_clients": plugin_clients_connected().count(),
    }
