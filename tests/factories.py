"""Factories for the test suite (factory-boy), and a helper to put a task in any state.

Tasks are created and moved only through the services, exactly as the
product does, so every task a test sees has a consistent event log.
"""

from __future__ import annotations

import datetime as dt
import random

import factory
import pytest
from django.db import DataError, transaction
from django.db.models import Q
from django.utils import timezone

from automation.models import AutomationTask, Lease, TaskStatus
from automation.services import transitions as tr
from automation.services.leasing import tasks_lease
from automation.services.tasks import task_create
from conversations.models import Conversation, ConversationLink, Message
from core.clock import now_ms
from ingest.models import Instruction, PluginClient
from ingest.tokens import token_hash

T0 = 1_700_000_000_000  # a fixed "now" in epoch milliseconds, in the past
LEASE_MS = 60_000
OWNER = "dispatcher-1"
TEST_TOKEN = "test-token-" + "x" * 32


class PluginClientFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = PluginClient

    client_id = factory.Sequence(lambda n: f"client-{n}")
    name = factory.LazyAttribute(lambda o: o.client_id)
    token_hash = token_hash(TEST_TOKEN)


class ConversationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Conversation

    platform = "claude"
    remote_id = factory.Sequence(lambda n: f"conv-{n}")
    title = factory.Sequence(lambda n: f"Conversation {n}")


class ConversationLinkFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ConversationLink

    conversation = factory.SubFactory(ConversationFactory)
    client = factory.SubFactory(PluginClientFactory)
    page_url = factory.LazyAttribute(lambda o: f"https://claude.ai/chat/{o.conversation.remote_id}")
    last_seen_at = factory.LazyFunction(timezone.now)


class MessageFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Message

    conversation = factory.SubFactory(ConversationFactory)
    role = Message.Role.ASSISTANT
    source = Message.Source.PLUGIN
    remote_message_id = factory.Sequence(lambda n: f"msg-{n}")
    dedupe_key = factory.LazyAttribute(lambda o: f"id:{o.remote_message_id}")
    text = "Hello"
    received_at = factory.LazyFunction(lambda: timezone.now() - dt.timedelta(seconds=1))


class InstructionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Instruction

    message = factory.SubFactory(MessageFactory)
    block_index = factory.Sequence(lambda n: n + 1)
    raw_text = "echo\n{}"
    target = "conductor"
    tool = "echo"
    params = factory.LazyFunction(dict)
    status = Instruction.Status.PENDING


def lease_of(task_id: str) -> Lease:
    """The lease that holds the task now, as its worker holds it: tests act as that worker.

    A task no lease holds gives a lease that holds nothing, so a fenced
    transition with it is refused (``LeaseLost``) as a stale worker's would be.
    """
    task = AutomationTask.objects.filter(pk=task_id).only("lease_owner", "lease_token").first()
    return (task.lease if task is not None else None) or Lease(owner="nobody", token=0)


def task_lease(task_id: str, *, lease_owner: str, lease_until: int, now: int | None = None) -> AutomationTask:
    """pending / retry_wait -> leased for one due task, through the claim's own ``tasks_lease``.

    For tests only: in the product nothing but the dispatcher's claim leases
    a task (SPEC §3). Refuses as a transition does: ``TaskNotFound``, or
    ``InvalidTransition`` for a task in another state, not yet due, or taken meanwhile.
    """
    now = now_ms() if now is None else now
    task = AutomationTask.objects.filter(pk=task_id).first()
    if task is None:
        raise tr.TaskNotFound(task_id)
    if task.status not in tr.LEASE.allowed_from:
        raise tr.InvalidTransition(task_id, tr.LEASE.action, task.status)
    if (refusal := tr.DUE.refusal(task, now)) is not None:
        raise tr.InvalidTransition(task_id, tr.LEASE.action, task.status, refusal)
    leased = tasks_lease({task_id: task.status}, still_claimable=Q(), lease_owner=lease_owner,
                            lease_until=lease_until, now=now)
    if not leased:
        raise tr.InvalidTransition(task_id, tr.LEASE.action, task.status, "leased by another owner meanwhile")
    return leased[0]


def make_task(
    status: str = TaskStatus.PENDING,
    *,
    kind: str = "test.instruction",
    owner: str = OWNER,
    now: int = T0,
    **create_kwargs,
) -> AutomationTask:
    """Create a task and drive it through real transitions into ``status``.

    Leased and running tasks are held by ``owner`` until ``now + LEASE_MS``.
    """
    initial = TaskStatus.BLOCKED if status == TaskStatus.BLOCKED else TaskStatus.PENDING
    task, _ = task_create(kind=kind, payload={}, actor="test", status=initial, now=now, **create_kwargs)
    if status in (TaskStatus.PENDING, TaskStatus.BLOCKED):
        return task
    if status == TaskStatus.CANCELLED:
        return tr.task_cancel(task.pk, actor="operator", now=now)
    task = task_lease(task.pk, lease_owner=owner, lease_until=now + LEASE_MS, now=now)
    if status == TaskStatus.LEASED:
        return task
    lease = task.lease
    task = tr.task_start(task.pk, lease=lease, lease_until=now + LEASE_MS, now=now)
    outcomes = {
        TaskStatus.RUNNING: lambda: task,
        TaskStatus.SUCCEEDED: lambda: tr.task_succeed(task.pk, lease=lease, result={"ok": 1}, now=now),
        TaskStatus.FAILED: lambda: tr.task_fail(task.pk, lease=lease, error="boom", now=now),
        TaskStatus.RETRY_WAIT: lambda: tr.task_retry_later(
            task.pk, lease=lease, error="flaky", retry_at=now + 5000,
            backoff_ms=5000, jitter_ms=0, now=now,
        ),
    }
    return outcomes[status]()


def make_renewable_conversation(
    *, last_activity_at: dt.datetime | None = None, has_link: bool = True, **fields
) -> Conversation:
    """A conversation with renewal turned on, last active an hour ago, and a link unless told not."""
    conversation = ConversationFactory(
        renewal_enabled=True,
        last_activity_at=last_activity_at or timezone.now() - dt.timedelta(hours=1),
        **fields,
    )
    if has_link:
        ConversationLinkFactory(conversation=conversation)
    return conversation


def make_staff(username: str = "staff", *permissions: str, password: str | None = "pw"):
    """A staff user (not a superuser) holding the given ``app_label.codename`` permissions.

    ``password=None``: none that works, for tests that log in with ``force_login``
    (hashing a real one takes a second on a loaded machine).
    """
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(username, password=password, is_staff=True)
    for permission in permissions:
        app_label, codename = permission.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return user


def create_or_skip(model_factory, **fields):
    """Create a row, or skip the test when the database cannot hold ``fields``.

    For rows holding a lone surrogate: PostgreSQL refuses one anywhere (text
    and jsonb), SQLite in a text column; SQLite keeps one in a JSON column,
    where it is stored as a "\\ud800" escape.
    """
    try:
        with transaction.atomic():
            return model_factory(**fields)
    except (UnicodeEncodeError, DataError) as exc:
        pytest.skip(f"this database cannot store the value: {exc}")


def retry_policy(rng=None):
    """The retry policy a dispatcher builds from the settings, with ``rng`` as its random source."""
    from automation.dispatcher import DispatcherConfig

    return DispatcherConfig.from_settings().retry_policy(rng or random.Random())
