"""Transition services for ``AutomationTask`` (SPEC §2.2).

One function per edge of the state diagram. Each runs in a transaction, checks
the starting state, conditions the move on the lease when the task leaves
``leased`` or ``running`` (only the lease that holds it, by its lease token, a
random value compared for equality, may move it: ``Lease``), writes one
``TaskEvent`` with its actor and one structured log line, and raises a
``TransitionError`` subclass when the move is not allowed. Nothing else in the
code base assigns ``status``.

An edge whose starting state is known (one state, or a status that does not
change) is one conditional ``UPDATE … RETURNING``: the starting state, the
lease and the guards are its ``WHERE``, so no row is read or locked first,
and only a refused update reads the task to say why. On PostgreSQL the same
statement inserts the event (``WITH moved AS (UPDATE …) INSERT …``), so such
an edge is one statement, atomic without a transaction of its own
(``statements.py``: those written by hand). An edge from several
states reads and locks the task first, to record which state it left.
``leasing.tasks_lease`` leases the dispatcher's whole claim in one such statement,
giving each task a lease token of its own, and learns what it leased
from the statement itself (``RETURNING``).
A heartbeat is not a change of state and writes no event. The state machine knows no kind and decides
nothing: what follows a change is the kind's ``follow_up``, which the callers
(the dispatcher, the reclaim, the operator services) run in the same
transaction through ``automation.services.steps.transition_and_follow_up``;
whether to retry is the ``RetryPolicy``'s answer, which the guards here only
assert.

Routing fields (``target_*``) are never touched here; ``task_retarget`` in
``automation.services.tasks`` is the one service that changes them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Q

from automation.changes import tasks_changed_on_commit
from automation.models import (
    LEASE_HOLDING_STATUSES,
    ROUTING_FIELDS,
    AutomationTask,
    FinishReason,
    Lease,
    TaskEvent,
)
# The diagram's edges, guards and errors: callers reach them through this module too.
from automation.services.diagram import (  # noqa: F401
    APPROVAL_HELD,
    APPROVAL_MISSING,
    APPROVE,
    ATTEMPTS_LEFT,
    CANCEL,
    DUE,
    EDGE_ACTIONS,
    FAIL,
    HEARTBEAT,
    INTERRUPTED_ERROR,
    LEASE,
    LEASE_EXPIRED,
    RECLAIM_TO_FAILED,
    RECLAIM_TO_RETRY,
    RECLAIM_UNSTARTED,
    REJECT,
    RELEASE,
    RETRY,
    RETRY_LATER,
    RETRY_TO_BLOCKED,
    START,
    SUCCEED,
    S,
    Edge,
    Guard,
    InvalidTransition,
    LeaseLost,
    TaskNotFound,
    TransitionError,
    edge,
)
from automation.services.statements import update_one, writes_in_with
from core.clock import now_ms
from core.logfmt import log_event

logger = logging.getLogger(__name__)


def _refusal(
    task_id: str, edge: Edge, task: AutomationTask | None, fenced: Lease | None,
    guards: Collection[Guard], now: int,
) -> TransitionError:
    """Why ``edge`` does not apply to ``task`` as it is now."""
    if task is None:
        return TaskNotFound(task_id)
    if fenced is not None and (task.status not in LEASE_HOLDING_STATUSES or task.lease != fenced):
        return LeaseLost(task_id, fenced, task.lease, task.status)
    if task.status not in edge.allowed_from:
        return InvalidTransition(task_id, edge.action, task.status)
    for guard in guards:
        if reason := guard.refusal(task, now):
            return InvalidTransition(task_id, edge.action, task.status, reason)
    return InvalidTransition(task_id, edge.action, task.status, "changed concurrently")


def _transition(
    task_id: str,
    edge: Edge,
    *,
    actor: str,
    now: int | None,
    fenced: Lease | None = None,
    guards: Collection[Guard] = (),
    changes: dict[str, Any] | None = None,
    error: str | None = None,
    jitter_ms: int | None = None,
    backoff_ms: int | None = None,
    detail: dict[str, Any] | None = None,
) -> AutomationTask:
    """Apply one transition; the single place where ``status`` is written after creation.

    ``fenced``: the transition applies only while that lease (its owner
    and its random token, compared for equality) holds the task. ``guards``: what
    else the task must meet. ``changes``: the other field updates (values or
    expressions of the row's own fields).
    """
    now = now_ms() if now is None else now
    values = _values(task_id, edge, changes, error=error, now=now)
    where = Q(pk=task_id, status__in=edge.allowed_from)
    if fenced is not None:
        where &= Q(lease_token=fenced.token, lease_owner=fenced.owner)
    for guard in guards:
        where &= guard.holds(now)

    event = TaskEvent(
        task_id=task_id, action=edge.action, status_from=edge.known_from, actor=actor, at=now,
        jitter_ms=jitter_ms, backoff_ms=backoff_ms, error=error, detail=detail or {},
    ) if edge.recorded else None
    reads_first = edge.known_from is None and edge.to_status is not None
    if not reads_first and writes_in_with(connection):
        # One statement, the update and its event (PostgreSQL): atomic on its own.
        task = update_one(AutomationTask.objects.filter(where), values, event=event)
        if task is None:
            raise _refusal(task_id, edge, AutomationTask.objects.filter(pk=task_id).first(), fenced, guards, now)
        status_from = edge.known_from or task.status
        if task.status != status_from:
            tasks_changed_on_commit([task])
    else:
        task, status_from = _transition_locked(
            task_id, edge, where, values, event, reads_first=reads_first, fenced=fenced, guards=guards, now=now,
        )
    log_transition(task, edge.action, status_from, actor, error=error, jitter_ms=jitter_ms, backoff_ms=backoff_ms)
    return task


def _values(
    task_id: str, edge: Edge, changes: dict[str, Any] | None, *, error: str | None, now: int,
) -> dict[str, Any]:
    """What a transition writes: ``changes``, the edge's status, the time and the error; never the route."""
    values = dict(changes or {})
    if routed := ROUTING_FIELDS & values.keys():
        # A task's recipient is never cleared or changed by a change of state (SPEC §5.1).
        raise ValueError(f"task {task_id}: a transition may not write its route ({', '.join(sorted(routed))})")
    if edge.to_status is not None:
        values["status"] = edge.to_status
    values["updated_at"] = now
    if error is not None:
        values["last_error"] = error
    return values


def _transition_locked(
    task_id: str,
    edge: Edge,
    where: Q,
    values: dict[str, Any],
    event: TaskEvent | None,
    *,
    reads_first: bool,
    fenced: Lease | None,
    guards: Collection[Guard],
    now: int,
) -> tuple[AutomationTask, str]:
    """A transition in a transaction: the row read first where the edge leaves several states, then its update
    and its event; the task and the state it left, or its refusal raised once the block is left."""
    # No savepoint inside a caller's transaction (a step and its follow-up): a refusal
    # writes nothing and is raised after the block, so the caller's transaction goes on
    # as it would after a savepoint's rollback; a database error fails it, as it should.
    refusal: TransitionError | None = None
    with transaction.atomic(savepoint=False):
        status_from = edge.known_from
        task = None
        if reads_first:
            # From one of several states: lock and read which, for the event.
            # (A row lock on PostgreSQL; on SQLite the IMMEDIATE transaction
            # already holds the write lock.)
            found = AutomationTask.objects.select_for_update().filter(pk=task_id).first()
            if found is None or found.status not in edge.allowed_from:
                refusal = _refusal(task_id, edge, found, fenced, guards, now)
            else:
                status_from = found.status
                where &= Q(status=status_from)
        if refusal is None:
            task = update_one(AutomationTask.objects.filter(where), values)
            if task is None:
                found = AutomationTask.objects.filter(pk=task_id).first()
                refusal = _refusal(task_id, edge, found, fenced, guards, now)
        if task is not None:
            status_from = status_from or task.status
            if event is not None:
                event.status_from, event.status_to = status_from, task.status
                event.save(force_insert=True)
            if task.status != status_from:
                tasks_changed_on_commit([task])
    if refusal is not None:
        raise refusal
    return task, status_from


def log_transition(task: AutomationTask, action: str, status_from: str | None, actor: str, **extra: Any) -> None:
    """The log line of a task event: the task, its move, its lease and ``extra`` (None fields left out)."""
    log_event(
        logger,
        action,
        task_id=task.pk,
        kind=task.kind,
        status_from=status_from,
        status_to=task.status,
        actor=actor,
        lease_owner=task.lease_owner,
        lease_token=f"{task.lease_token:016x}" if task.lease_token is not None else None,
        attempt=task.attempt_count,
        **extra,
    )


_CLEAR_LEASE = {"lease_owner": None, "lease_until": None, "lease_token": None}
# A run that ends otherwise than waiting for a part of the server ends that wait too.
_RUN_ENDED = {**_CLEAR_LEASE, "part_away_since": None}


def task_release(
    task_id: str, *, lease: Lease, reason: str, now: int | None = None
) -> AutomationTask:
    """leased -> pending, using no attempt: the holder gives the task back unstarted."""
    return _transition(
        task_id, RELEASE, actor=lease.owner, now=now,
        fenced=lease,
        changes=_CLEAR_LEASE,
        detail={"reason": reason},
    )


def task_start(
    task_id: str,
    *,
    lease: Lease,
    lease_until: int,
    jitter_ms: int | None = None,
    now: int | None = None,
) -> AutomationTask:
    """leased -> running; counts the run as an attempt. ``jitter_ms``: the wait before it."""
    now = now_ms() if now is None else now
    return _transition(
        task_id, START, actor=lease.owner, now=now,
        fenced=lease,
        changes={"attempt_count": F("attempt_count") + 1, "started_at": now, "lease_until": lease_until},
        jitter_ms=jitter_ms,
    )


def task_heartbeat(
    task_id: str, *, lease: Lease, lease_until: int, now: int | None = None
) -> AutomationTask:
    """Renew the lease of a task its owner still holds; the status does not change.

    One update under the lease and no event: a renewal is not a change of state, and a
    long task renews every third of its lease. Raises ``LeaseLost`` when the task was cancelled or reclaimed meanwhile:
    the worker must then stop the task's work.
    """
    return _transition(
        task_id, HEARTBEAT, actor=lease.owner, now=now,
        fenced=lease,
        changes={"lease_until": lease_until},
    )


def task_progress(
    task_id: str, *, lease: Lease, action: str, detail: dict[str, Any], now: int | None = None
) -> AutomationTask:
    """Put a step of a running attempt on the task's timeline; the status does not change.

    What the executor did on the way to its outcome (an outbound task: the
    delivery method it used, each fallback and why). ``action`` names the
    step; a name the state diagram uses is refused, so a step never passes
    for a change of state. Under the lease like a heartbeat: ``LeaseLost`` when the
    caller no longer holds the task.
    """
    if action in EDGE_ACTIONS:
        raise ValueError(f"{action!r} is a transition, not a step")
    return _transition(
        task_id, edge(action, {S.RUNNING}, None), actor=lease.owner, now=now,
        fenced=lease, detail=detail,
    )


def task_succeed(
    task_id: str, *, lease: Lease, result: Any, now: int | None = None
) -> AutomationTask:
    """running -> succeeded, storing the executor's result."""
    now = now_ms() if now is None else now
    return _transition(
        task_id, SUCCEED, actor=lease.owner, now=now,
        fenced=lease,
        changes={**_RUN_ENDED, "result_json": json.dumps(result), "finished_at": now},
    )


def task_retry_later(
    task_id: str,
    *,
    lease: Lease,
    error: str,
    retry_at: int,
    backoff_ms: int,
    jitter_ms: int,
    now: int | None = None,
) -> AutomationTask:
    """running -> retry_wait after a retryable failure, due again at ``retry_at``.

    Refused when the task has used all its attempts: the caller must fail it.
    """
    return _transition(
        task_id, RETRY_LATER, actor=lease.owner, now=now,
        fenced=lease,
        guards=(ATTEMPTS_LEFT,),
        changes={**_RUN_ENDED, "execute_after": retry_at},
        error=error,
        backoff_ms=backoff_ms,
        jitter_ms=jitter_ms,
    )


def task_wait_for_part(
    task_id: str, *, lease: Lease, part: str, error: str, since: int, retry_at: int, now: int | None = None,
) -> AutomationTask:
    """running -> retry_wait: a part of the server (``part``) did not answer; due again at ``retry_at``.

    Not the task's failure: the attempt it started is given back, and
    ``part_away_since`` keeps when the wait began (``since``), which bounds it.
    """
    return _transition(
        task_id, RETRY_LATER, actor=lease.owner, now=now, fenced=lease,
        changes={
            **_CLEAR_LEASE, "execute_after": retry_at, "attempt_count": F("attempt_count") - 1,
            "part_away_since": since,
        },
        error=error,
        backoff_ms=max(0, retry_at - (now_ms() if now is None else now)),
        detail={"part": part, "waiting_since": since},
    )


def task_fail(
    task_id: str,
    *,
    lease: Lease,
    error: str,
    result: Any = None,
    now: int | None = None,
    reason: FinishReason | None = None,
) -> AutomationTask:
    """running -> failed: a terminal failure, or a retryable one with no attempts left.

    ``reason`` only for a decision (a policy's no at run time): a fault has none.
    """
    now = now_ms() if now is None else now
    changes: dict[str, Any] = {**_RUN_ENDED, "finished_at": now, "finish_reason": reason}
    if result is not None:
        changes["result_json"] = json.dumps(result)
    return _transition(
        task_id, FAIL, actor=lease.owner, now=now,
        fenced=lease,
        changes=changes,
        error=error,
    )


def task_reclaim_unstarted(task_id: str, *, actor: str, now: int | None = None) -> AutomationTask:
    """leased -> pending when the lease expired before the task started: no side effect, no attempt."""
    return _transition(
        task_id, RECLAIM_UNSTARTED, actor=actor, now=now,
        guards=(LEASE_EXPIRED,),
        changes=_CLEAR_LEASE,
    )


def task_reclaim_interrupted(
    task_id: str,
    *,
    actor: str,
    retry_at: int | None,
    backoff_ms: int | None = None,
    jitter_ms: int | None = None,
    now: int | None = None,
) -> AutomationTask:
    """running -> retry_wait or failed when the worker died (its lease expired).

    The run already counted as an attempt. The caller gives ``retry_at`` only
    when the retry policy allows another run (the kind or tool is idempotent
    and attempts remain): the task then waits to be retried. Otherwise it
    fails with an error saying it was interrupted and not re-run; an operator
    may still retry it.
    """
    now = now_ms() if now is None else now
    if retry_at is None:
        return _transition(
            task_id, RECLAIM_TO_FAILED, actor=actor,
            now=now, guards=(LEASE_EXPIRED,), changes={**_CLEAR_LEASE, "finished_at": now},
            error=INTERRUPTED_ERROR,
        )
    return _transition(
        task_id, RECLAIM_TO_RETRY, actor=actor,
        now=now, guards=(LEASE_EXPIRED, ATTEMPTS_LEFT),
        changes={**_CLEAR_LEASE, "execute_after": retry_at}, error=INTERRUPTED_ERROR,
        backoff_ms=backoff_ms, jitter_ms=jitter_ms,
    )


def task_approve(task_id: str, *, actor: str, now: int | None = None) -> AutomationTask:
    """blocked -> pending, due at once: an operator allowed the held instruction, for this run."""
    now = now_ms() if now is None else now
    return _transition(
        task_id, APPROVE, actor=actor, now=now,
        changes={"execute_after": now, "approved_by": actor, "approved_at": now},
    )


def task_reject(task_id: str, *, actor: str, reason: str, now: int | None = None) -> AutomationTask:
    """blocked -> failed: an operator refused the held instruction."""
    now = now_ms() if now is None else now
    return _transition(
        task_id, REJECT, actor=actor, now=now,
        changes={"finished_at": now, "finish_reason": FinishReason.REJECTED},
        error=f"rejected by {actor}: {reason}" if reason else f"rejected by {actor}",
    )


def task_cancel(task_id: str, *, actor: str, now: int | None = None) -> AutomationTask:
    """pending / retry_wait / blocked / running -> cancelled, by an operator.

    Not under the lease: the operator overrides it. A worker running the task
    finds out at its next heartbeat (``LeaseLost``) and stops the tool.
    """
    now = now_ms() if now is None else now
    return _transition(
        task_id, CANCEL, actor=actor, now=now,
        changes={**_CLEAR_LEASE, "finished_at": now},
    )


# What an operator's retry clears on the task and keeps in its ``retry`` event
# (``detail["earlier_attempt"]``): the lists, the story and the panel show the new attempt only.
EARLIER_ATTEMPT = ("last_error", "started_at", "finished_at", "finish_reason", "result_json")


def task_retry(task_id: str, *, actor: str, now: int | None = None) -> AutomationTask:
    """failed / cancelled -> pending or blocked, by an operator, with a fresh set of attempts.

    A task that needs approval and never had it (cancelled or rejected while
    blocked) goes back to ``blocked``, to wait for an approval again; one that
    had it goes to ``pending`` with the retrier recorded as its approver, as
    a retry is a new run (``operator.tasks_retry`` checks the retrier may
    approve it). Which one is read first; the edge's guard holds it in the
    update itself. The earlier attempt's error, times, finish reason and
    result are cleared on the task and kept in the event (``EARLIER_ATTEMPT``).
    """
    now = now_ms() if now is None else now
    task = AutomationTask.objects.filter(pk=task_id).only("needs_approval", "approved_at", *EARLIER_ATTEMPT).first()
    if task is None:
        raise TaskNotFound(task_id)
    changes: dict[str, Any] = {
        "attempt_count": 0, "execute_after": now, "retry_count": F("retry_count") + 1,
        **dict.fromkeys(EARLIER_ATTEMPT),
    }
    # The retry starts clean: the earlier attempt's outcome moves to the retry's event.
    earlier = {"earlier_attempt": {
        field: getattr(task, field) for field in EARLIER_ATTEMPT if getattr(task, field) not in (None, "")
    }}
    if task.is_awaiting_approval_again:
        return _transition(task_id, RETRY_TO_BLOCKED, actor=actor, now=now, guards=(APPROVAL_MISSING,),
                           changes=changes, detail=earlier)
    if task.needs_approval:
        changes |= {"approved_by": actor, "approved_at": now}
    return _transition(task_id, RETRY, actor=actor, now=now, guards=(APPROVAL_HELD,), changes=changes, detail=earlier)
