import datetime as dt
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from automation.models import AutomationTask, TaskEvent, TaskStatus
from conversations.models import Message
from tests.factories import MessageFactory, make_task

pytestmark = pytest.mark.django_db

S = TaskStatus
DAY_MS = 86_400_000


def aged(task, days):
    AutomationTask.objects.filter(pk=task.pk).update(finished_at=int(timezone.now().timestamp() * 1000) - days * DAY_MS)
    return task


def prune(*args):
    out = StringIO()
    call_command("prune", *args, stdout=out)
    return out.getvalue().strip()


def test_prune_deletes_old_finished_tasks_their_events_and_old_messages(settings):
    settings.CONDUCTOR_RETENTION_DAYS = 30
    old_done = aged(make_task(S.SUCCEEDED), 31)
    old_failed = aged(make_task(S.FAILED), 40)
    recent = aged(make_task(S.SUCCEEDED), 5)
    still_open = make_task(S.PENDING)
    old_message = MessageFactory(received_at=timezone.now() - dt.timedelta(days=31))
    kept_message = MessageFactory(received_at=timezone.now() - dt.timedelta(days=31))
    make_task(S.PENDING, message_id=kept_message.pk)  # an unfinished task keeps its message
    new_message = MessageFactory()

    assert prune("--dry-run") == "would delete tasks: 2, events: 8, messages: 1 (older than 30 days)"
    assert AutomationTask.objects.count() == 5

    assert prune() == "deleted tasks: 2, events: 8, messages: 1 (older than 30 days)"
    assert not AutomationTask.objects.filter(pk__in=[old_done.pk, old_failed.pk]).exists()
    assert not TaskEvent.objects.filter(task_id__in=[old_done.pk, old_failed.pk]).exists()
    assert AutomationTask.objects.filter(pk__in=[recent.pk, still_open.pk]).count() == 2
    assert set(Message.objects.values_list("pk", flat=True)) == {kept_message.pk, new_message.pk}
    assert old_message.pk


def test_older_than_overrides_the_retention():
    aged(make_task(S.SUCCEEDED), 3)
    assert prune("--older-than", "2").startswith("deleted tasks: 1")
