"""Reads of the ingest app."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from ingest.models import PluginClient
from ingest.tokens import HASH_PREFIX, token_matches

# A socket that died without a close (its server killed) stops counting after
# this long at most, whatever the ping interval (SPEC §4).
PRESENCE_MAX_SECONDS = 60.0


def presence_window() -> dt.timedelta:
    """How long a client counts as connected after it was last seen: 2 × the ping interval."""
    return dt.timedelta(
        seconds=min(2 * settings.CONDUCTOR_PING_INTERVAL_SECONDS, PRESENCE_MAX_SECONDS)
    )


def plugin_clients_connected(*, now: dt.datetime | None = None) -> QuerySet[PluginClient]:
    now = now or timezone.now()
    return PluginClient.objects.filter(
        enabled=True, connected=True, last_seen_at__gte=now - presence_window()
    )


def plugin_client_is_connected(*, client_id: str, now: dt.datetime | None = None) -> bool:
    return plugin_clients_connected(now=now).filter(client_id=client_id).exists()


def plugin_client_authenticate(*, client_id: str, token: str) -> PluginClient | None:
    """The enabled client with this id and token, or None. Unknown ids cost the same hash."""
    client = PluginClient.objects.filter(client_id=client_id, enabled=True).first()
    stored = client.token_hash if client else HASH_PREFIX + "0" * 64
    if token_matches(token, stored) and client is not None:
        return client
    return None
