import json
import re

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME

from automation.models import AutomationTask, TaskEvent, TaskStatus
from automation.services import transitions as tr
from console.admin.tasks import ErrorAttempt, attempts_text, call_summary, error_attempt
from ingest.models import DeliveryRequest
from tests.factories import (
    LEASE_MS,
    OWNER,
    T0,
    ConversationFactory,
    InstructionFactory,
    MessageFactory,
    PluginClientFactory,
    make_staff,
    make_task,
    task_lease,
    lease_of,
)

pytestmark = pytest.mark.django_db

S = TaskStatus
LIST = "/admin/automation/automationtask/"


def change_url(task):
    return f"{LIST}{task.pk}/change/"


def run_action(client, action, tasks, url=LIST):
    response = client.post(
        url, {"action": action, ACTION_CHECKBOX_NAME: [t.pk for t in tasks], "index": 0}, follow=True
    )
    assert response.status_code == 200
    if action in ASKS_FIRST:  # first a page (each call, or the counts); its button posts them back with post=yes
        assert ASKS_FIRST[action] in response.content.decode()
        response = client.post(
            LIST, {"action": action, ACTION_CHECKBOX_NAME: [t.pk for t in tasks], "post": "yes"}, follow=True
        )
    return [str(m) for m in response.context["messages"]]


# The actions that answer ticked rows with a confirmation page, and its title.
ASKS_FIRST = {"approve": "Approve these calls?", "reject": "Reject these calls?", "retry": "Retry these "}


def status(task):
    return AutomationTask.objects.get(pk=task.pk).status


def last_event(task):
    return AutomationTask.objects.get(pk=task.pk).events.order_by("at", "pk").last()


# --- the list ------------------------------------------------------------------------------------


def test_the_list_shows_ids_kinds_states_errors_attempts_and_times(admin_client):
    conversation = ConversationFactory(title="Quarterly report")
    task = make_task(S.FAILED, conversation_id=conversation.pk, target_client_id="laptop", target_platform="claude")
    page = admin_client.get(LIST).content.decode()
    assert f'title="{task.task_id}">{task.task_id[:8]}<' in page  # short id, the full one on hover
    assert "test.instruction" in page
    assert "Failed" in page
    assert 'class="error-preview" title="boom">boom<' in page
    assert "Quarterly report" in page and f"/admin/conversations/conversation/{conversation.pk}/change/" in page
    assert "run 1 of 3" in page  # attempts used of max
    assert "2023-11-14 22:13:20.000 UTC" in page  # updated (T0) as a time on hover, its age shown
    assert str(task.updated_at) not in page


def test_the_list_needs_a_fixed_number_of_queries(admin_client, django_assert_max_num_queries):
    for _ in range(3):
        make_task(S.PENDING, conversation_id=ConversationFactory().pk)
    admin_client.get(LIST)  # warm up the session and content types
    with django_assert_max_num_queries(12) as few:
        admin_client.get(LIST)
    for _ in range(10):
        make_task(S.PENDING, conversation_id=ConversationFactory().pk)
    with django_assert_max_num_queries(len(few.captured_queries)):
        admin_client.get(LIST)


def test_the_list_joins_only_conversations_and_fetches_no_payload(admin_client, django_assert_max_num_queries):
    message = MessageFactory(text="word " * 20_000)
    instruction = InstructionFactory(message=message)
    make_task(S.SUCCEEDED, conversation_id=message.conversation_id, message_id=message.pk,
              instruction_id=instruction.pk)
    admin_client.get(LIST)
    with django_assert_max_num_queries(10) as queries:
        response = admin_client.get(LIST)
    assert str(message.conversation) in response.content.decode()
    sql = "\n".join(query["sql"] for query in queries.captured_queries)
    assert "conversations_message" not in sql and "ingest_instruction" not in sql
    # The payload's head only (for the args preview), inside SUBSTR / SUBSTRING.
    assert not re.search(r'(?<!\()"automation_tasks"\."payload_json"', sql) and '"result_json"' not in sql


@pytest.mark.parametrize(
    "query,expected",
    [
        ("status__exact=blocked", {"blocked"}),
        ("kind=test.local", {"local"}),
        ("target_platform=gemini", {"gemini"}),
        ("target_client_id=desk", {"gemini"}),
    ],
)
def test_filters(admin_client, query, expected):
    tasks = {
        "blocked": make_task(S.BLOCKED),
        "local": make_task(S.PENDING, kind="test.local"),
        "gemini": make_task(S.PENDING, kind="test.outbound", target_client_id="desk", target_platform="gemini"),
    }
    page = admin_client.get(f"{LIST}?{query}").content.decode()
    shown = {name for name, task in tasks.items() if task.task_id in page}
    assert shown == expected


def test_a_conversations_tasks_are_one_link_away(admin_client):
    conversation = ConversationFactory()
    mine, other = make_task(conversation_id=conversation.pk), make_task(conversation_id=ConversationFactory().pk)
    page = admin_client.get(LIST, {"conversation__id__exact": conversation.pk}).content.decode()
    assert mine.task_id in page and other.task_id not in page


def test_search_by_task_id_dedupe_key_and_conversation(admin_client):
    conversation = ConversationFactory(remote_id="abc-remote", title="Garden plans")
    in_conversation = make_task(conversation_id=conversation.pk)
    keyed = make_task(dedupe_key="deliver:message:42")
    other = make_task()
    for term, task in [
        (in_conversation.task_id[:12], in_conversation),
        ("deliver:message:42", keyed),
        ("abc-remote", in_conversation),
        ("Garden", in_conversation),
    ]:
        page = admin_client.get(LIST, {"q": term}).content.decode()
        assert task.task_id in page, term
        assert other.task_id not in page, term


# --- actions -------------------------------------------------------------------------------------


def test_retry_moves_failed_and_cancelled_tasks_and_reports_the_rest(admin_client, admin_user):
    failed, cancelled, succeeded, pending = (
        make_task(S.FAILED), make_task(S.CANCELLED), make_task(S.SUCCEEDED), make_task(S.PENDING)
    )
    notes = run_action(admin_client, "retry", [failed, cancelled, succeeded, pending])
    assert [status(t) for t in (failed, cancelled, succeeded, pending)] == [
        S.PENDING, S.PENDING, S.SUCCEEDED, S.PENDING,
    ]
    assert AutomationTask.objects.get(pk=failed.pk).attempt_count == 0
    assert last_event(failed).actor == admin_user.username == last_event(cancelled).actor
    done, skipped = notes
    assert done.startswith("Retried 2 task(s)") and failed.task_id in done and cancelled.task_id in done
    assert skipped.startswith("Skipped 2 task(s)")
    assert f"cannot retry a task that is succeeded: {succeeded.task_id}" in skipped
    assert f"cannot retry a task that is pending: {pending.task_id}" in skipped


def test_cancel_ends_running_and_waiting_tasks_but_not_finished_ones(admin_client, admin_user):
    running, pending, blocked, succeeded = (
        make_task(S.RUNNING), make_task(S.PENDING), make_task(S.BLOCKED), make_task(S.SUCCEEDED)
    )
    notes = run_action(admin_client, "cancel", [running, pending, blocked, succeeded])
    assert [status(t) for t in (running, pending, blocked)] == [S.CANCELLED] * 3
    assert status(succeeded) == S.SUCCEEDED
    event = last_event(running)
    assert (event.status_from, event.status_to, event.actor) == (S.RUNNING, S.CANCELLED, admin_user.username)
    assert notes[0].startswith("Cancelled 3 task(s)")
    assert notes[1] == f"Skipped 1 task(s) (cannot cancel a task that is succeeded: {succeeded.task_id})"


def test_approve_releases_only_blocked_tasks(admin_client, admin_user):
    blocked, running = make_task(S.BLOCKED), make_task(S.RUNNING)
    notes = run_action(admin_client, "approve", [blocked, running])
    assert (status(blocked), status(running)) == (S.PENDING, S.RUNNING)
    assert last_event(blocked).actor == admin_user.username
    assert notes == [
        f"Approved 1 task(s): {blocked.task_id}",
        f"Skipped 1 task(s) (cannot approve a task that is running: {running.task_id})",
    ]


def test_reject_fails_only_blocked_tasks_naming_the_operator(admin_client, admin_user):
    blocked, pending = make_task(S.BLOCKED), make_task(S.PENDING)
    notes = run_action(admin_client, "reject", [blocked, pending])
    rejected = AutomationTask.objects.get(pk=blocked.pk)
    assert (rejected.status, status(pending)) == (S.FAILED, S.PENDING)
    assert rejected.last_error == f"rejected by {admin_user.username}"
    assert notes[0] == f"Rejected 1 task(s): {blocked.task_id}"
    assert "cannot reject a task that is pending" in notes[1]


def test_an_action_runs_from_the_task_page_too(admin_client):
    running = make_task(S.RUNNING)
    response = admin_client.post(
        change_url(running),
        {"CHANGE_FORM-action": "cancel", ACTION_CHECKBOX_NAME: [running.pk], "CHANGE_FORM-index": 0},
        follow=True,
    )
    assert response.status_code == 200
    assert status(running) == S.CANCELLED


def change_form_actions(client, task):
    page = client.get(change_url(task)).content.decode()
    menu = re.search(r'<select name="CHANGE_FORM-action".*?</select>', page, re.S)
    return set(re.findall(r'<option value="(\w+)"', menu[0])) if menu else set()


@pytest.mark.parametrize("state, offered", [
    (S.BLOCKED, {"approve", "reject", "cancel"}),
    (S.FAILED, {"retry"}),
    (S.CANCELLED, {"retry"}),
    (S.PENDING, {"cancel"}),
    (S.RETRY_WAIT, {"cancel"}),
    (S.RUNNING, {"cancel"}),
    (S.LEASED, set()),
    (S.SUCCEEDED, set()),
])
def test_the_task_page_offers_only_the_actions_that_apply_to_its_status(admin_client, state, offered):
    assert change_form_actions(admin_client, make_task(state)) == offered


def test_an_action_that_no_longer_applies_is_refused_from_the_task_page(admin_client):
    failed = make_task(S.FAILED)
    response = admin_client.post(
        change_url(failed),
        {"CHANGE_FORM-action": "reject", ACTION_CHECKBOX_NAME: [failed.pk], "CHANGE_FORM-index": 0},
        follow=True,
    )
    assert response.status_code == 200
    assert status(failed) == S.FAILED
    assert AutomationTask.objects.get(pk=failed.pk).events.filter(action="reject").count() == 0


def test_the_task_list_still_offers_every_action(admin_client):
    page = admin_client.get(LIST).content.decode()
    assert set(re.findall(r'<option value="(retry|cancel|approve|reject)"', page)) == {
        "retry", "cancel", "approve", "reject"}


# --- the task page -------------------------------------------------------------------------------


def test_the_task_page_shows_pretty_json_links_and_the_timeline_in_order(admin_client, admin_user):
    message = MessageFactory()
    instruction = InstructionFactory(message=message, tool="files.read")
    task = make_task(
        S.FAILED,
        conversation_id=message.conversation_id, message_id=message.pk, instruction_id=instruction.pk,
    )
    AutomationTask.objects.filter(pk=task.pk).update(
        payload_json=json.dumps({"tool": "files.read", "params": {"path": "notes/todo.md"}}),
        result_json=json.dumps({"text": "<b>milk</b>"}),
    )
    tr.task_retry(task.pk, actor=admin_user.username, now=task.updated_at + 1000)

    page = admin_client.get(change_url(task)).content.decode()

    assert '<pre class="conductor-json conductor-text">' in page
    assert '  &quot;params&quot;: {\n    &quot;path&quot;: &quot;notes/todo.md&quot;\n  },' in page
    assert "&lt;b&gt;milk&lt;/b&gt;" in page  # escaped, never rendered as HTML
    assert f"/admin/conversations/conversation/{message.conversation_id}/change/" in page
    assert f"/admin/conversations/message/{message.pk}/change/" in page
    assert f"/admin/ingest/instruction/{instruction.pk}/change/" in page

    timeline = page[page.index('id="task-timeline"'):]
    rows = re.findall(
        r'<tr class="timeline-event">\s*<td>([^<]*)</td>\s*<td>([^<]*)</td>\s*<td>([^<]*)</td>\s*'
        r'<td class="timeline-actor">([^<]*)</td>',
        timeline,
    )
    assert [(action, transition, actor) for _, action, transition, actor in rows] == [
        ("create", "∅ → pending", "test"),
        ("lease", "pending → leased", "dispatcher-1"),
        ("start", "leased → running", "dispatcher-1"),
        ("fail", "running → failed", "dispatcher-1"),
        ("retry", "failed → pending", admin_user.username),
    ]
    assert rows[0][0] == "2023-11-14 22:13:20.000 UTC"  # T0
    assert "boom" in timeline  # the failure's error


@pytest.mark.parametrize("field", ["payload_json", "result_json"])
def test_the_task_page_shows_a_lone_surrogate_in_stored_json_as_a_replacement_character(admin_client, field):
    # A JSON escape is plain ASCII, so every database stores it; decoded, it is a lone surrogate.
    task = make_task(S.SUCCEEDED)
    AutomationTask.objects.filter(pk=task.pk).update(**{field: '{"text": "milk \\ud800 eggs"}'})
    response = admin_client.get(change_url(task))
    assert response.status_code == 200
    assert "milk \ufffd eggs" in response.content.decode()


def test_the_task_page_cannot_edit_a_task(admin_client):
    task = make_task(S.PENDING)
    page = admin_client.get(change_url(task)).content.decode()
    assert 'name="_save"' not in page
    assert 'name="status"' not in page
    response = admin_client.post(change_url(task), {"status": "succeeded", "_save": "Save"})
    assert response.status_code == 403
    assert status(task) == S.PENDING


def test_tasks_cannot_be_added_or_deleted_in_the_admin(admin_client):
    task = make_task(S.SUCCEEDED)
    assert admin_client.get(f"{LIST}add/").status_code == 403
    assert admin_client.get(f"{LIST}{task.pk}/delete/").status_code == 403
    assert "delete_selected" not in admin_client.get(LIST).content.decode()


# --- permissions ---------------------------------------------------------------------------------


def test_staff_with_view_permission_sees_tasks_but_cannot_act(client):
    client.force_login(make_staff("viewer", "automation.view_automationtask"))
    blocked = make_task(S.BLOCKED)
    page = client.get(LIST)
    assert page.status_code == 200 and blocked.task_id in page.content.decode()
    assert 'value="approve"' not in page.content.decode()
    client.post(LIST, {"action": "approve", ACTION_CHECKBOX_NAME: [blocked.pk], "index": 0})
    assert status(blocked) == S.BLOCKED
    assert client.get(change_url(blocked)).status_code == 200


def test_staff_with_change_permission_can_act(client):
    user = make_staff("operator", "automation.view_automationtask", "automation.change_automationtask")
    client.force_login(user)
    blocked = make_task(S.BLOCKED)
    notes = run_action(client, "approve", [blocked])
    assert status(blocked) == S.PENDING and notes == [f"Approved 1 task(s): {blocked.task_id}"]
    assert last_event(blocked).actor == "operator"


def test_staff_without_task_permissions_is_refused(client):
    client.force_login(make_staff("stranger", "conversations.view_conversation"))
    blocked = make_task(S.BLOCKED)
    assert client.get(LIST).status_code == 403
    assert client.get(change_url(blocked)).status_code == 403
    assert client.post(LIST, {"action": "approve", ACTION_CHECKBOX_NAME: [blocked.pk]}).status_code == 403
    assert status(blocked) == S.BLOCKED


# --- delivery methods -------------------------------------------------------------------------


def _delivery_request(task, method, *, delivered, result):
    return DeliveryRequest.objects.create(
        task=task, client=PluginClientFactory(), method=method, sent_at=1_700_000_000_000,
        answered_at=1_700_000_000_500, delivered=delivered, result=result,
    )


def test_the_list_filters_outbound_tasks_by_the_method_that_delivered(admin_client):
    by_http = make_task(S.SUCCEEDED, kind="test.outbound")
    by_dom = make_task(S.SUCCEEDED, kind="test.outbound")
    blocked_then_failed = make_task(S.FAILED, kind="test.outbound")
    _delivery_request(by_http, "http", delivered=True, result={"ok": True, "status": 200})
    _delivery_request(by_dom, "http", delivered=False, result={"ok": False, "error_code": "blocked"})
    _delivery_request(by_dom, "dom", delivered=True, result={"ok": True, "evidence": {"user_turn_seen": True}})
    _delivery_request(blocked_then_failed, "dom", delivered=False, result={"ok": False, "error": "no composer"})

    def shown(query):
        page = admin_client.get(f"{LIST}?{query}").content.decode()
        return {task.pk for task in (by_http, by_dom, blocked_then_failed) if task.pk in page}

    assert shown("delivered_by=http") == {by_http.pk}
    assert shown("delivered_by=dom") == {by_dom.pk}
    assert shown("") == {by_http.pk, by_dom.pk, blocked_then_failed.pk}


def test_the_task_page_shows_each_method_tried_and_why_it_fell_back(admin_client):
    task = make_task(S.RUNNING, kind="test.outbound")
    tr.task_progress(task.pk, lease=lease_of(task.pk), action="deliver", detail={"method": "http"})
    tr.task_progress(task.pk, lease=lease_of(task.pk), action="fallback", detail={
        "method": "http", "error_code": "blocked", "reason": "<b>403</b> Unusual activity",
    })
    _delivery_request(task, "http", delivered=False, result={
        "ok": False, "status": 403, "error": "<b>Unusual activity</b>", "error_code": "blocked",
    })
    _delivery_request(task, "dom", delivered=True, result={"ok": True, "evidence": {"user_turn_seen": True}})
    page = admin_client.get(change_url(task)).content.decode()
    assert "method: http, error_code: blocked, reason: &lt;b&gt;403&lt;/b&gt; Unusual activity" in page
    assert "blocked: HTTP 403: &lt;b&gt;Unusual activity&lt;/b&gt;" in page
    assert re.search(r"<td>dom</td><td>[^<]+</td><td>delivered \(", page)
    assert "<b>" not in page


# --- a task's error once it has succeeded -----------------------------------------------------


def events(*actions):
    """A timeline: each action, with an error where it is written ``action!``."""
    return [TaskEvent(action=a.rstrip("!"), error="boom" if a.endswith("!") else None) for a in actions]


@pytest.mark.parametrize("timeline, found", [
    ([], None),
    (["create", "lease", "start", "succeed"], None),
    (["create", "lease", "start", "retry_later!", "lease", "start", "succeed"], ErrorAttempt(1, False)),
    (["create", "lease", "start", "retry_later!", "lease", "start", "retry_later!", "lease", "start", "succeed"],
     ErrorAttempt(2, False)),
    (["create", "lease", "start", "reclaim!", "lease", "start", "succeed"], ErrorAttempt(1, False)),
    (["create", "lease", "start", "fail!", "retry", "lease", "start", "succeed"], ErrorAttempt(1, True)),
    (["create", "reject!"], ErrorAttempt(0, False)),
])
def test_error_attempt_names_the_run_the_last_error_came_from(timeline, found):
    assert error_attempt(events(*timeline)) == found


def succeed_after_a_retryable_failure():
    task = make_task(S.RETRY_WAIT)  # attempt 1 failed: "flaky"
    later = T0 + 10_000
    task_lease(task.pk, lease_owner=OWNER, lease_until=later + LEASE_MS, now=later)
    tr.task_start(task.pk, lease=lease_of(task.pk), lease_until=later + LEASE_MS, now=later)
    return tr.task_succeed(task.pk, lease=lease_of(task.pk), result={"ok": 1}, now=later)


def test_a_succeeded_tasks_page_shows_its_error_as_a_previous_attempts(admin_client):
    task = succeed_after_a_retryable_failure()
    assert (task.status, task.attempt_count, task.last_error) == (S.SUCCEEDED, 2, "flaky")
    page = admin_client.get(change_url(task)).content.decode()
    assert "Last error" not in page
    assert re.search(r"Previous error:</label>\s*<div class=\"readonly\">\(attempt 1\) flaky</div>", page), page


def test_a_failed_tasks_page_shows_its_last_error(admin_client):
    page = admin_client.get(change_url(make_task(S.FAILED))).content.decode()
    assert re.search(r"Last error:</label>\s*<div class=\"readonly\">boom</div>", page)
    assert "Previous error" not in page


@pytest.mark.parametrize(
    "counts,shown",
    [((0, 3, 0), "run 0 of 3"), ((2, 3, 0), "run 2 of 3"), ((1, 3, 1), "run 1 of 3, series 2")],
)
def test_attempts_count_runs_within_the_series_an_operators_retry_starts(counts, shown):
    assert attempts_text(*counts) == shown


def test_a_retried_task_reads_as_its_second_series(admin_client):
    task = make_task(S.FAILED)
    tr.task_retry(task.pk, actor="operator")
    task.refresh_from_db()
    assert (task.attempt_count, task.retry_count, task.finish_reason) == (0, 1, None)
    assert "run 0 of 3, series 2" in admin_client.get(LIST).content.decode()


def test_call_summary_reads_a_cut_payload_for_its_tool_and_params():
    assert call_summary("instruction.execute", '{"tool": "files.read", "params": {"path": "a.md"}}') == (
        "files.read", '{"path":"a.md"}'
    )
    assert call_summary("instruction.execute", '{"tool": "shell.run", "params": {"argv": ["ech') == (
        "shell.run", '{"argv": ["ech'
    )
    assert call_summary("renewal.deliver", '{"conversation_id": 3, "text": "hi"}') == ("renewal.deliver", '{"text":"hi"}')


def test_the_failures_page_groups_faults_and_leaves_rejections_out(admin_client):
    for n in range(3):
        task = make_task(S.RUNNING)
        tr.task_fail(task.pk, lease=lease_of(task.pk), error=f"HTTP 50{n} from request {n}")
    tr.task_reject(make_task(S.BLOCKED).pk, actor="alice", reason="no")
    page = admin_client.get("/admin/failures/").content.decode()
    assert page.count('class="failure-group"') == 1
    assert "HTTP &lt;n&gt; from request &lt;n&gt;" in page
    assert "Retry all 3" in page
    assert "rejected by" not in page
