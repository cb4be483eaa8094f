"""Transition services for ``AutomationTask`` (SPEC §2.2).

One function per edge of the state diagram. Each runs in a transaction, checks
the starting state, applies fencing when the task leaves ``leased`` or
``running`` (only the holding ``lease_owner`` may move it), writes one
``TaskEvent`` with its actor and one structured log line, and raises a
``TransitionError`` subclass when the move is not allowed. Nothing else in the
code base assigns ``status``. The state machine knows no kind and decides
nothing: what follows a change is the kind's ``follow_up``, which the callers
(the dispatcher, the reclaim, the operator services) run in the same
transaction; whether to retry is the ``RetryPolicy``'s answer, which the
guards here only assert.

Routing fields (``target_*``) are never touched here; ``task_retarget`` in
``automation.services.tasks`` is the one service that changes them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from automation.models import (
    LEASE_HOLDING_STATUSES,
    ROUTING_FIELDS,
    AutomationTask,
    TaskEvent,
    TaskStatus,
)
from core.clock import now_ms
from core.logfmt import log_event

logger = logging.getLogger(__name__)

S = TaskStatus

INTERRUPTED_ERROR = "interrupted: the worker running this task stopped before it finished"


class TransitionError(Exception):
    """A task could not be moved as asked. Subclasses say why."""

    def __init__(self, task_id: str, message: str) -> None:
        super().__init__(f"task {task_id}: {message}")
        self.task_id = task_id


class TaskNotFound(TransitionError):
    def __init__(self, task_id: str) -> None:
        super().__init__(task_id, "no such task")


class InvalidTransition(TransitionError):
    """The task is not in a state the transition starts from, or a guard refused it."""

    def __init__(self, task_id: str, action: str, status: str, reason: str = "") -> None:
        detail = reason or f"cannot {action} a task that is {status}"
        super().__init__(task_id, detail)
        self.action = action
        self.status = status


class LeaseLost(TransitionError):
    """Fencing: the caller no longer holds the task's lease.

    Another dispatcher reclaimed it, an operator cancelled it, or it finished.
    A worker that sees this must stop and write nothing more.
    """

    def __init__(self, task_id: str, lease_owner: str, holder: str | None, status: str) -> None:
        super().__init__(
            task_id,
            f"lease not held by {lease_owner} (status {status}, holder {holder or 'none'})",
        )
        self.status = status


Changes = dict[str, Any] | Callable[[AutomationTask], dict[str, Any]]


@dataclass(frozen=True)
class Edge:
    """One edge of the state diagram: the action, the states it leaves, the state it enters."""

    action: str
    allowed_from: frozenset[str]
    to_status: str | None  # None: the status stays (a heartbeat)


def _edge(action: str, allowed_from: Collection[str], to_status: str | None) -> Edge:
    return Edge(action, frozenset(allowed_from), to_status)


# The state diagram of SPEC §2.2, one line an edge.
LEASE = _edge("lease", {S.PENDING, S.RETRY_WAIT}, S.LEASED)
RELEASE = _edge("release", {S.LEASED}, S.PENDING)
START = _edge("start", {S.LEASED}, S.RUNNING)
HEARTBEAT = _edge("heartbeat", LEASE_HOLDING_STATUSES, None)
SUCCEED = _edge("succeed", {S.RUNNING}, S.SUCCEEDED)
RETRY_LATER = _edge("retry_later", {S.RUNNING}, S.RETRY_WAIT)
FAIL = _edge("fail", {S.RUNNING}, S.FAILED)
RECLAIM_UNSTARTED = _edge("reclaim", {S.LEASED}, S.PENDING)
RECLAIM_TO_RETRY = _edge("reclaim", {S.RUNNING}, S.RETRY_WAIT)
RECLAIM_TO_FAILED = _edge("reclaim", {S.RUNNING}, S.FAILED)
APPROVE = _edge("approve", {S.BLOCKED}, S.PENDING)
REJECT = _edge("reject", {S.BLOCKED}, S.FAILED)
CANCEL = _edge("cancel", {S.PENDING, S.RETRY_WAIT, S.BLOCKED, S.RUNNING}, S.CANCELLED)
RETRY = _edge("retry", {S.FAILED, S.CANCELLED}, S.PENDING)
EDGE_ACTIONS = frozenset(
    edge.action for edge in (
        LEASE, RELEASE, START, HEARTBEAT, SUCCEED, RETRY_LATER, FAIL, RECLAIM_UNSTARTED, APPROVE, REJECT,
        CANCEL, RETRY,
    )
) | {"create", "retarget"}


def _transition(
    task_id: str,
    edge: Edge,
    *,
    actor: str,
    now: int | None,
    fenced_owner: str | None = None,
    guard: Callable[[AutomationTask, int], str | None] | None = None,
    changes: Changes | None = None,
    error: str | None = None,
    jitter_ms: int | None = None,
    backoff_ms: int | None = None,
    detail: dict[str, Any] | None = None,
) -> AutomationTask:
    """Apply one transition; the single place where ``status`` is written after creation.

    ``fenced_owner``: the transition applies only while that owner holds the
    lease. ``guard(task, now)`` returns a refusal reason or None. ``changes``
    are the other field updates, or a function of the locked task returning them.
    """
    now = now_ms() if now is None else now
    with transaction.atomic():
        # A row lock on PostgreSQL; on SQLite the IMMEDIATE transaction already
        # holds the write lock. The conditional update below re-checks anyway.
        task = AutomationTask.objects.select_for_update().filter(pk=task_id).first()
        if task is None:
            raise TaskNotFound(task_id)
        if fenced_owner is not None and (
            task.status not in LEASE_HOLDING_STATUSES or task.lease_owner != fenced_owner
        ):
            raise LeaseLost(task_id, fenced_owner, task.lease_owner, task.status)
        action = edge.action
        if task.status not in edge.allowed_from:
            raise InvalidTransition(task_id, action, task.status)
        if guard is not None and (reason := guard(task, now)):
            raise InvalidTransition(task_id, action, task.status, reason)

        status_from = task.status
        status_to = edge.to_status or status_from
        values = changes(task) if callable(changes) else dict(changes or {})
        if routed := ROUTING_FIELDS & values.keys():
            # A task's recipient is never cleared or changed by a change of state (SPEC §5.1).
            raise ValueError(f"task {task_id}: a transition may not write its route ({', '.join(sorted(routed))})")
        values.update(status=status_to, updated_at=now)
        if error is not None:
            values["last_error"] = error
        updated = AutomationTask.objects.filter(
            pk=task_id, status=status_from, lease_owner=task.lease_owner
        ).update(**values)
        if updated != 1:
            # Only reachable on a database that ignored the lock above.
            raise InvalidTransition(task_id, action, status_from, "changed concurrently")
        # The row is locked and the update was conditional on what was read,
        # so the instance can take the new values without reading them back.
        for name, value in values.items():
            setattr(task, name, value)
        TaskEvent.objects.create(
            task_id=task_id, action=action, status_from=status_from, status_to=status_to, actor=actor, at=now,
            jitter_ms=jitter_ms, backoff_ms=backoff_ms, error=error, detail=detail or {},
        )
    log_event(
        logger,
        action,
        task_id=task_id,
        kind=task.kind,
        status_from=status_from,
        status_to=status_to,
        actor=actor,
        lease_owner=task.lease_owner,
        attempt=task.attempt_count,
        jitter_ms=jitter_ms,
        backoff_ms=backoff_ms,
        error=error,
    )
    return task


_CLEAR_LEASE = {"lease_owner": None, "lease_until": None}


def _due(task: AutomationTask, now: int) -> str | None:
    if task.execute_after > now:
        return f"not due until {task.execute_after}"
    return None


def _lease_expired(task: AutomationTask, now: int) -> str | None:
    if task.lease_until is not None and task.lease_until >= now:
        return f"lease of {task.lease_owner} is valid until {task.lease_until}"
    return None


def _attempts_left(task: AutomationTask, now: int) -> str | None:
    if task.attempt_count >= task.max_attempts:
        return f"no attempts left ({task.attempt_count} of {task.max_attempts} used)"
    return None


def task_lease(task_id: str, *, lease_owner: str, lease_until: int, now: int | None = None) -> AutomationTask:
    """pending / retry_wait -> leased, for a due task. Called only by the dispatcher's claim path."""
    return _transition(
        task_id, LEASE, actor=lease_owner, now=now,
        guard=_due,
        changes={"lease_owner": lease_owner, "lease_until": lease_until},
        detail={"lease_until": lease_until},
    )


def task_release(
    task_id: str, *, lease_owner: str, reason: str, now: int | None = None
) -> AutomationTask:
    """leased -> pending, using no attempt: the holder gives the task back unstarted."""
    return _transition(
        task_id, RELEASE, actor=lease_owner, now=now,
        fenced_owner=lease_owner,
        changes=_CLEAR_LEASE,
        detail={"reason": reason},
    )


def task_start(
    task_id: str,
    *,
    lease_owner: str,
    lease_until: int,
    jitter_ms: int | None = None,
    now: int | None = None,
) -> AutomationTask:
    """leased -> running; counts the run as an attempt. ``jitter_ms``: the wait before it."""
    now = now_ms() if now is None else now
    return _transition(
        task_id, START, actor=lease_owner, now=now,
        fenced_owner=lease_owner,
        changes=lambda task: {
            "attempt_count": task.attempt_count + 1, "started_at": now, "lease_until": lease_until,
        },
        jitter_ms=jitter_ms,
    )


def task_heartbeat(
    task_id: str, *, lease_owner: str, lease_until: int, now: int | None = None
) -> AutomationTask:
    """Renew the lease of a task its owner still holds; the status does not change.

    Raises ``LeaseLost`` when the task was cancelled or reclaimed meanwhile:
    the worker must then stop the task's work.
    """
    return _transition(
        task_id, HEARTBEAT, actor=lease_owner, now=now,
        fenced_owner=lease_owner,
        changes={"lease_until": lease_until},
        detail={"lease_until": lease_until},
    )


def task_progress(
    task_id: str, *, lease_owner: str, action: str, detail: dict[str, Any], now: int | None = None
) -> AutomationTask:
    """Put a step of a running attempt on the task's timeline; the status does not change.

    What the executor did on the way to its outcome (an outbound task: the
    delivery method it used, each fallback and why). ``action`` names the
    step; a name the state diagram uses is refused, so a step never passes
    for a change of state. Fenced like a heartbeat: ``LeaseLost`` when the
    caller no longer holds the task.
    """
    if action in EDGE_ACTIONS:
        raise ValueError(f"{action!r} is a transition, not a step")
    return _transition(
        task_id, _edge(action, {S.RUNNING}, None), actor=lease_owner, now=now,
        fenced_owner=lease_owner, detail=detail,
    )


def task_succeed(
    task_id: str, *, lease_owner: str, result: Any, now: int | None = None
) -> AutomationTask:
    """running -> succeeded, storing the executor's result."""
    now = now_ms() if now is None else now
    return _transition(
        task_id, SUCCEED, actor=lease_owner, now=now,
        fenced_owner=lease_owner,
        changes={**_CLEAR_LEASE, "result_json": json.dumps(result), "finished_at": now},
    )


def task_retry_later(
    task_id: str,
    *,
    lease_owner: str,
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
        task_id, RETRY_LATER, actor=lease_owner, now=now,
        fenced_owner=lease_owner,
        guard=_attempts_left,
        changes={**_CLEAR_LEASE, "execute_after": retry_at},
        error=error,
        backoff_ms=backoff_ms,
        jitter_ms=jitter_ms,
    )


def task_fail(
    task_id: str,
    *,
    lease_owner: str,
    error: str,
    result: Any = None,
    now: int | None = None,
) -> AutomationTask:
    """running -> failed: a terminal failure, or a retryable one with no attempts left."""
    now = now_ms() if now is None else now
    changes: dict[str, Any] = {**_CLEAR_LEASE, "finished_at": now}
    if result is not None:
        changes["result_json"] = json.dumps(result)
    return _transition(
        task_id, FAIL, actor=lease_owner, now=now,
        fenced_owner=lease_owner,
        changes=changes,
        error=error,
    )


def task_reclaim_unstarted(task_id: str, *, actor: str, now: int | None = None) -> AutomationTask:
    """leased -> pending when the lease expired before the task started: no side effect, no attempt."""
    return _transition(
        task_id, RECLAIM_UNSTARTED, actor=actor, now=now,
        guard=_lease_expired,
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
            now=now, guard=_lease_expired, changes={**_CLEAR_LEASE, "finished_at": now},
            error=INTERRUPTED_ERROR,
        )
    return _transition(
        task_id, RECLAIM_TO_RETRY, actor=actor,
        now=now, guard=lambda task, now: _lease_expired(task, now) or _attempts_left(task, now),
        changes={**_CLEAR_LEASE, "execute_after": retry_at}, error=INTERRUPTED_ERROR,
        backoff_ms=backoff_ms, jitter_ms=jitter_ms,
    )


def task_approve(task_id: str, *, actor: str, now: int | None = None) -> AutomationTask:
    """blocked -> pending, due at once: an operator allowed the held instruction."""
    now = now_ms() if now is None else now
    return _transition(
        task_id, APPROVE, actor=actor, now=now,
        changes={"execute_after": now},
    )


def task_reject(task_id: str, *, actor: str, reason: str, now: int | None = None) -> AutomationTask:
    """blocked -> failed: an operator refused the held instruction."""
    now = now_ms() if now is None else now
    return _transition(
        task_id, REJECT, actor=actor, now=now,
        changes={"finished_at": now},
        error=f"rejected by {actor}: {reason}" if reason else f"rejected by {actor}",
    )


def task_cancel(task_id: str, *, actor: str, now: int | None = None) -> AutomationTask:
    """pending / retry_wait / blocked / running -> cancelled, by an operator.

    Not fenced: the operator overrides the lease. A worker running the task
    finds out at its next heartbeat (``LeaseLost``) and stops the tool.
    """
    now = now_ms() if now is None else now
    return _transition(
        task_id, CANCEL, actor=actor, now=now,
        changes={**_CLEAR_LEASE, "finished_at": now},
    )


def task_retry(task_id: str, *, actor: str, now: int | None = None) -> AutomationTask:
    """failed / cancelled -> pending by an operator, with a fresh set of attempts."""
    now = now_ms() if now is None else now
    return _transition(
        task_id, RETRY, actor=actor, now=now,
        changes={"attempt_count": 0, "execute_after": now, "finished_at": None},
    )
