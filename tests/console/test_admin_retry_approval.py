"""A retry never skips an approval (SPEC §2.2), on every path an operator takes in the admin.

A ``shell.run`` block held for approval, then cancelled or rejected, goes
back to ``blocked`` when anyone retries it (checked rows, "Select all N",
the failures page's "retry all"), and its command does not run: a
dispatcher's tick finds nothing to claim and the workspace is as it was.
A task that was approved and then failed in its run is retried only by
someone who may approve it. Each test runs a real dispatcher tick on the
suite's database, so both configurations prove it.
"""

import re

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME

from automation.permissions import APPROVE_CODE_PERMISSION
from automation.models import AutomationTask, TaskStatus
from automation.selectors import failure_groups
from automation.services.operator import has_every_permission, tasks_approve
from automation.services.tasks import task_create
from core.clock import now_ms
from ingest.kinds import INSTRUCTION_EXECUTE
from tests.automation.test_dispatcher import one_tick
from tests.factories import make_staff, make_task

pytestmark = pytest.mark.django_db(transaction=True)

S = TaskStatus
TASKS = "/admin/automation/automationtask/"
BASE = ("automation.view_automationtask", "automation.change_automationtask", "conversations.view_conversation")
BACK_TO_APPROVAL = "never had the approval they need: they wait for approval again (blocked)"
REFUSED = "shell.run runs code: retrying it needs the permission to approve tools that run code"


@pytest.fixture
def workspace(settings, tmp_path):
    """A workspace with a ``notes`` folder, which the held command would remove."""
    settings.CONDUCTOR_WORKSPACE = tmp_path / "workspace"
    (settings.CONDUCTOR_WORKSPACE / "notes").mkdir(parents=True)
    (settings.CONDUCTOR_WORKSPACE / "notes" / "todo.md").write_text("keep me")
    return settings.CONDUCTOR_WORKSPACE


@pytest.fixture
def remove_notes(workspace):
    """``rm -rf notes``, held for approval as ingest holds it."""
    task, _ = task_create(
        kind=INSTRUCTION_EXECUTE, actor="ingest", status=S.BLOCKED,
        payload={"tool": "shell.run", "target": "conductor", "params": {"argv": ["rm", "-rf", "notes"]}},
    )
    return task


def login(client, *perms, superuser=False):
    name = "root" if superuser else "operator"
    user = make_staff(name, *perms, password=None)
    if superuser:
        user.is_superuser = True
        user.save()
    client.force_login(user)
    return client


@pytest.fixture
def staff(client):
    """Staff with the task admin's change permission, without ``approve_code``."""
    return login(client, *BASE)


@pytest.fixture
def root(client):
    return login(client, superuser=True)


def act(client, action, *tasks, **extra):
    data = {"action": action, ACTION_CHECKBOX_NAME: [t.pk for t in tasks], "post": "yes", **extra}
    return client.post(TASKS, data, follow=True)


def confirmation(client, action, query=""):
    data = {"action": action, "select_across": "1", "index": "0", ACTION_CHECKBOX_NAME: ["any"]}
    return client.post(f"{TASKS}?{query}", data).content.decode(), data


def across(client, action, query=""):
    """"Select all N": the confirmation page, then its "yes"; returns (the page, the response after)."""
    page, data = confirmation(client, action, query)
    through = re.search(r'name="through" value="(\d+)"', page).group(1)
    return page, client.post(f"{TASKS}?{query}", {**data, "post": "yes", "through": through}, follow=True)


def notes(response):
    return [str(m) for m in response.context["messages"]]


def reload(task):
    return AutomationTask.objects.get(pk=task.pk)


def timeline(task):
    return [(e.action, e.status_to, e.actor) for e in reload(task).events.order_by("at", "pk")]


def assert_did_not_run(task, workspace):
    report, _ = one_tick()
    assert report.claimed == []
    assert reload(task).status == S.BLOCKED
    assert (workspace / "notes" / "todo.md").read_text() == "keep me"


def test_staff_who_cancel_a_held_command_then_retry_it_put_it_back_to_wait(staff, remove_notes, workspace):
    act(staff, "cancel", remove_notes)
    response = act(staff, "retry", remove_notes)
    assert any(BACK_TO_APPROVAL in note for note in notes(response))
    assert_did_not_run(remove_notes, workspace)
    assert timeline(remove_notes) == [
        ("create", S.BLOCKED, "ingest"), ("cancel", S.CANCELLED, "operator"), ("retry", S.BLOCKED, "operator"),
    ]


def test_staff_who_reject_a_held_command_then_retry_it_put_it_back_to_wait(staff, remove_notes, workspace):
    act(staff, "reject", remove_notes)
    assert reload(remove_notes).status == S.FAILED
    act(staff, "retry", remove_notes)
    assert_did_not_run(remove_notes, workspace)
    assert timeline(remove_notes)[-1] == ("retry", S.BLOCKED, "operator")
    assert reload(remove_notes).finish_reason is None  # waiting again, not ended


def test_a_superuser_retrying_every_failed_task_does_not_run_the_one_they_rejected(root, remove_notes, workspace):
    act(root, "reject", remove_notes)
    plain = make_task(S.FAILED, kind="test.local", now=now_ms())  # needs no approval; failed in its run

    page, response = across(root, "retry", "status__exact=failed")
    assert re.search(r'id="bulk-awaiting-approval">\s*<strong>1</strong> of the 2 never had the approval', page)
    assert "Retried 2 of the tasks matching the list." in notes(response)
    assert any(BACK_TO_APPROVAL in note for note in notes(response))
    assert reload(plain).status == S.PENDING
    assert reload(remove_notes).status == S.BLOCKED
    assert timeline(remove_notes)[-1] == ("retry", S.BLOCKED, "root")
    AutomationTask.objects.filter(pk=plain.pk).delete()  # it would run (and succeed) in the tick below
    assert_did_not_run(remove_notes, workspace)


def test_the_checked_rows_of_a_superuser_put_a_rejected_command_back_to_wait(root, remove_notes, workspace):
    act(root, "reject", remove_notes)
    act(root, "retry", remove_notes)
    assert_did_not_run(remove_notes, workspace)


@pytest.fixture
def approved_then_failed(workspace):
    """``touch ran`` in a folder that is not there yet: approved by a coder, then failed in its run."""
    task, _ = task_create(
        kind=INSTRUCTION_EXECUTE, actor="ingest", status=S.BLOCKED,
        payload={"tool": "shell.run", "target": "conductor", "params": {"argv": ["touch", "ran"], "cwd": "later"}},
    )
    assert tasks_approve(task_ids=[task.pk], actor="coder", has_perm=has_every_permission).done == [task.pk]
    one_tick()
    failed = reload(task)
    assert (failed.status, failed.approved_by) == (S.FAILED, "coder")
    (workspace / "later").mkdir()
    return failed


def test_retrying_an_approved_command_that_failed_needs_the_approvers_permission(staff, approved_then_failed):
    response = act(staff, "retry", approved_then_failed)
    assert any(REFUSED in note for note in notes(response))
    assert reload(approved_then_failed).status == S.FAILED
    report, _ = one_tick()
    assert report.claimed == []


def test_the_failures_page_retry_all_needs_the_approvers_permission(staff, approved_then_failed):
    (group,) = [g for g in failure_groups(now_ms=now_ms()) if g.sample_task_id == approved_then_failed.pk]
    _, response = across(staff, "retry", f"failure_group={group.key}")
    assert any(REFUSED in note for note in notes(response))
    assert reload(approved_then_failed).status == S.FAILED


def test_whoever_may_approve_it_retries_an_approved_command_and_is_its_approver(client, approved_then_failed, workspace):
    login(client, *BASE, APPROVE_CODE_PERMISSION)
    act(client, "retry", approved_then_failed)
    retried = reload(approved_then_failed)
    assert (retried.status, retried.approved_by) == (S.PENDING, "operator")
    one_tick()
    assert reload(approved_then_failed).status == S.SUCCEEDED
    assert (workspace / "later" / "ran").exists()
