"""The story's keyset reader: one page of a conversation's entries, from all its sources.

A page is the ``limit`` entries before (or after) a cursor, by keyset over
(time, source, id): exact across the sources whatever the ties, and a fixed
number of queries whatever the page holds. Rows are first read as keys only,
then in full for the page's entries, so a page never loads more than it shows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db.models import Count, Exists, OuterRef, Prefetch, Q, QuerySet, Subquery
from django.db.models.fields.json import KT

from automation.kinds import KindSpec, kinds
from automation.models import AutomationTask, TaskEvent
from automation.services.transitions import APPROVE, CANCEL, REJECT, RETRY
from console.story.entries import MessageView, held_networks, local_moment, message_view, task_views
from console.story.waits import Wait, conversation_waits, is_block_kind, story_waits_add
from conversations.models import Conversation, ConversationMove, Message
from core.clock import EPOCH
from ingest.models import ClientAction, Instruction, ToolGuideServed

PAGE_ENTRIES = 50
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


def _is_shown_to_sender(spec: KindSpec) -> bool:
    return spec.display.is_shown_to_sender


def _tasks(conversation: Conversation) -> QuerySet:
    # Its own tasks but the blocks' (those are shown with their message), and those its blocks sent elsewhere (mail).
    return AutomationTask.objects.filter(
        (Q(conversation=conversation) & ~Q(kind__in=kinds.named(is_block_kind)))
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


def _client_actions(conversation: Conversation) -> QuerySet:
    return ClientAction.objects.filter(conversation=conversation)


def _full_client_actions(rows: QuerySet) -> QuerySet:
    return rows


# New sources go at the end: a source's rank is part of the cursors in links already given out.
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
            Cursor(at, rank, str(pk)), local_moment(at), SOURCES[rank].kind, rows[(rank, pk)]
        )
        for at, rank, pk in page
        if (rank, pk) in rows  # a row pruned between the two reads is left out
    ]
    _add_views(entries, conversation)
    story_waits_add(entry.view for entry in entries)
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
    networks = held_networks(messages)
    return {message.pk: message_view(message, networks) for message in messages}


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
    Source("task", "created_at", True, str, _tasks, _full_tasks, task_views),
    Source("operator", "at", True, int, _operator_events, _full_events, _operator_views),
    Source("log", "action_time", False, int, _admin_log, _full_log),
    Source("guide", "first_served_at", False, int, _guides, _full_guides),
    Source("move", "at", False, int, _moves, _full_moves),
    Source("client_action", "at", False, int, _client_actions, _full_client_actions),
]
MESSAGE_SOURCE, TASK_SOURCE = SOURCES[0], SOURCES[1]
