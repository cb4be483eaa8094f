"""The task list's reject action on ticked rows: a page with each call and an optional reason, then the rejection.

Approve's page is tested with the story (``test_story.py``); reject shares it
(``console.approval.decision_confirmation``) and adds the reason, which the
operator service stores in the reject event and the story shows.
"""

import html
import re

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import ValidationError

from automation.models import AutomationTask, TaskStatus
from automation.services.operator import REJECT_REASON_MAX_CHARS
from ingest.models import Instruction, ToolPolicy
from tests.console.test_story import block_tasks, ingest, story_url
from tests.factories import make_staff, make_task

pytestmark = pytest.mark.django_db

S = TaskStatus
TASKS = "/admin/automation/automationtask/"
HOSTILE = "<script>alert('reason')</script>"


@pytest.fixture
def admin_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("admin", "admin@example.com", password=None))
    return client


@pytest.fixture
def workspace(settings, tmp_path):
    settings.CONDUCTOR_WORKSPACE = tmp_path / "workspace"
    (tmp_path / "workspace" / "src").mkdir(parents=True)
    return (tmp_path / "workspace").resolve()


@pytest.fixture
def shell(workspace):
    """A ``shell.run`` block held for approval, as ingest holds it."""
    message = ingest('```baa\nshell.run\n{"argv": ["ls", "-la"], "cwd": "src"}\n```')
    return block_tasks(message)["shell.run"]


def ask(client, action, *tasks, url=TASKS):
    """Tick ``tasks`` on the list (or a task's own page) and choose ``action``: the page it answers with."""
    prefix = "CHANGE_FORM-" if url != TASKS else ""
    response = client.post(url, {f"{prefix}action": action, ACTION_CHECKBOX_NAME: [t.pk for t in tasks]})
    assert response.status_code == 200
    return response.content.decode()


def confirm(client, action, ids, **extra):
    data = {"action": action, ACTION_CHECKBOX_NAME: ids, "post": "yes", **extra}
    return client.post(TASKS, data, follow=True)


def posted_ids(page):
    return re.findall(rf'name="{ACTION_CHECKBOX_NAME}" value="(\w+)"', page)


def notes(response):
    return [str(m) for m in response.context["messages"]]


def test_reject_asks_first_showing_each_call_and_a_reason_field_and_changes_nothing(admin_client, shell, workspace):
    succeeded = make_task(S.SUCCEEDED)
    page = ask(admin_client, "reject", shell, succeeded)
    assert "Reject these calls?" in page
    assert "<code>shell.run</code>" in page and "[&quot;ls&quot;, &quot;-la&quot;]" in page
    assert f"<pre>{workspace / 'src'}</pre>" in page
    assert "Not blocked (succeeded): skipped." in page
    assert re.search(rf'<textarea id="decision-reason" name="reason" rows="3" maxlength="{REJECT_REASON_MAX_CHARS}">', page)
    assert 'value="Yes, reject 1 task"' in page and 'name="action" value="reject"' in page
    assert sorted(posted_ids(page)) == sorted([shell.pk, succeeded.pk])
    assert AutomationTask.objects.get(pk=shell.pk).status == S.BLOCKED


def test_a_confirmed_rejection_stores_the_reason_in_its_event_and_the_story_shows_it_escaped(admin_client, shell):
    reason = f"too broad {HOSTILE}"
    response = confirm(admin_client, "reject", [shell.pk], reason=f"  {reason}\n")
    assert notes(response) == [f"Rejected 1 task(s): {shell.pk}"]
    task = AutomationTask.objects.get(pk=shell.pk)
    assert (task.status, task.finish_reason) == (S.FAILED, "rejected")
    event = task.events.get(action="reject")
    assert (event.actor, event.error) == ("admin", f"rejected by admin: {reason}")
    # The block's result tells the chat, with the reason.
    assert Instruction.objects.get(pk=shell.instruction_id).error == f"rejected by admin: {reason}"

    page = admin_client.get(story_url(task.conversation)).content.decode()
    entry = page[page.index('class="story-entry story-operator"'):]
    entry = entry[:entry.index("</li>")]
    assert re.search(r"admin</strong> rejected\s+block 1 \(shell\.run\)", entry)
    assert html.escape(f"rejected by admin: {reason}") in entry
    assert HOSTILE not in page


def test_a_rejection_without_a_reason_names_only_the_operator(admin_client, shell):
    confirm(admin_client, "reject", [shell.pk], reason="   ")
    assert AutomationTask.objects.get(pk=shell.pk).last_error == "rejected by admin"


def test_a_reason_longer_than_its_bound_is_cut_to_it(admin_client, shell):
    confirm(admin_client, "reject", [shell.pk], reason="x" * (REJECT_REASON_MAX_CHARS + 100))
    assert AutomationTask.objects.get(pk=shell.pk).last_error == "rejected by admin: " + "x" * REJECT_REASON_MAX_CHARS


def test_rejecting_from_a_tasks_own_page_asks_first_and_posts_back_to_the_list(admin_client, shell):
    page = ask(admin_client, "reject", shell, url=f"{TASKS}{shell.pk}/change/")
    assert "Reject these calls?" in page and f'<form method="post" action="{TASKS}">' in page
    assert posted_ids(page) == [shell.pk]
    assert AutomationTask.objects.get(pk=shell.pk).status == S.BLOCKED


def test_the_confirmation_posts_back_to_the_list_as_it_was_filtered(admin_client, shell):
    response = admin_client.post(
        f"{TASKS}?status__exact=blocked", {"action": "reject", ACTION_CHECKBOX_NAME: [shell.pk]}
    )
    page = response.content.decode()
    assert f'<form method="post" action="{TASKS}?status__exact=blocked">' in page
    assert f'<a href="{TASKS}?status__exact=blocked" class="button cancel-link">' in page


def test_nothing_blocked_offers_no_rejection(admin_client):
    page = ask(admin_client, "reject", make_task(S.FAILED))
    assert 'value="Yes, reject 0 tasks" disabled' in page


def test_staff_who_may_only_view_tasks_get_no_reject_page(client, shell):
    client.force_login(make_staff("viewer", "automation.view_automationtask", password=None))
    response = client.post(TASKS, {"action": "reject", ACTION_CHECKBOX_NAME: [shell.pk]}, follow=True)
    assert "Reject these calls?" not in response.content.decode()
    confirm(client, "reject", [shell.pk], reason="no")
    assert AutomationTask.objects.get(pk=shell.pk).status == S.BLOCKED


def test_the_approval_page_says_whether_a_command_may_use_the_network(admin_client, shell):
    page = html.unescape(ask(admin_client, "approve", shell))
    assert "none: it reaches neither the internet nor this machine's loopback" in page
    assert "this command may use the network" not in page
    ToolPolicy.objects.create(tool="shell.run", policy="approve", allow_network=True)
    page = html.unescape(ask(admin_client, "approve", shell))
    assert "this command may use the network" in page


def test_only_a_tool_that_runs_without_network_takes_allow_network():
    with pytest.raises(ValidationError, match="only shell.run runs without network unless allowed"):
        ToolPolicy(tool="files.read", policy="allow", allow_network=True).full_clean()
    ToolPolicy(tool="shell.run", policy="approve", allow_network=True).full_clean()
