"""What a story entry shows: messages with their blocks, tasks with their requests and texts.

Built from the rows the page read (``console.story``); everything here was
written by a chat page, a plugin or a tool, so texts are cut to
``TEXT_CHARS`` and made encodable, and the template escapes them.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from automation.kinds import StoryHeading, kinds
from automation.models import AutomationTask, Outcome, TaskStatus
from console.approval import HeldCall, held_call
from console.helpers import (
    delivery_answer,
    displayable_text,
    readable_json,
    readable_json_text,
)
from console.task_waits import ShownWait
from conversations.models import Conversation, Message
from core.clock import EPOCH
from ingest.blocks import block_spans
from ingest.models import DeliveryRequest, Instruction
from ingest.selectors.policies import BlockScope, networks_allowed

# A text longer than this is cut on the page; its own admin page has it whole.
TEXT_CHARS = 20_000
# A message longer than this is shown without its blocks marked in the text
# (they are still listed): finding them means parsing it again.
MARK_BLOCKS_UP_TO_CHARS = 200_000
# Texts longer than this many lines or characters are folded (<details>).
FOLD_LINES = 15
FOLD_CHARS = 2_000
# A task's delivery requests shown (the latest ones).
SHOWN_REQUESTS = 10


def local_moment(at_us: int) -> dt.datetime:
    return timezone.localtime(EPOCH + dt.timedelta(microseconds=at_us))


# --- what an entry shows ------------------------------------------------------------------


@dataclass
class Text:
    """A stored text as the page shows it: made encodable, cut to ``TEXT_CHARS``, folded when long."""

    text: str
    cut: int = 0  # characters left out
    is_long: bool = False
    summary: str = ""

    @classmethod
    def of(cls, text: str | None, *, limit: int = TEXT_CHARS) -> Text:
        text = text or ""
        cut = max(0, len(text) - limit)
        shown = displayable_text(text[:limit])
        lines = shown.count("\n") + 1
        first = next((line for line in shown.splitlines() if line.strip()), "")[:100]
        is_long = lines > FOLD_LINES or len(shown) > FOLD_CHARS
        return cls(
            shown, cut, is_long, f"{first} … ({lines} lines)" if is_long else first
        )


def json_text(value: Any) -> Text:
    """A JSON value, indented, as a ``Text``."""
    return Text.of(readable_json(value, sort_keys=True))


@dataclass
class Block:
    """One ```baa block of a message and what came of it."""

    instruction: Instruction
    task: AutomationTask | None  # its latest task; none when it was rejected at ingest
    outcome: str  # in a few words: "succeeded", "awaiting approval", ...
    state: str  # for the page's colours: ok, failed, rejected, held, open, cancelled
    params: Text | None
    result: Text | None
    error: Text | None
    call: HeldCall | None  # held blocks: the call an approval would run
    started: dt.datetime | None
    finished: dt.datetime | None
    wait: ShownWait | None = None  # why its task waits (``waits.story_waits_add``)

    @property
    def anchor(self) -> str:
        return f"block-{self.instruction.pk}"


@dataclass
class Segment:
    """A run of a message's lines: prose, or the lines of ``block`` where it sits."""

    text: Text
    block: Block | None = None


@dataclass
class MessageView:
    message: Message
    segments: list[Segment]
    blocks: list[Block]
    unplaced: list[
        Block
    ]  # blocks with no place in the shown text (past the limit, or not marked)
    is_marked: bool  # the blocks are marked in the text
    more_blocks: int = 0  # blocks past SHOWN_BLOCKS: counted, not shown


@dataclass
class TaskView:
    task: AutomationTask
    heading: str
    requests: list[tuple[str, dt.datetime, str]]  # (method, sent, answer), oldest first
    more_requests: int
    text: Text | None  # the text sent, or to be sent
    text_note: str  # where the text is, when it is not here
    result: Text | None
    other_conversation: Conversation | None  # mail: the other party
    direction: str  # "in", "out" or ""
    wait: ShownWait | None = None  # why it waits (``waits.story_waits_add``)


# --- blocks and messages --------------------------------------------------------------------

OUTCOMES = {
    # instruction status -> (words, state); a pending one is told by its task's status below.
    Instruction.Status.SUCCEEDED: ("succeeded: its tool ran", "ok"),
    Instruction.Status.FAILED: ("failed", "failed"),
    Instruction.Status.REJECTED: ("rejected at ingest: it never ran", "rejected"),
    Instruction.Status.AWAITING_APPROVAL: ("held for approval", "held"),
    Instruction.Status.CANCELLED: ("cancelled by an operator", "cancelled"),
}
PENDING_OUTCOMES = {
    TaskStatus.PENDING: "queued",
    TaskStatus.LEASED: "claimed, about to run",
    TaskStatus.RUNNING: "running",
    TaskStatus.RETRY_WAIT: "waiting to retry",
}


def _block(instruction: Instruction, networks: dict[BlockScope, bool], client_pk: int | None) -> Block:
    tasks = list(instruction.tasks.all())
    task = tasks[-1] if tasks else None
    words, state = OUTCOMES.get(instruction.status, ("queued", "open"))
    if instruction.status == Instruction.Status.PENDING and task is not None:
        words = PENDING_OUTCOMES.get(task.status, task.status)
    if task is not None and task.outcome == Outcome.REJECTED:
        # Failed by SPEC §2.2's states, but a decision, not a fault.
        words, state = "rejected by an operator: it never ran", "rejected"
    is_held = task is not None and task.status == TaskStatus.BLOCKED
    error = instruction.error or (
        task.last_error if task is not None and task.status == TaskStatus.FAILED else ""
    )
    return Block(
        instruction=instruction,
        task=task,
        outcome=words,
        state=state,
        params=json_text(instruction.params)
        if instruction.params is not None
        else None,
        result=Text.of(readable_json_text(task.result_json))
        if task is not None and task.result_json
        else None,
        error=Text.of(error) if error else None,
        call=held_call(task.payload, allow_network=networks.get(
            (instruction.tool, instruction.target, client_pk, task.conversation_id), False))
        if is_held else None,
        started=ms_moment(task.started_at) if task is not None else None,
        finished=ms_moment(task.finished_at) if task is not None else None,
    )


def ms_moment(ms: int | None) -> dt.datetime | None:
    return None if ms is None else local_moment(ms * 1000)


def held_networks(messages: Iterable[Message]) -> dict[BlockScope, bool]:
    """Whether the policy lets each held block's command use the network (``networks_allowed``). One query
    when a held block's tool has its network decided by a policy, none otherwise."""
    return networks_allowed(blocks=[
        (instruction.tool, instruction.target, message.client_id, message.conversation_id)
        for message in messages for instruction in message.shown_instructions
        if instruction.status == Instruction.Status.AWAITING_APPROVAL
    ])


def message_view(message: Message, networks: dict[BlockScope, bool] | None = None) -> MessageView:
    blocks = [_block(instruction, networks or {}, message.client_id) for instruction in message.shown_instructions]
    more_blocks = max(0, (message.block_count or 0) - len(blocks))
    by_index = {block.instruction.block_index: block for block in blocks}
    text = message.text
    if not blocks or len(text) > MARK_BLOCKS_UP_TO_CHARS:
        return MessageView(
            message, [Segment(Text.of(text))], blocks, blocks, is_marked=False, more_blocks=more_blocks
        )
    lines, spans = block_spans(text)
    segments: list[Segment] = []
    budget, at = TEXT_CHARS, 0  # ``at``: lines used so far

    def add(chunk: list[str], block: Block | None) -> None:
        nonlocal budget
        if not chunk or budget <= 0:
            return
        piece = "\n".join(chunk)
        segments.append(Segment(Text.of(piece, limit=budget), block))
        budget -= len(piece)

    placed = set()
    for span in spans:
        add(lines[at : span.first - 1], None)
        block = by_index.get(span.index)
        if budget > 0 and block is not None:
            placed.add(span.index)
        add(lines[span.first - 1 : span.last], block)
        at = span.last
    add(lines[at:], None)
    unplaced = [
        block for block in blocks if block.instruction.block_index not in placed
    ]
    return MessageView(message, segments, blocks, unplaced, is_marked=True, more_blocks=more_blocks)


# --- tasks ----------------------------------------------------------------------------------


def _requests_by_task(tasks: list[AutomationTask]) -> dict[str, list[dict]]:
    """Each task's delivery requests with their answers, oldest first: one query."""
    requests: dict[str, list[dict]] = {}
    for row in (
        DeliveryRequest.objects.filter(task__in=tasks)
        .order_by("sent_at", "pk")
        .values(
            "task_id",
            "method",
            "sent_at",
            "answered_at",
            "delivered",
            "result__ok",
            "result__status",
            "result__error",
            "result__error_code",
        )
    ):
        requests.setdefault(row["task_id"], []).append(row)
    return requests


def _delivered_texts(results: dict[str, Any]) -> dict[int, str]:
    """The text of each message a task's result says it delivered: one query."""
    delivered_ids = [
        r["message_id"]
        for r in results.values()
        if isinstance(r, dict) and isinstance(r.get("message_id"), int)
    ]
    return {m.pk: m.text for m in Message.objects.filter(pk__in=delivered_ids).only("text")}


def _other_conversations(
    tasks: list[AutomationTask], headings: dict[str, StoryHeading]
) -> dict[int, Conversation]:
    """The other conversations the headings name, but a task's own (already read with it): one query."""
    return Conversation.objects.in_bulk(
        {
            heading.other_conversation_id
            for task in tasks
            if (heading := headings[task.pk]).other_conversation_id not in (None, task.conversation_id)
        }
    )


def _carried_text(task: AutomationTask, result: Any, delivered: dict[int, str]) -> tuple[Text | None, str]:
    """The text a task carried (what was delivered, else its payload's) and a note when there is none yet."""
    message_id = result.get("message_id") if isinstance(result, dict) else None
    if message_id in delivered:
        return Text.of(delivered[message_id]), ""
    if isinstance(task.payload.get("text"), str):
        return Text.of(task.payload["text"]), ""
    return None, "rendered from the message's blocks when it goes out"


def task_views(
    tasks: list[AutomationTask], conversation: Conversation
) -> dict[str, TaskView]:
    """Each task with its delivery requests, the text it carried and the other party of a mail: three queries."""
    requests = _requests_by_task(tasks)
    results = {task.pk: _json_or_none(task.result_json) for task in tasks}
    delivered = _delivered_texts(results)
    headings = {task.pk: _heading(task, conversation) for task in tasks}
    others = _other_conversations(tasks, headings)

    views = {}
    for task in tasks:
        result = results[task.pk]
        mine = requests.get(task.pk, [])
        text, note = _carried_text(task, result, delivered)
        heading = headings[task.pk]
        other = None
        if heading.other_conversation_id is not None:
            other = (
                task.conversation
                if heading.other_conversation_id == task.conversation_id
                else others.get(heading.other_conversation_id)
            )
        views[task.pk] = TaskView(
            task=task,
            heading=displayable_text(heading.text),
            requests=[
                (row["method"], ms_moment(row["sent_at"]), delivery_answer(row))
                for row in mine[-SHOWN_REQUESTS:]
            ],
            more_requests=max(0, len(mine) - SHOWN_REQUESTS),
            text=text,
            text_note=note,
            result=Text.of(readable_json(result, sort_keys=True))
            if result is not None
            else None,
            other_conversation=other,
            direction=heading.direction if other is not None else "",
        )
    return views


def _heading(task: AutomationTask, conversation: Conversation) -> StoryHeading:
    """The task's heading as its kind writes it (``KindDisplay.heading``), or the kind's noun."""
    display = kinds.display(task.kind)
    if display.heading is not None:
        return display.heading(task, conversation.pk)
    return StoryHeading(kinds.noun(task.kind))


def _json_or_none(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


