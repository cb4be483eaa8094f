"""The renewal projector, `manage.py renew` and the operator's "renew now"."""

import datetime as dt
import logging
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_q.models import Schedule

from automation.models import AutomationTask, TaskStatus
from automation.services import transitions as tr
from pipelines.renewal import (
    DEFAULT_RENEWAL_TEXT,
    DRY_RUN_TASK_ID,
    RENEWAL_DELIVER,
    RenewalReport,
    conversations_renew_now,
    renewal_project,
)
from pipelines.jobs import renew_scheduled
from tests.factories import (
    ConversationFactory,
    ConversationLinkFactory,
    make_renewable_conversation,
    make_task,
    task_lease,
    lease_of,
)

pytestmark = pytest.mark.django_db

S = TaskStatus
NOW = dt.datetime(2024, 5, 10, 12, 0, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)


def ms(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


def renewable(**fields):
    return make_renewable_conversation(last_activity_at=fields.pop("last_activity_at", NOW - HOUR), **fields)


def renewals():
    return list(AutomationTask.objects.filter(kind=RENEWAL_DELIVER).order_by("sequence"))


def earlier_renewal(conversation, status, at):
    return make_task(status, kind=RENEWAL_DELIVER, conversation_id=conversation.pk, now=ms(at))


def finish(task_id, at):
    now = ms(at)
    task_lease(task_id, lease_owner="d", lease_until=now + 60_000, now=now)
    tr.task_start(task_id, lease=lease_of(task_id), lease_until=now + 60_000, now=now)
    tr.task_succeed(task_id, lease=lease_of(task_id), result={"ok": True}, now=now)


def renew(*args):
    out = StringIO()
    call_command("renew", *args, stdout=out)
    return out.getvalue().strip().splitlines()


def test_renewal_is_off_by_default():
    conversation = ConversationFactory(last_activity_at=NOW - dt.timedelta(days=2))
    ConversationLinkFactory(conversation=conversation)
    report = renewal_project(now=NOW)
    assert report.created == [] and report.skipped == []
    assert renewals() == []


def test_an_idle_conversation_gets_one_task_with_its_text_route_and_idle_period_key(caplog):
    conversation = renewable(renewal_text="Keep going, please.")
    link = conversation.links.get()

    with caplog.at_level(logging.INFO, logger="pipelines.renewal"):
        report = renewal_project(now=NOW)

    [task] = renewals()
    assert report.created == [(conversation.pk, task.pk)] and report.skipped == []
    assert task.status == S.PENDING
    assert task.payload == {"conversation_id": conversation.pk, "text": "Keep going, please."}
    assert task.dedupe_key == f"renew:{conversation.pk}:{ms(NOW - HOUR)}"
    assert task.conversation_id == conversation.pk
    assert (task.target_client_id, task.target_platform, task.target_conversation_id) == (
        link.client.client_id, conversation.platform, conversation.remote_id,
    )
    assert task.created_at == ms(NOW)
    assert task.events.get().actor == "renewal"
    [line] = [r.getMessage() for r in caplog.records if "renewal_create" in r.getMessage()]
    assert line == f"action=renewal_create conversation_id={conversation.pk} task_id={task.pk} actor=renewal"


def test_a_blank_text_sends_the_default():
    renewable(renewal_text="  ")
    renewal_project(now=NOW)
    assert renewals()[0].payload["text"] == DEFAULT_RENEWAL_TEXT


def test_running_twice_renews_an_idle_period_once_even_after_the_first_was_delivered():
    conversation = renewable()
    first = renewal_project(now=NOW)
    second = renewal_project(now=NOW + dt.timedelta(seconds=30))
    assert len(first.created) == 1 and second.created == []
    assert second.skipped == [(conversation.pk, "a renewal is still open")]

    finish(first.created[0][1], NOW + dt.timedelta(minutes=1))
    third = renewal_project(now=NOW + dt.timedelta(minutes=2))
    assert third.created == []
    assert third.skipped == [(conversation.pk, "already renewed since its last activity")]
    assert len(renewals()) == 1


def test_a_conversation_not_idle_long_enough_is_skipped():
    conversation = renewable(renewal_idle_seconds=3600, last_activity_at=NOW - dt.timedelta(minutes=59))
    report = renewal_project(now=NOW)
    assert report.created == [] and report.skipped == [(conversation.pk, "not idle yet")]
    assert renewal_project(now=NOW + dt.timedelta(minutes=1)).created != []


def test_paused_conversations_and_ones_without_a_link_or_activity_are_never_renewed():
    paused = renewable(paused=True)
    unlinked = renewable(has_link=False)
    silent = renewable()
    type(silent).objects.filter(pk=silent.pk).update(last_activity_at=None)

    report = renewal_project(now=NOW)

    assert report.created == []
    assert report.skipped == [(paused.pk, "paused"), (unlinked.pk, "no link"), (silent.pk, "no activity yet")]
    assert renewals() == []


def test_the_daily_cap_counts_todays_renewals_only():
    capped = renewable(renewal_daily_cap=2)
    earlier_renewal(capped, S.SUCCEEDED, NOW - dt.timedelta(hours=3))
    earlier_renewal(capped, S.CANCELLED, NOW.replace(hour=0, minute=0))
    below_cap = renewable(renewal_daily_cap=2)
    earlier_renewal(below_cap, S.SUCCEEDED, NOW - dt.timedelta(hours=3))
    earlier_renewal(below_cap, S.FAILED, NOW.replace(hour=0) - dt.timedelta(seconds=1))  # yesterday
    earlier_renewal(below_cap, S.SUCCEEDED, NOW - dt.timedelta(days=1))

    report = renewal_project(now=NOW)

    assert report.skipped == [(capped.pk, "daily cap reached")]
    assert [pk for pk, _ in report.created] == [below_cap.pk]


def test_the_operators_renew_now_counts_towards_the_daily_cap():
    conversation = renewable(renewal_daily_cap=1)
    renewed = conversations_renew_now(conversation_ids=[conversation.pk], actor="alice", now=NOW)
    finish(renewed.created[0][1], NOW)
    report = renewal_project(now=NOW + dt.timedelta(minutes=1))
    assert report.skipped == [(conversation.pk, "daily cap reached")]


@pytest.mark.parametrize("status", [S.PENDING, S.RETRY_WAIT, S.RUNNING])
def test_an_open_renewal_is_not_stacked_even_from_yesterday(status):
    conversation = renewable(renewal_daily_cap=1)
    earlier_renewal(conversation, status, NOW - dt.timedelta(days=1))
    report = renewal_project(now=NOW)
    assert report.created == [] and report.skipped == [(conversation.pk, "a renewal is still open")]


def test_new_activity_opens_a_new_idle_period_and_a_new_renewal():
    conversation = renewable()
    first = renewal_project(now=NOW).created[0][1]
    finish(first, NOW + dt.timedelta(minutes=1))
    answered = NOW + dt.timedelta(minutes=5)
    type(conversation).objects.filter(pk=conversation.pk).update(last_activity_at=answered)

    too_soon = renewal_project(now=answered + dt.timedelta(minutes=29))
    assert too_soon.skipped == [(conversation.pk, "not idle yet")]
    report = renewal_project(now=answered + dt.timedelta(minutes=30))

    [(pk, second)] = report.created
    assert pk == conversation.pk and second != first
    assert AutomationTask.objects.get(pk=second).dedupe_key == f"renew:{conversation.pk}:{ms(answered)}"


def test_a_dry_run_decides_the_same_and_creates_nothing():
    due = renewable()
    paused = renewable(paused=True)
    report = renewal_project(now=NOW, dry_run=True)
    assert report.created == [(due.pk, DRY_RUN_TASK_ID)]
    assert report.skipped == [(paused.pk, "paused")]
    assert str(report) == f"1 would be created, 1 skipped ({paused.pk}: paused)"
    assert renewals() == []


def test_the_report_groups_skipped_conversations_by_reason():
    report = RenewalReport(
        created=[(1, "t1"), (2, "t2")], skipped=[(5, "paused"), (6, "no link"), (7, "paused")]
    )
    assert str(report) == "2 created, 3 skipped (5, 7: paused; 6: no link)"
    assert str(RenewalReport()) == "0 created, 0 skipped"


def test_the_command_prints_each_task_and_a_summary():
    conversation = make_renewable_conversation()
    paused = make_renewable_conversation(paused=True)

    assert renew("--dry-run") == [
        f"would create a renewal for conversation {conversation.pk}",
        f"1 would be created, 1 skipped ({paused.pk}: paused)",
    ]
    assert renewals() == []

    lines = renew()
    [task] = renewals()
    assert lines == [
        f"created renewal task {task.pk} for conversation {conversation.pk}",
        f"1 created, 1 skipped ({paused.pk}: paused)",
    ]
    assert renew()[-1].startswith("0 created, 2 skipped")


def test_renew_now_skips_paused_and_unlinked_conversations_and_renews_the_others_at_once():
    not_idle = renewable(last_activity_at=NOW - dt.timedelta(seconds=5), renewal_daily_cap=0)
    renewal_off = ConversationFactory(renewal_text="Go on.")
    ConversationLinkFactory(conversation=renewal_off)
    paused = renewable(paused=True)
    unlinked = renewable(has_link=False)

    report = conversations_renew_now(
        conversation_ids=[not_idle.pk, renewal_off.pk, paused.pk, unlinked.pk, 999_999],
        actor="alice",
        now=NOW,
    )

    tasks = {task.conversation_id: task for task in renewals()}
    assert report.created == [
        (not_idle.pk, tasks[not_idle.pk].pk), (renewal_off.pk, tasks[renewal_off.pk].pk),
    ]
    assert report.skipped == [
        (paused.pk, "paused"), (unlinked.pk, "no link"), (999_999, "no such conversation"),
    ]
    assert tasks[not_idle.pk].dedupe_key == f"renew:{not_idle.pk}:now:{ms(NOW)}"
    assert tasks[renewal_off.pk].payload == {"conversation_id": renewal_off.pk, "text": "Go on."}
    assert tasks[not_idle.pk].events.get().actor == "alice"


def test_renew_now_does_not_use_up_the_projectors_idle_period():
    conversation = renewable()
    earlier = NOW - dt.timedelta(minutes=5)
    conversations_renew_now(conversation_ids=[conversation.pk], actor="alice", now=earlier)
    finish(renewals()[0].pk, NOW - dt.timedelta(minutes=4))
    assert [pk for pk, _ in renewal_project(now=NOW).created] == [conversation.pk]


def test_the_projector_decides_in_a_fixed_number_of_queries():
    def add_conversations(n):
        for _ in range(n // 5):
            renewable()  # due
            renewable(last_activity_at=NOW - dt.timedelta(seconds=5))  # not idle
            renewable(paused=True)
            earlier_renewal(renewable(), S.PENDING, NOW - HOUR)  # open renewal
            capped = renewable(renewal_daily_cap=1)
            earlier_renewal(capped, S.CANCELLED, NOW - HOUR)

    def queries():
        with CaptureQueriesContext(connection) as captured:
            report = renewal_project(now=NOW, dry_run=True)
        return len(captured), len(report.created) + len(report.skipped)

    add_conversations(10)
    few, considered_few = queries()
    add_conversations(20)
    many, considered_many = queries()
    assert (considered_few, considered_many) == (10, 30)
    assert few == many <= 4


def test_already_renewed_conversations_cost_no_queries_of_their_own():
    def queries():
        with CaptureQueriesContext(connection) as captured:
            renewal_project(now=NOW)
        return len(captured)

    for _ in range(10):
        renewable()
    renewal_project(now=NOW - dt.timedelta(seconds=1))
    for task in renewals():
        finish(task.pk, NOW)
    few = queries()
    for _ in range(20):
        renewable()
    renewal_project(now=NOW - dt.timedelta(seconds=1))
    for task in renewals()[10:]:
        finish(task.pk, NOW)
    assert queries() == few


def test_the_renew_schedule_runs_every_minute_after_migrate():
    call_command("migrate", verbosity=0)
    schedule = Schedule.objects.get(name="conductor.renew")
    assert (schedule.func, schedule.schedule_type, schedule.minutes, schedule.repeats) == (
        "pipelines.jobs.renew_scheduled", "I", 1, -1,
    )


def test_the_scheduled_task_runs_the_projector():
    make_renewable_conversation()
    make_renewable_conversation(paused=True)
    assert renew_scheduled() == {"created": 1, "skipped": 1}
    assert len(renewals()) == 1
