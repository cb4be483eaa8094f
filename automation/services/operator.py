"""What an operator does to tasks, from the admin or a script (SPEC §2.2, §7).

Each service takes many task ids, moves the eligible ones through the
transition services with the operator as actor, runs the kind's follow-up in
the same transaction (``transition_and_follow_up``: a rejected or cancelled
instruction completes its message; see ``automation.kinds``), and reports what it did and what it
skipped, and why. What becomes due wakes the dispatcher on commit.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Q

from automation.kinds import kinds
from automation.models import AutomationTask, TaskStatus
from automation.services import transitions as tr
from automation.services.steps import transition_and_follow_up
from automation.wake import dispatcher_wake_on_commit
from conversations.services import conversations_pause_set
from core.text import storable


@dataclass
class OperatorReport:
    done: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # task id -> why
    # Tasks left as they were because the operator lacks a permission: task id -> what and why.
    refused: dict[str, str] = field(default_factory=dict)
    # Of ``done``, the retried tasks that went back to wait for an approval (never approved before).
    awaiting_approval: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        reasons = "; ".join(f"{task_id}: {why}" for task_id, why in {**self.skipped, **self.refused}.items())
        text = f"{len(self.done)} done, {len(self.skipped)} skipped"
        if self.awaiting_approval:
            text += f", {len(self.awaiting_approval)} waiting for approval again"
        if self.refused:
            text += f", {len(self.refused)} refused"
        return text + (f" ({reasons})" if reasons else "")


class PermissionMissing(tr.TransitionError):
    """The operator may not make this change to this task (approving a tool that runs code)."""


HasPerm = Callable[[str], bool]


def has_every_permission(permission: str) -> bool:
    """``has_perm`` for callers acting as the server's owner: commands and scripts run on the server."""
    return True


def _apply(
    task_ids: Iterable[str], move: Callable[[str], AutomationTask], *, actor: str, makes_due: bool = False
) -> OperatorReport:
    report = OperatorReport()
    for task_id in task_ids:
        try:
            task = transition_and_follow_up(functools.partial(move, task_id), actor=actor)
        except PermissionMissing as exc:
            report.refused[task_id] = str(exc).removeprefix(f"task {task_id}: ")
        except tr.TransitionError as exc:
            report.skipped[task_id] = str(exc).removeprefix(f"task {task_id}: ")
        else:
            report.done.append(task_id)
            if task.status == TaskStatus.BLOCKED:
                report.awaiting_approval.append(task_id)
            elif makes_due:
                # On the commit of a caller's outer transaction, if there is one; else now.
                dispatcher_wake_on_commit()
    return report


def _approval_permission_check(task: AutomationTask | None, *, has_perm: HasPerm, doing: str) -> None:
    """Raise ``PermissionMissing`` when the task's kind asks more of whoever approves it than ``has_perm`` grants."""
    if task is not None and (needed := kinds.approval_requirement(task)) and not has_perm(needed.permission):
        raise PermissionMissing(
            task.pk, f"{needed.why}: {doing} it needs the permission to approve tools that run code "
            f"({needed.permission})",
        )


def tasks_approve(*, task_ids: Iterable[str], actor: str, has_perm: HasPerm) -> OperatorReport:
    """Blocked tasks become due at once.

    A task whose kind asks more of its approver (``approval_requirement``: an
    instruction whose tool runs code) is refused, and stays blocked, unless
    ``has_perm`` (the operator's ``User.has_perm``) grants that permission.
    """

    def approve(task_id: str) -> AutomationTask:
        task = AutomationTask.objects.filter(pk=task_id).only("kind", "payload_json").first()
        _approval_permission_check(task, has_perm=has_perm, doing="approving")
        return tr.task_approve(task_id, actor=actor)

    return _apply(task_ids, approve, actor=actor, makes_due=True)


# An operator's reason for a rejection: what the task list and the story accept, and what is stored.
REJECT_REASON_MAX_CHARS = 500


def tasks_reject(*, task_ids: Iterable[str], actor: str, reason: str = "") -> OperatorReport:
    """Blocked tasks fail with the operator's reason.

    ``reason`` (optional, cut to ``REJECT_REASON_MAX_CHARS``, blanks around it
    and any NUL or lone surrogate dropped: PostgreSQL refuses them) is written to each task's ``reject`` event and ``last_error``
    (``rejected by alice: too broad``), so the story shows it and the block's
    result tells the chat.
    """
    reason = storable(reason).strip()[:REJECT_REASON_MAX_CHARS].strip()
    return _apply(task_ids, lambda task_id: tr.task_reject(task_id, actor=actor, reason=reason), actor=actor)


def tasks_retry(*, task_ids: Iterable[str], actor: str, has_perm: HasPerm) -> OperatorReport:
    """Failed or cancelled tasks run again, with a fresh set of attempts (SPEC §2.2).

    An approval belongs to the run it approves. A task that needs approval
    and never had it (cancelled or rejected while blocked) goes back to
    ``blocked`` and waits for an approval again (``report.awaiting_approval``).
    One that was approved and then failed or was cancelled runs again only
    if the retrier may approve it: a kind that asks more of its approver
    (``approval_requirement``) is refused, and stays as it is, unless
    ``has_perm`` grants that permission.
    """

    def retry(task_id: str) -> AutomationTask:
        task = (
            AutomationTask.objects.filter(pk=task_id)
            .only("kind", "payload_json", "needs_approval", "approved_at").first()
        )
        if task is not None and task.needs_approval and not task.is_awaiting_approval_again:
            _approval_permission_check(task, has_perm=has_perm, doing="retrying")
        return tr.task_retry(task_id, actor=actor)

    return _apply(task_ids, retry, actor=actor, makes_due=True)


def tasks_cancel(*, task_ids: Iterable[str], actor: str) -> OperatorReport:
    """Pending, waiting, blocked or running tasks end; a running one stops at its next heartbeat."""
    return _apply(task_ids, lambda task_id: tr.task_cancel(task_id, actor=actor), actor=actor)


# The statuses each service moves: the starting states of its edge. A caller
# that works on many tasks (the admin's "all matching" actions) hands the
# service only these, and counts the rest as skipped without reading them.
STARTING_STATUSES: dict[Callable[..., OperatorReport], frozenset[str]] = {
    tasks_approve: tr.APPROVE.allowed_from,
    tasks_reject: tr.REJECT.allowed_from,
    tasks_retry: tr.RETRY.allowed_from,
    tasks_cancel: tr.CANCEL.allowed_from,
}

# Of the tasks a service moves, those it puts back to wait for an approval,
# as a filter: a caller's confirmation page counts them before it runs.
BACK_TO_APPROVAL: dict[Callable[..., OperatorReport], Q] = {
    tasks_retry: tr.APPROVAL_MISSING.holds(0),
}


def conversations_pause(*, conversation_ids: Iterable[int], is_paused: bool, actor: str) -> int:
    """Pause or resume conversations; return how many changed.

    Resuming wakes the dispatcher once this commits, so the held tasks go out
    at once instead of at the next tick.
    """
    with transaction.atomic():
        changed = conversations_pause_set(conversation_ids=conversation_ids, is_paused=is_paused, actor=actor)
        if changed and not is_paused:
            dispatcher_wake_on_commit()
    return changed
