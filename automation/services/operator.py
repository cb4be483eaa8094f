"""What an operator does to tasks, from the admin or a script (SPEC §2.2, §7).

Each service takes many task ids, moves the eligible ones through the
transition services with the operator as actor, and reports what it did and
what it skipped, and why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from automation.models import AutomationTask
from automation.services import transitions as tr


@dataclass
class OperatorReport:
    done: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # task id -> why

    def __str__(self) -> str:
        reasons = "; ".join(f"{task_id}: {why}" for task_id, why in self.skipped.items())
        return f"{len(self.done)} done, {len(self.skipped)} skipped" + (f" ({reasons})" if reasons else "")


def _apply(task_ids: Iterable[str], move: Callable[[str], AutomationTask]) -> OperatorReport:
    report = OperatorReport()
    for task_id in task_ids:
        try:
            move(task_id)
        except tr.TransitionError as exc:
            report.skipped[task_id] = str(exc).removeprefix(f"task {task_id}: ")
        else:
            report.done.append(task_id)
    return report


def tasks_approve(*, task_ids: Iterable[str], actor: str) -> OperatorReport:
    """Blocked tasks become due at once."""
    return _apply(task_ids, lambda task_id: tr.task_approve(task_id, actor=actor))


def tasks_reject(*, task_ids: Iterable[str], actor: str, reason: str = "") -> OperatorReport:
    """Blocked tasks fail with the operator's reason."""
    return _apply(task_ids, lambda task_id: tr.task_reject(task_id, actor=actor, reason=reason))


def tasks_retry(*, task_ids: Iterable[str], actor: str) -> OperatorReport:
    """Failed or cancelled tasks run again, with a fresh set of attempts."""
    return _apply(task_ids, lambda task_id: tr.task_retry(task_id, actor=actor))


def tasks_cancel(*, task_ids: Iterable[str], actor: str) -> OperatorReport:
    """Pending, waiting, blocked or running tasks end; a running one stops at its next heartbeat."""
    return _apply(task_ids, lambda task_id: tr.task_cancel(task_id, actor=actor))
