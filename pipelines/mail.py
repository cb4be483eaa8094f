"""Mail between conversations (SPEC §3 ``mail.deliver``, §5.1 ``mail.send``): a pipeline of its own.

``mail.send {"to": "<handle>", "text": "..."}`` is a tool like any other:
checked at ingest (an unknown handle rejects the block, naming no other
handle), held by tool policies and approval like any tool. Running it
creates exactly one ``mail.deliver`` task (its dedupe key is the
instruction's), and its result names the mail and its recipient.

``mail.deliver`` is an outbound kind, so everything the engine does for
outbound tasks holds for it by construction:

- its route (``target_*``) is the recipient conversation's most recent link,
  fixed by ``task_create``; transitions refuse to write routing fields, so no
  requeue, retry or reclaim can clear or change it (only the logged
  ``task_retarget`` moves it);
- it is not guarded: it can never be created ``blocked``, and no guardrail
  or policy reads its text;
- it runs in the recipient conversation's outbound lane (mails and results
  reach a chat in the order they were created) and takes the per-target
  slot of its client on every attempt, retries included.

The delivered text says who it is from and how to answer.
"""

from __future__ import annotations

import json
from typing import Any

from automation.kinds import kinds
from automation.outcomes import ExecutionContext, Outcome, TerminalFailure
from automation.services.tasks import task_create
from conversations.models import (
    HANDLE_PATTERN,
    MAX_HANDLE_CHARS,
    Conversation,
    ConversationLink,
)
from pipelines.deliveries import deliver_text, outbound_kind
from tools.catalog import object_schema
from tools.registry import ExampleFacts, Policy, ToolCall, ToolError, ToolSpec, tools

MAIL_SEND = "mail.send"
MAIL_DELIVER = "mail.deliver"
MAX_MAIL_CHARS = 8000  # a mail's text; the delivered text adds a header and how to answer


def mail_text(*, sender: Conversation, text: str) -> str:
    """The text the recipient's chat receives: who it is from, the mail, and how to answer."""
    title = f" ({json.dumps(sender.title, ensure_ascii=False)})" if sender.title else ""
    if not sender.handle:
        return (
            f"Mail from another conversation{title}, which has no handle, so it cannot be answered by mail:\n\n"
            f"{text}"
        )
    answer = json.dumps({"to": sender.handle, "text": "..."})
    return (
        f"Mail from @{sender.handle}{title}:\n\n{text}\n\n"
        f"To answer, reply with a block:\n```baa\n{MAIL_SEND}\n{answer}\n```"
    )


def mail_send_check(params: dict[str, Any]) -> str | None:
    """An unknown recipient, named as the sender wrote it and nothing else (no other handle is listed)."""
    if not Conversation.objects.filter(handle=params["to"]).exists():
        return f"params.to: no conversation receives mail as {params['to']!r}"
    return None


def mail_send_example(facts: ExampleFacts) -> dict[str, Any] | None:
    """A mail to the first handle the conversation can write to; none without one."""
    if not facts.mail_handles:
        return None
    return {"to": facts.mail_handles[0], "text": "Hello from the other conversation."}


def mail_send(call: ToolCall) -> dict[str, Any]:
    origin = call.origin
    if origin is None:
        raise ToolError(f"{MAIL_SEND} runs only as a block of a conversation's message")
    to, text = call.params["to"], call.params["text"]
    recipient = Conversation.objects.filter(handle=to).first()
    if recipient is None:
        raise ToolError(f"no conversation receives mail as {to!r}")
    if not ConversationLink.objects.filter(conversation=recipient).exists():
        raise ToolError(f"{to!r} was never seen through a plugin: its mail has nowhere to go")
    sender = Conversation.objects.get(pk=origin.conversation_id)
    task, _ = task_create(
        kind=MAIL_DELIVER,
        payload={
            "from_conversation_id": sender.pk, "from_handle": sender.handle, "to": to,
            "instruction_id": origin.instruction_id, "text": mail_text(sender=sender, text=text),
        },
        actor=MAIL_SEND,
        # One mail per instruction, however often the tool runs.
        dedupe_key=f"mail:{origin.instruction_id}",
        conversation_id=recipient.pk,
        message_id=origin.message_id,
    )
    return {"mail": task.pk, "to": to}


def mail_deliver(ctx: ExecutionContext) -> Outcome:
    text = ctx.task.payload.get("text")
    if not isinstance(text, str) or not text:
        return TerminalFailure("payload missing: no mail text")
    accepts = Conversation.objects.filter(pk=ctx.task.conversation_id, handle__isnull=False).exists()
    if not accepts:
        return TerminalFailure("the recipient no longer accepts mail: its handle was removed")
    return deliver_text(ctx, text=text)


tools.register(ToolSpec(
    name=MAIL_SEND,
    run=mail_send,
    check=mail_send_check,
    description="Send a text to the conversation with this handle, as its next user message.",
    params_schema=object_schema(
        {
            "to": {"type": "string", "pattern": rf"^{HANDLE_PATTERN}$", "maxLength": MAX_HANDLE_CHARS},
            "text": {"type": "string", "minLength": 1, "maxLength": MAX_MAIL_CHARS},
        },
        required=["to", "text"],
    ),
    example=mail_send_example,
    # The dedupe key makes a second run return the first run's mail.
    is_idempotent=True,
    default_policy=Policy.ALLOW,
))
kinds.register(outbound_kind(name=MAIL_DELIVER, executor=mail_deliver))
