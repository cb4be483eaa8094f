"""What a plugin asks about and does to its owner's conversations (SPEC §6 ``status.get``, ``conversation.pause``).

Only the client's owner's conversations: another owner's is answered as if
it did not exist. A plugin pauses and resumes through the operator service
the admin uses, with the plugin client as the actor; it never approves
(approval stays in the admin, behind a staff login).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from automation.services.operator import conversations_pause
from conversations.models import Conversation
from ingest.panel import selectors
from ingest.models import ClientAction, PluginClient


def plugin_actor(client_id: str) -> str:
    """How a plugin client is named as an actor in task events and log lines."""
    return f"plugin:{client_id}"


@dataclass(frozen=True)
class ConversationStatus:
    is_paused: bool
    messages: list[dict[str, Any]]
    approvals_waiting: int


def conversation_status_get(*, client_pk: int, platform: str, conversation_id: str) -> ConversationStatus:
    """``status.get`` for client ``client_pk``: its owner's conversation's last messages with blocks.

    The client looks at that conversation from now on: its ``instruction.status``
    frames go to the client (``ingest/panel/push.py``) until it asks about another.
    """
    owner = PluginClient.objects.values_list("owner", flat=True).get(pk=client_pk)
    PluginClient.objects.filter(pk=client_pk).update(viewing_platform=platform, viewing_conversation_id=conversation_id)
    is_paused, messages = selectors.conversation_status(owner=owner, platform=platform, conversation_id=conversation_id)
    return ConversationStatus(
        is_paused=is_paused, messages=messages, approvals_waiting=selectors.approvals_waiting(owner=owner)
    )


def conversation_pause_from_plugin(
    *, client_pk: int, platform: str, conversation_id: str, is_paused: bool, now: dt.datetime | None = None
) -> bool | None:
    """Pause or resume the conversation for client ``client_pk``; return whether it is paused now.

    None when it is not a conversation of the client's owner. A change is
    made by ``conversations_pause`` and recorded as the client's
    ``ClientAction``; asking for the state it is in already changes and
    records nothing.
    """
    client_id, owner = PluginClient.objects.values_list("client_id", "owner").get(pk=client_pk)
    with transaction.atomic():
        pk = (
            Conversation.objects.select_for_update()
            .filter(owner=owner, platform=platform, remote_id=conversation_id)
            .values_list("pk", flat=True).first()
        )
        if pk is None:
            return None
        if conversations_pause(conversation_ids=[pk], is_paused=is_paused, actor=plugin_actor(client_id)):
            ClientAction.objects.create(
                client_id=client_pk, client_label=client_id, conversation_id=pk,
                action=ClientAction.Action.PAUSE if is_paused else ClientAction.Action.RESUME,
                at=now or timezone.now(),
            )
    return is_paused
