"""Writes of the conversations app."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from typing import Any, NamedTuple

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from conversations.models import Conversation, ConversationLink, ConversationMove, Message
from core.inserts import insert_unless_taken
from core.logfmt import log_event

logger = logging.getLogger(__name__)


class ConversationKey(NamedTuple):
    """What names a conversation at ingest: its owner, platform and the platform's id.

    ``owner`` is the owner of the plugin client the message came through, or
    "" when it came through none (replayed without a client).
    """

    owner: str
    platform: str
    remote_id: str


def _conversation_create_locked(*, key: ConversationKey, title: str, now: dt.datetime) -> Conversation:
    """Get or create the conversation of exactly ``key``, held until the transaction ends."""
    # A row this transaction inserts is held by it too.
    conversation, _ = Conversation.objects.select_for_update().get_or_create(
        owner=key.owner, platform=key.platform, remote_id=key.remote_id,
        defaults={"title": title, "last_activity_at": now},
    )
    return conversation


def conversations_get_locked(
    *, titles: dict[ConversationKey, str], now: dt.datetime
) -> dict[ConversationKey, Conversation]:
    """The conversation of each key, held until the transaction ends; created when new, claimed when unclaimed.

    A conversation is its owner's (docs/security.md, "Whose conversation"):
    a key with an owner gets that owner's conversation with the id; else the
    unclaimed one (owner "", stored without a client), which it claims for
    the owner; else a new one of the owner. Another owner's conversation with
    the same id is never it. A key without an owner (a message through no
    client) gets the unclaimed conversation with the id, else the first one
    stored with it (an operator's replay; ``--client`` says whose), else a
    new unclaimed one. ``titles`` maps each key to the title a conversation
    created now gets.

    Holding the rows serialises ingest per conversation, so per-conversation
    counts (the hourly instruction limit) hold under concurrent writers. The
    existing rows are locked in one statement, in primary-key order, so two
    callers locking overlapping sets wait for each other instead of
    deadlocking; missing ones are then created one by one, in key order.
    """
    found = _conversations_lock(titles.keys())
    resolved: dict[ConversationKey, Conversation] = {}
    for key in sorted(titles, key=lambda key: (key.owner == "", key)):  # the clients' keys claim first
        candidates = found.get((key.platform, key.remote_id), [])
        if key.owner:
            # A row another key of this call claimed has that key's owner by now.
            conversation = next((c for c in candidates if c.owner == key.owner), None) or _claimed(
                key, next((c for c in candidates if c.owner == ""), None)
            )
        else:
            conversation = next((c for c in candidates if c.owner == ""), None) or next(iter(candidates), None)
        if conversation is None:
            conversation = _conversation_create_locked(key=key, title=titles[key], now=now)
        resolved[key] = conversation
    return resolved


def _conversations_lock(keys: Iterable[ConversationKey]) -> dict[tuple[str, str], list[Conversation]]:
    """The stored conversations the keys may resolve to, locked, in primary-key order, by (platform, remote id).

    A key with an owner reads only that owner's row and the unclaimed one:
    another owner's conversation with the same id is not locked. A key
    without an owner reads every row with its id.
    """
    remote_ids: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for key in keys:
        owners = (key.owner, "") if key.owner else ()
        remote_ids.setdefault((key.platform, owners), []).append(key.remote_id)
    if not remote_ids:
        return {}
    rows = Q()
    for (platform, owners), ids in remote_ids.items():
        rows |= Q(platform=platform, remote_id__in=ids, **({"owner__in": owners} if owners else {}))
    found: dict[tuple[str, str], list[Conversation]] = {}
    for conversation in Conversation.objects.select_for_update().filter(rows).order_by("pk"):
        found.setdefault((conversation.platform, conversation.remote_id), []).append(conversation)
    return found


def _claimed(key: ConversationKey, conversation: Conversation | None) -> Conversation | None:
    """The unclaimed ``conversation`` given ``key``'s owner, or None when there is none or another claimed it.

    The caller holds its lock, so two owners' clients cannot both claim it;
    only a row still unclaimed is written. When the owner's own conversation
    with the id was created meanwhile, the update breaks the unique key and
    ingest tries again, finding it.
    """
    if conversation is None:
        return None
    if not Conversation.objects.filter(pk=conversation.pk, owner="").update(owner=key.owner):
        return None
    conversation.owner = key.owner
    log_event(logger, "conversation_claim", conversation_id=conversation.pk, owner=key.owner)
    return conversation


def conversations_touch(*, titles: dict[Conversation, str], now: dt.datetime) -> None:
    """Record activity in the conversations, and each one's newest title ("" for none).

    One statement for all those whose title stays as it is, one for each whose title changed.
    """
    unchanged = [conversation for conversation, title in titles.items() if title in ("", conversation.title)]
    Conversation.objects.filter(pk__in=[conversation.pk for conversation in unchanged]).update(last_activity_at=now)
    for conversation in unchanged:
        conversation.last_activity_at = now
    for conversation, title in titles.items():
        if title not in ("", conversation.title):
            Conversation.objects.filter(pk=conversation.pk).update(last_activity_at=now, title=title)
            conversation.last_activity_at, conversation.title = now, title


class LinkSighting(NamedTuple):
    """What a sighting of a conversation through a plugin client records, besides the conversation and the time."""

    client_pk: int
    page_url: str
    organization_id: str
    last_assistant_message_id: str


LINK_SIGHTING_FIELDS = ("page_url", "organization_id", "last_assistant_message_id")


def conversation_links_seen(
    *, sightings: dict[Conversation, LinkSighting], now: dt.datetime
) -> dict[Conversation, int]:
    """Record that each conversation was seen through its sighting's plugin client, just now.

    Blank values do not overwrite what an earlier sighting recorded. One
    read, one update of ``last_seen_at`` for them all, and one update per
    link whose other values change. The links are read and then written, so
    the caller holds the conversations' locks, as every writer of a link does.
    The caller also checked that each sighting's client has the
    conversation's owner: a link never crosses owners.

    Returns the conversations whose route (``selectors.conversation_route``)
    this moves to another client, each with the client it moved from; each
    move is stored (``ConversationMove``) and logged.
    """
    if not sightings:
        return {}
    existing, route_of = _links_read(sightings)
    _links_write(sightings, existing, now=now)
    moved = {
        conversation: route_of[conversation.pk] for conversation, sighting in sightings.items()
        if route_of.get(conversation.pk, sighting.client_pk) != sighting.client_pk
    }
    _moves_record(moved, sightings, now=now)
    return moved


def _links_read(sightings: dict[Conversation, LinkSighting]) -> tuple[dict[int, ConversationLink], dict[int, int]]:
    """Each conversation's link to its sighting's client (when it has one), and its route before this sighting."""
    client_of = {conversation.pk: sighting.client_pk for conversation, sighting in sightings.items()}
    owner_of = {conversation.pk: conversation.owner for conversation in sightings}
    existing: dict[int, ConversationLink] = {}
    route_of: dict[int, int] = {}
    # Every link of the conversations, newest first: the sighting's own, and the route before this sighting.
    for link in (
        ConversationLink.objects.filter(conversation__in=client_of)
        .annotate(client_owner=F("client__owner"))
        .order_by("-last_seen_at", "-pk")
    ):
        if client_of[link.conversation_id] == link.client_id:
            existing[link.conversation_id] = link
        if link.client_owner == owner_of[link.conversation_id]:
            route_of.setdefault(link.conversation_id, link.client_id)
    return existing, route_of


def _links_write(
    sightings: dict[Conversation, LinkSighting], existing: dict[int, ConversationLink], *, now: dt.datetime,
) -> None:
    """New links inserted, changed ones updated each, the others' ``last_seen_at`` in one update."""
    first_seen = []
    only_seen = []
    for conversation, sighting in sightings.items():
        link = existing.get(conversation.pk)
        if link is None:
            first_seen.append(ConversationLink(
                conversation=conversation, client_id=sighting.client_pk, last_seen_at=now,
                **{name: getattr(sighting, name) for name in LINK_SIGHTING_FIELDS},
            ))
            continue
        # Blank values do not overwrite what an earlier sighting recorded.
        changed = {
            name: value for name in LINK_SIGHTING_FIELDS
            if (value := getattr(sighting, name)) and value != getattr(link, name)
        }
        if changed:
            ConversationLink.objects.filter(pk=link.pk).update(last_seen_at=now, **changed)
        else:
            only_seen.append(link.pk)
    if only_seen:
        ConversationLink.objects.filter(pk__in=only_seen).update(last_seen_at=now)
    ConversationLink.objects.bulk_create(first_seen)


def _moves_record(
    moved: dict[Conversation, int], sightings: dict[Conversation, LinkSighting], *, now: dt.datetime,
) -> None:
    """Each move stored (``ConversationMove``) and logged."""
    if not moved:
        return
    ConversationMove.objects.bulk_create(
        ConversationMove(conversation=conversation, from_client_id=from_pk,
                         to_client_id=sightings[conversation].client_pk, at=now)
        for conversation, from_pk in moved.items()
    )
    for conversation, from_pk in moved.items():
        log_event(
            logger, "conversation_move", conversation_id=conversation.pk, owner=conversation.owner,
            from_client_pk=from_pk, to_client_pk=sightings[conversation].client_pk,
        )


def _flag_set(
    *, conversation_ids: Iterable[int], field: str, value: bool, actor: str, actions: tuple[str, str]
) -> int:
    """Set a boolean ``field`` on the conversations where it differs; return how many changed.

    The rows are locked while they are read, so the count is exactly the rows
    this call changed, even with another operator acting at once. The change
    is logged as ``actions[0]`` when set, ``actions[1]`` when cleared.
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
    if changed:
        log_event(logger, actions[0] if value else actions[1], conversation_ids=changed, actor=actor)
    return len(changed)


def conversations_pause_set(*, conversation_ids: Iterable[int], is_paused: bool, actor: str) -> int:
    """Pause or resume the conversations; return how many changed.

    The tasks of a paused conversation are not claimed; they stay pending or
    waiting (SPEC §4.2). Conversations already in the asked state are left
    alone. Operators call ``automation.services.operator.conversations_pause``,
    which also wakes the dispatcher when tasks become claimable.
    """
    return _flag_set(
        conversation_ids=conversation_ids, field="paused", value=is_paused, actor=actor,
        actions=("conversation_pause", "conversation_resume"),
    )


def conversations_renewal_set(*, conversation_ids: Iterable[int], is_enabled: bool, actor: str) -> int:
    """Turn renewal on or off for the conversations; return how many changed.

    The renewal projector only considers conversations with renewal on.
    """
    return _flag_set(
        conversation_ids=conversation_ids, field="renewal_enabled", value=is_enabled, actor=actor,
        actions=("conversation_renewal_enable", "conversation_renewal_disable"),
    )


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


def conversation_handle_set(*, conversation: Conversation, handle: str | None, actor: str) -> None:
    """Give the conversation the handle other conversations mail it by, or take it away (None).

    The handle is checked by the model field's validator and its uniqueness
    by the database. Writes only this field; mails already created keep
    their recipient, and fail when they find it no longer accepts mail.
    """
    Conversation.objects.filter(pk=conversation.pk).update(handle=handle)
    conversation.handle = handle
    log_event(logger, "conversation_handle", conversation_id=conversation.pk, handle=handle or "none", actor=actor)


def conversation_delivery_methods_set(*, conversation: Conversation, methods: str, actor: str) -> None:
    """Set the delivery methods the conversation is tried by, in order ("" for its platform's).

    ``methods`` is checked by the model field's validator (``http,dom``).
    Writes only this field.
    """
    Conversation.objects.filter(pk=conversation.pk).update(delivery_methods=methods)
    conversation.delivery_methods = methods
    log_event(
        logger, "conversation_delivery_methods", conversation_id=conversation.pk, methods=methods or "platform",
        actor=actor,
    )


def delivered_dedupe_key(task_id: str) -> str:
    """The dedupe key of the message a task delivered: one per task (ingest's keys start ``id:`` or ``text:``)."""
    return f"delivery:{task_id}"


def delivered_message_store(
    *, task_id: str, conversation_id: int, client_pk: int, text: str, frame: dict[str, Any],
    remote_message_id: str | None,
) -> Message:
    """Store a delivered text as the conversation's user message (source ``conductor``), once per task.

    Its dedupe key is the task's (``delivered_dedupe_key``), which makes a
    second call for the same task return the first message. When the answer
    revealed the id of the message the platform created, the link replies
    under it from now on.
    """
    with transaction.atomic():
        # The conversation's lock first, as ingest takes it: ingest locks the
        # conversation and then updates the link, while this updates the link
        # and (PostgreSQL checks deferred foreign keys at commit) then needs
        # the conversation row. In opposite orders the two deadlock when the
        # app's reply to this delivery is ingested while it is stored.
        Conversation.objects.select_for_update().filter(pk=conversation_id).first()
        message = Message(
            conversation_id=conversation_id, role=Message.Role.USER, source=Message.Source.CONDUCTOR,
            text=text, raw_frame=frame, client_id=client_pk, received_at=timezone.now(),
            parent_message_id=frame.get("parent_message_id", ""), dedupe_key=delivered_dedupe_key(task_id),
        )
        if not insert_unless_taken(message):
            return Message.objects.get(conversation_id=conversation_id, dedupe_key=message.dedupe_key)
        if remote_message_id:
            ConversationLink.objects.filter(conversation_id=conversation_id, client_id=client_pk).update(
                last_assistant_message_id=remote_message_id
            )
    return message
