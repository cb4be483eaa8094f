"""Delivery requests and their answers: the plugin edge's side of a delivery (SPEC §6).

A request is recorded as a ``DeliveryRequest`` row, then sent as a frame to
the target client's socket through the channel layer; whichever ASGI server
holds that socket stores the plugin's answer on the row
(``delivery_result_record``), and the executor that sent it, in a dispatcher
worker elsewhere, waits for it there (``delivery_answer_wait``), woken once
the answer commits (``ingest/answer_wakes.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection

from django.db import transaction

from core import layer_send
from core.clock import now_ms
from core.logfmt import log_event
from ingest.answer_wakes import answer_waiters, answers_wake_on_commit
from ingest.frames import DeliveryResult
from ingest.models import DeliveryRequest, plugin_group_name

logger = logging.getLogger(__name__)

# How often a waiting executor reads its request's row though nothing woke it:
# what a lost wake-up costs at most.
ANSWER_SAFETY_POLL_SECONDS = 1.0
# How often it looks at its ``cancelled`` event meanwhile (no statement).
CANCEL_CHECK_SECONDS = 0.1

# The most of a result's ``body`` (or ``error``) a row keeps. A plugin may send up to a
# frame's 1 MiB of it, once per attempt; the adapters need only the stream's
# start (the new message's id) and its end (an error event), so a longer body
# keeps both ends and the size it had.
MAX_STORED_BODY_CHARS = 16 * 1024


def body_capped(body: str, *, limit: int = MAX_STORED_BODY_CHARS) -> str:
    """``body`` itself when it fits in ``limit`` characters, else its head and tail in about that many.

    Each end is cut at a line break where it has one, and the two are joined
    by a blank line, so a stream of server-sent events or JSON lines still
    reads as whole events.
    """
    if len(body) <= limit:
        return body
    half = limit // 2
    head, tail = body[:half], body[-half:]
    if "\n" in head:
        head = head[: head.rindex("\n") + 1]
    if "\n" in tail:
        tail = tail[tail.index("\n") + 1 :]
    return f"{head}\n\n{tail}"


def delivery_result_record(*, client_pk: int, result: DeliveryResult, now: int | None = None) -> bool:
    """Store the plugin's answer to a delivery request it was sent.

    Returns False, storing nothing, when no unanswered request with that id
    and the answer's method was sent to this client: the plugin gets
    ``invalid``. ``error_code`` is
    kept beside the rest; a result that has one is never ``ok`` (the frame
    parser refuses that), so the platform adapters read it as a failure.
    A ``body`` or ``error`` over ``MAX_STORED_BODY_CHARS`` is stored cut
    (``body_capped``), with ``body_chars`` or ``error_chars``, its length as sent.
    """
    stored = {
        "ok": result.ok, "status": result.status, "body": result.body, "error": result.error,
        "error_code": result.error_code, "evidence": result.evidence,
    }
    for name in ("body", "error"):
        value = stored[name]
        if value is not None and len(value) > MAX_STORED_BODY_CHARS:
            stored.update({name: body_capped(value), f"{name}_chars": len(value)})
    recorded = bool(
        DeliveryRequest.objects.filter(
            request_id=result.request_id, client_id=client_pk, method=result.method, answered_at__isnull=True
        ).update(
            answered_at=now_ms() if now is None else now, result=stored
        )
    )
    if recorded:
        answers_wake_on_commit(request_ids=[result.request_id])
    return recorded


def delivery_request_create(
    *, task_id: str, client_pk: int, method: str, now: int | None = None
) -> DeliveryRequest:
    """Record a request about to be sent to a plugin client by ``method``, before it is sent."""
    return DeliveryRequest.objects.create(
        task_id=task_id, client_id=client_pk, method=method, sent_at=now_ms() if now is None else now
    )


def delivery_request_mark_delivered(*, request_id: str) -> None:
    """The request's answer was read as delivered: it is the one that carried the text."""
    DeliveryRequest.objects.filter(pk=request_id).update(delivered=True)


def delivery_request_send(*, client_pk: int, frame: dict) -> None:
    """Send a recorded request's frame to every socket of the client, through the channel layer."""
    layer_send.group_send(plugin_group_name(client_pk), {"type": "plugin.deliver", "frame": frame})


def delivery_answer_wait(
    *, request_id: str, timeout: float, cancelled: threading.Event, send: Callable[[], None] | None = None,
) -> dict | None:
    """The stored answer to the request, or None when the time ran out or ``cancelled`` was set.

    Reads the row each time the answer's commit wakes it (``answer_waiters``),
    and every ``ANSWER_SAFETY_POLL_SECONDS`` meanwhile. With ``send`` (what
    sends the request), it is called once this waiter is registered: no
    answer's wake-up can come before it, so the row is first read when woken.
    Without, the row is read at once too: the answer may be stored already.
    """
    deadline = time.monotonic() + timeout
    with answer_waiters.waiting(request_id) as answered:
        if send is None:
            answered.set()
        else:
            send()
        while not cancelled.is_set():
            read_at = min(time.monotonic() + ANSWER_SAFETY_POLL_SECONDS, deadline)
            while not answered.is_set() and not cancelled.is_set():
                left = read_at - time.monotonic()
                if left <= 0:
                    break
                answered.wait(min(left, CANCEL_CHECK_SECONDS))
            if cancelled.is_set():
                break
            answered.clear()  # before the read: a wake-up after it is kept for the next one
            result = (
                DeliveryRequest.objects.filter(pk=request_id, answered_at__isnull=False)
                .values_list("result", flat=True)
                .first()
            )
            if result is not None:
                return result
            if time.monotonic() >= deadline:
                return None
    return None


def delivery_requests_abandon(*, client_pks: Collection[int], reason: str, now: int | None = None) -> int:
    """Answer every unanswered request of these clients with a failure: their sockets closed first.

    The waiting executors see it at once and retry later with the same
    delivery key, instead of waiting out their timeout. Returns how many.
    """
    if not client_pks:
        return 0
    with transaction.atomic():
        # The ids first, to wake their waiters: an update returns only a count.
        request_ids = list(
            DeliveryRequest.objects.filter(client_id__in=client_pks, answered_at__isnull=True)
            .values_list("pk", flat=True)
        )
        if not request_ids:
            return 0
        abandoned = DeliveryRequest.objects.filter(pk__in=request_ids, answered_at__isnull=True).update(
            answered_at=now_ms() if now is None else now,
            result={"ok": False, "status": None, "body": None, "error": reason},
        )
        answers_wake_on_commit(request_ids=request_ids)
    if abandoned:
        log_event(
            logger, "delivery_abandoned", client_pks=sorted(client_pks), requests=abandoned, reason=reason
        )
    return abandoned
