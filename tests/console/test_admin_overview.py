import datetime as dt
import re

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.utils import timezone

from automation.models import AutomationTask, DispatcherState, DispatcherWorker, TaskStatus
from automation.selectors import (
    HOUR_MS,
    HourlyFinishes,
    paused_kinds,
    task_counts_by_kind_status_and_outcome,
    task_finishes_by_hour,
)
from automation.services import transitions as tr
from automation.services.dispatcher_state import (
    dispatcher_pause_set,
    dispatcher_worker_heartbeat,
)
from console.views import chart_layout, status_table
from core.clock import now_ms
from tests.factories import (
    ConversationFactory,
    InstructionFactory,
    PluginClientFactory,
    lease_of,
    make_staff,
    make_task,
    task_lease,
)

pytestmark = pytest.mark.django_db

S = TaskStatus
OVERVIEW = "/admin/overview/"
PAUSE = "/admin/overview/pause/"


def section(page, element_id):
    """The HTML of the module with this id, up to the next module."""
    start = page.index(f'id="{element_id}"')
    end = page.find('<div class="module', start)
    return page[start:end if end != -1 else None]


# --- the page ------------------------------------------------------------------------------------


def test_the_admin_index_links_to_the_overview(admin_client):
    assert 'href="/admin/overview/"' in admin_client.get("/admin/").content.decode()


def test_the_overview_counts_tasks_by_status_and_kind(admin_client):
    for state in (S.PENDING, S.PENDING, S.BLOCKED, S.FAILED, S.BLOCKED):
        make_task(state)
    make_task(S.SUCCEEDED, kind="test.local")
    # A rejection leaves the task failed, but it is counted apart from the faults.
    tr.task_reject(make_task(S.BLOCKED).pk, actor="alice", reason="no")
    page = admin_client.get(OVERVIEW).content.decode()
    totals = section(page, "overview-tasks")
    cells = dict(re.findall(r'data-status="(\w+)">(?:<a [^>]*>)?(\d+)', totals))
    assert cells == {
        "pending": "2", "leased": "0", "running": "0", "retry_wait": "0",
        "succeeded": "1", "fault": "1", "rejected": "1", "blocked": "2", "cancelled": "0",
    }
    assert "status__exact=failed&amp;outcome=rejected" in totals
    assert "test.instruction" in totals and "test.local" in totals
    assert "?kind=test.local&amp;status__exact=succeeded" in totals


def test_the_overview_lists_instructions_awaiting_approval(admin_client):
    conversation = ConversationFactory(title="Build server")
    instruction = InstructionFactory(tool="shell.run")
    blocked = make_task(S.BLOCKED, conversation_id=conversation.pk, instruction_id=instruction.pk)
    make_task(S.PENDING)
    part = section(admin_client.get(OVERVIEW).content.decode(), "overview-approval")
    assert '<span class="overview-number" id="blocked-count">1</span>' in part
    assert "/admin/automation/automationtask/?status__exact=blocked" in part
    assert f"/admin/automation/automationtask/{blocked.pk}/change/" in part
    assert "shell.run" in part and "Build server" in part


def test_the_overview_draws_throughput_and_failures_as_inline_svg(admin_client):
    now = now_ms()
    for _ in range(3):
        make_task(S.SUCCEEDED, now=now - 1000)
    make_task(S.SUCCEEDED, now=now - 5 * HOUR_MS)
    make_task(S.FAILED, now=now - 2 * HOUR_MS)
    make_task(S.SUCCEEDED, now=now - 30 * HOUR_MS)  # older than the chart
    part = section(admin_client.get(OVERVIEW).content.decode(), "overview-throughput")
    assert "<svg" in part and "</svg>" in part
    assert '<strong id="throughput-succeeded">4</strong>' in part
    assert '<strong id="throughput-failed">1</strong>' in part
    assert len(re.findall(r'<rect class="succeeded"', part)) == 24
    assert len(re.findall(r'<rect class="failed"', part)) == 24
    assert ": 3 succeeded</title>" in part and ": 1 failed</title>" in part
    assert "<script" not in part


def test_the_overview_lists_the_ten_most_recent_failures(admin_client):
    failures = [make_task(S.FAILED, now=now_ms() - n * 1000) for n in range(12)]
    part = section(admin_client.get(OVERVIEW).content.decode(), "overview-failures")
    listed = re.findall(r"/admin/automation/automationtask/(\w+)/change/", part)
    assert listed == [task.pk for task in failures[:10]]  # newest first
    assert "boom" in part


def test_the_overview_shows_the_newest_heartbeat_and_flags_a_lagging_dispatcher(admin_client, settings):
    settings.CONDUCTOR_TICK_SECONDS = 2
    dispatcher_worker_heartbeat(owner="host-1:42:abc", server="host-1:8000", now=now_ms() - 60_000)
    dispatcher_worker_heartbeat(owner="host-2:51:def", server="host-2:8000", now=now_ms() - 1000)
    part = section(admin_client.get(OVERVIEW).content.decode(), "overview-dispatcher")
    assert "by host-2:51:def on host-2:8000" in part and 'id="dispatcher-lagging"' not in part

    DispatcherWorker.objects.filter(owner="host-2:51:def").delete()
    part = section(admin_client.get(OVERVIEW).content.decode(), "overview-dispatcher")
    assert "by host-1:42:abc on host-1:8000" in part
    assert 'id="dispatcher-lagging"' in part and "more than 6 s" in part


def test_the_overview_lists_every_dispatcher_loop_at_work_and_not_a_stalled_one(admin_client, settings):
    settings.CONDUCTOR_TICK_SECONDS = 2
    now = now_ms()
    dispatcher_worker_heartbeat(owner="host-1:43:abc", server="host-1:8000", now=now)
    dispatcher_worker_heartbeat(owner="host-2:51:def", server="host-2:8000", now=now)
    dispatcher_worker_heartbeat(owner="host-3:60:fed", server="host-3:8000", now=now - 11_000)
    part = section(admin_client.get(OVERVIEW).content.decode(), "dispatcher-workers")
    assert "at work (2)" in part
    assert "host-1:43:abc on host-1:8000, last beat 0" in part and "host-2:51:def on host-2:8000" in part
    assert "host-3:60:fed" not in part  # its heartbeat is older than 10 s: stalled

    DispatcherWorker.objects.all().delete()
    part = section(admin_client.get(OVERVIEW).content.decode(), "dispatcher-workers")
    assert "No dispatcher loop at work" in part


def test_a_dispatcher_that_never_ticked_is_flagged(admin_client):
    part = section(admin_client.get(OVERVIEW).content.decode(), "overview-dispatcher")
    assert 'id="dispatcher-lagging"' in part and "never" in part


def test_the_overview_lists_connected_plugin_clients_only(admin_client):
    PluginClientFactory(client_id="present", connected=True, last_seen_at=timezone.now())
    PluginClientFactory(client_id="stale", connected=True, last_seen_at=timezone.now() - dt.timedelta(hours=1))
    PluginClientFactory(client_id="offline")
    part = section(admin_client.get(OVERVIEW).content.decode(), "overview-clients")
    assert re.findall(r'<li class="connected-client">([\w-]+)', part) == ["present"]


def test_the_overview_needs_a_fixed_number_of_queries(admin_client, django_assert_max_num_queries):
    admin_client.get(OVERVIEW)
    for state in (S.BLOCKED, S.FAILED, S.SUCCEEDED):
        for _ in range(5):
            make_task(state, conversation_id=ConversationFactory().pk, instruction_id=InstructionFactory().pk)
    with django_assert_max_num_queries(15):
        admin_client.get(OVERVIEW)


# --- the global pause ---------------------------------------------------------------------------


def test_a_superuser_pauses_and_resumes_the_dispatcher(admin_client, admin_user):
    page = admin_client.get(OVERVIEW).content.decode()
    assert 'action="/admin/overview/pause/"' in page and 'name="csrfmiddlewaretoken"' in page

    response = admin_client.post(PAUSE, {"is_paused": "1"}, follow=True)
    state = DispatcherState.objects.get()
    assert state.is_paused and state.paused_by == admin_user.username
    page = response.content.decode()
    assert 'id="dispatcher-paused"' in page and "Resume the dispatcher" in page
    assert "The dispatcher is paused" in page

    admin_client.post(PAUSE, {"is_paused": "0"})
    assert not DispatcherState.objects.get().is_paused
    assert list(LogEntry.objects.order_by("action_time", "pk").values_list("user__username", "change_message")) == [
        (admin_user.username, "Paused all claiming"), (admin_user.username, "Resumed claiming"),
    ]


def test_pausing_twice_says_so_and_changes_nothing(admin_client):
    dispatcher_pause_set(is_paused=True, actor="alice")
    response = admin_client.post(PAUSE, {"is_paused": "1"}, follow=True)
    assert "The dispatcher was already paused." in response.content.decode()
    assert DispatcherState.objects.get().paused_by == "alice"


def test_the_pause_switch_takes_only_a_post_with_a_csrf_token(admin_user):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(admin_user)
    assert browser.get(PAUSE).status_code == 405
    assert browser.post(PAUSE, {"is_paused": "1"}).status_code == 403
    assert not DispatcherState.objects.filter(is_paused=True).exists()


def test_staff_who_may_view_tasks_see_the_overview_but_cannot_switch_the_pause(client):
    client.force_login(make_staff("viewer", "automation.view_automationtask"))
    assert 'href="/admin/overview/"' in client.get("/admin/").content.decode()
    page = client.get(OVERVIEW)
    assert page.status_code == 200
    assert 'action="/admin/overview/pause/"' not in page.content.decode()
    assert client.post(PAUSE, {"is_paused": "1"}).status_code == 403
    assert not DispatcherState.objects.filter(is_paused=True).exists()


@pytest.mark.parametrize("permissions", [(), ("conversations.view_conversation", "ingest.view_instruction")])
def test_staff_who_may_not_view_tasks_are_refused_the_overview_and_not_shown_its_link(client, permissions):
    client.force_login(make_staff("stranger", *permissions))
    make_task(S.FAILED, conversation_id=ConversationFactory(title="Secret plans").pk)
    response = client.get(OVERVIEW)
    assert response.status_code == 403
    assert "Secret plans" not in response.content.decode() and "boom" not in response.content.decode()
    assert "/admin/overview/" not in client.get("/admin/").content.decode()
    assert client.post(PAUSE, {"is_paused": "1"}).status_code == 403
    assert not DispatcherState.objects.filter(is_paused=True).exists()


@pytest.mark.parametrize("url", [OVERVIEW, PAUSE])
def test_anonymous_visitors_are_sent_to_the_login(client, url):
    response = client.post(url, {"is_paused": "1"}) if url == PAUSE else client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    assert not DispatcherState.objects.filter(is_paused=True).exists()


# --- the pieces ---------------------------------------------------------------------------------


def test_finished_tasks_are_counted_once_by_the_clock_hour_they_finished_in():
    now = 1_700_000_000_000  # 22:13:20 UTC
    current_hour = now // HOUR_MS * HOUR_MS
    make_task(S.SUCCEEDED, now=current_hour)
    make_task(S.SUCCEEDED, now=now)
    make_task(S.FAILED, now=current_hour - 1)  # the last millisecond of the hour before
    retried = make_task(S.FAILED, now=current_hour - 3 * HOUR_MS)
    tr.task_retry(retried.pk, actor="alice", now=now)  # open again: the table counts it pending, the chart not
    make_task(S.FAILED, now=current_hour - 23 * HOUR_MS - 1)  # just outside 24 hours

    buckets = task_finishes_by_hour(now_ms=now, hours=24)

    assert len(buckets) == 24
    assert buckets[-1] == HourlyFinishes(start_ms=current_hour, succeeded=2, failed=0)
    assert buckets[-2] == HourlyFinishes(start_ms=current_hour - HOUR_MS, succeeded=0, failed=1)
    assert buckets[-4].failed == 0
    assert buckets[0].start_ms == current_hour - 23 * HOUR_MS
    assert sum(b.failed for b in buckets) == 1 and sum(b.succeeded for b in buckets) == 2


def test_the_chart_and_the_table_of_kinds_count_the_same_tasks(admin_client):
    now = now_ms()
    failed_twice = make_task(S.FAILED, now=now - 2000)
    tr.task_retry(failed_twice.pk, actor="alice", now=now - 1500)
    task_lease(failed_twice.pk, lease_owner="w", lease_until=now + 60_000, now=now - 1000)
    lease = lease_of(failed_twice.pk)
    tr.task_start(failed_twice.pk, lease=lease, lease_until=now + 60_000, now=now - 1000)
    tr.task_fail(failed_twice.pk, lease=lease, error="boom again", now=now - 500)
    rejected = make_task(S.BLOCKED, now=now - 400)
    tr.task_reject(rejected.pk, actor="alice", reason="not now", now=now - 300)

    chart = task_finishes_by_hour(now_ms=now, hours=24)
    totals = {column.value: n for column, n in status_table(task_counts_by_kind_status_and_outcome())["totals"]}
    assert (sum(b.failed for b in chart), sum(b.rejected for b in chart)) == (1, 1)
    assert (totals["fault"], totals["rejected"]) == (1, 1)
    page = admin_client.get(OVERVIEW).content.decode()
    assert '<strong id="throughput-failed">1</strong>' in page and "tasks per hour" in page


def test_chart_layout_scales_bars_to_the_tallest():
    hour = 1_700_000_000_000 // HOUR_MS * HOUR_MS
    chart = chart_layout([HourlyFinishes(hour, 4, 0, 0), HourlyFinishes(hour + HOUR_MS, 2, 1, 3)])
    heights = {(bar.hour.hour, bar.series): bar.height for bar in chart.bars}
    full = chart.plot_bottom - chart.plot_top
    assert heights == {
        (22, "succeeded"): full, (22, "failed"): 0, (22, "rejected"): 0,
        (23, "succeeded"): full / 2, (23, "failed"): full / 4, (23, "rejected"): full * 3 / 4,
    }
    assert all(bar.y + bar.height == chart.plot_bottom for bar in chart.bars)
    assert (chart.total_succeeded, chart.total_failed, chart.total_rejected, chart.max_count) == (6, 1, 3, 4)


def test_an_empty_chart_has_no_division_by_zero():
    chart = chart_layout([HourlyFinishes(0, 0, 0)] * 24)
    assert chart.max_count == 1 and all(bar.height == 0 for bar in chart.bars)


def test_status_table_sums_each_status_across_kinds():
    table = status_table({
        ("a", "pending", ""): 2, ("a", "failed", "fault"): 1, ("b", "pending", ""): 3,
        ("b", "failed", "rejected"): 2,
    })
    totals = {column.value: n for column, n in table["totals"]}
    assert (totals[S.PENDING], totals["fault"], totals["rejected"], table["total"]) == (5, 1, 2, 8)
    assert [(kind, total) for kind, _, total in table["rows"]] == [("a", 3), ("b", 5)]


# --- the front door: / ---------------------------------------------------------------------------


def test_the_front_door_sends_staff_who_may_read_the_overview_there(admin_client):
    response = admin_client.get("/")
    assert (response.status_code, response["Location"]) == (302, OVERVIEW)


def test_the_front_door_sends_other_staff_to_the_admin_index(client):
    client.force_login(make_staff("clerk", "conversations.view_conversation", password=None))
    assert client.get("/")["Location"] == "/admin/"


@pytest.mark.parametrize("who", ["anonymous", "not staff"])
def test_the_front_door_sends_anyone_else_to_the_login_and_back(client, who):
    from django.contrib.auth.models import User

    if who == "not staff":
        client.force_login(User.objects.create_user("visitor", password=None))
    response = client.get("/")
    assert (response.status_code, response["Location"]) == (302, "/admin/login/?next=/")


def test_the_admins_view_site_link_leads_to_the_front_door(admin_client):
    page = admin_client.get("/admin/").content.decode()
    assert re.search(r'<a href="/">View site</a>', page), page[:2000]
    assert admin_client.get("/").status_code == 302


def test_purge_counts_first_then_deletes_what_prune_would(admin_client):
    old = make_task(S.SUCCEEDED, now=1_000)
    kept = make_task(S.PENDING, now=1_000)
    page = admin_client.get("/admin/overview/purge/").content.decode()
    assert "<strong>1</strong> tasks" in page
    assert AutomationTask.objects.filter(pk=old.pk).exists()
    admin_client.post("/admin/overview/purge/", {"days": "30", "confirm": "yes"})
    assert not AutomationTask.objects.filter(pk=old.pk).exists()
    assert AutomationTask.objects.filter(pk=kept.pk).exists()


def test_purge_is_for_superusers(client):
    client.force_login(make_staff("viewer", "automation.view_automationtask"))
    assert client.get("/admin/overview/purge/").status_code == 403


def test_a_kind_is_paused_and_resumed_from_the_overview(admin_client):
    admin_client.post("/admin/overview/pause-kind/", {"kind": "renewal.deliver", "is_paused": "1"})
    assert "renewal.deliver" in paused_kinds()
    assert LogEntry.objects.filter(change_message="Paused claiming renewal.deliver").exists()
    admin_client.post("/admin/overview/pause-kind/", {"kind": "renewal.deliver", "is_paused": "0"})
    assert paused_kinds() == set()
