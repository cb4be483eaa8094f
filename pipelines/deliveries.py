"""Outbound deliveries: post a text into the chat through the plugin (SPEC §3, §6).

``proxy_deliver`` is the delivery step every outbound kind shares:
``instruction.deliver`` (here: the results of a message's blocks),
``renewal.deliver`` (``pipelines.renewal``). It builds the platform's
request, sends it to the target client through the plugin edge
(``ingest.services.deliveries``) and waits for the answer; the platform
adapter reads it: delivered is success, any other answer, or none within
``CONDUCTOR_DELIVERY_TIMEOUT_SECONDS``, is retryable. The task id is the
delivery key on every retry, so a plugin that already posted the text
answers with its earlier result.
"""

from __future__ import annotations

import logging

from django.conf import settings

from automation.kinds import LANE_OUTBOUND, KindSpec, always, kinds
from automation.outcomes import (
    ExecutionContext,
    Outcome,
    RetryableFailure,
    Success,
    TerminalFailure,
)
from conversations.models import ConversationLink, Message
from conversations.services import delivered_message_store
from core.logfmt import log_event
from ingest.models import PluginClient
from ingest.selectors import plugin_targets
from ingest.services.deliveries import (
    delivery_answer_wait,
    delivery_request_create,
    delivery_request_send,
)
from ingest.services.instructions import INSTRUCTION_DELIVER
from pipelines.results import message_results_text
from platforms import platforms
from platforms.registry import DeliveryTarget, ProxyAnswer, UnsupportedPlatform

logger = logging.getLogger(__name__)


def outbound_kind(*, name: str, executor) -> KindSpec:
    """The spec of an outbound kind: to plugin clients, in the outbound lane.

    A delivery carries its task id as delivery_key, so a plugin that already
    posted it answers with its earlier result: repeating one is harmless.
    """
    return KindSpec(name=name, lane=LANE_OUTBOUND, is_idempotent=always, targets=plugin_targets, executor=executor)


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
    delivery_request_send(client_pk=client.pk, frame=frame)
    log_event(logger, "delivery_sent", task_id=task.pk, kind=task.kind, request_id=pending.pk,
              client_id=client.client_id, platform=adapter.name)

    answer = delivery_answer_wait(request_id=pending.pk, timeout=timeout, cancelled=ctx.cancelled)
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


def instruction_deliver(ctx: ExecutionContext) -> Outcome:
    """The results of a message's blocks (or of the blocks in ``instruction_ids``), in one user turn."""
    payload = ctx.task.payload
    message_id = payload.get("message_id")
    if message_id is None or not Message.objects.filter(pk=message_id).exists():
        return TerminalFailure(f"payload missing: message {message_id!r} does not exist")
    text = message_results_text(message_id=message_id, instruction_ids=payload.get("instruction_ids"))
    return proxy_deliver(ctx, text=text)


kinds.register(outbound_kind(name=INSTRUCTION_DELIVER, executor=instruction_deliver))
