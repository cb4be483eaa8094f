"""What a conversation waits on now: its open work, the dispatcher, its plugin, its renewal; and why each open
block and task of a story page waits."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count
from django.utils import timezone

from automation.kinds import KindSpec, kinds
from automation.models import OPEN_STATUSES, AutomationTask, TaskStatus
from automation.selectors import dispatcher_is_paused, paused_kinds
from automation.wait_selectors import APPROVAL
from console.helpers import displayable_text
from console.story.entries import MessageView, TaskView, ms_moment
from console.task_waits import waits_of
from conversations.models import Conversation
from ingest.selectors.clients import plugin_clients_connected
from pipelines.renewal import renewal_dedupe_key


def is_block_kind(spec: KindSpec) -> bool:
    """Whether a kind's tasks are a message's blocks (its display says so)."""
    return spec.display.is_block


@dataclass
class Wait:
    """One thing the conversation waits on now; ``level``: "held", "busy", "paused" or "idle"."""

    text: str
    level: str


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
    for kind in sorted(paused_kinds() & {kind for kind, _ in counts}):
        waits.append(Wait(f"{kinds.noun(kind)} tasks ({kind}) are paused (the overview's pause of that kind)",
                          "paused"))
    block_kinds = set(kinds.named(is_block_kind))
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
        .exclude(kind__in=kinds.named(is_block_kind))
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
        at = ms_moment(task.execute_after)
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


# --- why each open block and task of a page waits ------------------------------------------


def story_waits_add(views: Iterable[object]) -> None:
    """Set ``wait`` on each block and task of a page's views that waits (``console.task_waits``): one statement.

    A held block's own approval is not repeated: its call and its approve form are right there.
    """
    holders: list[tuple[object, AutomationTask]] = []
    for view in views:
        if isinstance(view, MessageView):
            holders += [(block, block.task) for block in view.blocks if block.task is not None]
        elif isinstance(view, TaskView):
            holders.append((view, view.task))
    waits = waits_of(task for _, task in holders)
    for holder, task in holders:
        if (wait := waits.get(task.pk)) is not None and wait.code != APPROVAL:
            holder.wait = wait
