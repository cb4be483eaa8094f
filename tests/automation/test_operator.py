import dataclasses
import functools
from unittest import mock

import pytest

from automation.kinds import ApprovalRequirement, kinds
from automation.models import AutomationTask, TaskStatus
from automation.services.dispatcher_state import dispatcher_pause_set
from automation.services.operator import (
    has_every_permission,
    tasks_approve,
    tasks_cancel,
    tasks_reject,
    tasks_retry,
)
from tests.factories import make_task

pytestmark = pytest.mark.django_db

S = TaskStatus


def statuses(*tasks):
    return [AutomationTask.objects.get(pk=t.pk).status for t in tasks]


def test_approve_moves_blocked_tasks_and_reports_the_rest():
    blocked, pending = make_task(S.BLOCKED), make_task(S.PENDING)
    report = tasks_approve(task_ids=[blocked.pk, pending.pk, "ghost"], actor="alice", has_perm=has_every_permission)
    assert report.done == [blocked.pk]
    assert report.skipped == {pending.pk: "cannot approve a task that is pending", "ghost": "no such task"}
    assert statuses(blocked, pending) == [S.PENDING, S.PENDING]
    assert AutomationTask.objects.get(pk=blocked.pk).events.last().actor == "alice"
    assert str(report).startswith("1 done, 2 skipped")


def test_reject_fails_blocked_tasks_with_the_reason():
    blocked, running = make_task(S.BLOCKED), make_task(S.RUNNING)
    report = tasks_reject(task_ids=[blocked.pk, running.pk], actor="bob", reason="not today")
    assert report.done == [blocked.pk] and list(report.skipped) == [running.pk]
    assert AutomationTask.objects.get(pk=blocked.pk).last_error == "rejected by bob: not today"


def test_a_reason_loses_the_characters_postgresql_refuses_and_the_rejection_stands():
    blocked = make_task(S.BLOCKED)
    report = tasks_reject(task_ids=[blocked.pk], actor="bob", reason="not\x00 to\ud800day")
    assert report.done == [blocked.pk]
    task = AutomationTask.objects.get(pk=blocked.pk)
    assert (task.status, task.last_error) == (S.FAILED, "rejected by bob: not today")
    assert task.events.get(action="reject").error == "rejected by bob: not today"


def test_retry_takes_only_failed_or_cancelled_tasks_and_resets_attempts():
    failed, cancelled, succeeded = make_task(S.FAILED), make_task(S.CANCELLED), make_task(S.SUCCEEDED)
    report = tasks_retry(task_ids=[failed.pk, cancelled.pk, succeeded.pk], actor="alice", has_perm=has_every_permission)
    assert report.done == [failed.pk, cancelled.pk]
    assert report.skipped == {succeeded.pk: "cannot retry a task that is succeeded"}
    assert [t.attempt_count for t in AutomationTask.objects.filter(pk__in=report.done)] == [0, 0]


def test_retry_reports_the_tasks_that_wait_for_approval_again_and_wakes_nothing_for_them():
    never_approved = make_task(S.BLOCKED)
    tasks_reject(task_ids=[never_approved.pk], actor="bob")
    failed = make_task(S.FAILED)
    with mock.patch("automation.services.operator.dispatcher_wake_on_commit") as wake:
        report = tasks_retry(task_ids=[never_approved.pk, failed.pk], actor="alice", has_perm=has_every_permission)
    assert (report.done, report.awaiting_approval) == ([never_approved.pk, failed.pk], [never_approved.pk])
    assert statuses(never_approved, failed) == [S.BLOCKED, S.PENDING]
    assert wake.call_count == 1
    assert str(report) == "2 done, 0 skipped, 1 waiting for approval again"


def test_retry_of_an_approved_task_is_refused_without_the_permission_its_approval_needs(monkeypatch):
    def needs_code_permission(task):
        return ApprovalRequirement(permission="automation.approve_code", why="it runs code")

    spec = kinds.get("test.instruction")
    monkeypatch.setitem(
        kinds._entries, "test.instruction", dataclasses.replace(spec, approval_requirement=needs_code_permission)
    )
    task = make_task(S.BLOCKED)
    tasks_approve(task_ids=[task.pk], actor="root", has_perm=has_every_permission)
    tasks_cancel(task_ids=[task.pk], actor="bob")
    report = tasks_retry(task_ids=[task.pk], actor="bob", has_perm=lambda permission: False)
    assert report.refused == {task.pk: "it runs code: retrying it needs the permission to approve tools that run code "
                                       "(automation.approve_code)"}
    assert statuses(task) == [S.CANCELLED]
    assert tasks_retry(task_ids=[task.pk], actor="root", has_perm=has_every_permission).done == [task.pk]
    assert statuses(task) == [S.PENDING]


@pytest.mark.parametrize("status", [S.PENDING, S.RETRY_WAIT, S.BLOCKED, S.RUNNING])
def test_cancel_ends_waiting_and_running_tasks(status):
    task = make_task(status)
    assert tasks_cancel(task_ids=[task.pk], actor="alice").done == [task.pk]
    assert statuses(task) == [S.CANCELLED]


@pytest.mark.parametrize("status", [S.LEASED, S.SUCCEEDED, S.FAILED, S.CANCELLED])
def test_cancel_refuses_other_states(status):
    task = make_task(status)
    report = tasks_cancel(task_ids=[task.pk], actor="alice")
    assert report.done == [] and task.pk in report.skipped


def test_the_global_pause_records_its_actor_and_reports_a_no_op():
    from automation.models import DispatcherState
    from automation.services.dispatcher_state import dispatcher_pause_set

    assert dispatcher_pause_set(is_paused=True, actor="alice") is True
    assert dispatcher_pause_set(is_paused=True, actor="bob") is False  # already paused: nothing changed
    state = DispatcherState.objects.get()
    assert (state.is_paused, state.paused_by) == (True, "alice") and state.paused_at is not None
    assert dispatcher_pause_set(is_paused=False, actor="bob") is True
    assert DispatcherState.objects.get().is_paused is False


# Real commits: a test wrapped in one transaction would never run its on-commit callbacks.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("status", "service"), [
    (S.BLOCKED, functools.partial(tasks_approve, has_perm=has_every_permission)),
    (S.FAILED, functools.partial(tasks_retry, has_perm=has_every_permission)),
])
def test_approve_and_retry_wake_the_dispatcher_once_they_commit(status, service):
    tasks = [make_task(status), make_task(status)]
    with mock.patch("automation.wake.dispatcher_wake") as wake:
        assert service(task_ids=[t.pk for t in tasks], actor="alice").done == [t.pk for t in tasks]
    assert wake.call_count == 2  # each change commits on its own, and its task is due at once


@pytest.mark.django_db(transaction=True)
def test_reject_and_cancel_make_nothing_due_and_wake_nothing():
    blocked, pending = make_task(S.BLOCKED), make_task(S.PENDING)
    with mock.patch("automation.wake.dispatcher_wake") as wake:
        tasks_reject(task_ids=[blocked.pk], actor="alice")
        tasks_cancel(task_ids=[pending.pk], actor="alice")
    wake.assert_not_called()


@pytest.mark.django_db(transaction=True)
def test_the_global_resume_wakes_the_dispatcher_once_it_commits():
    with mock.patch("automation.wake.dispatcher_wake") as wake:
        assert dispatcher_pause_set(is_paused=True, actor="alice")
        wake.assert_not_called()
        assert dispatcher_pause_set(is_paused=False, actor="alice")
        assert not dispatcher_pause_set(is_paused=False, actor="alice")
    wake.assert_called_once_with()


def test_an_operators_change_and_its_kinds_follow_up_commit_together(monkeypatch):
    def follow_up(task, actor):
        raise RuntimeError("follow-up broke")

    spec = kinds.get("test.instruction")
    monkeypatch.setitem(kinds._entries, "test.instruction", dataclasses.replace(spec, follow_up=follow_up))
    blocked = make_task(S.BLOCKED)
    with pytest.raises(RuntimeError, match="follow-up broke"):
        tasks_reject(task_ids=[blocked.pk], actor="alice")
    assert statuses(blocked) == [S.BLOCKED]


def test_approving_a_task_whose_kind_asks_a_permission_is_refused_without_it(monkeypatch):
    def needs_code_permission(task):
        return ApprovalRequirement(permission="automation.approve_code", why="shell.run runs code")

    spec = kinds.get("test.instruction")
    monkeypatch.setitem(
        kinds._entries, "test.instruction", dataclasses.replace(spec, approval_requirement=needs_code_permission)
    )
    blocked, other = make_task(S.BLOCKED), make_task(S.BLOCKED)
    asked = []

    def has_perm(permission):
        asked.append(permission)
        return False

    report = tasks_approve(task_ids=[blocked.pk, other.pk], actor="alice", has_perm=has_perm)
    assert report.done == [] and report.skipped == {}
    why = "shell.run runs code: approving it needs the permission to approve tools that run code"
    assert report.refused == {task.pk: f"{why} (automation.approve_code)" for task in (blocked, other)}
    assert asked == ["automation.approve_code"] * 2
    assert statuses(blocked, other) == [S.BLOCKED, S.BLOCKED]
    assert "0 done, 0 skipped, 2 refused" in str(report)

    report = tasks_approve(task_ids=[blocked.pk], actor="alice", has_perm=lambda permission: True)
    assert report.done == [blocked.pk]
