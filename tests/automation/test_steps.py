"""One engine step: a transition and its kind's follow-up commit together, or neither does.

A kind whose follow-up always fails is moved by each caller that takes the
step (the dispatcher recording an outcome, the reclaim of an expired lease,
an operator's service): each time the task stays where it was and no event
of the move is left.
"""

import functools
import ast
import random

import pytest

from automation.dispatcher import Dispatcher, DispatcherConfig
from automation.kinds import KindSpec, always, kinds
from automation.models import AutomationTask, TaskStatus
from automation.outcomes import Success
from automation.retry import RetryPolicy
from automation.services import operator
from automation.services import transitions as tr
from automation.services.claim import tasks_reclaim_expired
from automation.services.steps import transition_and_follow_up
from automation.services.tasks import task_create
from core.clock import now_ms
from tests.factories import LEASE_MS, T0, make_task
from tests.test_style import product_modules

S = TaskStatus
FOLLOWED = []


class FollowUpBroke(RuntimeError):
    pass


def broken_follow_up(task, actor):
    FOLLOWED.append((task.pk, task.status))
    raise FollowUpBroke(f"follow-up of {task.pk} failed")


BRITTLE = KindSpec(
    name="test.brittle", lane=None, is_idempotent=always, is_guarded=True,
    executor=lambda ctx: Success({"ran": True}), follow_up=broken_follow_up,
)


@pytest.fixture(autouse=True)
def brittle_kind():
    FOLLOWED.clear()
    kinds.register(BRITTLE)
    yield
    kinds.unregister(BRITTLE.name)


def actions(task):
    return list(AutomationTask.objects.get(pk=task.pk).events.values_list("action", flat=True))


def status(task):
    return AutomationTask.objects.get(pk=task.pk).status


@pytest.mark.django_db
def test_the_step_returns_the_moved_task_when_both_parts_commit():
    task = make_task(S.PENDING, kind="test.local")
    moved = transition_and_follow_up(lambda: tr.task_cancel(task.pk, actor="op"), actor="op")
    assert (moved.status, status(task), actions(task)) == (S.CANCELLED, S.CANCELLED, ["create", "cancel"])


@pytest.mark.django_db
def test_a_refused_transition_runs_no_follow_up():
    task = make_task(S.SUCCEEDED, kind="test.brittle")
    with pytest.raises(tr.TransitionError):
        transition_and_follow_up(lambda: tr.task_cancel(task.pk, actor="op"), actor="op")
    assert FOLLOWED == []


@pytest.mark.django_db(transaction=True)
def test_a_failing_follow_up_takes_back_the_dispatchers_recorded_outcome():
    task, _ = task_create(kind="test.brittle", payload={}, actor="test")
    dispatcher = Dispatcher(
        owner="d1", clock=now_ms, rng=random.Random(1),
        config=DispatcherConfig(max_tasks_per_tick=5, lease_ms=LEASE_MS, outbound_jitter_max_ms=0,
                                retry_backoff_seconds=(5,), retry_jitter_max_ms=0),
    )
    try:
        assert dispatcher.tick().claimed == [task.pk]
        assert dispatcher.wait_idle(30)
    finally:
        dispatcher.stop(grace=5)
    assert FOLLOWED == [(task.pk, S.SUCCEEDED)]  # the follow-up saw the outcome ...
    assert status(task) == S.RUNNING  # ... which was taken back with it; the reclaim will find the task
    assert actions(task) == ["create", "lease", "start"]


@pytest.mark.django_db
def test_a_failing_follow_up_takes_back_the_reclaim():
    task = make_task(S.RUNNING, kind="test.brittle", now=T0)
    retry = RetryPolicy(backoff_seconds=(5,), jitter_max_ms=0, rng=random.Random(1))
    with pytest.raises(FollowUpBroke):
        tasks_reclaim_expired(actor="d2", now=T0 + LEASE_MS + 1, retry=retry)
    assert FOLLOWED == [(task.pk, S.RETRY_WAIT)]
    assert status(task) == S.RUNNING
    assert actions(task) == ["create", "lease", "start"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("service", "start", "moved_to"),
    [
        (operator.tasks_cancel, S.PENDING, S.CANCELLED),
        (functools.partial(operator.tasks_approve, has_perm=operator.has_every_permission), S.BLOCKED, S.PENDING),
        (operator.tasks_reject, S.BLOCKED, S.FAILED),
        (functools.partial(operator.tasks_retry, has_perm=operator.has_every_permission), S.FAILED, S.PENDING),
    ],
)
def test_a_failing_follow_up_takes_back_an_operators_move(service, start, moved_to):
    task = make_task(start, kind="test.brittle")
    before = actions(task)
    with pytest.raises(FollowUpBroke):
        service(task_ids=[task.pk], actor="op")
    assert FOLLOWED == [(task.pk, moved_to)]
    assert (status(task), actions(task)) == (start, before)


def test_only_the_step_runs_a_follow_up():
    """The dispatcher, the reclaim and the operator services reach the follow-up through the one step."""
    callers = {
        str(path)
        for path, source in product_modules().items()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "follow_up"
    }
    assert callers == {"automation/services/steps.py"}
