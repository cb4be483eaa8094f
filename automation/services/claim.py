"""The one claim path (STYLE rule 2, SPEC §4.1) and the reclaim of expired leases (§4.4)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from django.db import IntegrityError, connection
from django.db.models import QuerySet

from automation.claim_rules import claimable as claimable_now
from automation.kinds import kinds
from automation.models import LEASE_HOLDING_STATUSES, AutomationTask, TaskStatus
from automation.retry import RetryPolicy
from automation.services.leasing import leasable, tasks_lease
from automation.services.steps import transition_and_follow_up
from automation.services.transitions import (
    TransitionError,
    task_reclaim_interrupted,
    task_reclaim_unstarted,
)
from core.compiled import CompiledOnce
from core.logfmt import log_event

logger = logging.getLogger(__name__)

# Candidates read per free slot: some share a target or lane with a better one.
CANDIDATES_PER_SLOT = 4


def tasks_claim(
    *, lease_owner: str, now: int, limit: int, lease_ms: int,
    among: Collection[str] | None = None, detail: dict | None = None, start_at_once: bool = False,
    outbound_jitter: bool = True,
) -> list[AutomationTask]:
    """Lease up to ``limit`` due tasks for ``lease_owner``, best first; return them.

    ``among``: only tasks of these ids (a dispatcher's continuation: what a
    task it just ran created); ``detail`` goes on their lease events. With
    ``start_at_once`` (the dispatcher's claim), the tasks that wait for
    nothing before they run are started in the same statement and returned
    running (``tasks_lease``): those of kinds that are not outbound, and
    outbound ones too when there is no ``outbound_jitter`` to wait (this
    statement itself checked that their client is connected).

    One query reads the best candidates (compiled once, ``core/compiled.py``:
    an empty tick costs that statement and no ORM work); at most one per target and per
    conversation lane is kept (only one of each can be in flight); then one
    conditional update (``tasks_lease``) leases every candidate that is still
    claimable, skipping rows another dispatcher holds locked. The partial
    unique indexes over in-flight tasks refuse a second task for one target
    or one lane: when another dispatcher won such a race meanwhile, the
    batch is refused whole and the candidates are leased one per
    transaction, each loser skipped.
    """
    if limit <= 0:
        return []
    runnable = kinds.runnable()
    shape = (tuple((kind, kinds.get(kind).targets) for kind in runnable), limit * CANDIDATES_PER_SLOT)
    candidates = _CANDIDATES.rows(shape, now=now, ids=None if among is None else list(among))
    chosen = _one_per_target_and_lane(candidates, limit)
    if not chosen:
        return []
    lease = functools.partial(
        tasks_lease, still_claimable=functools.partial(_still_claimable_ids, shape[0]),
        lease_owner=lease_owner, lease_until=now + lease_ms, now=now,
        detail=detail,
        start_kinds=[
            kind for kind in runnable if not (outbound_jitter and kinds.get(kind).is_outbound)
        ] if start_at_once else (),
    )
    leased = _lease_all_or_each(lease, chosen)
    order = {task_id: n for n, task_id in enumerate(chosen)}
    return sorted(leased, key=lambda task: order[task.pk])


def _candidates(shape: tuple, now: int, among: list[str] | None) -> QuerySet[AutomationTask]:
    """The claim's read: the best claimable tasks of the shape's kinds (of ``among`` when given), as many as it says."""
    kinds_and_targets, count = shape
    found = AutomationTask.objects.filter(claimable_now(now, [kind for kind, _ in kinds_and_targets]))
    if among is not None:
        found = found.filter(pk__in=among)
    return (
        found
        .order_by("-priority", "execute_after", "sequence")
        .values_list("task_id", "status", "target_client_id", "target_platform", "conversation_id", "lane")
    )[:count]


# Compiled once per set of kinds, count and number of ids: the ORM built and compiled it at every claim.
_CANDIDATES = CompiledOnce(_candidates)


def _still_claimable(shape: tuple, now: int, ids: list[str]) -> QuerySet[AutomationTask]:
    """The lease's sub-select: which of the tasks read (``ids``, in the statuses the shape lists) may be leased now."""
    statuses, kinds_and_targets = shape
    seen = dict(zip(ids, statuses, strict=True))
    return leasable(seen, now).filter(claimable_now(now, [kind for kind, _ in kinds_and_targets])).values("pk")


_STILL_CLAIMABLE = CompiledOnce(_still_claimable)


def _still_claimable_ids(kinds_and_targets: tuple, seen: Mapping[str, str], now: int) -> tuple[str, list[Any]]:
    """``_still_claimable``'s statement for ``seen``: its tasks ordered by status, so that the shapes are few."""
    ordered = sorted(seen.items(), key=lambda item: item[1])
    return _STILL_CLAIMABLE.statement(
        (tuple(status for _, status in ordered), kinds_and_targets), now=now, ids=[task_id for task_id, _ in ordered],
        using=connection.alias,
    )


def _one_per_target_and_lane(candidates: Iterable[tuple], limit: int) -> dict[str, str]:
    """Up to ``limit`` of the candidates, best first, at most one per target and per conversation lane:
    their ids and the statuses they were read in."""
    chosen: dict[str, str] = {}
    taken: set[tuple] = set()
    for task_id, status, client_id, platform, conversation_id, lane in candidates:
        keys = {("target", client_id, platform)} if client_id else set()
        if conversation_id and lane:
            keys.add(("lane", conversation_id, lane))
        if keys & taken:
            continue
        chosen[task_id] = status
        taken |= keys
        if len(chosen) == limit:
            break
    return chosen


def _lease_all_or_each(
    lease: Callable[[dict[str, str]], list[AutomationTask]], chosen: dict[str, str]
) -> list[AutomationTask]:
    """Lease the chosen tasks in one statement; when another dispatcher won a target or a lane
    meanwhile (the unique indexes refuse the batch), one per transaction, each loser skipped."""
    try:
        return lease(chosen)
    except IntegrityError as exc:
        log_event(logger, "claim_race_lost", level=logging.DEBUG, tasks=len(chosen), error=str(exc),
                  detail="leasing them one at a time")
    leased = []
    for task_id, status in chosen.items():
        try:
            leased += lease({task_id: status})
        except IntegrityError as exc:
            # Another dispatcher took this task's target or lane first.
            log_event(logger, "claim_race_lost", level=logging.DEBUG, task_id=task_id, error=str(exc))
    return leased


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
            task = transition_and_follow_up(
                functools.partial(
                    task_reclaim_interrupted, task.pk, actor=actor, now=now,
                    retry_at=now + delay.total_ms if delay else None,
                    backoff_ms=delay.backoff_ms if delay else None,
                    jitter_ms=delay.jitter_ms if delay else None,
                ),
                actor=actor,
            )
            reclaimed.append(task)
        except TransitionError as exc:
            # Its worker renewed the lease, or another dispatcher reclaimed it.
            log_event(logger, "reclaim_skipped", level=logging.DEBUG, task_id=task.pk, kind=task.kind,
                      error=str(exc))
    return reclaimed
