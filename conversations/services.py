"""Writes of the conversations app."""

from __future__ import annotations

import datetime as dt

from conversations.models import Conversation, ConversationLink


def conversation_get_locked(*, platform: str, remote_id: str, title: str, now: dt.datetime) -> Conversation:
    """Get or create the conversation and hold its row until the transaction ends.

    Holding it serialises ingest per conversation, so per-conversation counts
    (the hourly instruction limit) hold under concurrent writers.
    """
    # A row this transaction inserts is held by it too.
    conversation, _ = Conversation.objects.select_for_update().get_or_create(
        platform=platform, remote_id=remote_id, defaults={"title": title, "last_activity_at": now}
    )
    return conversation


def conversation_touch(*, conversation: Conversation, title: str, now: dt.datetime) -> None:
    """Record activity in the conversation, and its newest title when one is given."""
    updates = {"last_activity_at": now, **({"title": title} if title else {})}
    Conversation.objects.filter(pk=conversation.pk).update(**updates)
    for field, value in updates.items():
        setattr(conversation, field, value)


def conversation_link_seen(
    *,
    conversation: Conversation,
    client_pk: int,
    page_url: str,
    organization_id: str,
    last_assistant_message_id: str,
    now: dt.datetime,
) -> None:
    """Record that the conversation was seen through this plugin client, just now.

    Blank values do not overwrite what an earlier sighting recorded.
    """
    values = {
        "page_url": page_url,
        "organization_id": organization_id,
        "last_assistant_message_id": last_assistant_message_id,
    }
    seen_before = ConversationLink.objects.filter(conversation=conversation, client_id=client_pk)
    if not seen_before.update(last_seen_at=now, **{name: value for name, value in values.items() if value}):
        ConversationLink.objects.get_or_create(
            conversation=conversation, client_id=client_pk, defaults={**values, "last_seen_at": now}
        )
