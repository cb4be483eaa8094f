"""The task list's actions on every task it matches ("Select all N"), after a confirmation page."""

import re

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.test import Client

from automation.models import AutomationTask, TaskStatus
from automation.services import operator
from console.admin import bulk
from tests.factories import make_staff, make_task

pytestmark = pytest.mark.django_db

S = TaskStatus
LIST = "/admin/automation/automationtask/"


def across(client, action, query="", *, confirm=False, through=None, **extra):
    """Post ``action`` for every task the list at ``query`` matches; confirmed when asked."""
    data = {
        "action": action,
        "select_across": "1",
        ACTION_CHECKBOX_NAME: ["any"],
        **extra,
    }
    if confirm:
        data |= {
            "post": "yes",
            "through": through if through is not None else confirmed_through(client, action, query),
        }
    return client.post(f"{LIST}?{query}", data, follow=confirm)


def confirmed_through(client, action, query):
    """The bound the confirmation page would post back."""
    page = across(client, action, query).content.decode()
    return re.search(r'name="through" value="(\d+)"', page).group(1)


def statuses(*tasks):
    return [AutomationTask.objects.get(pk=task.pk).status for task in tasks]


def notes(response):
    return [str(m) for m in response.context["messages"]]


def test_select_all_asks_first_naming_the_counts_and_changes_nothing(admin_client):
    failed = [make_task(S.FAILED, kind="test.local") for _ in range(3)]
    running = make_task(S.RUNNING, kind="test.local")
    other = make_task(S.FAILED)
    response = across(admin_client, "retry", "kind=test.local")
    page = response.content.decode()
    assert response.status_code == 200 and "Retry every task the list matches?" in page
    assert re.search(r'id="bulk-total">4<', page) and re.search(r'id="bulk-eligible">3<', page)
    assert re.search(r'id="bulk-skipped">1<', page)
    rows = re.findall(r'<tr class="(bulk-\w+)">\s*<td>(\w+)</td><td>(\d+)</td>', page)
    assert sorted(rows) == [
        ("bulk-eligible", "Failed", "3"),
        ("bulk-skipped", "Running", "1"),
    ]
    assert 'name="post" value="yes"' in page and 'name="select_across" value="1"' in page
    assert statuses(*failed, running, other) == [S.FAILED] * 3 + [S.RUNNING, S.FAILED]


def test_a_confirmed_retry_across_a_filter_retries_exactly_the_matching_tasks(admin_client, admin_user):
    matching = [make_task(S.FAILED, kind="test.local") for _ in range(3)] + [make_task(S.CANCELLED, kind="test.local")]
    running, succeeded = (
        make_task(S.RUNNING, kind="test.local"),
        make_task(S.SUCCEEDED, kind="test.local"),
    )
    elsewhere = [make_task(S.FAILED), make_task(S.CANCELLED)]
    response = across(admin_client, "retry", "kind=test.local", confirm=True)
    assert response.redirect_chain[-1][0] == f"{LIST}?kind=test.local"
    assert statuses(*matching) == [S.PENDING] * 4
    assert statuses(running, succeeded, *elsewhere) == [
        S.RUNNING,
        S.SUCCEEDED,
        S.FAILED,
        S.CANCELLED,
    ]
    assert notes(response) == [
        "Retried 4 of the tasks matching the list.",
        "Skipped 2 task(s) in a status it does not apply to: 1 running, 1 succeeded.",
    ]
    assert {e.actor for t in matching for e in AutomationTask.objects.get(pk=t.pk).events.filter(action="retry")} == {
        admin_user.username
    }


def test_select_all_follows_the_search_too(admin_client):
    keyed = make_task(S.BLOCKED, dedupe_key="hold:me")
    other = make_task(S.BLOCKED)
    across(admin_client, "approve", "q=hold%3Ame", confirm=True)
    assert statuses(keyed, other) == [S.PENDING, S.BLOCKED]


@pytest.mark.parametrize(
    "action,moved,to,kept",
    [
        (
            "cancel",
            [S.PENDING, S.RETRY_WAIT, S.BLOCKED, S.RUNNING],
            S.CANCELLED,
            [S.SUCCEEDED, S.FAILED],
        ),
        ("approve", [S.BLOCKED], S.PENDING, [S.PENDING, S.FAILED]),
        ("reject", [S.BLOCKED], S.FAILED, [S.PENDING, S.SUCCEEDED]),
    ],
)
def test_every_action_moves_every_matching_task_it_applies_to(admin_client, action, moved, to, kept):
    moving, staying = [make_task(s) for s in moved], [make_task(s) for s in kept]
    across(admin_client, action, confirm=True)
    assert statuses(*moving) == [to] * len(moving)
    assert statuses(*staying) == kept


def test_tasks_that_match_only_after_the_confirmation_are_left_alone(admin_client):
    before = make_task(S.FAILED)
    through = confirmed_through(admin_client, "retry", "")
    after = make_task(S.FAILED)
    across(admin_client, "retry", confirm=True, through=through)
    assert statuses(before, after) == [S.PENDING, S.FAILED]


def test_a_confirmation_without_a_valid_bound_only_asks_again(admin_client):
    failed = make_task(S.FAILED)
    response = across(admin_client, "retry", post="yes", through="1; drop table")
    assert "Retry every task the list matches?" in response.content.decode()
    assert statuses(failed) == [S.FAILED]


def test_get_with_the_confirmation_fields_changes_nothing(admin_client):
    failed = make_task(S.FAILED)
    fields = {
        "action": "retry",
        "select_across": "1",
        ACTION_CHECKBOX_NAME: failed.pk,
        "post": "yes",
        "through": "9" * 18,
    }
    response = admin_client.get(LIST, fields, follow=True)
    assert response.status_code == 200
    assert statuses(failed) == [S.FAILED]


def test_the_confirmation_needs_the_csrf_token(admin_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    failed = make_task(S.FAILED)
    data = {
        "action": "retry",
        "select_across": "1",
        ACTION_CHECKBOX_NAME: ["x"],
        "post": "yes",
        "through": "1",
    }
    assert client.post(LIST, data).status_code == 403
    assert statuses(failed) == [S.FAILED]


def test_batches_are_bounded_and_one_submission_stops_at_the_limit(admin_client, monkeypatch):
    monkeypatch.setattr(bulk, "BATCH", 2)
    monkeypatch.setattr(bulk, "LIMIT", 5)
    calls = []
    service = operator.tasks_retry

    def recording(*, task_ids, actor, has_perm):
        # The first task stays failed (as when its follow-up refuses): it must not come round again.
        calls.append(list(task_ids))
        report = service(task_ids=[pk for pk in task_ids if pk != failed[0].pk], actor=actor, has_perm=has_perm)
        if failed[0].pk in task_ids:
            report.skipped[failed[0].pk] = "refused"
        return report

    monkeypatch.setattr(operator, "tasks_retry", recording)
    monkeypatch.setitem(operator.STARTING_STATUSES, recording, operator.STARTING_STATUSES[service])
    failed = [make_task(S.FAILED) for _ in range(7)]
    assert "One confirmation moves at most 5 tasks" in across(admin_client, "retry").content.decode()
    response = across(admin_client, "retry", confirm=True)
    assert [len(ids) for ids in calls] == [2, 2, 1]
    assert [pk for ids in calls for pk in ids] == [t.pk for t in failed[:5]]  # creation order, none twice
    assert statuses(*failed) == [S.FAILED] + [S.PENDING] * 4 + [S.FAILED] * 2
    assert "Stopped after 5 tasks, the most one request moves: run the action again for the rest." in notes(response)


def test_a_task_that_changed_meanwhile_is_reported_by_reason(admin_client, monkeypatch):
    failed = make_task(S.FAILED)
    moved_first = make_task(S.FAILED)
    service = operator.tasks_retry

    def racing(*, task_ids, actor, has_perm):
        service(task_ids=[moved_first.pk], actor="someone else", has_perm=has_perm)  # another operator was quicker
        return service(task_ids=task_ids, actor=actor, has_perm=has_perm)

    monkeypatch.setattr(operator, "tasks_retry", racing)
    monkeypatch.setitem(operator.STARTING_STATUSES, racing, operator.STARTING_STATUSES[service])
    response = across(admin_client, "retry", confirm=True)
    assert statuses(failed, moved_first) == [S.PENDING, S.PENDING]
    assert notes(response) == [
        "Retried 1 of the tasks matching the list.",
        "Skipped 1 task(s) that changed meanwhile (cannot retry a task that is pending: 1).",
    ]


def test_nothing_matching_says_so_and_offers_no_confirmation(admin_client):
    make_task(S.FAILED)
    page = across(admin_client, "retry", "kind=test.local").content.decode()
    assert "No task matches" in page and 'name="post"' not in page


def test_reject_across_asks_for_a_reason_and_stores_it_on_every_task(admin_client, admin_user):
    held = [make_task(S.BLOCKED) for _ in range(3)]
    page = across(admin_client, "reject").content.decode()
    assert re.search(rf'<textarea id="bulk-reason" name="reason" rows="3" cols="60" maxlength="{operator.REJECT_REASON_MAX_CHARS}">', page)
    response = across(admin_client, "reject", confirm=True, reason="not on a Friday")
    assert notes(response) == ["Rejected 3 of the tasks matching the list."]
    assert [e.error for e in AutomationTask.objects.get(pk=held[0].pk).events.filter(action="reject")] == [
        f"rejected by {admin_user.username}: not on a Friday"
    ]
    assert {AutomationTask.objects.get(pk=t.pk).last_error for t in held} == {
        f"rejected by {admin_user.username}: not on a Friday"
    }


def test_other_actions_across_ask_for_no_reason(admin_client):
    make_task(S.FAILED)
    assert 'name="reason"' not in across(admin_client, "retry").content.decode()


# --- retry of ticked rows: the counts first --------------------------------------------------------


def tick(client, action, tasks, url=LIST, **extra):
    """Tick ``tasks`` and choose ``action``, as the list's Go button posts it."""
    data = {"action": action, ACTION_CHECKBOX_NAME: [t.pk for t in tasks], "index": "0", **extra}
    return client.post(url, data)


def test_retrying_ticked_rows_asks_first_with_the_counts_by_status_and_changes_nothing(admin_client):
    failed = [make_task(S.FAILED) for _ in range(3)]
    cancelled, succeeded, running = make_task(S.CANCELLED), make_task(S.SUCCEEDED), make_task(S.RUNNING)
    unticked = make_task(S.FAILED)
    response = tick(admin_client, "retry", [*failed, cancelled, succeeded, running])
    page = response.content.decode()
    assert response.status_code == 200 and "Retry these 6 tasks?" in page
    summary = " ".join(re.sub(r"<[^>]+>", "", re.search(r'<p id="bulk-summary">(.*?)</p>', page, re.S).group(1)).split())
    assert summary == (
        "6 tasks ticked: 4 will be retried (3 failed, 1 cancelled), "
        "2 skipped, as their status does not allow it (1 running, 1 succeeded)."
    )
    rows = re.findall(r'<tr class="(bulk-\w+)">\s*<td>(\w+)</td><td>(\d+)</td>', page)
    assert sorted(rows) == [
        ("bulk-eligible", "Cancelled", "1"), ("bulk-eligible", "Failed", "3"),
        ("bulk-skipped", "Running", "1"), ("bulk-skipped", "Succeeded", "1"),
    ]
    carried = re.findall(rf'name="{ACTION_CHECKBOX_NAME}" value="(\w+)"', page)
    assert sorted(carried) == sorted(t.pk for t in [*failed, cancelled, succeeded, running])
    assert 'name="select_across"' not in page and 'name="through"' not in page and 'name="reason"' not in page
    assert 'value="Yes, retry 4 tasks"' in page
    assert statuses(*failed, cancelled, unticked) == [S.FAILED] * 3 + [S.CANCELLED, S.FAILED]


def test_a_confirmed_retry_of_ticked_rows_retries_them_and_reports_the_rest(admin_client, admin_user):
    failed, cancelled, succeeded = make_task(S.FAILED), make_task(S.CANCELLED), make_task(S.SUCCEEDED)
    unticked = make_task(S.FAILED)
    response = admin_client.post(
        LIST, {"action": "retry", ACTION_CHECKBOX_NAME: [failed.pk, cancelled.pk, succeeded.pk], "post": "yes"},
        follow=True,
    )
    assert statuses(failed, cancelled, succeeded, unticked) == [S.PENDING, S.PENDING, S.SUCCEEDED, S.FAILED]
    done, skipped = notes(response)
    assert done.startswith("Retried 2 task(s)")
    assert skipped == f"Skipped 1 task(s) (cannot retry a task that is succeeded: {succeeded.pk})"


def test_the_retry_page_counts_the_tasks_that_go_back_to_wait_for_approval(admin_client):
    never_approved = make_task(S.BLOCKED)
    operator.tasks_reject(task_ids=[never_approved.pk], actor="alice")
    page = tick(admin_client, "retry", [never_approved, make_task(S.FAILED)]).content.decode()
    assert re.search(r'id="bulk-awaiting-approval">\s*<strong>1</strong> of the 2 never had the approval', page)


def test_retrying_from_a_tasks_own_page_asks_first_and_posts_back_to_the_list(admin_client):
    failed = make_task(S.FAILED)
    response = admin_client.post(
        f"{LIST}{failed.pk}/change/", {"CHANGE_FORM-action": "retry", ACTION_CHECKBOX_NAME: [failed.pk]}
    )
    page = response.content.decode()
    assert "Retry this task?" in page and f'<form method="post" action="{LIST}">' in page
    assert statuses(failed) == [S.FAILED]


def test_the_retry_page_posts_back_to_the_list_as_it_was_filtered(admin_client):
    failed = make_task(S.FAILED)
    page = tick(admin_client, "retry", [failed], url=f"{LIST}?status__exact=failed").content.decode()
    assert f'<form method="post" action="{LIST}?status__exact=failed">' in page
    response = admin_client.post(
        f"{LIST}?status__exact=failed", {"action": "retry", ACTION_CHECKBOX_NAME: [failed.pk], "post": "yes"}
    )
    assert response["Location"] == f"{LIST}?status__exact=failed"
    assert statuses(failed) == [S.PENDING]


def test_nothing_retryable_among_ticked_rows_offers_no_confirmation(admin_client):
    page = tick(admin_client, "retry", [make_task(S.SUCCEEDED)]).content.decode()
    assert "<strong id=\"bulk-eligible\">0</strong>" in page and 'name="post"' not in page


# --- who may -------------------------------------------------------------------------------------


def test_anonymous_users_are_sent_to_the_login(client):
    failed = make_task(S.FAILED)
    response = across(client, "retry", confirm=True, through="9" * 18)
    assert response.redirect_chain[0][0].startswith("/admin/login/")
    assert statuses(failed) == [S.FAILED]


def test_staff_who_may_only_view_tasks_cannot_act_on_all_of_them(client):
    client.force_login(make_staff("viewer", "automation.view_automationtask"))
    failed = make_task(S.FAILED)
    asked = across(client, "retry")
    assert "Retry every task" not in asked.content.decode()
    response = across(client, "retry", confirm=True, through="9" * 18)
    assert response.status_code == 200
    assert statuses(failed) == [S.FAILED]


def test_staff_without_task_permissions_is_refused(client):
    client.force_login(make_staff("stranger", "conversations.view_conversation"))
    failed = make_task(S.FAILED)
    assert across(client, "retry").status_code == 403
    assert statuses(failed) == [S.FAILED]


def test_staff_with_the_change_permission_acts_on_all_as_superusers_do(client):
    user = make_staff("operator", "automation.view_automationtask", "automation.change_automationtask")
    client.force_login(user)
    failed = make_task(S.FAILED)
    across(client, "retry", confirm=True)
    assert statuses(failed) == [S.PENDING]
    assert AutomationTask.objects.get(pk=failed.pk).events.get(action="retry").actor == "operator"
