"""Reads of deliveries: where a delivery to a conversation through a client goes, and how delivery requests stand."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Case, Count, Value, When
from django.db.models.fields.json import KeyTextTransform

from conversations.models import Conversation, ConversationLink
from ingest.models import DeliveryRequest, PluginClient


@dataclass(frozen=True)
class DeliveryRoute:
    """What a delivery to a conversation through one client needs to know.

    ``client`` is None when no client has that id; ``link`` is None when the
    conversation was never seen through it; ``owner`` and ``methods`` are the
    conversation's ("" when it is gone).
    """

    client: PluginClient | None
    owner: str
    methods: str
    link: ConversationLink | None


def delivery_route_for(*, conversation_id: int, client_id: str) -> DeliveryRoute:
    """The client, the conversation's owner and delivery methods, and their link: one query when the link exists."""
    link = (
        ConversationLink.objects.select_related("client", "conversation")
        .filter(conversation_id=conversation_id, client__client_id=client_id).first()
    )
    if link is not None:
        return DeliveryRoute(
            client=link.client, owner=link.conversation.owner, methods=link.conversation.delivery_methods, link=link
        )
    owner, methods = (
        Conversation.objects.filter(pk=conversation_id).values_list("owner", "delivery_methods").first() or ("", "")
    )
    return DeliveryRoute(
        client=PluginClient.objects.filter(client_id=client_id).first(), owner=owner, methods=methods, link=None
    )


class DeliveryState:
    """Where a delivery request stands, for ``delivery_request_counts``."""

    DELIVERED = "delivered"  # its answer was read as delivered
    ANSWERED = "answered"  # answered, not delivered (refused, failed, or abandoned when the socket closed)
    UNANSWERED = "unanswered"  # no answer yet, or none before its executor stopped waiting


def delivery_request_counts() -> dict[tuple[str, str, str | None], int]:
    """How many delivery requests there are: ``{(method, state, error_code): count}``.

    ``state`` is a ``DeliveryState``; ``error_code`` is the answer's (SPEC §6),
    None without one. One aggregated query. Requests go with their task, so
    ``prune`` takes them away with it.
    """
    state = Case(
        When(delivered=True, then=Value(DeliveryState.DELIVERED)),
        When(answered_at__isnull=True, then=Value(DeliveryState.UNANSWERED)),
        default=Value(DeliveryState.ANSWERED),
    )
    rows = (
        DeliveryRequest.objects.annotate(state=state, error_code=KeyTextTransform("error_code", "result"))
        .values_list("method", "state", "error_code")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return {(method, state, error_code): n for method, state, error_code, n in rows}
