"""Ingesting an assistant message: store it, extract its blocks, queue their work (SPEC §5, §6)."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone

from automation.services.tasks import NewTask, tasks_create, tasks_retarget
from conversations.models import Conversation, Message
from conversations.services import (
    ConversationKey,
    LinkSighting,
    conversation_links_seen,
    conversations_get_locked,
    conversations_touch,
)
from core.logfmt import log_event
from ingest.blocks import Block, parse_blocks
from ingest.frames import FinalMessage
from ingest.models import Instruction, PluginClient
from ingest.services.instructions import (
    STATUS_OF_TASK,
    instruction_task,
    message_delivery_task,
)
from ingest.services.judging import Judgement

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
    """A message's identity in its conversation: its remote id, or its text when it has none.

    Within its conversation, which is its owner's: the same key in another
    owner's conversation with the same id is another message.
    """
    if message.message_id:
        return f"id:{message.message_id}"
    return "text:" + hashlib.sha256(message.text.encode()).hexdigest()


@dataclass(frozen=True)
class ClientMessage:
    """A final message to store, and where it came from.

    ``client_pk`` is the plugin client it came through (None: replayed without
    one); ``blocks`` is ``parse_blocks(message.text)`` when already parsed;
    ``force`` (replay) stores it again whatever was stored before.
    """

    message: FinalMessage
    client_pk: int | None
    blocks: list[Block] | None = None
    source: str = Message.Source.PLUGIN
    force: bool = False


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

    A batch of one through ``messages_store``: the same message again (same
    owner, platform, conversation and dedupe key) creates nothing and reports the first one
    with ``duplicate=True``; ``force`` (replay) stores it again regardless.
    ``client`` is the plugin client it came through; None when replayed without one.
    """
    arrival = ClientMessage(
        message=message, client_pk=client.pk if client is not None else None, blocks=blocks,
        source=source, force=force,
    )
    return messages_store(arrivals=[arrival], now=now)[0]


class _NotTogether(Exception):
    """The batch cannot be stored in one go; its messages are stored one at a time."""


def final_messages_ingest(*, arrivals: Sequence[ClientMessage]) -> list[IngestResult | Exception]:
    """Store several frames in their order, together when they can be, each alone when not.

    A handful of statements for the whole batch instead of a score per
    message: what lets one ASGI process keep up with many plugins. When the
    batch cannot be stored together (a database error, a failing message,
    one conversation arriving through two clients, or through a client and
    through none), it is rolled back and
    each frame is stored as a batch of one, so a bad frame costs only itself:
    its exception is returned in its place.
    """
    if len(arrivals) > 1:
        try:
            return messages_store(arrivals=arrivals)
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
            results.append(messages_store(arrivals=[arrival])[0])
        except Exception as exc:
            results.append(exc)
    return results


def messages_store(*, arrivals: Sequence[ClientMessage], now: dt.datetime | None = None) -> list[IngestResult]:
    """Store final messages in their order, in one transaction: the path every final message takes.

    The same as storing them one after another: each conversation's
    activity, link and re-targeting are written once with what its last
    message would have left; the messages, instructions and tasks are
    inserted in bulk, the tasks in the messages' order; the blocks are judged
    by one ``Judgement``. The database's unique key decides duplicates, so
    identical frames racing in two processes store one message: the loser's
    insert fails, and its second try finds the winner's row.
    """
    now = now or timezone.now()
    try:
        return _store(arrivals, now)
    except IntegrityError:
        return _store(arrivals, now)


@dataclass(frozen=True)
class _Arrivals:
    """The batch as read before the transaction (``_arrivals_read``): what every later phase reads."""

    arrivals: Sequence[ClientMessage]
    now: dt.datetime
    messages: list[FinalMessage]
    all_blocks: list[list[Block]]
    keys: list[ConversationKey]  # each message's (owner, platform, conversation id)
    client_pk_of: dict[ConversationKey, int | None]
    clients: dict[int, PluginClient]
    dedupe_keys: list[str | None]
    titles: dict[ConversationKey, str]


@dataclass(frozen=True)
class _Sorted:
    """Which messages are new, and what stands for the others (``_duplicates_set_aside``)."""

    new: list[int]  # the indexes of the messages to store
    stored_before: dict[tuple[int, str], int]  # (conversation, dedupe key) -> the message stored earlier
    first_of: dict[tuple[int, str], int]  # (conversation, dedupe key) -> the batch's first message with it
    newest_titles: dict[Conversation, str]
    links: dict[Conversation, dict[str, str]]  # what the new messages say of each conversation's link


@dataclass(frozen=True)
class _Stored:
    """What the transaction wrote and counted, for the acks (``_results``)."""

    messages: dict[int, Message]  # index -> the new message stored
    queued: dict[int, int]  # index -> its tasks queued
    counts: dict[int, int]  # an earlier message's pk -> its instructions, for a duplicate's ack


def _store(arrivals: Sequence[ClientMessage], now: dt.datetime) -> list[IngestResult]:
    """``messages_store``'s one try, in its phases, each handing on what it produced."""
    batch = _arrivals_read(arrivals, now)
    with transaction.atomic():
        # Each client's owner's own conversations, locked: created when new, claimed when unclaimed. A client
        # of another owner naming the same conversation id gets a conversation of its own (docs/security.md,
        # "Whose conversation"): what one owner sends never shows in, suppresses or changes another's.
        conversations = conversations_get_locked(titles=batch.titles, now=now)
        sorted_ = _duplicates_set_aside(batch, conversations)
        _sightings_record(batch, conversations, sorted_)
        messages = _messages_insert(batch, conversations, sorted_.new)
        queued = _queue_blocks({index: (messages[index], batch.all_blocks[index]) for index in sorted_.new}, now)
        counts = _duplicates_counts(batch, sorted_)
    return _results(batch, conversations, sorted_, _Stored(messages=messages, queued=queued, counts=counts))


def _arrivals_read(arrivals: Sequence[ClientMessage], now: dt.datetime) -> _Arrivals:
    """Before the transaction: the blocks parsed, each message's client, conversation key and dedupe key.

    A conversation's key holds the owner of the client its message came
    through ("" for none): a conversation is its owner's. Raises
    ``_NotTogether`` when a conversation would change route within the batch,
    a conversation id arrives both through a client and through none (the
    two keys might name one conversation), or a client of it was deleted
    (those frames fail on their own).
    """
    messages = [arrival.message for arrival in arrivals]
    # Parsed before the transaction: the parse is pure and, for a large
    # message, long enough (a CommonMark parse of up to 1 MiB) that holding
    # the conversations' locks and the write transaction through it would
    # stall every other writer. At most MAX_BLOCKS + 1 blocks per message,
    # whatever the text holds: see ingest.blocks.
    all_blocks = [
        arrival.blocks if arrival.blocks is not None else parse_blocks(arrival.message.text) for arrival in arrivals
    ]
    client_pks = {arrival.client_pk for arrival in arrivals if arrival.client_pk is not None}
    clients = PluginClient.objects.in_bulk(client_pks) if client_pks else {}
    if len(clients) < len(client_pks):
        if len(arrivals) > 1:
            raise _NotTogether  # a client was deleted: those frames fail on their own
        raise PluginClient.DoesNotExist(f"plugin client {arrivals[0].client_pk} no longer exists")
    keys = [
        ConversationKey(
            owner=clients[arrival.client_pk].owner if arrival.client_pk is not None else "",
            platform=arrival.message.platform, remote_id=arrival.message.conversation_id,
        )
        for arrival in arrivals
    ]
    client_pk_of: dict[ConversationKey, int | None] = {}
    for key, arrival in zip(keys, arrivals, strict=True):
        if client_pk_of.setdefault(key, arrival.client_pk) != arrival.client_pk:
            raise _NotTogether  # the conversation's route would change within the batch
    if {(key.platform, key.remote_id) for key in keys if not key.owner} & {
        (key.platform, key.remote_id) for key in keys if key.owner
    }:
        raise _NotTogether  # a message through no client may land in a client's conversation of the batch
    titles: dict[ConversationKey, str] = {}
    for key, message in zip(keys, messages, strict=True):
        titles.setdefault(key, message.title)
    return _Arrivals(
        arrivals=arrivals, now=now, messages=messages, all_blocks=all_blocks, keys=keys, client_pk_of=client_pk_of,
        clients=clients, dedupe_keys=[None if arrival.force else message_dedupe_key(arrival.message)
                                      for arrival in arrivals],
        titles=titles,
    )


def _duplicates_set_aside(batch: _Arrivals, conversations: dict[ConversationKey, Conversation]) -> _Sorted:
    """Which messages are new, the others being stored already or repeated in the batch; and what the
    new ones say of each conversation: its newest title and link values."""
    dedupe_keys = batch.dedupe_keys
    stored_before = {
        (conversation_pk, dedupe_key): pk
        for conversation_pk, dedupe_key, pk in Message.objects.filter(
            conversation__in=[conversation.pk for conversation in conversations.values()],
            dedupe_key__in={key for key in dedupe_keys if key is not None},
        ).values_list("conversation_id", "dedupe_key", "pk")
    } if any(key is not None for key in dedupe_keys) else {}
    sorted_ = _Sorted(new=[], stored_before=stored_before, first_of={}, newest_titles={}, links={})
    for index, (key, message, dedupe_key) in enumerate(zip(batch.keys, batch.messages, dedupe_keys, strict=True)):
        conversation = conversations[key]
        if dedupe_key is not None:
            identity = (conversation.pk, dedupe_key)
            if identity in stored_before or identity in sorted_.first_of:
                continue
            sorted_.first_of[identity] = index  # the first message of the batch with it; the others repeat it
        sorted_.new.append(index)
        # What one message after another would leave: the last non-blank values.
        sorted_.newest_titles[conversation] = message.title or sorted_.newest_titles.get(conversation, "")
        if batch.client_pk_of[key] is None:
            continue
        seen = sorted_.links.setdefault(conversation, {})
        for name in ("page_url", "organization_id", "message_id"):
            if value := getattr(message, name):
                seen[name] = value
    return sorted_


def _sightings_record(
    batch: _Arrivals, conversations: dict[ConversationKey, Conversation], sorted_: _Sorted
) -> None:
    """Each conversation's activity and title, its link to the client it was seen through, and its
    not-yet-running outbound tasks sent to that client."""
    conversations_touch(titles=sorted_.newest_titles, now=batch.now)
    links = sorted_.links
    if not links:
        return
    # Each key with a client names a conversation of that client's owner: a link never crosses owners.
    client_pk_of = {conversations[key]: client_pk for key, client_pk in batch.client_pk_of.items()
                    if client_pk is not None}
    conversation_links_seen(
        sightings={
            conversation: LinkSighting(
                client_pk=client_pk_of[conversation], page_url=seen.get("page_url", ""),
                organization_id=seen.get("organization_id", ""),
                last_assistant_message_id=seen.get("message_id", ""),
            )
            for conversation, seen in links.items()
        },
        now=batch.now,
    )
    tasks_retarget(
        client_ids={conversation.pk: batch.clients[client_pk_of[conversation]].client_id for conversation in links},
        actor=ACTOR,
    )


def _messages_insert(
    batch: _Arrivals, conversations: dict[ConversationKey, Conversation], new: list[int]
) -> dict[int, Message]:
    """The new messages, in one insert."""
    stored = {
        index: Message(
            conversation=conversations[batch.keys[index]], role=Message.Role.ASSISTANT,
            source=batch.arrivals[index].source, capture=batch.messages[index].capture,
            remote_message_id=batch.messages[index].message_id,
            parent_message_id=batch.messages[index].parent_message_id, dedupe_key=batch.dedupe_keys[index],
            text=batch.messages[index].text, raw_frame=batch.messages[index].raw,
            client=batch.clients.get(batch.arrivals[index].client_pk), received_at=batch.now,
        )
        for index in new
    }
    Message.objects.bulk_create(stored.values())
    return stored


def _duplicates_counts(batch: _Arrivals, sorted_: _Sorted) -> dict[int, int]:
    """A duplicate's ack repeats the first ack's count, which its stored rows give back."""
    if not sorted_.stored_before or len(sorted_.new) == len(batch.arrivals):
        return {}
    return dict(
        Instruction.objects.filter(message_id__in=sorted_.stored_before.values())
        .order_by()
        .values_list("message_id")
        .annotate(count=Count("pk"))
        .values_list("message_id", "count")
    )


def _results(
    batch: _Arrivals, conversations: dict[ConversationKey, Conversation], sorted_: _Sorted, stored: _Stored
) -> list[IngestResult]:
    """Each message's ack, in order, once committed; the log lines of what was stored."""
    results: list[IngestResult] = []
    for index, (key, dedupe_key) in enumerate(zip(batch.keys, batch.dedupe_keys, strict=True)):
        conversation = conversations[key]
        if index in stored.messages:
            log_event(
                logger, "message_ingest", message_id=stored.messages[index].pk, conversation_id=conversation.pk,
                platform=conversation.platform, blocks=len(batch.all_blocks[index]), queued=stored.queued[index],
                source=batch.arrivals[index].source,
            )
            # One Instruction per block, so this equals what a duplicate's ack counts.
            results.append(IngestResult(message_id=stored.messages[index].pk,
                                        instructions=len(batch.all_blocks[index]), duplicate=False))
        elif (conversation.pk, dedupe_key) in sorted_.stored_before:
            pk = sorted_.stored_before[conversation.pk, dedupe_key]
            results.append(IngestResult(message_id=pk, instructions=stored.counts.get(pk, 0), duplicate=True))
        else:
            first = sorted_.first_of[conversation.pk, dedupe_key]
            results.append(IngestResult(message_id=stored.messages[first].pk,
                                        instructions=len(batch.all_blocks[first]), duplicate=True))
    return results


def _queue_blocks(messages: dict[int, tuple[Message, list[Block]]], now: dt.datetime) -> dict[int, int]:
    """Create an Instruction per block and a task per accepted one, in bulk; return each message's tasks created.

    Blocks are judged in the messages' order (``Judgement``); a message whose
    blocks were all refused gets its delivery at once, so the chat hears why.
    Each task wakes the dispatcher once the transaction commits.
    """
    judgement = Judgement.load(
        conversation_pks={stored.conversation_id for stored, _ in messages.values()},
        client_pks={stored.client_id for stored, _ in messages.values()},
        blocks=[block for _, blocks in messages.values() for block in blocks],
        now=now,
    )
    judged: dict[int, list[tuple[Instruction, str | None]]] = {}
    for index, (stored, blocks) in messages.items():
        judged[index] = []
        for block in blocks:
            verdict = judgement.judge(block, conversation_pk=stored.conversation_id, client_pk=stored.client_id)
            instruction = Instruction(
                message=stored, block_index=block.index, raw_text=block.raw_text,
                target=block.target, tool=block.tool, params=block.params,
                status=STATUS_OF_TASK[verdict.status] if verdict.is_accepted else Instruction.Status.REJECTED,
                error=verdict.error,
            )
            judged[index].append((instruction, verdict.status))
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
