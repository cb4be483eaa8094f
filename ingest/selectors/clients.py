"""Reads of plugin clients: presence, the clients outbound tasks may target, a client's token and activity."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet, Subquery
from django.utils import timezone

from conversations.models import Message
from core.clock import datetime_from_ms
from ingest.models import DeliveryRequest, PluginClient
from ingest.tokens import HASH_PREFIX, token_matches
from platforms import platforms

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


class PluginTargets:
    """The ``targets`` of outbound kinds (``automation.kinds.Targets``): plugin clients.

    A client can take a task while it is enabled and connected and was seen
    within the presence window.
    """

    def present(self, *, now: int) -> QuerySet:
        return plugin_clients_connected(now=datetime_from_ms(now)).values("client_id")

    def is_present(self, *, client_id: str) -> bool:
        return plugin_client_is_connected(client_id=client_id)


plugin_targets = PluginTargets()


def plugin_client_exists(*, client_id: str) -> bool:
    """Whether a client (enabled or revoked) has this id."""
    return PluginClient.objects.filter(client_id=client_id).exists()


def plugin_client_name_suggest() -> str:
    """A name for a new client that is not taken yet: "browser 1", "browser 2", ..."""
    taken = set(PluginClient.objects.filter(client_id__startswith="browser-").values_list("client_id", flat=True))
    number = 1
    while f"browser-{number}" in taken:
        number += 1
    return f"browser {number}"


def plugin_client_authenticate(*, client_id: str, token: str) -> PluginClient | None:
    """The enabled client with this id and token, or None. Unknown ids cost the same hash."""
    client = PluginClient.objects.filter(client_id=client_id, enabled=True).first()
    stored = client.token_hash if client else HASH_PREFIX + "0" * 64
    if token_matches(token, stored) and client is not None:
        return client
    return None


@dataclass(frozen=True)
class LastDelivery:
    """A delivery request and the plugin's answer, without the answer's body."""

    request_id: str
    task_id: str
    sent_at: int  # epoch ms
    answered_at: int | None  # epoch ms; None while unanswered
    ok: Any  # as the answer said: True or False (None while unanswered)
    status: Any
    error: Any
    error_code: Any
    method: str  # SPEC §6.1: "http" or "dom"


@dataclass(frozen=True)
class PlatformActivity:
    """A client's latest capture and latest delivery on one platform, for its admin page."""

    platform: str
    last_capture: Message | None
    last_delivery: LastDelivery | None


def _latest_per_platform(queryset: QuerySet, *, platform_field: str, order: tuple[str, ...]) -> QuerySet:
    """``queryset``'s first row in ``order`` for each platform, in one statement.

    One subquery per platform, each a short walk of an index newest first,
    instead of a scan of everything the client ever sent.
    """
    latest = Q()
    for platform in platforms.names():
        newest = queryset.filter(**{platform_field: platform}).order_by(*order).values("pk")[:1]
        latest |= Q(pk=Subquery(newest))
    return queryset.filter(latest)


def plugin_client_activity(*, client_pk: int) -> list[PlatformActivity]:
    """Per platform, the client's latest captured message and latest delivery request. Two queries."""
    captures = _latest_per_platform(
        Message.objects.filter(client_id=client_pk, source=Message.Source.PLUGIN),
        platform_field="conversation__platform", order=("-received_at", "-pk"),
    ).select_related("conversation").only(
        "role", "capture", "received_at", "conversation__platform", "conversation__remote_id",
        "conversation__title",
    )
    deliveries = _latest_per_platform(
        DeliveryRequest.objects.filter(client_id=client_pk),
        platform_field="task__target_platform", order=("-sent_at", "-pk"),
    ).values(
        "request_id", "task_id", "method", "sent_at", "answered_at", "task__target_platform",
        "result__ok", "result__status", "result__error", "result__error_code",
    )
    capture_of = {message.conversation.platform: message for message in captures}
    delivery_of = {
        row["task__target_platform"]: LastDelivery(
            request_id=row["request_id"], task_id=row["task_id"], sent_at=row["sent_at"],
            answered_at=row["answered_at"], ok=row["result__ok"], status=row["result__status"],
            error=row["result__error"], error_code=row["result__error_code"], method=row["method"],
        )
        for row in deliveries
    }
    return [
        PlatformActivity(platform=platform, last_capture=capture_of.get(platform),
                         last_delivery=delivery_of.get(platform))
        for platform in platforms.names()
    ]


def message_clients(*, message_ids: Iterable[int | None]) -> dict[int, int | None]:
    """Each message's plugin client (its pk, or None). One query."""
    ids = {pk for pk in message_ids if pk is not None}
    return dict(Message.objects.filter(pk__in=ids).values_list("pk", "client_id")) if ids else {}


def plugin_client_pk(*, client_id: str) -> int | None:
    return PluginClient.objects.filter(client_id=client_id).values_list("pk", flat=True).first()


def plugin_client_owner(*, client_pk: int) -> str | None:
    """The owner of plugin client ``client_pk``; None when there is no such client."""
    return PluginClient.objects.filter(pk=client_pk).values_list("owner", flat=True).first()
