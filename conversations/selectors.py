"""Reads of the conversations app."""

from __future__ import annotations

from typing import NamedTuple

from django.db.models import Count

from conversations.models import ConversationLink, Message


class Route(NamedTuple):
    """Where an outbound task for a conversation goes (SPEC §2.2, §6 Routing)."""

    client_id: str
    platform: str
    conversation_id: str


def conversation_route(*, conversation_id: int) -> Route | None:
    """The route of the conversation's most recently seen link, or None without a link."""
    link = (
        ConversationLink.objects.filter(conversation_id=conversation_id)
        .select_related("client", "conversation")
        .order_by("-last_seen_at", "-pk")
        .first()
    )
    if link is None:
        return None
    return Route(link.client.client_id, link.conversation.platform, link.conversation.remote_id)


def message_counts_by_source_and_role() -> dict[tuple[str, str], int]:
    """How many messages are stored: ``{(source, role): count}``, only pairs with any. One query."""
    rows = Message.objects.values_list("source", "role").annotate(n=Count("pk")).order_by()
    return {(source, role): n for source, role, n in rows}
