"""The state diagram of SPEC §2.2 as data: its edges, the guards some edges add, and the errors a refused move raises.

``automation.services.transitions`` applies them; nothing here touches the database.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from django.db.models import F, Q

from automation.models import LEASE_HOLDING_STATUSES, AutomationTask, Lease, TaskStatus

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
    """Lease lost: the caller no longer holds the task's lease.

    Another dispatcher reclaimed it, an operator cancelled it, or it finished.
    A worker that sees this must stop and write nothing more.
    """

    def __init__(self, task_id: str, lease: Lease, holder: Lease | None, status: str) -> None:
        super().__init__(
            task_id,
            f"lease {lease} no longer holds it (status {status}, held by {holder or 'no lease'})",
        )
        self.status = status


@dataclass(frozen=True)
class Edge:
    """One edge of the state diagram: the action, the states it leaves, the state it enters."""

    action: str
    allowed_from: frozenset[str]
    to_status: str | None  # None: the status stays (a heartbeat, a step)
    recorded: bool = True  # writes a TaskEvent (a heartbeat does not: it changes no state)

    @property
    def known_from(self) -> str | None:
        """The state the task is in before the edge, when that is known without reading it."""
        return next(iter(self.allowed_from)) if len(self.allowed_from) == 1 else None


def edge(action: str, allowed_from: Collection[str], to_status: str | None, *, recorded: bool = True) -> Edge:
    return Edge(action, frozenset(allowed_from), to_status, recorded)


@dataclass(frozen=True)
class Guard:
    """What a transition needs beyond its starting state.

    ``holds(now)`` is the condition as a filter, checked by the update
    itself; ``refusal(task, now)`` says why a task does not meet it, or None.
    """

    holds: Callable[[int], Q]
    refusal: Callable[[AutomationTask, int], str | None]


# The state diagram of SPEC §2.2, one line an edge.
LEASE = edge("lease", {S.PENDING, S.RETRY_WAIT}, S.LEASED)
RELEASE = edge("release", {S.LEASED}, S.PENDING)
START = edge("start", {S.LEASED}, S.RUNNING)
HEARTBEAT = edge("heartbeat", LEASE_HOLDING_STATUSES, None, recorded=False)
SUCCEED = edge("succeed", {S.RUNNING}, S.SUCCEEDED)
RETRY_LATER = edge("retry_later", {S.RUNNING}, S.RETRY_WAIT)
FAIL = edge("fail", {S.RUNNING}, S.FAILED)
RECLAIM_UNSTARTED = edge("reclaim", {S.LEASED}, S.PENDING)
RECLAIM_TO_RETRY = edge("reclaim", {S.RUNNING}, S.RETRY_WAIT)
RECLAIM_TO_FAILED = edge("reclaim", {S.RUNNING}, S.FAILED)
APPROVE = edge("approve", {S.BLOCKED}, S.PENDING)
REJECT = edge("reject", {S.BLOCKED}, S.FAILED)
CANCEL = edge("cancel", {S.PENDING, S.RETRY_WAIT, S.BLOCKED, S.RUNNING}, S.CANCELLED)
# An operator's retry: to pending when the task needs no approval or was
# approved (the retrier approves the new run); to blocked, waiting for an
# approval again, when it needs one and never had it (cancelled or rejected
# while blocked). Each carries its guard (APPROVAL_HELD, APPROVAL_MISSING),
# so no path reaches pending past an approval.
RETRY = edge("retry", {S.FAILED, S.CANCELLED}, S.PENDING)
RETRY_TO_BLOCKED = edge("retry", {S.FAILED, S.CANCELLED}, S.BLOCKED)
EDGE_ACTIONS = frozenset(
    edge.action for edge in (
        LEASE, RELEASE, START, HEARTBEAT, SUCCEED, RETRY_LATER, FAIL, RECLAIM_UNSTARTED, APPROVE, REJECT,
        CANCEL, RETRY,
    )
) | {"create", "retarget"}



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


def _approval_held(task: AutomationTask, now: int) -> str | None:
    if task.is_awaiting_approval_again:
        return "it was never approved: a retry puts it back to wait for approval"
    return None


def _approval_missing(task: AutomationTask, now: int) -> str | None:
    if not task.is_awaiting_approval_again:
        return "it needs no approval, or has one"
    return None


DUE = Guard(lambda now: Q(execute_after__lte=now), _due)
LEASE_EXPIRED = Guard(lambda now: Q(lease_until__isnull=True) | Q(lease_until__lt=now), _lease_expired)
ATTEMPTS_LEFT = Guard(lambda now: Q(attempt_count__lt=F("max_attempts")), _attempts_left)
APPROVAL_HELD = Guard(lambda now: Q(needs_approval=False) | Q(approved_at__isnull=False), _approval_held)
APPROVAL_MISSING = Guard(lambda now: Q(needs_approval=True, approved_at__isnull=True), _approval_missing)
