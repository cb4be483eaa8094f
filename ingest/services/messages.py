"""Ingesting an assistant message: store it, extract its blocks, queue their work (SPEC §5, §6)."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone

from automation.models import TaskStatus
from automation.services.tasks import NewTask, task_retarget, tasks_create, tasks_retarget
from conversations.models import Conversation, Message
from conversations.services import (
    LinkSighting,
    conversation_get_locked,
    conversation_link_seen,
    conversation_links_seen,
    conversation_touch,
    conversations_get_locked,
    conversations_touch,
)
from core.logfmt import log_event
from ingest.blocks import Block, parse_blocks
from ingest.frames import FinalMessage
from ingest.models import Instruction, PluginClient
from ingest.selectors import ToolPolicies, tool_policy_for
from ingest.services.instructions import (
    STATUS_OF_TASK,
    instruction_task,
    instruction_task_create,
    message_delivery_ensure,
    message_delivery_task,
)
from tools.registry import DEFAULT_TARGET, Policy, UnknownTool, tools

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
    return _hourly_budgets([conversation.pk], now)[conversation.pk]


def _hourly_budgets(conversation_pks: Iterable[int], now: dt.datetime) -> dict[int, int]:
    """``_hourly_budget`` of each conversation, in one query."""
    conversation_pks = list(conversation_pks)
    used = dict(
        Instruction.objects.filter(
            message__conversation__in=conversation_pks, created_at__gte=now - dt.timedelta(hours=1)
        )
        .exclude(status=Instruction.Status.REJECTED)
        .order_by()
        .values_list("message__conversation")
        .annotate(used=Count("pk"))
        .values_list("message__conversation", "used")
    )
    limit = settings.CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR
    return {pk: limit - used.get(pk, 0) for pk in conversation_pks}


def _judge(
    block: Block, conversation: Conversation, client: PluginClient | None, *, budget_left: int,
    policy_for: Callable[..., str] | None = None,
) -> tuple[str | None, str]:
    """The status a block's task starts in, or None and why when the block is rejected.

    ``policy_for`` gives ``tool_policy_for``'s answer from policies read before (``ToolPolicies``).
    """
    rejected = None
    if block.error:
        return rejected, block.error
    try:
        spec = tools.get(block.tool, target=block.target)
    except UnknownTool as exc:
        return rejected, str(exc)
    if error := spec.call_error(block.params or {}):
        return rejected, f"invalid params for {block.tool}: {error}"
    policy = (policy_for or tool_policy_for)(
        tool=block.tool, target=block.target, client_pk=client.pk if client else None,
        conversation_pk=conversation.pk,
    )
    if policy == Policy.DENY:
        return rejected, f"{spec.full_name if spec.target != DEFAULT_TARGET else block.tool} is denied by policy"
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


@dataclass(frozen=True)
class ClientMessage:
    """A ``browser.final_message`` from a connected plugin client, and its blocks when already parsed."""

    message: FinalMessage
    client_pk: int
    blocks: list[Block] | None = None


class _NotTogether(Exception):
    """The batch cannot be stored in one go; its messages are stored one at a time."""


def final_messages_ingest(*, arrivals: Sequence[ClientMessage]) -> list[IngestResult | Exception]:
    """``ingest_final_message`` for several frames, in their order, in one transaction.

    A handful of statements for the whole batch instead of a score per
    message: what lets one ASGI process keep up with many plugins. Each
    result is what ``ingest_final_message`` would have returned for that
    frame alone. When the batch cannot be stored together (a database error,
    a failing message, one conversation arriving through two clients), it is
    rolled back and each frame is ingested on its own, so a bad frame costs
    only itself: its exception is returned in its place.
    """
    if len(arrivals) > 1:
        try:
            return _ingest_together(arrivals)
        except _NotTogether:
            pass
        except Exception as exc:
            log_event(
                logger, "message_ingest_batch_split", level=logging.WARNING, messages=len(arrivals),
                error=f"{type(exc).__name__}: {exc}",
            )
    results: list[IngestResult | Exception] = []
    for arrival in arrivals:
        try:
            results.append(
                ingest_final_message(message=arrival.message, client_pk=arrival.client_pk, blocks=arrival.blocks)
            )
        except Exception as exc:
            results.append(exc)
    return results


def _ingest_together(arrivals: Sequence[ClientMessage]) -> list[IngestResult]:
    """Store the batch as ``message_ingest`` would store its messages one after another.

    Each conversation's activity, link and re-targeting are written once with
    what its last message would have left; the messages, instructions and
    tasks are inserted in bulk, the tasks in the messages' order.
    """
    now = timezone.now()
    messages = [arrival.message for arrival in arrivals]
    # Parsed before the transaction, as in message_ingest.
    all_blocks = [
        arrival.blocks if arrival.blocks is not None else parse_blocks(arrival.message.text) for arrival in arrivals
    ]
    keys = [(message.platform, message.conversation_id) for message in messages]
    client_pk_of: dict[tuple[str, str], int] = {}
    for key, arrival in zip(keys, arrivals, strict=True):
        if client_pk_of.setdefault(key, arrival.client_pk) != arrival.client_pk:
            raise _NotTogether  # the conversation's route would change within the batch
    clients = PluginClient.objects.in_bulk(set(client_pk_of.values()))
    if len(clients) < len(set(client_pk_of.values())):
        raise _NotTogether  # a client was deleted: those frames fail on their own
    dedupe_keys = [message_dedupe_key(message) for message in messages]
    titles: dict[tuple[str, str], str] = {}
    for key, message in zip(keys, messages, strict=True):
        titles.setdefault(key, message.title)

    with transaction.atomic():
        conversations = conversations_get_locked(titles=titles, now=now)
        stored_before = {
            (conversation_pk, dedupe_key): pk
            for conversation_pk, dedupe_key, pk in Message.objects.filter(
                conversation__in=[conversation.pk for conversation in conversations.values()],
                dedupe_key__in=set(dedupe_keys),
            ).values_list("conversation_id", "dedupe_key", "pk")
        }
        # The first message of the batch with each identity; the others repeat it.
        first_of: dict[tuple[int, str], int] = {}
        new: list[int] = []
        newest_titles: dict[Conversation, str] = {}
        links: dict[Conversation, dict[str, str]] = {}
        for index, (key, message, dedupe_key) in enumerate(zip(keys, messages, dedupe_keys, strict=True)):
            conversation = conversations[key]
            identity = (conversation.pk, dedupe_key)
            if identity in stored_before or identity in first_of:
                continue
            first_of[identity] = index
            new.append(index)
            # What conversation_touch and conversation_link_seen keep: the last non-blank values.
            newest_titles[conversation] = message.title or newest_titles.get(conversation, "")
            seen = links.setdefault(conversation, {})
            for field in ("page_url", "organization_id", "message_id"):
                if value := getattr(message, field):
                    seen[field] = value

        conversations_touch(titles=newest_titles, now=now)
        conversation_links_seen(
            sightings={
                conversation: LinkSighting(
                    client_pk=client_pk_of[conversation.platform, conversation.remote_id],
                    page_url=seen.get("page_url", ""), organization_id=seen.get("organization_id", ""),
                    last_assistant_message_id=seen.get("message_id", ""),
                )
                for conversation, seen in links.items()
            },
            now=now,
        )
        tasks_retarget(
            client_ids={
                conversation.pk: clients[client_pk_of[conversation.platform, conversation.remote_id]].client_id
                for conversation in links
            },
            actor=ACTOR,
        )

        stored = {
            index: Message(
                conversation=conversations[keys[index]], role=Message.Role.ASSISTANT, source=Message.Source.PLUGIN,
                capture=messages[index].capture, remote_message_id=messages[index].message_id,
                parent_message_id=messages[index].parent_message_id, dedupe_key=dedupe_keys[index],
                text=messages[index].text, raw_frame=messages[index].raw,
                client=clients[arrivals[index].client_pk], received_at=now,
            )
            for index in new
        }
        Message.objects.bulk_create(stored.values())
        queued = _queue_blocks_together(
            {index: (stored[index], all_blocks[index]) for index in new}, clients, now
        )

        # A duplicate's ack repeats the first ack's count, which its stored rows give back.
        counts = dict(
            Instruction.objects.filter(message_id__in=stored_before.values())
            .order_by()
            .values_list("message_id")
            .annotate(count=Count("pk"))
            .values_list("message_id", "count")
        ) if len(first_of) < len(arrivals) else {}

    results: list[IngestResult] = []
    for index, (key, dedupe_key) in enumerate(zip(keys, dedupe_keys, strict=True)):
        conversation = conversations[key]
        if index in stored:
            log_event(
                logger, "message_ingest", message_id=stored[index].pk, conversation_id=conversation.pk,
                platform=conversation.platform, blocks=len(all_blocks[index]), queued=queued[index],
                source=Message.Source.PLUGIN,
            )
            results.append(IngestResult(message_id=stored[index].pk, instructions=len(all_blocks[index]),
                                        duplicate=False))
        elif (conversation.pk, dedupe_key) in stored_before:
            pk = stored_before[conversation.pk, dedupe_key]
            results.append(IngestResult(message_id=pk, instructions=counts.get(pk, 0), duplicate=True))
        else:
            first = first_of[conversation.pk, dedupe_key]
            results.append(IngestResult(message_id=stored[first].pk, instructions=len(all_blocks[first]),
                                        duplicate=True))
    return results


def _queue_blocks_together(
    messages: dict[int, tuple[Message, list[Block]]], clients: dict[int, PluginClient], now: dt.datetime
) -> dict[int, int]:
    """``_queue_blocks`` for stored messages, in their order, in bulk; return each one's tasks created."""
    conversation_pks = {stored.conversation_id for stored, _ in messages.values()}
    budgets = _hourly_budgets(conversation_pks, now)
    policies = ToolPolicies.load(
        tools={block.tool for _, blocks in messages.values() for block in blocks if block.tool},
        targets={block.target for _, blocks in messages.values() for block in blocks if block.target},
        client_pks={stored.client_id for stored, _ in messages.values()},
        conversation_pks=conversation_pks,
    )
    judged: dict[int, list[tuple[Instruction, str | None]]] = {}
    for index, (stored, blocks) in messages.items():
        conversation, client = stored.conversation, clients[stored.client_id]
        judged[index] = []
        for block in blocks:
            task_status, error = _judge(
                block, conversation, client, budget_left=budgets[conversation.pk], policy_for=policies.policy_for
            )
            if task_status is not None:
                budgets[conversation.pk] -= 1
            instruction = Instruction(
                message=stored, block_index=block.index, raw_text=block.raw_text,
                target=block.target, tool=block.tool, params=block.params,
                status=Instruction.Status.REJECTED if task_status is None else STATUS_OF_TASK[task_status],
                error=error,
            )
            judged[index].append((instruction, task_status))
    Instruction.objects.bulk_create(instruction for pairs in judged.values() for instruction, _ in pairs)

    new_tasks: list[NewTask] = []
    queued: dict[int, int] = {}
    for index, (stored, blocks) in messages.items():
        tasks = [
            instruction_task(instruction=instruction, conversation_id=stored.conversation_id, status=task_status)
            for instruction, task_status in judged[index]
            if task_status is not None
        ]
        if blocks and not tasks:
            # Every block was rejected: the chat hears why at once.
            tasks.append(message_delivery_task(message_id=stored.pk, conversation_id=stored.conversation_id))
        new_tasks += tasks
        queued[index] = len(tasks)
    tasks_create(tasks=new_tasks, actor=ACTOR)
    return queued
