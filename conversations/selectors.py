"""Reads of the conversations app."""

from __future__ import annotations

from dataclasses import dataclass

from conversations.models import Conversation, ConversationLink


@dataclass(frozen=True)
class Route:
    """Where an outbound task for a conversation goes (SPEC §2.2, §6 Routing)."""

    client_id: str
    platform: str
    conversation_id: str

    def as_task_fields(self) -> dict[str, str]:
        return {
            "target_client_id": self.client_id,
            "target_platform": self.platform,
            "target_conversation_id": self.conversation_id,
        }


def conversation_route(*, conversation: Conversation) -> Route | None:
    """The route of the conversation's most recently seen link, or None without a link."""
    link = (
        ConversationLink.objects.filter(conversation=conversation)
        .select_related("client")
        .order_by("-last_seen_at", "-pk")
        .first()
    )
    if link is None:
        return None
    return Route(
        client_id=link.client.client_id,
        platform=conversation.platform,
        conversation_id=conversation.remote_id,
    )
