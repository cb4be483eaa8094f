"""Outbound deliveries: post a text into the chat through the plugin (SPEC §3, §6).

``deliver_text`` is the delivery step every outbound kind shares:
``instruction.deliver`` (here: the results of a message's blocks),
``renewal.deliver`` (``pipelines.renewal``). It walks the conversation's
delivery methods (``pipelines.delivery_methods``: the page's own HTTP
request, then the composer), sends each method's frame to the target
client through the plugin edge (``ingest.services.deliveries``) and waits
for the answer: delivered is success; an answer saying the method cannot
work here moves on to the next method; any other answer, or none within
``CONDUCTOR_DELIVERY_TIMEOUT_SECONDS``, is retryable. The task id is the
delivery key on every method and every retry, so a plugin that already
delivered the text answers with its earlier result.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings

from automation.kinds import LANE_OUTBOUND, KindDisplay, KindSpec, StoryHeading, always, kinds
from automation.outcomes import (
    ExecutionContext,
    Outcome,
    RetryableFailure,
    Success,
    TerminalFailure,
)
from conversations.selectors import message_exists
from conversations.services import delivered_message_store
from core.logfmt import log_event
from ingest.kinds import INSTRUCTION_DELIVER
from ingest.selectors.blocks import message_block_rows
from ingest.selectors.clients import plugin_targets
from ingest.selectors.deliveries import delivery_route_for
from ingest.services.deliveries import (
    delivery_answer_wait,
    delivery_request_create,
    delivery_request_mark_delivered,
    delivery_request_send,
)
from ingest.sites import platform_adapter
from pipelines.delivery_methods import DeliveryMethodSpec, methods_for
from pipelines.results_text import BlockOutcome, render_results
from platforms.registry import (
    DeliveryTarget,
    PlatformAdapter,
    UnsupportedPlatform,
)
from platforms.wire import (
    excerpt,
)

if TYPE_CHECKING:
    from automation.models import AutomationTask
    from ingest.models import PluginClient

logger = logging.getLogger(__name__)


def outbound_kind(*, name: str, executor, display: KindDisplay) -> KindSpec:
    """The spec of an outbound kind: to plugin clients, in the outbound lane.

    A delivery carries its task id as delivery_key, so a plugin that already
    posted it answers with its earlier result: repeating one is harmless.
    """
    return KindSpec(
        name=name, lane=LANE_OUTBOUND, is_idempotent=always, targets=plugin_targets, executor=executor,
        display=display,
    )


def deliver_text(ctx: ExecutionContext, *, text: str) -> Outcome:
    """Post ``text`` as the next user message of the task's conversation, through its target client.

    Tries the conversation's delivery methods in order within this one
    attempt (SPEC §6.1): it moves on when the plugin lacks a method's
    capability, or answers that the method cannot work here (its
    ``falls_through_on`` codes); any other answer ends the attempt. Each
    method sent and each fallback with its reason is a step on the task's
    timeline.
    """
    task = ctx.task
    if not task.has_route or task.conversation_id is None:
        return TerminalFailure("no route for the conversation: it was never seen through a plugin client")
    try:
        adapter = platform_adapter(task.target_platform)
    except UnsupportedPlatform as exc:
        return TerminalFailure(str(exc))
    route = delivery_route_for(conversation_id=task.conversation_id, client_id=task.target_client_id)
    client, conversation_owner, link = route.client, route.owner, route.link
    if client is None or not client.enabled:
        return TerminalFailure(f"plugin client {task.target_client_id!r} is revoked or gone")
    if client.owner != conversation_owner:
        # Routes only name the owner's clients; a client given another owner after its task was routed stops here.
        return TerminalFailure(
            f"plugin client {client.client_id!r} belongs to owner {client.owner!r}, the conversation to "
            f"{conversation_owner or 'no owner'!r}: results never go to another owner's client"
        )
    target = DeliveryTarget(
        platform=adapter.name,
        conversation_id=task.target_conversation_id or "",
        parent_message_id=link.last_assistant_message_id if link else "",
        organization_id=link.organization_id if link else "",
        page_url=link.page_url if link else "",
        text=text,
        delivery_key=task.pk,
    )
    fallbacks = []
    sent_any = False
    for method in methods_for(adapter=adapter, conversation_methods=route.methods or ""):
        if not client.has_capability(method.capability):
            reason = f"plugin client {client.client_id!r} does not announce {method.capability}"
            ctx.progress("fallback", method=method.name, reason=reason)
            fallbacks.append(f"{method.name}: {reason}")
            continue
        sent_any = True
        outcome = _deliver_by(ctx, method, adapter=adapter, client=client, target=target)
        if isinstance(outcome, Fallback):
            ctx.progress("fallback", method=method.name, error_code=outcome.error_code, reason=outcome.reason)
            fallbacks.append(f"{method.name}: {outcome.error_code}: {outcome.reason}")
            continue
        return outcome
    if not sent_any:
        return TerminalFailure(f"no delivery method this plugin client performs: {'; '.join(fallbacks)}")
    return RetryableFailure(f"every delivery method fell through: {'; '.join(fallbacks)}")


@dataclass(frozen=True)
class Fallback:
    """A method's answer saying it cannot work here: the attempt tries the next one."""

    error_code: str
    reason: str


def _deliver_by(
    ctx: ExecutionContext, method: DeliveryMethodSpec, *, adapter: PlatformAdapter, client: PluginClient,
    target: DeliveryTarget,
) -> Outcome | Fallback:
    """Send the delivery by one method and read the answer."""
    task = ctx.task
    timeout = settings.CONDUCTOR_DELIVERY_TIMEOUT_SECONDS
    pending = delivery_request_create(task_id=task.pk, client_pk=client.pk, method=method.name)
    frame = {
        "type": method.frame_type,
        "request_id": pending.pk,
        "delivery_key": task.pk,
        "platform": adapter.name,
        "conversation_id": task.target_conversation_id,
        # The page the conversation was last seen on, so the plugin opens that
        # one (beyond SPEC §6's proxy frame, and harmless to plugins that ignore it).
        "page_url": target.page_url,
        "text": target.text,
        **method.frame_fields(adapter, target),
        "timeout_ms": timeout * 1000,
    }
    ctx.progress("deliver", method=method.name, request_id=pending.pk)

    def send() -> None:
        delivery_request_send(client_pk=client.pk, frame=frame)
        log_event(logger, "delivery_sent", task_id=task.pk, kind=task.kind, request_id=pending.pk,
                  client_id=client.client_id, platform=adapter.name, method=method.name)

    answer = delivery_answer_wait(request_id=pending.pk, timeout=timeout, cancelled=ctx.cancelled, send=send)
    if answer is None:
        return RetryableFailure(f"no answer from plugin client {client.client_id!r} within {timeout} s")
    error_code = answer.get("error_code")
    if error_code in method.falls_through_on:
        return Fallback(error_code, excerpt(str(answer.get("error") or "")) or "no detail")
    verdict = method.read(adapter, answer)
    outcome = {"request_id": pending.pk, "method": method.name, "status": answer.get("status")}
    if not verdict.is_delivered:
        failure = RetryableFailure if verdict.is_retryable else TerminalFailure
        return failure(verdict.error or "not delivered", result=outcome)
    delivery_request_mark_delivered(request_id=pending.pk)
    message = delivered_message_store(
        task_id=task.pk, conversation_id=task.conversation_id, client_pk=client.pk, text=target.text,
        frame={**frame, "parent_message_id": target.parent_message_id},
        remote_message_id=verdict.remote_message_id,
    )
    return Success({**outcome, "message_id": message.pk, "remote_message_id": verdict.remote_message_id})


def message_block_outcomes(*, message_id: int, instruction_ids: Sequence[int] | None = None) -> list[BlockOutcome]:
    """The outcome of each block of the message, in block order (only ``instruction_ids`` when given).

    A block's result is the one its most recent task stored; rejected blocks
    never had a task. One query (``message_block_rows``).
    """
    return [
        BlockOutcome(
            block=row.block, tool=row.label, status=row.status,
            result=json.loads(row.result_json) if row.result_json else None, error=row.error or None,
        )
        for row in message_block_rows(message_id=message_id, instruction_ids=instruction_ids)
    ]


def message_results_text(*, message_id: int, instruction_ids: Sequence[int] | None = None) -> str:
    """The text that reports the message's blocks back to the chat, within CONDUCTOR_RESULT_MAX_CHARS."""
    return results_text(message_block_outcomes(message_id=message_id, instruction_ids=instruction_ids))


def results_text(outcomes: Sequence[BlockOutcome]) -> str:
    """The text that reports these outcomes, within CONDUCTOR_RESULT_MAX_CHARS."""
    return render_results(outcomes, max_chars=settings.CONDUCTOR_RESULT_MAX_CHARS)


def instruction_deliver(ctx: ExecutionContext) -> Outcome:
    """The results of a message's blocks (or of the blocks in ``instruction_ids``), in one user turn."""
    payload = ctx.task.payload
    message_id = payload.get("message_id")
    outcomes = message_block_outcomes(message_id=message_id, instruction_ids=payload.get("instruction_ids"))
    if not outcomes and not message_exists(message_id=message_id):
        return TerminalFailure(f"payload missing: message {message_id!r} does not exist")
    return deliver_text(ctx, text=results_text(outcomes))


def instruction_deliver_heading(task: AutomationTask, conversation_id: int) -> StoryHeading:
    if task.message_id:
        return StoryHeading(f"delivery of the results of message {task.message_id}")
    return StoryHeading("delivery of results")


kinds.register(outbound_kind(
    name=INSTRUCTION_DELIVER,
    executor=instruction_deliver,
    display=KindDisplay(noun="delivery of results", heading=instruction_deliver_heading),
))
