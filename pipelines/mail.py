"""Mail between conversations (SPEC §3 ``mail.deliver``, §5.1 ``mail.send``): a pipeline of its own.

``mail.send {"to": "<handle>", "text": "..."}`` is a tool like any other:
checked at ingest (an unknown handle rejects the block, naming no other
handle), held by tool policies and approval like any tool. Mail stays
within an owner: a handle of another owner's conversation is answered
exactly as an unknown one, at ingest and when the tool runs, so a sender
cannot probe which handles exist; only a pair of owners an operator named
in ``CONDUCTOR_MAIL_BETWEEN_OWNERS`` mail each other
(``conversations.selectors.mail_recipient``). Running it
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

Two conversations answering each other's mail at once would loop as fast as
their chats reply. So a conversation cannot mail itself, and mail from one
conversation to another goes at most at the pace of the hourly instruction
budget (``CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR``): ``MAIL_BURST`` mails in
any window of ``MAIL_BURST`` budget intervals (with the default 120, three
in 90 s, then one every 30 s). A mail over that pace fails with an error
that says when the next one may go.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from django.conf import settings

from automation.kinds import Detail, KindDisplay, StoryHeading, kinds
from automation.selectors import task_times_between
from automation.outcomes import ExecutionContext, Outcome, TerminalFailure
from automation.services.tasks import task_create
from conversations.handles import HANDLE_PATTERN, MAX_HANDLE_CHARS
from conversations.selectors import (
    conversation_get,
    conversation_has_handle,
    conversation_has_link,
    mail_is_allowed,
    mail_recipient,
)
from core.clock import now_ms
from pipelines.deliveries import deliver_text, outbound_kind
from tools.catalog import object_schema
from tools.registry import ExampleFacts, Policy, ToolCall, ToolError, ToolSpec, tools

if TYPE_CHECKING:
    from automation.models import AutomationTask
    from conversations.models import Conversation

MAIL_SEND = "mail.send"
MAIL_DELIVER = "mail.deliver"
MAX_MAIL_CHARS = 8000  # a mail's text; the delivered text adds a header and how to answer
# Mails one conversation may send another back to back before the pace applies.
MAIL_BURST = 3


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


def unknown_recipient(to: str) -> str:
    """The one answer for a handle the sender cannot write to: none has it, or another owner's conversation does.

    It names the handle as the sender wrote it and nothing else (no other
    handle is listed), and is the same for both, so handles cannot be probed.
    """
    return f"no conversation receives mail as {to!r}"


def mail_send_check(params: dict[str, Any], *, conversation_id: int | None = None) -> str | None:
    """A recipient the sender cannot write to (``unknown_recipient``), or the sending conversation itself."""
    recipient = mail_recipient(handle=params["to"], sender_id=conversation_id)
    if recipient is None:
        return f"params.to: {unknown_recipient(params['to'])}"
    if recipient.pk == conversation_id:
        return f"params.to: {params['to']!r} is this conversation's own handle; a conversation cannot mail itself"
    return None


def mail_send_example(facts: ExampleFacts) -> dict[str, Any] | None:
    """A mail to the first handle the conversation can write to; none without one."""
    if not facts.mail_handles:
        return None
    return {"to": facts.mail_handles[0], "text": "Hello from the other conversation."}


def mail_pace_error(*, sender: Conversation, recipient: Conversation, instruction_id: int,
                    now: int | None = None) -> str | None:
    """Why a mail from ``sender`` to ``recipient`` must wait (the pair's pace, module docstring), or None.

    Counts the pair's ``mail.deliver`` tasks of the window, leaving out the
    instruction's own (a second run of it returns its first mail). The count
    is read without a lock: two mails of one pair run at the same instant
    may both pass, which a pace against loops need not prevent.
    """
    now = now_ms() if now is None else now
    budget = settings.CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR
    interval_ms = 3_600_000 / budget
    window_ms = math.ceil(MAIL_BURST * interval_ms)
    sent = task_times_between(
        kind=MAIL_DELIVER, to_conversation_id=recipient.pk, from_conversation_id=sender.pk,
        since_ms=now - window_ms, excluding_dedupe_key=_dedupe_key(instruction_id), limit=MAIL_BURST,
    )
    if len(sent) < MAIL_BURST:
        return None
    wait_s = math.ceil((sent[-1] + window_ms - now) / 1000)
    return (
        f"mail rate: this conversation already mailed {recipient.handle!r} {MAIL_BURST} times in the last "
        f"{window_ms / 1000:g} s; mail between two conversations goes at the pace of the hourly budget "
        f"(CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR = {budget}: one every {interval_ms / 1000:g} s). "
        f"This mail was not sent; send it again in {wait_s} s or later"
    )


def _dedupe_key(instruction_id: int) -> str:
    return f"mail:{instruction_id}"


def mail_send(call: ToolCall) -> dict[str, Any]:
    origin = call.origin
    if origin is None:
        raise ToolError(f"{MAIL_SEND} runs only as a block of a conversation's message")
    to, text = call.params["to"], call.params["text"]
    # Read again when it runs: an owner, a handle or CONDUCTOR_MAIL_BETWEEN_OWNERS may have changed
    # since ingest (or since the block waited for approval).
    recipient = mail_recipient(handle=to, sender_id=origin.conversation_id)
    if recipient is None:
        raise ToolError(unknown_recipient(to))
    if not conversation_has_link(conversation_id=recipient.pk):
        raise ToolError(f"{to!r} was never seen through a plugin: its mail has nowhere to go")
    if recipient.pk == origin.conversation_id:
        raise ToolError(f"{to!r} is this conversation's own handle; a conversation cannot mail itself")
    sender = conversation_get(conversation_id=origin.conversation_id)
    if error := mail_pace_error(sender=sender, recipient=recipient, instruction_id=origin.instruction_id):
        raise ToolError(error)
    task, _ = task_create(
        kind=MAIL_DELIVER,
        payload={
            "from_conversation_id": sender.pk, "from_handle": sender.handle, "to": to,
            "instruction_id": origin.instruction_id, "text": mail_text(sender=sender, text=text),
        },
        actor=MAIL_SEND,
        # One mail per instruction, however often the tool runs.
        dedupe_key=_dedupe_key(origin.instruction_id),
        conversation_id=recipient.pk,
        message_id=origin.message_id,
    )
    return {"mail": task.pk, "to": to}


def mail_deliver(ctx: ExecutionContext) -> Outcome:
    text = ctx.task.payload.get("text")
    if not isinstance(text, str) or not text:
        return TerminalFailure("payload missing: no mail text")
    if not conversation_has_handle(conversation_id=ctx.task.conversation_id):
        return TerminalFailure("the recipient no longer accepts mail: its handle was removed")
    # A mail sent while its owners could mail each other, delivered only while they still can.
    sender = ctx.task.payload.get("from_conversation_id")
    if not mail_is_allowed(sender_id=sender if isinstance(sender, int) else None,
                           recipient_id=ctx.task.conversation_id):
        return TerminalFailure(
            "the recipient no longer accepts mail from the sender: their owners may not mail each other "
            "(CONDUCTOR_MAIL_BETWEEN_OWNERS)"
        )
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
def mail_heading(task: AutomationTask, conversation_id: int) -> StoryHeading:
    """Mail in, in the recipient's story (the task's conversation); mail out, in the sender's."""
    payload = task.payload
    if task.conversation_id == conversation_id:
        sender = payload.get("from_conversation_id")
        return StoryHeading(
            f"mail from @{payload.get('from_handle') or '(no handle)'}",
            direction="in",
            other_conversation_id=sender if isinstance(sender, int) else None,
        )
    return StoryHeading(f"mail to @{payload.get('to', '?')}", direction="out",
                        other_conversation_id=task.conversation_id)


def mail_details(task: AutomationTask) -> list[Detail]:
    payload = task.payload
    handle = payload.get("from_handle")
    sender = payload.get("from_conversation_id")
    return [
        Detail("from", f"@{handle}" if handle else "(no handle)",
               conversation_id=sender if isinstance(sender, int) else None),
        Detail("to", f"@{payload.get('to', '')}", conversation_id=task.conversation_id),
        Detail("text delivered", str(payload.get("text", "")), is_long=True),
    ]


kinds.register(outbound_kind(
    name=MAIL_DELIVER,
    executor=mail_deliver,
    display=KindDisplay(
        noun="mail", heading=mail_heading, is_shown_to_sender=True, details_title="Mail", details=mail_details,
    ),
))
