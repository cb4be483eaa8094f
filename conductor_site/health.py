"""What /healthz reports: the server's parts (its database, its channel layer), the dispatcher and the clients."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection

from automation.loop import stall_seconds
from automation.selectors import dispatcher_heartbeat_age_seconds, dispatcher_servers_signing_otherwise
from core.clock import now_ms
from core.keys import other_key_report
from core.layer_send import channel_layer_error, first_line_of
from ingest.selectors.clients import plugin_clients_connected


def database_error_text(exc: Exception) -> str:
    """The error's first line, to show a monitor without a traceback."""
    return first_line_of(exc)


def health_report() -> dict[str, Any]:
    """The report, and whether every part answers (200) or not (503, the part named)."""
    layer_error = channel_layer_error()
    layer = {"channel_layer": layer_error is None, **({"channel_layer_error": layer_error} if layer_error else {})}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        return {
            "database": False,
            "database_error": database_error_text(exc),
            **layer,
            "dispatcher_last_tick_age_seconds": None,
            "connected_clients": None,
            "other_secret_key": None,
        }
    now = now_ms()
    stalled_before = now - int(stall_seconds(settings.CONDUCTOR_TICK_SECONDS) * 1000)
    return {
        "database": True,
        **layer,
        "dispatcher_last_tick_age_seconds": dispatcher_heartbeat_age_seconds(now_ms=now),
        "connected_clients": plugin_clients_connected().count(),
        # A server of this installation that signs with another SECRET_KEY (core.keys), or null.
        "other_secret_key": other_key_report(dispatcher_servers_signing_otherwise(stalled_before=stalled_before)),
    }


def is_healthy(report: dict[str, Any]) -> bool:
    """Every part of the server answers: its database and its channel layer."""
    return bool(report["database"] and report["channel_layer"])
