"""Reads for the plugin's side panel: what became of each block of a message (SPEC §6 message status).

``message_statuses`` is what ``instruction.status`` is made of
(``ingest/status_push.py``), ``conversation_status`` what ``status.get``
answers; ``approvals_waiting`` is the plugin's badge. The shapes are
``ingest.status``'s, pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Exists, OuterRef, TextField
from django.db.models.functions import Cast, Substr
from django.urls import reverse

from automation.models import AutomationTask, TaskStatus
from conversations.models import Conversation, Message
from ingest import status as shown
from ingest.models import Instruction
from ingest.selectors import plugin_clients_connected
from ingest.services.instructions import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from tools.registry import DEFAULT_TARGET


# How much of a stored result is read for its preview: a result may be up to
# CONDUCTOR_RESULT_STORE_MAX_BYTES, and only its first 300 characters are shown.
_RESULT_HEAD_CHARS = 2000


@dataclass(frozen=True)
class StatusOfMessage:
    """A message status (``ingest.status``) and whose conversation it is, to route its frame."""

    owner: str
    platform: str
    conversation_id: str  # the chat's own id
    status: dict[str, Any]


def approval_path(*, conversation_pk: int, task_id: str, instruction_pk: int) -> str:
    """The admin page where a held block is approved: its conversation's story at the block (behind a staff login)."""
    story = reverse("admin:conversations_conversation_story", args=[conversation_pk])
    return f"{story}?task={task_id}#block-{instruction_pk}"


def message_statuses(*, message_ids: Iterable[int], listened_to_only: bool = False) -> list[StatusOfMessage]:
    """The status of each of ``message_ids`` that has blocks, in id order.

    ``listened_to_only``: only messages whose conversation's owner has a
    plugin client connected now (the others are read no further than the
    first statement).

    Three statements however many messages: the messages, their blocks, and
    the blocks' and deliveries' tasks (a stored result read only as far as
    its preview needs). ``approve_url`` is the approval page's path; the
    socket makes it absolute for the server its plugin is paired with.
    """
    ids = sorted(set(message_ids))
    if not ids:
        return []
    messages = Message.objects.filter(pk__in=ids).filter(
        Exists(Instruction.objects.filter(message_id=OuterRef("pk")))
    )
    if listened_to_only:
        messages = messages.filter(conversation__owner__in=plugin_clients_connected().values("owner"))
    rows = list(messages.order_by("pk").values(
        "pk", "remote_message_id", "conversation_id", "conversation__owner", "conversation__platform",
        "conversation__remote_id",
    ))
    if not rows:
        return []
    found = [row["pk"] for row in rows]
    instructions: dict[int, list[dict[str, Any]]] = {}
    for row in Instruction.objects.filter(message_id__in=found).order_by("message_id", "block_index").values(
        "pk", "message_id", "block_index", "target", "tool", "params", "status", "error", "created_at",
    ):
        instructions.setdefault(row["message_id"], []).append(row)
    block_tasks: dict[int, dict[str, Any]] = {}
    deliveries: dict[int, dict[str, Any]] = {}
    tasks = (
        AutomationTask.objects.filter(message_id__in=found, kind__in=(INSTRUCTION_EXECUTE, INSTRUCTION_DELIVER))
        .annotate(result_head=Substr(Cast("result_json", TextField()), 1, _RESULT_HEAD_CHARS))
        .order_by("created_at", "task_id")
        .values("task_id", "kind", "status", "last_error", "result_head", "updated_at", "instruction_id", "message_id")
    )
    for task in tasks:
        # A block's task names its block; a delivery names none.
        if task["instruction_id"] is not None:
            block_tasks[task["instruction_id"]] = task
        else:
            deliveries[task["message_id"]] = task  # the latest one: a retried block's own delivery
    statuses = []
    for row in rows:
        blocks = []
        for instruction in instructions.get(row["pk"], []):
            task = block_tasks.get(instruction["pk"])
            block = shown.BlockRow(
                index=instruction["block_index"], target=instruction["target"] or DEFAULT_TARGET,
                tool=instruction["tool"], params=instruction["params"],
                instruction_status=instruction["status"], instruction_error=instruction["error"],
                task_id=task["task_id"] if task else None, task_status=task["status"] if task else None,
                task_error=task["last_error"] if task else None,
                task_result=_result_head(task["result_head"]) if task else None,
                updated_at=task["updated_at"] if task else int(instruction["created_at"].timestamp() * 1000),
            )
            approve = approval_path(
                conversation_pk=row["conversation_id"], task_id=task["task_id"], instruction_pk=instruction["pk"],
            ) if task and task["status"] == TaskStatus.BLOCKED else None
            blocks.append(shown.block_status(block, approve_url=approve))
        delivery = deliveries.get(row["pk"])
        statuses.append(StatusOfMessage(
            owner=row["conversation__owner"], platform=row["conversation__platform"],
            conversation_id=row["conversation__remote_id"],
            status=shown.message_status(
                remote_message_id=row["remote_message_id"], message_pk=row["pk"], blocks=blocks,
                delivery=shown.delivery_status(shown.DeliveryRow(
                    status=delivery["status"], result=_result_head(delivery["result_head"]),
                    error=delivery["last_error"],
                ) if delivery else None),
            ),
        ))
    return statuses


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


def approvals_waiting_by_owner(*, owners: Iterable[str]) -> dict[str, int]:
    """``approvals_waiting`` for several owners in one statement (0 for an owner with none)."""
    wanted = sorted(set(owners))
    counts = dict(
        AutomationTask.objects.filter(status=TaskStatus.BLOCKED, kind=INSTRUCTION_EXECUTE, conversation__owner__in=wanted)
        .values_list("conversation__owner").annotate(count=Count("pk")).order_by()
    )
    return {owner: counts.get(owner, 0) for owner in wanted}


