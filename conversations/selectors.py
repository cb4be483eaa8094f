"""Reads of the conversations app."""

from __future__ import annotations

from typing import NamedTuple

from django.conf import settings
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


def message_exists(*, message_id: int | None) -> bool:
    """Whether a message with this id is stored."""
    return message_id is not None and Message.objects.filter(pk=message_id).exists()


def message_counts_by_source_and_role() -> dict[tuple[str, str], int]:
    """How many messages are stored: ``{(source, role): count}``, only pairs with any. One query."""
    rows = Message.objects.values_list("source", "role").annotate(n=Count("pk")).order_by()
    return {(source, role): n for source, role, n in rows}


def conversation_of_owner(*, owner: str, platform: str, remote_id: str) -> Conversation | None:
    """The conversation a message with this id from a client of ``owner`` goes to now, or None for a new one.

    The owner's own conversation with the id, else the unclaimed one (stored
    without a client), which that message would claim; never another
    owner's (docs/security.md, "Whose conversation").
    """
    found = {
        conversation.owner: conversation
        for conversation in Conversation.objects.filter(owner__in=(owner, ""), platform=platform, remote_id=remote_id)
    }
    return found.get(owner) or found.get("")


class ConversationNotFound(LookupError):
    pass


def conversation_by_reference(
    *, reference: str, platform: str | None = None, owner: str | None = None
) -> Conversation:
    """The conversation an operator names: Conductor's id, or the platform's id (with ``platform`` and
    ``owner`` when several match: two platforms, or two owners' chats with one id).

    Raises ``ConversationNotFound`` saying why none or several match.
    """
    matches = Conversation.objects.filter(remote_id=reference)
    if platform:
        matches = matches.filter(platform=platform)
    if owner is not None:
        matches = matches.filter(owner=owner)
    if reference.isdigit():
        by_pk = Conversation.objects.filter(pk=int(reference))
        matches = by_pk if by_pk.exists() else matches
    found = list(matches[:2])
    if not found:
        where = "".join([f" on {platform}" if platform else "", f" of owner {owner!r}" if owner is not None else ""])
        raise ConversationNotFound(f"no conversation {reference!r}{where}")
    if len(found) > 1:
        if found[0].platform != found[1].platform:
            raise ConversationNotFound(f"{reference!r} names conversations on several platforms: give --platform")
        raise ConversationNotFound(
            f"{reference!r} names conversations of several owners on {found[0].platform}: "
            "give --client (one of the owner's plugin clients) or Conductor's id"
        )
    return found[0]


def conversation_get(*, conversation_id: int) -> Conversation:
    """The conversation with this id; raises ``Conversation.DoesNotExist`` when there is none."""
    return Conversation.objects.get(pk=conversation_id)


def conversations_with_link_flag(*fields: str) -> QuerySet[Conversation]:
    """Conversations annotated with ``has_link`` (seen through some plugin client), loading only ``fields``."""
    return Conversation.objects.annotate(
        has_link=Exists(ConversationLink.objects.filter(conversation=OuterRef("pk")))
    ).only(*fields)


# --- mail (SPEC §5.1): within an owner, or between two owners an operator paired ---------------


def mail_owners(*, owner: str) -> frozenset[str]:
    """The owners whose conversations a conversation of ``owner`` may mail.

    Its own, and each owner an operator paired with it
    (``CONDUCTOR_MAIL_BETWEEN_OWNERS``, both ways). None for a conversation
    with no owner yet (stored without a client): it can mail no one.
    """
    if not owner:
        return frozenset()
    paired = (other for pair in settings.CONDUCTOR_MAIL_BETWEEN_OWNERS if owner in pair for other in pair)
    return frozenset({owner, *paired})


def _owners_mailed_by(sender_id: int | None) -> list[str]:
    """``mail_owners`` of conversation ``sender_id``'s owner (none for no conversation), sorted."""
    sender_owner = Conversation.objects.filter(pk=sender_id).values_list("owner", flat=True).first()
    return sorted(mail_owners(owner=sender_owner or ""))


def mail_recipient(*, handle: str, sender_id: int | None) -> Conversation | None:
    """The conversation that receives mail as ``handle`` from conversation ``sender_id``, or None.

    None alike when no conversation has the handle and when it belongs to an
    owner the sender's may not mail: the same queries, the same answer, so a
    sender cannot tell another owner's handle from one that does not exist.
    """
    return Conversation.objects.filter(handle=handle, owner__in=_owners_mailed_by(sender_id)).first()


def mail_handles(*, owner: str, excluding_id: int | None = None) -> QuerySet:
    """The handles a conversation of ``owner`` can write to, in order (a ``values_list`` of strings).

    Only conversations of the owners it may mail (``mail_owners``) that were
    seen through a plugin: mail to one never seen has nowhere to go.
    """
    return (
        Conversation.objects.filter(
            handle__isnull=False, links__isnull=False, owner__in=sorted(mail_owners(owner=owner))
        )
        .exclude(pk=excluding_id)
        .order_by("handle")
        .values_list("handle", flat=True)
        .distinct()
    )


def conversation_has_handle(*, conversation_id: int) -> bool:
    """Whether the conversation has a handle: whether it receives mail at all."""
    return Conversation.objects.filter(pk=conversation_id, handle__isnull=False).exists()


def mail_is_allowed(*, sender_id: int | None, recipient_id: int) -> bool:
    """Whether conversation ``sender_id``'s owner may mail conversation ``recipient_id``'s, as the owners are now."""
    return Conversation.objects.filter(pk=recipient_id, owner__in=_owners_mailed_by(sender_id)).exists()


def conversation_has_link(*, conversation_id: int) -> bool:
    """Whether the conversation was ever seen through a plugin client."""
    return ConversationLink.objects.filter(conversation_id=conversation_id).exists()
