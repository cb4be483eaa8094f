from unittest import mock

import pytest
from django.db import IntegrityError, transaction

from automation.models import AutomationTask, TaskEvent, TaskStatus
from automation.services.tasks import NewTask, task_create, task_retarget, tasks_create, tasks_retarget
from tests.factories import T0, ConversationFactory, ConversationLinkFactory, PluginClientFactory, make_task

S = TaskStatus


@pytest.mark.django_db
def test_create_writes_the_first_event_with_its_actor(settings):
    settings.CONDUCTOR_MAX_ATTEMPTS = 4
    task, created = task_create(kind="test.local", payload={"a": 1}, actor="ingest", now=T0)
    assert created
    assert (task.status, task.execute_after, task.max_attempts, task.payload_json) == (
        S.PENDING, T0, 4, '{"a": 1}',
    )
    event = TaskEvent.objects.get(task=task)
    assert (event.action, event.status_from, event.status_to, event.actor) == (
        "create", None, "pending", "ingest",
    )


@pytest.mark.django_db
def test_create_with_an_existing_dedupe_key_returns_the_first_task():
    first, created = task_create(kind="test.local", payload={}, actor="ingest", dedupe_key="deliver:7")
    again, created_again = task_create(kind="test.local", payload={"other": 1}, actor="ingest", dedupe_key="deliver:7")
    assert (created, created_again) == (True, False)
    assert again.pk == first.pk
    assert TaskEvent.objects.filter(task=first).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_taken_dedupe_key_leaves_the_callers_transaction_usable_without_a_savepoint():
    first, _ = task_create(kind="test.local", payload={}, actor="ingest", dedupe_key="deliver:8")
    with transaction.atomic():
        again, created = task_create(kind="test.local", payload={}, actor="ingest", dedupe_key="deliver:8")
        later, later_created = task_create(kind="test.local", payload={}, actor="ingest", dedupe_key="deliver:9")
    assert (created, later_created, again.pk) == (False, True, first.pk)
    assert TaskEvent.objects.filter(task__in=[first, later], action="create").count() == 2
    assert TaskEvent.objects.get(task=later).status_from is None


@pytest.mark.django_db
@pytest.mark.parametrize("status", [S.LEASED, S.RUNNING, S.SUCCEEDED, S.RETRY_WAIT])
def test_create_refuses_any_status_but_pending_or_blocked(status):
    with pytest.raises(ValueError):
        task_create(kind="test.local", payload={}, actor="ingest", status=status)


@pytest.mark.django_db
@pytest.mark.parametrize("staying_status", [S.LEASED, S.RUNNING, S.SUCCEEDED, S.FAILED])
def test_retarget_moves_only_unstarted_outbound_tasks_of_the_conversation(staying_status):
    conversation, other = ConversationFactory(), ConversationFactory()
    route = dict(kind="test.outbound", target_client_id="old", target_platform="claude",
                 conversation_id=conversation.pk)
    movable = [make_task(status, **route) for status in (S.PENDING, S.RETRY_WAIT)]
    staying = make_task(staying_status, **route)
    local = make_task(S.PENDING, conversation_id=conversation.pk)  # no route: not outbound
    elsewhere = make_task(S.PENDING, **{**route, "conversation_id": other.pk})

    moved = task_retarget(conversation_id=conversation.pk, client_id="new", actor="ingest", now=T0)

    assert sorted(moved) == sorted(t.pk for t in movable)
    for task in movable:
        task.refresh_from_db()
        assert (task.target_client_id, task.target_platform) == ("new", "claude")
        event = task.events.get(action="retarget")
        assert (event.status_from, event.status_to, event.actor, event.detail) == (
            task.status, task.status, "ingest", {"from_client_id": "old", "to_client_id": "new"},
        )
    for task in [staying, elsewhere]:
        task.refresh_from_db()
        assert task.target_client_id == "old"
    local.refresh_from_db()
    assert local.target_client_id is None


@pytest.mark.django_db
def test_retarget_moves_blocked_instructions_with_a_route():
    conversation = ConversationFactory()
    blocked = make_task(S.BLOCKED, kind="test.instruction", target_client_id="old",
                        target_platform="claude", conversation_id=conversation.pk)
    assert task_retarget(conversation_id=conversation.pk, client_id="new", actor="ingest") == [blocked.pk]


@pytest.mark.django_db
def test_retarget_never_clears_the_route():
    with pytest.raises(ValueError):
        task_retarget(conversation_id=1, client_id="", actor="ingest")


# Real commits: a test wrapped in one transaction would never run its on-commit callbacks.
@pytest.mark.django_db(transaction=True)
def test_creating_tasks_wakes_the_dispatcher_once_per_transaction_whoever_creates_them():
    with mock.patch("automation.wake.dispatcher_wake") as wake:
        with transaction.atomic():
            for n in range(3):
                task_create(kind="test.local", payload={"n": n}, actor="anyone")
            wake.assert_not_called()  # not before the commit
        assert wake.call_count == 1
        task_create(kind="test.local", payload={}, actor="anyone", dedupe_key="once")  # autocommit
        assert wake.call_count == 2
        task_create(kind="test.local", payload={}, actor="anyone", dedupe_key="once")  # exists: not created
        assert wake.call_count == 2


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_creation_wakes_nothing_and_does_not_swallow_the_next_wake():
    with mock.patch("automation.wake.dispatcher_wake") as wake:
        with transaction.atomic():
            with pytest.raises(RuntimeError), transaction.atomic():
                task_create(kind="test.local", payload={}, actor="anyone")
                raise RuntimeError("rolled back")
            task_create(kind="test.local", payload={}, actor="anyone")
        wake.assert_called_once_with()
        with pytest.raises(RuntimeError), transaction.atomic():
            task_create(kind="test.local", payload={}, actor="anyone")
            raise RuntimeError("rolled back")
        wake.assert_called_once_with()


@pytest.mark.django_db
def test_tasks_created_together_are_created_in_order_as_one_by_one(settings):
    settings.CONDUCTOR_MAX_ATTEMPTS = 4
    conversation = ConversationFactory()
    ConversationLinkFactory(conversation=conversation, client=PluginClientFactory(client_id="laptop"))
    made = tasks_create(tasks=[
        NewTask(kind="test.local", payload={"n": 1}),
        NewTask(kind="test.instruction", payload={"n": 2}, status=S.BLOCKED, dedupe_key="execute:2"),
        NewTask(kind="test.outbound", payload={"n": 3}, conversation_id=conversation.pk),
    ], actor="ingest", now=T0)

    stored = list(AutomationTask.objects.order_by("sequence"))
    assert [t.pk for t in stored] == [t.pk for t in made]
    assert [(t.kind, t.status, t.lane, t.payload_json, t.max_attempts, t.execute_after) for t in stored] == [
        ("test.local", S.PENDING, None, '{"n": 1}', 4, T0),
        ("test.instruction", S.BLOCKED, "instructions", '{"n": 2}', 4, T0),
        ("test.outbound", S.PENDING, "outbound", '{"n": 3}', 4, T0),
    ]
    assert (stored[2].target_client_id, stored[2].target_platform) == ("laptop", conversation.platform)
    events = [(e.task_id, e.action, e.status_from, e.status_to, e.actor, e.at) for e in TaskEvent.objects.all()]
    assert sorted(events) == sorted((t.pk, "create", None, t.status, "ingest", T0) for t in stored)


@pytest.mark.django_db
def test_tasks_created_together_check_each_as_task_create_does():
    with pytest.raises(ValueError):
        tasks_create(tasks=[NewTask(kind="test.local", payload={}), NewTask(kind="test.local", payload={},
                                                                             status=S.BLOCKED)], actor="ingest")
    assert not AutomationTask.objects.exists()


@pytest.mark.django_db
def test_tasks_created_together_refuse_an_existing_dedupe_key():
    task_create(kind="test.local", payload={}, actor="ingest", dedupe_key="deliver:7")
    with pytest.raises(IntegrityError), transaction.atomic():
        tasks_create(tasks=[NewTask(kind="test.local", payload={}, dedupe_key="deliver:7")], actor="ingest")
    assert AutomationTask.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_tasks_created_together_wake_the_dispatcher_once():
    with mock.patch("automation.wake.dispatcher_wake") as wake:
        tasks_create(tasks=[NewTask(kind="test.local", payload={"n": n}) for n in range(3)], actor="anyone")
    assert wake.call_count == 1


@pytest.mark.django_db
def test_retargeting_several_conversations_moves_each_to_its_own_client():
    first, second = ConversationFactory(), ConversationFactory()
    route = dict(kind="test.outbound", target_client_id="old", target_platform="claude")
    to_new = make_task(S.PENDING, **route, conversation_id=first.pk)
    to_other = make_task(S.PENDING, **route, conversation_id=second.pk)
    already = make_task(S.PENDING, **{**route, "target_client_id": "other"}, conversation_id=second.pk)

    moved = tasks_retarget(client_ids={first.pk: "new", second.pk: "other"}, actor="ingest", now=T0)

    assert sorted(moved) == sorted([to_new.pk, to_other.pk])
    for task, client_id in [(to_new, "new"), (to_other, "other"), (already, "other")]:
        task.refresh_from_db()
        assert task.target_client_id == client_id
    assert not already.events.filter(action="retarget").exists()
    assert to_other.events.get(action="retarget").detail == {"from_client_id": "old", "to_client_id": "other"}
