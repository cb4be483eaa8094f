"""Ingesting an assistant message: store it, extract its blocks, queue their work (SPEC §5, §6)."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from automation.models import TaskStatus
from automation.services.tasks import task_retarget
from conversations.models import Conversation, Message
from conversations.services import (
    conversation_get_locked,
    conversation_link_seen,
    conversation_touch,
)
from core.logfmt import log_event
from ingest.blocks import Block, parse_blocks
from ingest.frames import FinalMessage
from ingest.models import Instruction, PluginClient
from ingest.selectors import tool_policy_for
from ingest.services.instructions import (
    STATUS_OF_TASK,
    instruction_task_create,
    message_delivery_ensure,
)
from tools.registry import Policy, UnknownTool, tools

logger = logging.getLogger(__name__)

ACTOR = "ingest"


@dataclass(frozen=True)
class IngestResult:
    """What the plugin's ``ack`` reports.

    ``instructions`` is the number of Instructions stored for the message: one
    per block, valid or rejected, up to the 32 a message may hold, plus the one
    rejection that stands for all the blocks past them (SPEC §5). It is not the
    number of fences in the text: blocks past the limit are ignored, never
    instructions, and a duplicate's ack must repeat the first ack's count,
    which the stored rows give back exactly; the rejection says how many were
    ignored.
    """

    message_id: int
    instructions: int
    duplicate: bool


def message_dedupe_key(message: FinalMessage) -> str:
    """A message's identity in its conversation: its remote id, or its text when it has none."""
    if message.message_id:
        return f"id:{message.message_id}"
    return "text:" + hashlib.sha256(message.text.encode()).hexdigest()


def message_ingest(
    *,
    message: FinalMessage,
    client: PluginClient | None,
    source: str = Message.Source.PLUGIN,
    force: bool = False,
    now: dt.datetime | None = None,
    blocks: list[Block] | None = None,
) -> IngestResult:
    """Store an assistant message and queue the work of its ```baa blocks, in one transaction.

    The same message again (same conversation and dedupe key) creates nothing
    and reports the first one with ``duplicate=True``; the database's unique
    key decides, so identical frames racing in two processes store one
    message. ``force`` (replay) stores it again regardless. ``client`` is the
    plugin client it came through; None when replayed without one. ``blocks``
    is ``parse_blocks(message.text)`` when the caller parsed it already.
    """
    now = now or timezone.now()
    dedupe_key = None if force else message_dedupe_key(message)
    # Parsed before the transaction: the parse is pure and, for a large
    # message, long enough (a CommonMark parse of up to 1 MiB) that holding the
    # conversation's lock and the write transaction through it would stall
    # every other writer. A duplicate's parse is wasted; nothing else changes.
    # At most MAX_BLOCKS + 1 blocks, whatever the text holds: see ingest.blocks.
    if blocks is None:
        blocks = parse_blocks(message.text)
    with transaction.atomic():
        conversation = conversation_get_locked(
            platform=message.platform, remote_id=message.conversation_id,
            title=message.title, now=now,
        )
        existing = _existing(conversation, dedupe_key)
        if existing is not None:
            return existing

        conversation_touch(conversation=conversation, title=message.title, now=now)
        if client is not None:
            conversation_link_seen(
                conversation=conversation, client_pk=client.pk, page_url=message.page_url,
                organization_id=message.organization_id,
                last_assistant_message_id=message.message_id, now=now,
            )
            task_retarget(conversation_id=conversation.pk, client_id=client.client_id, actor=ACTOR)
        try:
            with transaction.atomic():
                stored = Message.objects.create(
                    conversation=conversation, role=Message.Role.ASSISTANT, source=source, capture=message.capture,
                    remote_message_id=message.message_id, parent_message_id=message.parent_message_id,
                    dedupe_key=dedupe_key, text=message.text, raw_frame=message.raw,
                    client=client, received_at=now,
                )
        except IntegrityError:
            # Another process stored the same message since our look-up.
            existing = _existing(conversation, dedupe_key)
            if existing is None:
                raise
            return existing

        queued = _queue_blocks(stored, conversation, client, blocks, now)

    log_event(
        logger, "message_ingest", message_id=stored.pk, conversation_id=conversation.pk,
        platform=conversation.platform, blocks=len(blocks), queued=queued, source=source,
    )
    # One Instruction per block (see _queue_blocks), so this equals what _existing counts for a duplicate.
    return IngestResult(message_id=stored.pk, instructions=len(blocks), duplicate=False)


def _existing(conversation: Conversation, dedupe_key: str | None) -> IngestResult | None:
    if dedupe_key is None:
        return None
    first = Message.objects.filter(conversation=conversation, dedupe_key=dedupe_key).first()
    if first is None:
        return None
    return IngestResult(message_id=first.pk, instructions=first.instructions.count(), duplicate=True)


def _queue_blocks(
    stored: Message, conversation: Conversation, client: PluginClient | None,
    blocks: list[Block], now: dt.datetime,
) -> int:
    """Create an Instruction per block and a task per valid one; return the tasks created.

    Each task wakes the dispatcher once the transaction commits.
    """
    budget = _hourly_budget(conversation, now)
    queued = 0
    for block in blocks:
        task_status, error = _judge(block, conversation, client, budget_left=budget - queued)
        instruction = Instruction.objects.create(
            message=stored, block_index=block.index, raw_text=block.raw_text,
            target=block.target, tool=block.tool, params=block.params,
            status=Instruction.Status.REJECTED if task_status is None else STATUS_OF_TASK[task_status],
            error=error,
        )
        if task_status is None:
            continue
        instruction_task_create(
            instruction=instruction, conversation_id=conversation.pk, status=task_status, actor=ACTOR
        )
        queued += 1
    if blocks and not queued:
        # Every block was rejected: the chat hears why at once.
        message_delivery_ensure(message_id=stored.pk, conversation_id=conversation.pk, actor=ACTOR)
        queued += 1
    return queued


def _hourly_budget(conversation: Conversation, now: dt.datetime) -> int:
    """Valid blocks the conversation may still queue in the rolling hour (SPEC §5)."""
    used = (
        Instruction.objects.filter(
            message__conversation=conversation, created_at__gte=now - dt.timedelta(hours=1)
        )
        .exclude(status=Instruction.Status.REJECTED)
        .count()
    )
    return settings.CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR - used


def _judge(
    block: Block, conversation: Conversation, client: PluginClient | None, *, budget_left: int
) -> tuple[str | None, str]:
    """The status a block's task starts in, or None and why when the block is rejected."""
    rejected = None
    if block.error:
        return rejected, block.error
    try:
        spec = tools.get(block.tool, target=block.target)
    except UnknownTool as exc:
        return rejected, str(exc)
    if error := spec.call_error(block.params or {}):
        return rejected, f"invalid params for {block.tool}: {error}"
    policy = tool_policy_for(
        tool=block.tool, client_pk=client.pk if client else None, conversation_pk=conversation.pk
    )
    if policy == Policy.DENY:
        return rejected, f"{block.tool} is denied by policy"
    if budget_left <= 0:
        limit = settings.CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR
        return rejected, (
            f"rate limit: this conversation already sent {limit} valid blocks in the last hour "
            "(CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR); wait before sending more"
        )
    if policy == Policy.APPROVE:
        return TaskStatus.BLOCKED, ""
    return TaskStatus.PENDING, ""


def ingest_final_message(
    *, message: FinalMessage, client_pk: int, blocks: list[Block] | None = None
) -> IngestResult:
    """``message_ingest`` for a frame from a connected plugin client."""
    return message_ingest(message=message, client=PluginClient.objects.get(pk=client_pk), blocks=blocks)
