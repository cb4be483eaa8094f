"""Giving a plugin the tool guide of a chat (SPEC §5.5, §6 ``guide.get``)."""

from __future__ import annotations

import datetime as dt
import logging

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from conversations.models import Conversation
from conversations.selectors import conversation_of_owner
from core.logfmt import log_event
from ingest.guide import ToolGuide
from ingest.models import ToolGuideServed
from ingest.selectors.clients import plugin_client_owner
from ingest.selectors.guides import tool_guide

logger = logging.getLogger(__name__)


def tool_guide_serve(
    *, client_pk: int, platform: str, conversation_id: str | None, now: dt.datetime | None = None
) -> ToolGuide:
    """The guide for a chat the plugin is on, recorded as served to that client.

    ``conversation_id`` is the platform's id of the chat, looked up among the
    client's owner's conversations (``conversation_of_owner``, where the
    owner's next message with that id goes); a chat Conductor has not seen
    for this owner gets the platform's guide, with the client's policies,
    even when another owner has a chat with the same id: its policies and
    story are none of this client's business.
    """
    now = now or timezone.now()
    conversation = None
    if conversation_id and (owner := plugin_client_owner(client_pk=client_pk)) is not None:
        conversation = conversation_of_owner(owner=owner, platform=platform, remote_id=conversation_id)
    guide = tool_guide(platform=platform, conversation=conversation, client_pk=client_pk)
    _record(client_pk=client_pk, platform=platform, conversation=conversation, guide=guide, now=now)
    log_event(
        logger, "guide_served", client_pk=client_pk, platform=platform,
        conversation_id=conversation.pk if conversation else None, version=guide.version,
    )
    return guide


def _record(
    *, client_pk: int, platform: str, conversation: Conversation | None, guide: ToolGuide, now: dt.datetime
) -> None:
    served = ToolGuideServed.objects.filter(
        client_id=client_pk, platform=platform, conversation=conversation, version=guide.version
    )
    with transaction.atomic():
        if served.update(count=F("count") + 1, last_served_at=now):
            return
        try:
            # Two sockets of one client asking at once: the loser counts instead.
            with transaction.atomic():
                ToolGuideServed.objects.create(
                    client_id=client_pk, platform=platform, conversation=conversation, version=guide.version,
                    text=guide.text, first_served_at=now, last_served_at=now,
                )
        except IntegrityError:
            served.update(count=F("count") + 1, last_served_at=now)
