"""Writes of the conversations app."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable

from django.db import transaction

from automation.wake import dispatcher_wake
from conductor_site.logfmt import log_event
from conversations.models import Conversation, ConversationLink

logger = logging.getLogger(__name__)


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


def _flag_set(*, conversation_ids: Iterable[int], field: str, value: bool) -> list[int]:
    """Set a boolean ``field`` on the conversations where it differs; return the pks changed.

    The rows are locked while they are read, so the pks returned are exactly
    the rows this call changed, even with another operator acting at once.
    """
    ids = list(conversation_ids)
    with transaction.atomic():
        changed = sorted(
            Conversation.objects.select_for_update()
            .filter(pk__in=ids)
            .exclude(**{field: value})
            .values_list("pk", flat=True)
        )
        Conversation.objects.filter(pk__in=changed).update(**{field: value})
    return changed


def conversations_pause_set(*, conversation_ids: Iterable[int], is_paused: bool, actor: str) -> int:
    """Pause or resume the conversations; return how many changed.

    The tasks of a paused conversation are not claimed; they stay pending or
    waiting (SPEC §4.2). Resuming wakes the dispatcher once this commits, so the
    held tasks go out at once instead of at the next tick. Conversations
    already in the asked state are left alone.
    """
    with transaction.atomic():
        changed = _flag_set(conversation_ids=conversation_ids, field="paused", value=is_paused)
        if changed and not is_paused:
            transaction.on_commit(dispatcher_wake)
    if changed:
        log_event(
            logger,
            "conversation_pause" if is_paused else "conversation_resume",
            conversation_ids=changed,
            actor=actor,
        )
    return len(changed)


def conversations_renewal_set(*, conversation_ids: Iterable[int], is_enabled: bool, actor: str) -> int:
    """Turn renewal on or off for the conversations; return how many changed.

    The renewal projector only considers conversations with renewal on.
    """
    changed = _flag_set(conversation_ids=conversation_ids, field="renewal_enabled", value=is_enabled)
    if changed:
        log_event(
            logger,
            "conversation_renewal_enable" if is_enabled else "conversation_renewal_disable",
            conversation_ids=changed,
            actor=actor,
        )
    return len(changed)


def conversation_renewal_policy_set(
    *, conversation: Conversation, idle_seconds: int, text: str, daily_cap: int, actor: str
) -> None:
    """Change when and with what text the conversation is renewed.

    Writes only these three fields, so it never undoes a concurrent pause or
    a newer ``last_activity_at``.
    """
    values = {"renewal_idle_seconds": idle_seconds, "renewal_text": text, "renewal_daily_cap": daily_cap}
    Conversation.objects.filter(pk=conversation.pk).update(**values)
    for name, value in values.items():
        setattr(conversation, name, value)
    log_event(
        logger,
        "conversation_renewal_policy",
        conversation_id=conversation.pk,
        idle_seconds=idle_seconds,
        daily_cap=daily_cap,
        actor=actor,
    )
