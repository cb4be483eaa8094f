"""Delivery requests and their answers (SPEC §6, ``browser.proxy_delivery``)."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from automation.clock import now_ms
from automation.models import DeliveryRequest
from conductor_site.logfmt import log_event
from conversations.models import Conversation, ConversationLink, Message
from ingest.frames import DeliveryResult

logger = logging.getLogger(__name__)


def delivery_result_record(*, client_pk: int, result: DeliveryResult, now: int | None = None) -> bool:
    """Store the plugin's answer to a delivery request it was sent.

    Returns False, storing nothing, when no unanswered request with that id
    was sent to this client: the plugin gets ``invalid``. ``error_code`` is
    kept beside the rest; a result that has one is never ``ok`` (the frame
    parser refuses that), so the platform adapters read it as a failure.
    """
    return bool(
        DeliveryRequest.objects.filter(
            request_id=result.request_id, client_id=client_pk, answered_at__isnull=True
        ).update(
            answered_at=now_ms() if now is None else now,
            result={
                "ok": result.ok, "status": result.status, "body": result.body, "error": result.error,
                "error_code": result.error_code,
            },
        )
    )


def delivery_request_create(*, task_id: str, client_pk: int, now: int | None = None) -> DeliveryRequest:
    """Record a request about to be sent to a plugin client, before it is sent."""
    return DeliveryRequest.objects.create(task_id=task_id, client_id=client_pk, sent_at=now_ms() if now is None else now)


def delivery_requests_abandon(*, client_pk: int, reason: str, now: int | None = None) -> int:
    """Answer every unanswered request of the client with a failure: its socket closed first.

    The waiting executors see it at once and retry later with the same
    delivery key, instead of waiting out their timeout. Returns how many.
    """
    abandoned = DeliveryRequest.objects.filter(client_id=client_pk, answered_at__isnull=True).update(
        answered_at=now_ms() if now is None else now,
        result={"ok": False, "status": None, "body": None, "error": reason},
    )
    if abandoned:
        log_event(logger, "delivery_abandoned", client_pk=client_pk, requests=abandoned, reason=reason)
    return abandoned


def delivered_message_store(
    *, task_id: str, conversation_id: int, client_pk: int, text: str, frame: dict[str, Any],
    remote_message_id: str | None,
) -> Message:
    """Store a delivered text as the conversation's user message (source ``conductor``), once per task.

    The stored frame (``raw_frame``) carries the delivery key, which makes a
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
        existing = Message.objects.filter(
            conversation_id=conversation_id, source=Message.Source.CONDUCTOR, raw_frame__delivery_key=task_id
        ).first()
        if existing:
            return existing
        message = Message.objects.create(
            conversation_id=conversation_id, role=Message.Role.USER, source=Message.Source.CONDUCTOR,
            text=text, raw_frame=frame, client_id=client_pk, received_at=timezone.now(),
            parent_message_id=frame.get("parent_message_id", ""),
        )
        if remote_message_id:
            ConversationLink.objects.filter(conversation_id=conversation_id, client_id=client_pk).update(
                last_assistant_message_id=remote_message_id
            )
    return message
