"""Reads for the plugin's side panel: what became of each block of a message (SPEC §6 message status).

``statuses_to_push`` is what ``instruction.status`` is made of
(``ingest/panel/push.py``), ``conversation_status`` what ``status.get``
answers; ``approvals_waiting`` is the plugin's badge. The shapes are
``ingest.panel.status``'s, pure.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Exists, FilteredRelation, OuterRef, Q, QuerySet, Subquery, TextField
from django.db.models.functions import Cast, Coalesce, Substr
from django.urls import reverse

from automation.models import OPEN_STATUSES, AutomationTask, TaskStatus
from automation.wait_selectors import BEHIND_APPROVAL, Wait, task_waits
from conversations.models import Conversation, Message
from core.clock import datetime_from_ms, now_ms
from core.compiled import CompiledOnce
from ingest.panel import status as shown
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from ingest.models import Instruction
from ingest.selectors.clients import plugin_clients_connected
from tools.registry import DEFAULT_TARGET


# The statuses of a task that is not running and may wait for something (``task_waits``).
_MAY_WAIT = OPEN_STATUSES - {TaskStatus.RUNNING}
# What a status tells of the task a block or a delivery waits behind, read with the waits.
_AHEAD_FIELDS = {
    "message_id": "message__remote_message_id", "conductor_message_id": "message_id",
    "index": "instruction__block_index", "instruction_id": "instruction_id",
}

# How much of a stored result is read for its preview: a result may be up to
# CONDUCTOR_RESULT_STORE_MAX_BYTES, and only its first 300 characters are shown.
_RESULT_HEAD_CHARS = 2000


@dataclass(frozen=True)
class StatusOfMessage:
    """A message status (``ingest.panel.status``) and whose conversation it is, to route its frame."""

    owner: str
    platform: str
    conversation_id: str  # the chat's own id
    status: dict[str, Any]
    approvals_waiting: int | None = None  # the owner's badge, when asked for


def approval_path(*, conversation_pk: int, task_id: str, instruction_pk: int) -> str:
    """The admin page where a held block is approved: its conversation's story at the block (behind a staff login)."""
    story = reverse("admin:conversations_conversation_story", args=[conversation_pk])
    return f"{story}?task={task_id}#block-{instruction_pk}"


def _result_head_of(field: str) -> Substr:
    """The first ``_RESULT_HEAD_CHARS`` of a stored result, as text: all its preview needs."""
    return Substr(Cast(field, TextField()), 1, _RESULT_HEAD_CHARS)


def message_statuses(
    *, message_ids: Iterable[int], listened_to_only: bool = False, with_approvals: bool = False,
) -> list[StatusOfMessage]:
    """The status of each of ``message_ids`` that has blocks, in id order.

    ``listened_to_only``: only messages whose conversation's owner has a
    plugin client connected now (the others are read no further than the
    first statement). ``with_approvals``: each status carries its owner's
    ``approvals_waiting``, read by the same statement.

    Two statements however many messages: the messages with their latest
    delivery (and their owners' counts), then their blocks with each
    block's task (a stored result read only as far as its preview needs);
    a third when a block or the delivery is open and not running: why each
    such one waits (``task_waits``, its ``waiting_for``).
    ``approve_url`` is the approval page's path; the socket makes it
    absolute for the server its plugin is paired with.
    """
    ids = sorted(set(message_ids))
    if not ids:
        return []
    return _statuses_of(_message_rows(ids, listened_to_only=listened_to_only, with_approvals=with_approvals))


@dataclass(frozen=True)
class PushRound:
    """What one push round sends (``ingest/panel/push.py``)."""

    statuses: list[StatusOfMessage]  # of the messages a connected client of their owner looks at
    approvals: dict[str, int]  # every connected owner of a message read: its badge's count


def statuses_to_push(*, message_ids: Iterable[int]) -> PushRound:
    """The statuses of ``message_ids`` whose conversation a connected client looks at, and the counts of
    the owners with a client connected.

    One statement when no client looks at any of them, compiled once
    (``core/compiled.py``): the messages, their owners' counts and whether
    each is looked at, without the latest delivery a status shows (four
    subqueries the ORM would build and compile for nobody). Then
    ``message_statuses``'s statements for those looked at.
    """
    ids = sorted(set(message_ids))
    if not ids:
        return PushRound(statuses=[], approvals={})
    rows = _WHO_LOOKS.rows(None, now=now_ms(), ids=ids)
    approvals = {owner: count for _, owner, count, _ in rows}
    viewed = {pk: count for pk, _, count, is_viewed in rows if is_viewed}
    if not viewed:
        return PushRound(statuses=[], approvals=approvals)
    statuses = _statuses_of(_message_rows(sorted(viewed), listened_to_only=False, with_approvals=False))
    return PushRound(
        statuses=[dataclasses.replace(item, approvals_waiting=viewed[int(item.status["conductor_message_id"])])
                  for item in statuses],
        approvals=approvals,
    )


def _statuses_of(rows: list[dict[str, Any]]) -> list[StatusOfMessage]:
    """Each message status of ``rows`` (``_message_rows``): its blocks and waits read."""
    if not rows:
        return []
    blocks_of = _blocks_by_message([row["pk"] for row in rows])
    waits = _waits(rows, blocks_of)
    statuses = []
    for row in rows:
        conversation_pk = row["conversation_id"]
        blocks = [
            _block_status(instruction, conversation_pk, waits.get(instruction["task__task_id"]))
            for instruction in blocks_of.get(row["pk"], ())
        ]
        has_delivery = row["delivery_status"] is not None
        # Blocks retried after the delivery: their new results wait for a follow-up.
        not_delivered = sum(1 for block in blocks_of.get(row["pk"], ()) if block["reopened_since_delivery"])
        statuses.append(StatusOfMessage(
            owner=row["conversation__owner"], platform=row["conversation__platform"],
            conversation_id=row["conversation__remote_id"],
            status=shown.message_status(
                remote_message_id=row["remote_message_id"], message_pk=row["pk"], blocks=blocks,
                delivery=shown.delivery_status(shown.DeliveryRow(
                    status=row["delivery_status"], result=_result_head(row["delivery_result"]),
                    error=row["delivery_error"],
                ) if has_delivery else None, waiting=_waiting(waits.get(row["delivery_task_id"]), conversation_pk),
                    not_delivered=not_delivered),
            ),
            approvals_waiting=row.get("approvals_waiting"),
        ))
    return statuses


def _message_rows(ids: list[int], *, listened_to_only: bool, with_approvals: bool) -> list[dict[str, Any]]:
    """One statement: the messages of ``ids`` that have blocks, with their latest delivery (and owner's count)."""
    # A block's task names its block; a delivery names none. The latest delivery counts: a retried block's own.
    deliveries = AutomationTask.objects.filter(
        message_id=OuterRef("pk"), kind__in=(INSTRUCTION_EXECUTE, INSTRUCTION_DELIVER), instruction_id__isnull=True,
    ).order_by("-created_at", "-task_id")
    messages = _messages_with_blocks(ids, listened_to_only=listened_to_only, with_approvals=with_approvals).annotate(
        delivery_task_id=Subquery(deliveries.values("task_id")[:1]),
        delivery_status=Subquery(deliveries.values("status")[:1]),
        delivery_error=Subquery(deliveries.values("last_error")[:1]),
        delivery_result=Subquery(deliveries.annotate(head=_result_head_of("result_json")).values("head")[:1]),
    )
    fields = [
        "pk", "remote_message_id", "conversation_id", "conversation__owner", "conversation__platform",
        "conversation__remote_id", "delivery_task_id", "delivery_status", "delivery_error", "delivery_result",
    ]
    return list(messages.values(*fields, *(["approvals_waiting"] if with_approvals else [])))


def _who_looks(shape: None, now: int, ids: list[int]) -> QuerySet[Message]:
    """A push round's first statement: the messages of ``ids`` with blocks, their owners' counts and who looks."""
    return _messages_with_blocks(
        ids, listened_to_only=True, with_approvals=True, with_viewed=True, now=datetime_from_ms(now),
    ).values_list("pk", "conversation__owner", "approvals_waiting", "viewed")


# Compiled once per number of messages: every push round of every process runs it.
_WHO_LOOKS = CompiledOnce(_who_looks, ids_are=int)


def _messages_with_blocks(
    ids: list[int], *, listened_to_only: bool, with_approvals: bool, with_viewed: bool = False,
    now: dt.datetime | None = None,
) -> QuerySet[Message]:
    """The messages of ``ids`` that have blocks, in id order; only those whose owner has a client connected
    (``listened_to_only``), with the owner's count (``approvals_waiting``), and whether a connected client
    looks at the conversation (``viewed``)."""
    messages = Message.objects.filter(pk__in=ids).filter(Exists(Instruction.objects.filter(message_id=OuterRef("pk"))))
    if listened_to_only:
        messages = messages.filter(conversation__owner__in=plugin_clients_connected(now=now).values("owner"))
    if with_approvals:
        waiting = (
            AutomationTask.objects.filter(
                status=TaskStatus.BLOCKED, kind=INSTRUCTION_EXECUTE, conversation__owner=OuterRef("conversation__owner"),
            )
            .order_by().values("status").annotate(count=Count("pk")).values("count")
        )
        messages = messages.annotate(approvals_waiting=Coalesce(Subquery(waiting), 0))
    if with_viewed:
        messages = messages.annotate(viewed=Exists(plugin_clients_connected(now=now).filter(
            owner=OuterRef("conversation__owner"), viewing_platform=OuterRef("conversation__platform"),
            viewing_conversation_id=OuterRef("conversation__remote_id"),
        )))
    return messages.order_by("pk")


def _blocks_by_message(message_pks: list[int]) -> dict[int, Iterable[dict[str, Any]]]:
    """The second statement: each message's blocks in order, each with its latest task's fields."""
    instructions: dict[int, dict[int, dict[str, Any]]] = {}
    blocks_with_tasks = (
        Instruction.objects.filter(message_id__in=message_pks)
        .alias(task=FilteredRelation("tasks", condition=Q(tasks__kind__in=(INSTRUCTION_EXECUTE, INSTRUCTION_DELIVER))))
        .annotate(task_result_head=_result_head_of("task__result_json"))
        .order_by("message_id", "block_index", "task__created_at", "task__task_id")
        .values(
            "pk", "message_id", "block_index", "target", "tool", "params", "status", "error", "created_at",
            "reopened_since_delivery", "task__task_id", "task__status", "task__last_error", "task_result_head", "task__updated_at",
        )
    )
    for row in blocks_with_tasks:
        # One row per task of the block (none: one row with no task): the latest one counts.
        instructions.setdefault(row["message_id"], {})[row["pk"]] = row
    return {message_pk: blocks.values() for message_pk, blocks in instructions.items()}


def _waits(rows: list[dict[str, Any]], blocks_of: dict[int, Iterable[dict[str, Any]]]) -> dict[str, Wait]:
    """Why each open task of the blocks and deliveries read that is not running waits: none read when there is none."""
    task_ids = [
        block["task__task_id"] for blocks in blocks_of.values() for block in blocks
        if block["task__status"] in _MAY_WAIT
    ] + [row["delivery_task_id"] for row in rows if row["delivery_status"] in _MAY_WAIT]
    return task_waits(task_ids=task_ids, ahead_fields=_AHEAD_FIELDS) if task_ids else {}


def _waiting(wait: Wait | None, conversation_pk: int) -> dict[str, Any] | None:
    """A ``waiting_for``, with the approval page of the block it waits behind when that one waits for approval."""
    if wait is None or wait.ahead_task_id is None or wait.ahead.get("instruction_id") is None:
        return shown.waiting_for(wait)
    approve = approval_path(
        conversation_pk=conversation_pk, task_id=wait.ahead_task_id, instruction_pk=wait.ahead["instruction_id"],
    ) if wait.code == BEHIND_APPROVAL else None
    return shown.waiting_for(wait, approve_url=approve)


def _block_status(instruction: dict[str, Any], conversation_pk: int, wait: Wait | None) -> dict[str, Any]:
    """A block's status from its row of ``_blocks_by_message``: with an approval link while its task is blocked,
    and why it waits when it does (``wait``)."""
    has_task = instruction["task__task_id"] is not None
    block = shown.BlockRow(
        index=instruction["block_index"], target=instruction["target"] or DEFAULT_TARGET,
        tool=instruction["tool"], params=instruction["params"],
        instruction_status=instruction["status"], instruction_error=instruction["error"],
        task_id=instruction["task__task_id"], task_status=instruction["task__status"],
        task_error=instruction["task__last_error"],
        task_result=_result_head(instruction["task_result_head"]) if has_task else None,
        updated_at=instruction["task__updated_at"] if has_task
        else int(instruction["created_at"].timestamp() * 1000),
    )
    approve = approval_path(
        conversation_pk=conversation_pk, task_id=instruction["task__task_id"], instruction_pk=instruction["pk"],
    ) if has_task and instruction["task__status"] == TaskStatus.BLOCKED else None
    return shown.block_status(block, approve_url=approve, waiting=_waiting(wait, conversation_pk))


def _result_head(head: str | None) -> Any:
    """A stored result from the head read of it: the value when it was read whole, else its text so far."""
    if head is None or head == "null":
        return None
    try:
        return json.loads(head)
    except ValueError:
        return head


def conversation_status(*, owner: str, platform: str, conversation_id: str) -> tuple[bool, list[dict[str, Any]]]:
    """``status.get``: whether the conversation is paused, and its last messages' statuses, newest last.

    A conversation of another owner, or none, is answered as not paused with no messages.
    """
    conversation = (
        Conversation.objects.filter(owner=owner, platform=platform, remote_id=conversation_id)
        .values_list("pk", "paused").first()
    )
    if conversation is None:
        return False, []
    pk, is_paused = conversation
    recent = list(
        Message.objects.filter(conversation_id=pk)
        .filter(Exists(Instruction.objects.filter(message_id=OuterRef("pk"))))
        .order_by("-received_at", "-pk").values_list("pk", flat=True)[: shown.STATUS_MESSAGES]
    )
    order = {message_pk: place for place, message_pk in enumerate(reversed(recent))}
    statuses = sorted(message_statuses(message_ids=recent), key=lambda item: order[int(item.status["conductor_message_id"])])
    return is_paused, [item.status for item in statuses]


def approvals_waiting(*, owner: str) -> int:
    """How many blocks of ``owner``'s conversations wait for an approval (the plugin's badge)."""
    return AutomationTask.objects.filter(
        status=TaskStatus.BLOCKED, kind=INSTRUCTION_EXECUTE, conversation__owner=owner
    ).count()
