"""Reads of the conversations app."""

from __future__ import annotations

from typing import NamedTuple

from django.db.models import Count, Exists, F, OuterRef, QuerySet

from conversations.models import Conversation, ConversationLink, Message


class Route(NamedTuple):
    """Where an outbound task for a conversation goes (SPEC §2.2, §6 Routing)."""

    client_id: str
    platform: str
    conversation_id: str


def conversation_route(*, conversation_id: int) -> Route | None:
    """The route of the conversation's most recently seen link, or None without a link.

    Only links through a client of the conversation's owner count: a client
    given another owner since keeps its links, but no longer routes them.
    """
    link = (
        ConversationLink.objects.filter(conversation_id=conversation_id, client__owner=F("conversation__owner"))
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


class ConversationNotFound(LookupError):
    pass


def conversation_by_reference(*, reference: str, platform: str | None = None) -> Conversation:
    """The conversation an operator names: Conductor's id, or the platform's id (with ``platform`` when two match).

    Raises ``ConversationNotFound`` saying why none or several match.
    """
    matches = Conversation.objects.filter(remote_id=reference)
    if platform:
        matches = matches.filter(platform=platform)
    if reference.isdigit():
        by_pk = Conversation.objects.filter(pk=int(reference))
        matches = by_pk if by_pk.exists() else matches
    found = list(matches[:2])
    if not found:
        raise ConversationNotFound(f"no conversation {reference!r}" + (f" on {platform}" if platform else ""))
    if len(found) > 1:
        raise ConversationNotFound(f"{reference!r} names conversations on several platforms: give --platform")
    return found[0]


def conversations_with_link_flag(*fields: str) -> QuerySet[Conversation]:
    """Conversations annotated with ``has_link`` (seen through some plugin client), loading only ``fields``."""
    return Conversation.objects.annotate(
        has_link=Exists(ConversationLink.objects.filter(conversation=OuterRef("pk")))
    ).only(*fields)
