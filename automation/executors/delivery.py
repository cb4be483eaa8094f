"""``instruction.deliver`` and ``renewal.deliver``: post a text into the chat through the plugin (SPEC §3, §6).

The request is recorded as a ``DeliveryRequest`` row, then sent as a
``browser.proxy_delivery`` frame to the target client's socket through the
channel layer; whichever ASGI server holds that socket stores the plugin's
answer on the row, and this executor, in a dispatcher worker elsewhere, reads
it there. The platform adapter reads the answer: delivered is success; any
other answer, or none within ``CONDUCTOR_DELIVERY_TIMEOUT_SECONDS``, is
retryable. The task id is the delivery key on every retry, so a plugin that
already posted the text answers with its earlier result.
"""

from __future__ import annotations

import logging
import time

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from automation.kinds import INSTRUCTION_DELIVER, RENEWAL_DELIVER, kinds
from automation.models import DeliveryRequest
from automation.outcomes import ExecutionContext, Outcome, RetryableFailure, Success, TerminalFailure
from automation.platforms import DeliveryTarget, ProxyAnswer, UnsupportedPlatform, platforms
from automation.results import message_results_text
from automation.services.delivery import delivered_message_store, delivery_request_create
from conductor_site.logfmt import log_event
from conversations.models import ConversationLink, Message
from ingest.models import PluginClient, plugin_group_name

logger = logging.getLogger(__name__)

# How often a waiting executor looks for the answer: a cheap primary-key read.
ANSWER_POLL_SECONDS = 0.02
ANSWER_POLL_MAX_SECONDS = 0.1


def _send(client_pk: int, frame: dict) -> None:
    async_to_sync(get_channel_layer().group_send)(
        plugin_group_name(client_pk), {"type": "plugin.deliver", "frame": frame}
    )


def _await_answer(ctx: ExecutionContext, request_id: str, timeout: float) -> dict | None:
    """The stored answer, or None when the time ran out or the task was cancelled."""
    deadline = time.monotonic() + timeout
    pause = ANSWER_POLL_SECONDS
    while not ctx.is_cancelled():
        result = (
            DeliveryRequest.objects.filter(pk=request_id, answered_at__isnull=False)
            .values_list("result", flat=True)
            .first()
        )
        if result is not None:
            return result
        if time.monotonic() >= deadline:
            return None
        # Backs off a little while the plugin's request is under way.
        ctx.cancelled.wait(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 1.5, ANSWER_POLL_MAX_SECONDS)
    return None


def proxy_deliver(ctx: ExecutionContext, *, text: str) -> Outcome:
    """Post ``text`` as the next user message of the task's conversation, through its target client."""
    task = ctx.task
    if not task.has_route or task.conversation_id is None:
        return TerminalFailure("no route for the conversation: it was never seen through a plugin client")
    try:
        adapter = platforms.get(task.target_platform)
    except UnsupportedPlatform as exc:
        return TerminalFailure(str(exc))
    client = PluginClient.objects.filter(client_id=task.target_client_id).first()
    if client is None or not client.enabled:
        return TerminalFailure(f"plugin client {task.target_client_id!r} is revoked or gone")
    link = ConversationLink.objects.filter(conversation_id=task.conversation_id, client=client).first()
    target = DeliveryTarget(
        platform=adapter.name,
        conversation_id=task.target_conversation_id or "",
        parent_message_id=link.last_assistant_message_id if link else "",
        organization_id=link.organization_id if link else "",
        page_url=link.page_url if link else "",
        text=text,
        delivery_key=task.pk,
    )
    request = adapter.build_request(target)
    timeout = settings.CONDUCTOR_DELIVERY_TIMEOUT_SECONDS
    pending = delivery_request_create(task_id=task.pk, client_pk=client.pk)
    frame = {
        "type": "browser.proxy_delivery",
        "request_id": pending.pk,
        "delivery_key": task.pk,
        "platform": adapter.name,
        "conversation_id": task.target_conversation_id,
        # Not in SPEC §6's frame, and harmless to plugins that ignore it: the
        # page the conversation was last seen on, so the plugin opens that one.
        "page_url": target.page_url,
        "text": text,
        "request": request.as_frame(),
        "timeout_ms": timeout * 1000,
    }
    _send(client.pk, frame)
    log_event(logger, "delivery_sent", task_id=task.pk, kind=task.kind, request_id=pending.pk,
              client_id=client.client_id, platform=adapter.name)

    answer = _await_answer(ctx, pending.pk, timeout)
    if answer is None:
        return RetryableFailure(f"no answer from plugin client {client.client_id!r} within {timeout} s")
    verdict = adapter.read_answer(ProxyAnswer.from_result(answer))
    outcome = {"request_id": pending.pk, "status": answer.get("status")}
    if not verdict.is_delivered:
        failure = RetryableFailure if verdict.is_retryable else TerminalFailure
        return failure(verdict.error or "not delivered", result=outcome)
    message = delivered_message_store(
        task_id=task.pk, conversation_id=task.conversation_id, client_pk=client.pk, text=text,
        frame={**frame, "parent_message_id": target.parent_message_id},
        remote_message_id=verdict.remote_message_id,
    )
    return Success({**outcome, "message_id": message.pk, "remote_message_id": verdict.remote_message_id})


@kinds.executor(INSTRUCTION_DELIVER)
def instruction_deliver(ctx: ExecutionContext) -> Outcome:
    """The results of a message's blocks (or of the blocks in ``instruction_ids``), in one user turn."""
    payload = ctx.task.payload
    message_id = payload.get("message_id")
    if message_id is None or not Message.objects.filter(pk=message_id).exists():
        return TerminalFailure(f"payload missing: message {message_id!r} does not exist")
    text = message_results_text(message_id=message_id, instruction_ids=payload.get("instruction_ids"))
    return proxy_deliver(ctx, text=text)


@kinds.executor(RENEWAL_DELIVER)
def renewal_deliver(ctx: ExecutionContext) -> Outcome:
    text = ctx.task.payload.get("text")
    if not isinstance(text, str) or not text.strip():
        return TerminalFailure("payload missing: no renewal text")
    return proxy_deliver(ctx, text=text)
