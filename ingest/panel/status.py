"""What became of a message's blocks and of its delivery, in the words of the chat (SPEC §6 "message status").

The side panel of the plugin shows it: ``instruction.status`` pushes it on
every change (``ingest/panel/push.py``), ``status.get`` answers with the
last messages' (``ingest.selectors.conversation_status``). This module is
pure: it turns the rows those read into the frame's shape. Everything in it
came from an assistant, a page or a tool, so every string is bounded here;
the plugin renders it as text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from automation.models import TaskStatus
from automation import wait_selectors as waits
from automation.wait_selectors import Wait
from ingest.models import Instruction

# A block's status as the panel shows it (SPEC §6).
QUEUED = "queued"
WAITING_APPROVAL = "waiting_approval"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
REJECTED = "rejected"
CANCELLED = "cancelled"

# A message's delivery, as the panel shows it.
DELIVERY_NONE = "none"  # no delivery yet: blocks are still open
DELIVERY_WAITING = "waiting"
DELIVERY_RUNNING = "running"
DELIVERY_DELIVERED = "delivered"
DELIVERY_FAILED = "failed"

S = TaskStatus

BLOCK_STATUS_OF_TASK = {
    S.PENDING: QUEUED,
    S.LEASED: QUEUED,
    S.RETRY_WAIT: QUEUED,
    S.BLOCKED: WAITING_APPROVAL,
    S.RUNNING: RUNNING,
    S.SUCCEEDED: SUCCEEDED,
    S.FAILED: FAILED,
    S.CANCELLED: CANCELLED,
}
# A block without a task: how ingest judged it.
BLOCK_STATUS_OF_INSTRUCTION = {
    Instruction.Status.REJECTED: REJECTED,
    Instruction.Status.PENDING: QUEUED,
    Instruction.Status.AWAITING_APPROVAL: WAITING_APPROVAL,
    Instruction.Status.SUCCEEDED: SUCCEEDED,
    Instruction.Status.FAILED: FAILED,
    Instruction.Status.CANCELLED: CANCELLED,
}
DELIVERY_STATUS_OF_TASK = {
    S.PENDING: DELIVERY_WAITING,
    S.LEASED: DELIVERY_WAITING,
    S.RETRY_WAIT: DELIVERY_WAITING,
    S.BLOCKED: DELIVERY_WAITING,
    S.RUNNING: DELIVERY_RUNNING,
    S.SUCCEEDED: DELIVERY_DELIVERED,
    S.FAILED: DELIVERY_FAILED,
    S.CANCELLED: DELIVERY_FAILED,
}

MAX_ERROR_CHARS = 300
MAX_PREVIEW_CHARS = 300
MAX_PARAMS_PREVIEW_CHARS = 120
# How many messages status.get answers with, newest last.
STATUS_MESSAGES = 20


def shortened(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending in "…" when it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def first_line(text: str, limit: int = MAX_ERROR_CHARS) -> str | None:
    """The first non-empty line of ``text``, bounded; None for no text."""
    for line in text.splitlines():
        if line.strip():
            return shortened(line.strip(), limit)
    return None


def one_line_json(value: Any, limit: int) -> str:
    """``value`` as compact JSON on one line, bounded (a string stands for itself)."""
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True, default=str)
    return shortened(" ".join(text.split()), limit)


@dataclass(frozen=True)
class BlockRow:
    """What the status of one block is made of: its instruction, and its task when it has one."""

    index: int
    target: str
    tool: str
    params: Any
    instruction_status: str
    instruction_error: str
    task_id: str | None = None
    task_status: str | None = None
    task_error: str | None = None
    task_result: Any = None
    updated_at: int = 0  # ms


@dataclass(frozen=True)
class DeliveryRow:
    status: str
    result: Any
    error: str | None


# The wait codes as the frames name them (SPEC §6): one code each, and what it names. A task a
# dispatcher has leased starts in a moment, and a kind with no executor here is the operator's to
# see in the console: the frames say nothing holds those back.
FRAME_WAITS: dict[str, tuple[str, dict[str, Any]]] = {
    waits.APPROVAL: ("approval", {}),
    waits.BEHIND_APPROVAL: ("earlier_block", {"approval": True}),
    waits.BEHIND_EARLIER: ("earlier_block", {"approval": False}),
    waits.CONVERSATION_PAUSED: ("paused", {"paused": "conversation"}),
    waits.KIND_PAUSED: ("paused", {"paused": "kind"}),
    waits.DISPATCHER_PAUSED: ("paused", {"paused": "dispatcher"}),
    waits.NO_PLUGIN: ("no_plugin", {}),
    waits.TARGET_BUSY: ("target_busy", {}),
    waits.BACKOFF: ("backoff", {}),
}


def waiting_for(wait: Wait | None, *, approve_url: str | None = None) -> dict[str, Any] | None:
    """Why a block or a delivery does not run (SPEC §6 ``waiting_for``); None when nothing holds it back.

    ``{"code": ...}`` with SPEC §6's code (``FRAME_WAITS``) and what it
    names: ``until`` (a backoff's end); ``paused``, what is paused
    (``conversation``, ``kind``, ``dispatcher``); for ``earlier_block``, the
    earlier block's ``message_id`` (the chat's), ``conductor_message_id``
    and ``index``, whether it waits for ``approval``, and then its ``approve_url``.
    """
    if wait is None or wait.code not in FRAME_WAITS:
        return None
    code, named = FRAME_WAITS[wait.code]
    shown: dict[str, Any] = {"code": code, **named}
    if wait.until is not None and code == "backoff":
        shown["until"] = wait.until
    if wait.ahead:
        message_pk = wait.ahead.get("conductor_message_id")
        shown.update(
            message_id=wait.ahead.get("message_id") or None,
            conductor_message_id=str(message_pk) if message_pk is not None else None,
            index=wait.ahead.get("index"),
        )
        if approve_url is not None:
            shown["approve_url"] = approve_url
    return shown


def block_status(
    row: BlockRow, *, approve_url: str | None, waiting: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One block of a message status; ``approve_url`` is given for a block waiting for approval,
    ``waiting`` (``waiting_for``'s shape) for one that does not run."""
    if row.task_status is not None:
        status = BLOCK_STATUS_OF_TASK[row.task_status]
    else:
        status = BLOCK_STATUS_OF_INSTRUCTION.get(row.instruction_status, QUEUED)
    error = None
    if status in (FAILED, REJECTED, CANCELLED) or (status == QUEUED and row.task_error):
        # A queued block with an error is waiting for its retry: the panel says why.
        error = first_line(row.task_error or row.instruction_error or "")
    preview = None
    if status == SUCCEEDED and row.task_result is not None:
        preview = one_line_json(row.task_result, MAX_PREVIEW_CHARS)
    return {
        "index": row.index,
        "target": row.target,
        "tool": shortened(row.tool, 100),
        "params_preview": one_line_json(row.params, MAX_PARAMS_PREVIEW_CHARS) if row.params is not None else "",
        "status": status,
        "error": error,
        "result_preview": preview,
        "approve_url": approve_url if status == WAITING_APPROVAL else None,
        "updated_at": row.updated_at,
        "waiting_for": waiting,
    }


def delivery_status(
    row: DeliveryRow | None, *, waiting: dict[str, Any] | None = None, not_delivered: int = 0,
) -> dict[str, Any]:
    """The message's (latest) delivery: ``none`` until it has one; ``waiting`` as a block's;
    ``results_not_delivered``: blocks retried since, whose new results a follow-up will carry."""
    if row is None:
        return {"status": DELIVERY_NONE, "method": None, "error": None, "waiting_for": None,
                "results_not_delivered": not_delivered}
    status = DELIVERY_STATUS_OF_TASK[row.status]
    method = row.result.get("method") if isinstance(row.result, dict) else None
    return {
        "status": status,
        "method": method if isinstance(method, str) else None,
        "error": first_line(row.error or "") if status in (DELIVERY_FAILED, DELIVERY_WAITING) else None,
        "waiting_for": waiting,
        "results_not_delivered": not_delivered,
    }


def message_status(
    *, remote_message_id: str, message_pk: int, blocks: list[dict[str, Any]], delivery: dict[str, Any]
) -> dict[str, Any]:
    return {
        "message_id": remote_message_id or None,
        "conductor_message_id": str(message_pk),
        "blocks": blocks,
        "delivery": delivery,
    }


def server_base_url(scope: dict[str, Any]) -> str:
    """The server's address as this socket's plugin reached it (``https://host``), for links it opens.

    The scheme follows the socket's (``wss`` → ``https``); the host is the
    one the plugin asked for. Behind a proxy that ends TLS, the plugin
    rebases a link on the server it was paired with (its origin differs).
    """
    scheme = "https" if scope.get("scheme") in ("wss", "https") else "http"
    headers = dict(scope.get("headers") or ())
    host = headers.get(b"host", b"").decode("latin-1")
    if not host and (server := scope.get("server")):
        host = f"{server[0]}:{server[1]}" if server[1] else str(server[0])
    return f"{scheme}://{host}"


def with_absolute_links(frame: dict[str, Any], *, base: str) -> dict[str, Any]:
    """A copy of ``frame`` (``instruction.status`` or ``status``) whose blocks' ``approve_url`` paths, and those of
    the blocks they wait behind (``waiting_for``), are absolute on ``base``.

    A copy: one frame of the channel layer may go to several sockets of a process.
    """

    def absolute_url(shown: dict[str, Any] | None) -> dict[str, Any] | None:
        if shown is None or not (shown.get("approve_url") or "").startswith("/"):
            return shown
        return {**shown, "approve_url": base + shown["approve_url"]}

    def absolute_block(block: dict[str, Any]) -> dict[str, Any]:
        block = absolute_url(block)
        return {**block, "waiting_for": absolute_url(block["waiting_for"])} if block.get("waiting_for") else block

    def absolute(message: dict[str, Any]) -> dict[str, Any]:
        return {**message, "blocks": [absolute_block(block) for block in message["blocks"]]}

    if "message" in frame:
        return {**frame, "message": absolute(frame["message"])}
    return {**frame, "messages": [absolute(message) for message in frame.get("messages", [])]}
