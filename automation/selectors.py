"""Reads of the automation app."""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import NamedTuple

from django.db.models import Count, F, Q, QuerySet, Value
from django.db.models.functions import Substr

from automation.errors import error_first_line, error_signature, failure_group_key
from automation.models import (
    OPEN_STATUSES,
    AutomationTask,
    DispatcherState,
    DispatcherWorker,
    FinishReason,
    KindPause,
    LeaseLoss,
    Outcome,
    TaskEvent,
    TaskStatus,
    task_outcome,
)
from core.keys import accepted_key_fingerprints


def dispatcher_state() -> DispatcherState:
    """The dispatcher-wide row (the global pause); an unsaved one with the defaults before anything wrote it."""
    return DispatcherState.objects.filter(pk=1).first() or DispatcherState(pk=1)


def dispatcher_workers_live(*, stalled_before: int) -> list[DispatcherWorker]:
    """The dispatcher loops at work (heartbeat at or after ``stalled_before``), by server, oldest first."""
    return list(DispatcherWorker.objects.filter(heartbeat_at__gte=stalled_before).order_by("server", "started_at", "owner"))


def dispatcher_servers_signing_otherwise(*, stalled_before: int) -> list[str]:
    """The servers with a live loop signing with a key this process does not accept (``core.keys``), by name.

    A row with no fingerprint (written before loops told theirs) names no one.
    """
    rows = (
        DispatcherWorker.objects.filter(heartbeat_at__gte=stalled_before)
        .exclude(key_fingerprint="").exclude(key_fingerprint__in=accepted_key_fingerprints())
    )
    return sorted(set(rows.values_list("server", flat=True)))


def dispatcher_server_elder(*, server: str, owner: str, stalled_before: int) -> DispatcherWorker | None:
    """The oldest live loop of ``server`` started before ``owner``'s (ties by owner), or None."""
    mine = DispatcherWorker.objects.filter(owner=owner).values_list("started_at", flat=True).first()
    elders = DispatcherWorker.objects.filter(server=server, heartbeat_at__gte=stalled_before).exclude(owner=owner)
    if mine is not None:
        elders = elders.filter(Q(started_at__lt=mine) | Q(started_at=mine, owner__lt=owner))
    return elders.order_by("started_at", "owner").first()


def dispatcher_server_newer(*, server: str, owner: str, stalled_before: int) -> DispatcherWorker | None:
    """The newest live loop of ``server`` started after ``owner``'s (ties by owner), or None.

    None too when ``owner`` has no row: a loop that has not joined has no place in the order.
    """
    mine = DispatcherWorker.objects.filter(owner=owner).values_list("started_at", flat=True).first()
    if mine is None:
        return None
    return (
        DispatcherWorker.objects.filter(server=server, heartbeat_at__gte=stalled_before)
        .exclude(owner=owner)
        .filter(Q(started_at__gt=mine) | Q(started_at=mine, owner__gt=owner))
        .order_by("-started_at", "-owner")
        .first()
    )


def dispatcher_is_paused() -> bool:
    return DispatcherState.objects.filter(pk=1, is_paused=True).exists()


def dispatcher_worker_newest() -> DispatcherWorker | None:
    """The loop that beat last, stalled or not; None while no loop has a row.

    A loop beats after a tick that went through, at most every half tick
    (``automation.loop``): the newest heartbeat is the system's last tick,
    give or take half a tick. A loop that stops deletes its row; one that
    died leaves it until a live loop prunes it.
    """
    return DispatcherWorker.objects.order_by("-heartbeat_at", "owner").first()


def dispatcher_heartbeat_age_seconds(*, now_ms: int) -> float | None:
    """Seconds since the newest heartbeat of any loop (/healthz's and /metrics' last tick); None without one."""
    last = DispatcherWorker.objects.order_by("-heartbeat_at").values_list("heartbeat_at", flat=True).first()
    return None if last is None else max(0.0, (now_ms - last) / 1000)


def task_counts_by_kind_and_status() -> dict[str, dict[str, int]]:
    """How many tasks there are of each kind in each status: ``{kind: {status: count}}``."""
    counts: dict[str, dict[str, int]] = {}
    rows = AutomationTask.objects.values_list("kind", "status").annotate(n=Count("pk")).order_by("kind", "status")
    for kind, status, n in rows:
        counts.setdefault(kind, {})[status] = n
    return counts


def task_counts_by_kind_status_and_outcome() -> dict[tuple[str, str, str], int]:
    """How many tasks there are of each kind, status and ``Outcome`` ("" while open): one aggregated query."""
    counts: dict[tuple[str, str, str], int] = {}
    rows = AutomationTask.objects.values_list("kind", "status", "finish_reason").annotate(n=Count("pk")).order_by()
    for kind, status, reason, n in rows:
        key = (kind, status, task_outcome(status, reason))
        counts[key] = counts.get(key, 0) + n
    return counts


def paused_kinds() -> set[str]:
    """The kinds the dispatcher does not claim (paused from the overview)."""
    return set(KindPause.objects.values_list("kind", flat=True))


def task_event_counts(*, actions: Collection[str]) -> dict[tuple[str, str, str], int]:
    """How many events of ``actions`` the tasks' timelines hold: ``{(action, kind, status_to): count}``.

    One aggregated query, whatever the number of events. Counts what is
    kept: ``prune`` deletes finished tasks with their events, so a count
    falls when it runs.
    """
    rows = (
        TaskEvent.objects.filter(action__in=list(actions))
        .values_list("action", "task__kind", "status_to")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return {(action, kind, status_to): n for action, kind, status_to, n in rows}


def lease_losses_by_kind() -> dict[str, int]:
    """How many times a worker found its lease gone, per task kind (``LeaseLoss``): never pruned, so a counter."""
    return dict(LeaseLoss.objects.values_list("kind", "count"))


# --- the admin's overview and task pages ----------------------------------------

HOUR_MS = 3_600_000


class HourlyFinishes(NamedTuple):
    """Tasks that finished in one hour: ``start_ms`` is the hour's first millisecond."""

    start_ms: int
    succeeded: int
    failed: int  # faults only
    rejected: int = 0


def task_finishes_by_hour(*, now_ms: int, hours: int = 24) -> list[HourlyFinishes]:
    """Tasks per clock hour of their finish over the last ``hours`` hours, by how they ended, oldest first.

    Counts tasks, as the overview's table of kinds does, and classifies them
    the same way (``task_outcome``): each finished task once, in the hour it
    finished, by its outcome now. A task an operator retried counts again
    only once it finishes again, in that hour. The last bucket is the
    current, unfinished hour. One aggregated query, read through the event
    log's time index: the event that finished each task as it stands.
    """
    end = (now_ms // HOUR_MS + 1) * HOUR_MS
    start = end - hours * HOUR_MS
    rows = (
        TaskEvent.objects.filter(
            at__gte=start, at__lt=end, status_to__in=[TaskStatus.SUCCEEDED, TaskStatus.FAILED],
            task__finished_at=F("at"), task__status=F("status_to"),
        )
        # Integer division on both databases: `at` and the constants are integers.
        .annotate(bucket=(F("at") - Value(start)) / Value(HOUR_MS))
        .values_list("bucket", "task__status", "task__finish_reason")
        .annotate(n=Count("task_id", distinct=True))
        .order_by()
    )
    counts: dict[tuple[int, str], int] = {}
    for bucket, status, reason, n in rows:
        key = (int(bucket), task_outcome(status, reason))
        counts[key] = counts.get(key, 0) + n
    return [
        HourlyFinishes(
            start_ms=start + bucket * HOUR_MS,
            succeeded=counts.get((bucket, Outcome.SUCCEEDED), 0),
            failed=counts.get((bucket, Outcome.FAULT), 0),
            rejected=counts.get((bucket, Outcome.REJECTED), 0),
        )
        for bucket in range(hours)
    ]


def tasks_awaiting_approval(*, limit: int = 10) -> QuerySet[AutomationTask]:
    """The oldest blocked tasks (held instructions), with their instruction and conversation."""
    return (
        AutomationTask.objects.filter(status=TaskStatus.BLOCKED)
        .select_related("instruction", "conversation")
        .order_by("created_at", "pk")[:limit]
    )


def tasks_recently_failed(*, limit: int = 10) -> QuerySet[AutomationTask]:
    """The most recently finished failed tasks that were faults (not rejections), newest first."""
    return (
        faults()
        .select_related("conversation")
        .order_by("-finished_at", "-pk")[:limit]
    )


def faults() -> QuerySet[AutomationTask]:
    """Failed tasks whose failure was a fault, not a decision (``Outcome.FAULT``)."""
    return AutomationTask.objects.filter(status=TaskStatus.FAILED).exclude(finish_reason=FinishReason.REJECTED)


def task_events(*, task_id: str) -> QuerySet[TaskEvent]:
    """A task's timeline, oldest first."""
    return TaskEvent.objects.filter(task_id=task_id).order_by("at", "pk")


# --- durations for /metrics ------------------------------------------------------

# How far back /metrics looks for finished tasks to build its duration histograms,
# and the most tasks it reads for them (newest first), so a scrape stays cheap.
DURATION_WINDOW_MS = HOUR_MS
DURATION_ROW_LIMIT = 20_000


class TaskTimes(NamedTuple):
    """One finished task's times, epoch milliseconds (``message_at``: its source message's arrival)."""

    kind: str
    status: str
    due: int
    started: int | None
    finished: int
    message_at: int | None


def task_times_finished_since(*, since_ms: int, limit: int = DURATION_ROW_LIMIT) -> list[TaskTimes]:
    """The times of tasks finished at or after ``since_ms``, newest first, at most ``limit`` of them.

    One query. ``started`` is the last run's start and ``due`` when it became due,
    so ``started - due`` is that run's wait in the queue.
    """
    rows = (
        AutomationTask.objects.filter(finished_at__gte=since_ms)
        .order_by("-finished_at")
        .values_list("kind", "status", "execute_after", "started_at", "finished_at", "message__received_at")[:limit]
    )
    return [
        TaskTimes(kind, status, due, started, finished,
                  None if received is None else int(received.timestamp() * 1000))
        for kind, status, due, started, finished, received in rows
    ]


# --- failures grouped by cause -----------------------------------------------------

FAILURE_WINDOW_MS = 24 * HOUR_MS
# The most failures read to group them (newest first), so the page stays cheap.
FAILURE_ROW_LIMIT = 10_000


@dataclass
class FailureGroup:
    """Faults of one kind and tool with the same error once ids and numbers are stripped."""

    key: str
    kind: str
    tool: str
    signature: str
    count: int
    first_ms: int
    last_ms: int
    sample_task_id: str
    sample_error: str


_PAYLOAD_TOOL = re.compile(r'"tool":\s*"([^"]*)"')


def _failure_rows(now_ms: int, window_ms: int):
    """(task id, kind, tool, error, finished) of the faults in the window, newest first.

    The tool is the instruction's, or the payload's for a task made without one
    (the payload's head only is read).
    """
    rows = (
        faults().filter(finished_at__gte=now_ms - window_ms)
        .order_by("-finished_at", "-pk")
        .annotate(payload_head=Substr("payload_json", 1, 300))
        .values_list("pk", "kind", "instruction__tool", "payload_head", "last_error", "finished_at")
    )[:FAILURE_ROW_LIMIT]
    for task_id, kind, tool, head, error, finished in rows:
        if not tool and (found := _PAYLOAD_TOOL.search(head or "")):
            tool = found.group(1)
        yield task_id, kind, tool or "", error, finished


def failure_groups(*, now_ms: int, window_ms: int = FAILURE_WINDOW_MS) -> list[FailureGroup]:
    """Faults finished within ``window_ms`` grouped by kind, tool and ``error_signature``, largest first.

    Rejections are decisions, not faults, and are left out. The sample is each group's newest task.
    """
    groups: dict[str, FailureGroup] = {}
    for task_id, kind, tool, error, finished in _failure_rows(now_ms, window_ms):
        signature = error_signature(error)
        key = failure_group_key(kind=kind, tool=tool or "", signature=signature)
        group = groups.get(key)
        if group is None:
            groups[key] = FailureGroup(
                key, kind, tool or "", signature, 1, finished, finished, task_id, error_first_line(error)
            )
        else:
            group.count += 1
            group.first_ms = min(group.first_ms, finished)
    return sorted(groups.values(), key=lambda group: (-group.count, -group.last_ms))


def failure_group_task_ids(*, key: str, now_ms: int, window_ms: int = FAILURE_WINDOW_MS) -> list[str]:
    """The ids of the faults in the group named ``key`` (``failure_groups``' ``key``)."""
    return [
        task_id for task_id, kind, tool, error, _ in _failure_rows(now_ms, window_ms)
        if failure_group_key(kind=kind, tool=tool, signature=error_signature(error)) == key
    ]


# How many dedupe keys one query asks about (SQLite binds at most 999 parameters).
DEDUPE_LOOKUP_BATCH = 500


def existing_dedupe_keys(keys: Collection[str]) -> set[str]:
    """Which of ``keys`` a task already holds, asked in batches."""
    existing: set[str] = set()
    for batch in itertools.batched(keys, DEDUPE_LOOKUP_BATCH):
        existing.update(AutomationTask.objects.filter(dedupe_key__in=batch).values_list("dedupe_key", flat=True))
    return existing


def task_counts_per_conversation(
    *, kind: str, since_ms: int, renewal_enabled: bool = True,
) -> dict[int, tuple[int, int]]:
    """Per conversation: (tasks of ``kind`` created since ``since_ms``, tasks of ``kind`` still open).

    One aggregated query over the conversations whose ``renewal_enabled`` is as
    given; conversations with neither are absent.
    """
    rows = (
        AutomationTask.objects.filter(kind=kind, conversation__renewal_enabled=renewal_enabled)
        .filter(Q(created_at__gte=since_ms) | Q(status__in=OPEN_STATUSES))
        .values("conversation_id")
        .annotate(
            since=Count("pk", filter=Q(created_at__gte=since_ms)),
            open=Count("pk", filter=Q(status__in=OPEN_STATUSES)),
        )
    )
    return {row["conversation_id"]: (row["since"], row["open"]) for row in rows}


def task_times_between(
    *, kind: str, to_conversation_id: int, from_conversation_id: int, since_ms: int, excluding_dedupe_key: str,
    limit: int,
) -> list[int]:
    """When the last ``limit`` tasks of ``kind`` created since ``since_ms`` for one conversation, sent from
    another's message, were created (newest first), leaving out the task with ``excluding_dedupe_key``."""
    return list(
        AutomationTask.objects.filter(
            kind=kind, conversation_id=to_conversation_id, message__conversation_id=from_conversation_id,
            created_at__gt=since_ms,
        )
        .exclude(dedupe_key=excluding_dedupe_key)
        .order_by("-created_at")
        .values_list("created_at", flat=True)[:limit]
    )
