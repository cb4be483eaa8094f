"""A conversation's story: what it asked for, what ran, what came back, and what it waits on now.

``conversation_story`` reads one page of it, in time order, from its
sources, each row one entry:

- its messages (an assistant message carries its ```baa blocks, marked where
  they sit in the text, and each block's outcome: its latest task's result or
  error, or why it is held);
- its other tasks (a message's delivery, renewals, mail in) and the mail its
  blocks sent (``mail.deliver`` tasks of other conversations), each with the
  requests that carried it and the text sent; a text Conductor delivered is
  shown with the task that delivered it, not again as a message;
- what operators did to its tasks (approve, reject, cancel, retry: the
  tasks' events, with the operator as actor);
- what operators did to the conversation (pause, resume, renewal, handle: the
  admin log);
- the tool guides given to insert into it, and its moves from one plugin
  client to another of its owner (a re-target).

A page is the ``limit`` entries before (or after) a cursor, by keyset over
(time, source, id): exact across the sources whatever the ties, and a fixed
number of queries whatever the page holds. Rows are first read as keys only,
then in full for the page's entries, so a page never loads more than it shows.
Everything shown was written by a chat page, a plugin or a tool: the template
escapes it, and texts are cut to ``TEXT_CHARS`` and made encodable here.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db.models import Count, Exists, OuterRef, Prefetch, Q, QuerySet, Subquery
from django.db.models.fields.json import KT
from django.utils import timezone

from automation.kinds import KindSpec, StoryHeading, kinds
from automation.models import OPEN_STATUSES, AutomationTask, Outcome, TaskEvent, TaskStatus
from automation.selectors import dispatcher_is_paused
from automation.services.transitions import APPROVE, CANCEL, REJECT, RETRY
from console.approval import HeldCall, held_call
from console.helpers import (
    delivery_answer,
    displayable_text,
    readable_json,
    readable_json_text,
)
from conversations.models import Conversation, ConversationMove, Message
from core.clock import EPOCH
from ingest.blocks import block_spans
from ingest.models import DeliveryRequest, Instruction, ToolGuideServed
from ingest.selectors import plugin_clients_connected
from pipelines.renewal import renewal_dedupe_key

PAGE_ENTRIES = 50
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
# A message's blocks shown with it, the first ones; the rest are counted and
# linked to the instruction list. Ingest keeps at most 33 a message, but
# older rows, a replay or a script may hold more: the page reads no more.
SHOWN_BLOCKS = 50

# The task events an operator causes; the others are the dispatcher's and ingest's.
OPERATOR_ACTIONS = frozenset(edge.action for edge in (APPROVE, REJECT, CANCEL, RETRY))
OPERATOR_VERBS = {
    APPROVE.action: "approved",
    REJECT.action: "rejected",
    CANCEL.action: "cancelled",
    RETRY.action: "retried",
}
MAX_AT_US = (dt.datetime(9999, 1, 1, tzinfo=dt.UTC) - EPOCH) // dt.timedelta(
    microseconds=1
)


def _us(moment: dt.datetime) -> int:
    return (moment - EPOCH) // dt.timedelta(microseconds=1)


def _moment(at_us: int) -> dt.datetime:
    return timezone.localtime(EPOCH + dt.timedelta(microseconds=at_us))


# --- the cursor ---------------------------------------------------------------------------


class Cursor(NamedTuple):
    """An entry's place in the story: its time in epoch microseconds, its source's rank, its row's id."""

    at_us: int
    rank: int
    pk: str

    def __str__(self) -> str:
        return f"{self.at_us}.{self.rank}.{self.pk}"

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """The cursor ``str()`` wrote; ``ValueError`` for anything else."""
        if len(text) > 200:
            raise ValueError("cursor too long")
        at, rank, pk = text.split(".", 2)
        cursor = cls(int(at), int(rank), pk)
        if not (
            0 <= cursor.at_us < MAX_AT_US and 0 <= cursor.rank < len(SOURCES) and pk
        ):
            raise ValueError("cursor out of range")
        SOURCES[cursor.rank].pk_type(
            pk
        )  # raises ValueError for an id of the wrong type
        return cursor


@dataclass(frozen=True)
class Bound:
    """Which page: the entries before ``cursor`` (older), or after it; ``inclusive`` takes the cursor's own entry."""

    cursor: Cursor
    older: bool
    inclusive: bool = False


# --- the sources --------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """Rows of one table that are entries of a conversation's story."""

    kind: str  # names the entry's template
    time_field: str
    is_ms: bool  # epoch milliseconds (tasks, events), else a datetime
    pk_type: Callable[[str], Any]
    rows: Callable[[Conversation], QuerySet]
    # Full rows of the page's entries, with what showing them needs.
    full: Callable[[QuerySet], QuerySet]
    # What the page's rows show beyond themselves, by pk (read for all of them at once); None: the row alone.
    views: Callable[[list[Any], Conversation], dict[Any, Any]] | None = None

    @property
    def rank(self) -> int:
        return SOURCES.index(self)

    def at_us(self, value: Any) -> int:
        return value * 1000 if self.is_ms else _us(value)

    def _time(self, op: str, at_us: int) -> Q:
        """``time <op> at_us``, in the field's own unit."""
        if not self.is_ms:
            return Q(
                **{f"{self.time_field}__{op}": EPOCH + dt.timedelta(microseconds=at_us)}
            )
        floor, ceil = at_us // 1000, -(-at_us // 1000)
        if op == "exact":
            return Q(**{self.time_field: floor}) if at_us % 1000 == 0 else Q(pk__in=[])
        return Q(
            **{
                f"{self.time_field}__{op}": {
                    "lt": ceil,
                    "lte": floor,
                    "gt": floor,
                    "gte": ceil,
                }[op]
            }
        )

    def beyond(self, bound: Bound) -> Q:
        """The rows on the far side of ``bound``'s cursor, in the order (time, rank, id)."""
        cursor = bound.cursor
        strict, loose = ("lt", "lte") if bound.older else ("gt", "gte")
        if self.rank == cursor.rank:
            same = Q(
                **{
                    f"pk__{loose if bound.inclusive else strict}": self.pk_type(
                        cursor.pk
                    )
                }
            )
            return self._time(strict, cursor.at_us) | (
                self._time("exact", cursor.at_us) & same
            )
        # At the cursor's very time, a lower rank comes before it and a higher one after it.
        comes_on_this_side = (self.rank < cursor.rank) == bound.older
        return self._time(loose if comes_on_this_side else strict, cursor.at_us)

    def keys(
        self, conversation: Conversation, bound: Bound | None, limit: int
    ) -> list[tuple[int, Any]]:
        """(time in µs, id) of the ``limit`` rows nearest ``bound``, oldest first."""
        rows = self.rows(conversation)
        if bound is not None:
            rows = rows.filter(self.beyond(bound))
        newest_first = bound is None or bound.older
        order = (
            [f"-{self.time_field}", "-pk"] if newest_first else [self.time_field, "pk"]
        )
        keys = [
            (self.at_us(at), pk)
            for at, pk in rows.order_by(*order).values_list(self.time_field, "pk")[
                :limit
            ]
        ]
        return keys[::-1] if newest_first else keys


def _messages(conversation: Conversation) -> QuerySet:
    # A text Conductor delivered belongs to the task that delivered it, while that task exists.
    return (
        Message.objects.filter(conversation=conversation)
        .annotate(delivery_key=KT("raw_frame__delivery_key"))
        .exclude(
            Q(source=Message.Source.CONDUCTOR)
            & Exists(AutomationTask.objects.filter(pk=OuterRef("delivery_key")))
        )
    )


def _full_messages(rows: QuerySet) -> QuerySet:
    # The first SHOWN_BLOCKS of each message (a sliced prefetch: one query with a
    # window function), and how many it has in all.
    blocks = Instruction.objects.order_by("block_index").prefetch_related(
        Prefetch("tasks", queryset=AutomationTask.objects.order_by("sequence"))
    )[:SHOWN_BLOCKS]
    block_count = (
        Instruction.objects.filter(message=OuterRef("pk"))
        .order_by()
        .values("message")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return (
        rows.defer("raw_frame")
        .select_related("client")
        .annotate(block_count=Subquery(block_count))
        .prefetch_related(Prefetch("instructions", queryset=blocks, to_attr="shown_instructions"))
    )


def _is_block(spec: KindSpec) -> bool:
    return spec.display.is_block


def _is_shown_to_sender(spec: KindSpec) -> bool:
    return spec.display.is_shown_to_sender


def _tasks(conversation: Conversation) -> QuerySet:
    # Its own tasks but the blocks' (those are shown with their message), and those its blocks sent elsewhere (mail).
    return AutomationTask.objects.filter(
        (Q(conversation=conversation) & ~Q(kind__in=kinds.named(_is_block)))
        | (
            Q(kind__in=kinds.named(_is_shown_to_sender), message__conversation=conversation)
            & ~Q(conversation=conversation)
        )
    )


def _full_tasks(rows: QuerySet) -> QuerySet:
    return rows.select_related("conversation")


def _operator_events(conversation: Conversation) -> QuerySet:
    return TaskEvent.objects.filter(action__in=OPERATOR_ACTIONS).filter(
        Q(task__conversation=conversation)
        | Q(task__kind__in=kinds.named(_is_shown_to_sender), task__message__conversation=conversation)
    )


def _full_events(rows: QuerySet) -> QuerySet:
    return rows.select_related("task", "task__instruction").only(
        "action",
        "status_from",
        "status_to",
        "actor",
        "at",
        "error",
        "task__kind",
        "task__message_id",
        "task__instruction_id",
        "task__instruction__block_index",
        "task__instruction__tool",
        "task__instruction__target",
    )


def _admin_log(conversation: Conversation) -> QuerySet:
    return LogEntry.objects.filter(
        content_type=ContentType.objects.get_for_model(Conversation),
        object_id=str(conversation.pk),
    )


def _full_log(rows: QuerySet) -> QuerySet:
    return rows.select_related("user")


def _guides(conversation: Conversation) -> QuerySet:
    return ToolGuideServed.objects.filter(conversation=conversation)


def _full_guides(rows: QuerySet) -> QuerySet:
    return rows.select_related("client")


def _moves(conversation: Conversation) -> QuerySet:
    return ConversationMove.objects.filter(conversation=conversation)


def _full_moves(rows: QuerySet) -> QuerySet:
    return rows.select_related("from_client", "to_client")


# New sources go at the end: a source's rank is part of the cursors in links already given out.
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


@dataclass
class Entry:
    cursor: Cursor
    at: dt.datetime
    kind: str
    row: Any
    view: Any = None

    @property
    def anchor(self) -> str:
        return f"{self.kind}-{self.row.pk}"

    @property
    def template(self) -> str:
        return f"admin/conversations/conversation/story/{self.kind}.html"


@dataclass
class Wait:
    """One thing the conversation waits on now; ``level``: "held", "busy", "paused" or "idle"."""

    text: str
    level: str


@dataclass
class Story:
    conversation: Conversation
    entries: list[Entry]
    waits: list[Wait]
    earlier: (
        Cursor | None
    )  # the cursor of the page before this one, when there are older entries
    later: Cursor | None  # the cursor of the page after, when there are newer ones
    is_latest: bool
    held: int = 0  # blocks held for approval on this page


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


def _block(instruction: Instruction) -> Block:
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
        call=held_call(task.payload) if is_held else None,
        started=_ms_moment(task.started_at) if task is not None else None,
        finished=_ms_moment(task.finished_at) if task is not None else None,
    )


def _ms_moment(ms: int | None) -> dt.datetime | None:
    return None if ms is None else _moment(ms * 1000)


def _message_view(message: Message) -> MessageView:
    blocks = [_block(instruction) for instruction in message.shown_instructions]
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


def _task_views(
    tasks: list[AutomationTask], conversation: Conversation
) -> dict[str, TaskView]:
    """Each task with its delivery requests, the text it carried and the other party of a mail: three queries."""
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
    results = {task.pk: _json_or_none(task.result_json) for task in tasks}
    delivered_ids = [
        r["message_id"]
        for r in results.values()
        if isinstance(r, dict) and isinstance(r.get("message_id"), int)
    ]
    delivered = {
        m.pk: m.text for m in Message.objects.filter(pk__in=delivered_ids).only("text")
    }
    headings = {task.pk: _heading(task, conversation) for task in tasks}
    # The other conversations a heading names, but a task's own (already read with it).
    others = Conversation.objects.in_bulk(
        {
            heading.other_conversation_id
            for task in tasks
            if (heading := headings[task.pk]).other_conversation_id not in (None, task.conversation_id)
        }
    )

    views = {}
    for task in tasks:
        payload = task.payload
        result = results[task.pk]
        message_id = result.get("message_id") if isinstance(result, dict) else None
        mine = requests.get(task.pk, [])
        text, note = None, ""
        if message_id in delivered:
            text = Text.of(delivered[message_id])
        elif isinstance(payload.get("text"), str):
            text = Text.of(payload["text"])
        else:
            note = "rendered from the message's blocks when it goes out"
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
                (row["method"], _ms_moment(row["sent_at"]), delivery_answer(row))
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


# --- what it waits on now -----------------------------------------------------------------


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def conversation_waits(
    conversation: Conversation, *, now: dt.datetime | None = None
) -> list[Wait]:
    """What the conversation waits on now, most pressing first; "idle" when nothing is open. A fixed few queries."""
    now = now or timezone.now()
    waits: list[Wait] = []
    if conversation.paused:
        waits.append(
            Wait(
                "paused: its tasks are not claimed until an operator resumes it",
                "paused",
            )
        )
    if dispatcher_is_paused():
        waits.append(
            Wait(
                "the dispatcher is paused for every conversation (the overview's switch)",
                "paused",
            )
        )
    counts: dict[tuple[str, str], int] = {
        (kind, status): n
        for kind, status, n in AutomationTask.objects.filter(
            conversation=conversation, status__in=OPEN_STATUSES
        )
        .values_list("kind", "status")
        .annotate(n=Count("pk"))
        .order_by()
    }
    block_kinds = set(kinds.named(_is_block))
    blocks: dict[str, dict[str, int]] = {}  # noun -> status -> count
    for (kind, status), n in counts.items():
        if kind in block_kinds:
            by_status = blocks.setdefault(kinds.noun(kind), {})
            by_status[status] = by_status.get(status, 0) + n
    for noun, by_status in sorted(blocks.items()):
        if n := by_status.get(TaskStatus.BLOCKED):
            waits.append(Wait(f"{_plural(n, noun)} awaiting approval", "held"))
        if n := by_status.get(TaskStatus.LEASED, 0) + by_status.get(TaskStatus.RUNNING, 0):
            waits.append(Wait(f"{_plural(n, noun)} running", "busy"))
        if n := by_status.get(TaskStatus.RETRY_WAIT):
            waits.append(Wait(f"{_plural(n, noun)} waiting to retry", "busy"))
        if n := by_status.get(TaskStatus.PENDING):
            waits.append(Wait(f"{_plural(n, noun)} queued", "busy"))
    # Every other open task waits in the conversation's outbound lane, or behind it.
    outbound = sum(n for (kind, _), n in counts.items() if kind not in block_kinds)
    if outbound:
        waits.append(_outbound_wait(conversation, outbound))
    if not waits:
        waits.append(_idle_wait(conversation, now))
    return waits


def _outbound_wait(conversation: Conversation, open_count: int) -> Wait:
    """The first open outbound task, the one the conversation's lane waits on (SPEC §4)."""
    task = (
        AutomationTask.objects.filter(
            conversation=conversation, status__in=OPEN_STATUSES
        )
        .exclude(kind__in=kinds.named(_is_block))
        .order_by("sequence")
        .only(
            "kind",
            "status",
            "attempt_count",
            "max_attempts",
            "execute_after",
            "last_error",
            "target_client_id",
        )
        .first()
    )
    what = kinds.noun(task.kind) if task is not None else "delivery"
    more = f" ({open_count - 1} more queued after it)" if open_count > 1 else ""
    if task is None:
        return Wait(f"{what} queued{more}", "busy")
    if task.status in (TaskStatus.LEASED, TaskStatus.RUNNING):
        return Wait(
            f"{what} in flight, attempt {task.attempt_count} of {task.max_attempts}{more}",
            "busy",
        )
    if task.status == TaskStatus.RETRY_WAIT:
        at = _ms_moment(task.execute_after)
        error = (
            f"; last error: {displayable_text(task.last_error)[:200]}"
            if task.last_error
            else ""
        )
        return Wait(
            f"{what} waiting to retry after attempt {task.attempt_count} of {task.max_attempts}, "
            f"due {at:%Y-%m-%d %H:%M:%S %Z}{error}{more}",
            "busy",
        )
    if (
        task.target_client_id
        and not plugin_clients_connected()
        .filter(client_id=task.target_client_id)
        .exists()
    ):
        return Wait(
            f"{what} queued, waiting for plugin client {task.target_client_id} to connect{more}",
            "busy",
        )
    return Wait(f"{what} queued{more}", "busy")


def _idle_wait(conversation: Conversation, now: dt.datetime) -> Wait:
    if not conversation.renewal_enabled:
        return Wait("idle; renewal is off", "idle")
    if conversation.last_activity_at is None:
        return Wait("idle; renewal is on, after its first activity", "idle")
    if AutomationTask.objects.filter(
        dedupe_key=renewal_dedupe_key(conversation)
    ).exists():
        return Wait(
            "idle; renewed since its last activity, so the next renewal follows new activity",
            "idle",
        )
    due = timezone.localtime(
        conversation.last_activity_at
        + dt.timedelta(seconds=conversation.renewal_idle_seconds)
    )
    when = (
        "now (the projector runs every minute)"
        if due <= now
        else f"at {due:%Y-%m-%d %H:%M:%S %Z}"
    )
    return Wait(f"idle, renewal due {when}", "idle")


# --- the page -------------------------------------------------------------------------------


def conversation_story(
    *, conversation: Conversation, bound: Bound | None = None, limit: int = PAGE_ENTRIES
) -> Story:
    """One page of the conversation's story, oldest entry first: the ``limit`` newest entries, or those nearest ``bound``.

    The number of queries is the same whatever the page holds.
    """
    newest_first = bound is None or bound.older
    keys: list[
        tuple[int, int, Any]
    ] = []  # (time µs, rank, id), each source's oldest first
    for source in SOURCES:
        keys.extend(
            (at, source.rank, pk)
            for at, pk in source.keys(conversation, bound, limit + 1)
        )
    # Stable: rows of one source at one time keep the database's order of their ids.
    keys.sort(key=lambda key: key[:2])
    has_more = len(keys) > limit
    page = keys[-limit:] if newest_first else keys[:limit]

    rows: dict[tuple[int, Any], Any] = {}
    for source in SOURCES:
        pks = [pk for _, rank, pk in page if rank == source.rank]
        if pks:
            rows.update(
                ((source.rank, row.pk), row)
                for row in source.full(source.rows(conversation).filter(pk__in=pks))
            )
    entries = [
        Entry(
            Cursor(at, rank, str(pk)), _moment(at), SOURCES[rank].kind, rows[(rank, pk)]
        )
        for at, rank, pk in page
        if (rank, pk) in rows  # a row pruned between the two reads is left out
    ]
    _add_views(entries, conversation)
    if newest_first:
        earlier = entries[0].cursor if has_more and entries else None
        later = entries[-1].cursor if bound is not None and entries else None
    else:
        earlier = entries[0].cursor if entries else None
        later = entries[-1].cursor if has_more and entries else None
    return Story(
        conversation=conversation,
        entries=entries,
        waits=conversation_waits(conversation),
        earlier=earlier,
        later=later,
        is_latest=later is None,
        held=sum(
            1
            for entry in entries
            if isinstance(entry.view, MessageView)
            for block in entry.view.blocks
            if block.call is not None
        ),
    )


def _add_views(entries: Iterable[Entry], conversation: Conversation) -> None:
    entries = list(entries)
    for source in SOURCES:
        mine = [entry for entry in entries if entry.cursor.rank == source.rank]
        if source.views is None or not mine:
            continue
        views = source.views([entry.row for entry in mine], conversation)
        for entry in mine:
            entry.view = views[entry.row.pk]


def _message_views(messages: list[Message], conversation: Conversation) -> dict[int, MessageView]:
    return {message.pk: _message_view(message) for message in messages}


def _operator_views(events: list[TaskEvent], conversation: Conversation) -> dict[int, str]:
    return {event.pk: OPERATOR_VERBS.get(event.action, event.action) for event in events}


def story_bound(
    *,
    before: str | None = None,
    after: str | None = None,
    message: Message | None = None,
    task: AutomationTask | None = None,
) -> Bound | None:
    """The page a request asks for: before or after a cursor, or starting at a message or a task.

    ``ValueError`` for a cursor that ``Cursor.parse`` refuses.
    """
    if before:
        return Bound(Cursor.parse(before), older=True)
    if after:
        return Bound(Cursor.parse(after), older=False)
    if (
        task is not None
        and kinds.display(task.kind).is_block
        and task.message is not None
    ):
        message = task.message
    if message is not None:
        return Bound(
            Cursor(
                _us(message.received_at), SOURCES.index(MESSAGE_SOURCE), str(message.pk)
            ),
            older=False,
            inclusive=True,
        )
    if task is not None:
        return Bound(
            Cursor(task.created_at * 1000, SOURCES.index(TASK_SOURCE), task.pk),
            older=False,
            inclusive=True,
        )
    return None


SOURCES: list[Source] = [
    Source("message", "received_at", False, int, _messages, _full_messages, _message_views),
    Source("task", "created_at", True, str, _tasks, _full_tasks, _task_views),
    Source("operator", "at", True, int, _operator_events, _full_events, _operator_views),
    Source("log", "action_time", False, int, _admin_log, _full_log),
    Source("guide", "first_served_at", False, int, _guides, _full_guides),
    Source("move", "at", False, int, _moves, _full_moves),
]
MESSAGE_SOURCE, TASK_SOURCE = SOURCES[0], SOURCES[1]
