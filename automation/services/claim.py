"""The one claim path (STYLE rule 2, SPEC §4.1) and the reclaim of expired leases (§4.4)."""

from __future__ import annotations

import logging
from collections.abc import Collection

from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, OuterRef, Q

from automation.kinds import kinds
from automation.models import (
    CLAIMABLE_STATUSES,
    LEASE_HOLDING_STATUSES,
    OPEN_STATUSES,
    AutomationTask,
    TaskStatus,
)
from automation.retry import RetryPolicy
from automation.selectors import dispatcher_is_paused
from automation.services.transitions import (
    TransitionError,
    task_lease,
    task_reclaim_interrupted,
    task_reclaim_unstarted,
)

logger = logging.getLogger(__name__)

# Candidates read per free slot: some share a target or lane with a better one.
CANDIDATES_PER_SLOT = 4

def _target_present(now: int, runnable_kinds: Collection[str]) -> Q:
    """Outbound tasks whose target can take them now, as their kinds' ``targets`` say."""
    present = Q(pk__in=[])
    by_targets: dict[int, tuple[object, list[str]]] = {}
    for name in runnable_kinds:
        if (targets := kinds.get(name).targets) is not None:
            by_targets.setdefault(id(targets), (targets, []))[1].append(name)
    for targets, names in by_targets.values():
        present |= Q(kind__in=names, target_client_id__in=targets.present(now=now))
    return present


def _claimable(now: int, runnable_kinds: Collection[str]):
    """Due tasks that may run now, best first.

    A task is held back while its conversation is paused, while an earlier
    task of its conversation lane is unfinished (instructions one at a time in
    arrival order; a blocked instruction or a delivery waiting to retry holds
    back the rest), and, when it is outbound, while another task is in flight
    to its target or its target client is not connected.
    """
    earlier_in_lane = AutomationTask.objects.filter(
        conversation_id=OuterRef("conversation_id"),
        lane=OuterRef("lane"),
        sequence__lt=OuterRef("sequence"),
        status__in=OPEN_STATUSES,
    )
    target_busy = AutomationTask.objects.filter(
        target_client_id=OuterRef("target_client_id"),
        target_platform=OuterRef("target_platform"),
        status__in=LEASE_HOLDING_STATUSES,
    )
    return (
        AutomationTask.objects.filter(
            status__in=CLAIMABLE_STATUSES, execute_after__lte=now, kind__in=list(runnable_kinds)
        )
        .filter(Q(conversation__isnull=True) | Q(conversation__paused=False))
        .filter(Q(lane__isnull=True) | Q(conversation__isnull=True) | ~Exists(earlier_in_lane))
        .filter(Q(target_client_id__isnull=True) | (~Exists(target_busy) & _target_present(now, runnable_kinds)))
        .order_by("-priority", "execute_after", "sequence")
    )


def tasks_claim(*, lease_owner: str, now: int, limit: int, lease_ms: int) -> list[AutomationTask]:
    """Lease up to ``limit`` due tasks for ``lease_owner``, best first; return them.

    One query picks the best candidates; then each is leased in its own short
    transaction that re-checks it is still claimable and locks it
    (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so concurrent dispatchers take
    different rows; on SQLite the IMMEDIATE transaction holds the write lock)
    before a conditional update. The partial unique indexes over in-flight
    tasks refuse a second task for one target or one conversation lane: a
    dispatcher that loses such a race waits only for the winner's one-row
    transaction, and skips. Leasing one task per transaction keeps two
    dispatchers from ever waiting on each other in a cycle.
    """
    if limit <= 0 or dispatcher_is_paused():
        return []
    runnable = kinds.runnable()
    candidates = _claimable(now, runnable).values_list(
        "task_id", "target_client_id", "target_platform", "conversation_id", "lane"
    )[: limit * CANDIDATES_PER_SLOT]
    claimed: list[AutomationTask] = []
    taken: set[tuple] = set()
    for task_id, client_id, platform, conversation_id, lane in candidates:
        if len(claimed) == limit:
            break
        # At most one task per target and per lane can be in flight: skip the
        # rest without a round trip.
        keys = {("target", client_id, platform)} if client_id else set()
        if conversation_id and lane:
            keys.add(("lane", conversation_id, lane))
        if keys & taken:
            continue
        try:
            with transaction.atomic():
                still_claimable = _claimable(now, runnable).filter(pk=task_id)
                if connection.features.has_select_for_update_skip_locked:
                    still_claimable = still_claimable.select_for_update(skip_locked=True, of=("self",))
                if not still_claimable.values_list("pk", flat=True).first():
                    continue
                claimed.append(
                    task_lease(task_id, lease_owner=lease_owner, lease_until=now + lease_ms, now=now)
                )
                taken |= keys
        except (IntegrityError, TransitionError) as exc:
            # Another dispatcher took this task, its target or its lane first.
            logger.debug("claim lost a race for task %s: %s", task_id, exc)
    return claimed


def tasks_reclaim_expired(
    *, actor: str, now: int, retry: RetryPolicy, limit: int = 100
) -> list[AutomationTask]:
    """Take back tasks whose lease expired (SPEC §4.4); return them in their new state.

    A leased task that never started goes back to pending. A running task
    whose worker died used an attempt: it waits to be retried when its kind or
    tool is idempotent and ``retry`` allows another run, and fails as
    interrupted otherwise. Each reclaim and its kind's follow-up commit together.
    """
    expired = list(
        AutomationTask.objects.filter(status__in=LEASE_HOLDING_STATUSES, lease_until__lt=now)
        .order_by("lease_until")[:limit]
    )
    reclaimed = []
    for task in expired:
        try:
            if task.status == TaskStatus.LEASED:
                reclaimed.append(task_reclaim_unstarted(task.pk, actor=actor, now=now))
                continue
            delay = None
            if kinds.get(task.kind).is_idempotent(task):
                delay = retry.next_delay(attempt_count=task.attempt_count, max_attempts=task.max_attempts)
            with transaction.atomic():
                task = task_reclaim_interrupted(
                    task.pk, actor=actor, now=now,
                    retry_at=now + delay.total_ms if delay else None,
                    backoff_ms=delay.backoff_ms if delay else None,
                    jitter_ms=delay.jitter_ms if delay else None,
                )
                kinds.follow_up(task, actor=actor)
            reclaimed.append(task)
        except TransitionError as exc:
            # Its worker renewed the lease, or another dispatcher reclaimed it.
            logger.debug("reclaim skipped task %s: %s", task.pk, exc)
    return reclaimed
