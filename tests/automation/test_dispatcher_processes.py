"""The dispatcher across several real processes, on the configured database."""

import datetime as dt
import itertools
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from django.utils import timezone

from automation.models import AutomationTask, TaskEvent, TaskStatus
from automation.services.claim import tasks_reclaim_expired
from automation.services.tasks import task_create
from core.clock import now_ms
from tests import side_effects
from tests.factories import ConversationFactory, PluginClientFactory, retry_policy
from tests.procs import database_url, run_in_processes, spawn_process

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

S = TaskStatus
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def side_effect_table():
    side_effects.create_table()
    yield
    side_effects.drop_table()


def create(kind, **fields):
    payload = fields.pop("payload", {})
    task, _ = task_create(kind=kind, payload=payload, actor="test", **fields)
    return task


def wait_for(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_four_dispatchers_run_2000_tasks_each_exactly_once_within_every_limit(side_effect_table):
    targets = [f"client-{n}" for n in range(10)]
    for client_id in targets:
        PluginClientFactory(client_id=client_id, connected=True,
                            last_seen_at=timezone.now() + dt.timedelta(hours=1))
    outbound_conversations = [ConversationFactory() for _ in range(40)]
    instruction_conversations = [ConversationFactory() for _ in range(20)]
    record = {"record": True}
    for _ in range(800):
        create("test.local", payload=record)
    for _, conversation in zip(range(800), itertools.cycle(outbound_conversations), strict=False):
        create("test.outbound", payload=record, conversation_id=conversation.pk,
               target_client_id=targets[conversation.pk % 10], target_platform="claude")
    for _, conversation in zip(range(400), itertools.cycle(instruction_conversations), strict=False):
        create("test.instruction", payload=record, conversation_id=conversation.pk)

    run_in_processes(
        "tests.automation.workers:dispatch_until_done",
        [(f"dispatcher-{n}", 240, 60_000, 10) for n in range(4)],
        timeout=300,
    )

    rows = side_effects.rows()
    assert len(rows) == 2000
    assert len({task_id for task_id, *_ in rows}) == 2000  # each ran exactly once
    assert AutomationTask.objects.filter(status=S.SUCCEEDED).count() == 2000
    assert TaskEvent.objects.filter(action="start").count() == 2000
    assert len({owner for _, owner, *_ in rows}) > 1  # the work was shared

    by_target = defaultdict(list)
    for _, _, target, started, ended in rows:
        if target:
            by_target[target].append((started, ended))
    assert len(by_target) == 10
    for target, runs in by_target.items():
        runs.sort()
        for (_, previous_end), (next_start, _) in itertools.pairwise(runs):
            assert next_start >= previous_end, f"two tasks in flight for {target}"

    sequence = dict(AutomationTask.objects.values_list("task_id", "sequence"))
    conversation_of = dict(AutomationTask.objects.values_list("task_id", "conversation_id"))
    lanes = defaultdict(list)
    for task_id, _, target, started, ended in rows:
        if not target and conversation_of[task_id]:
            lanes[conversation_of[task_id]].append((started, ended, sequence[task_id]))
    assert len(lanes) == 20
    for runs in lanes.values():
        runs.sort()
        assert [seq for *_, seq in runs] == sorted(seq for *_, seq in runs)  # arrival order
        for (_, previous_end, _), (next_start, _, _) in itertools.pairwise(runs):
            assert next_start >= previous_end


def test_a_dispatcher_killed_mid_run_loses_nothing():
    idempotent = [create("test.local", payload={"sleep": 60, "idempotent": True}) for _ in range(3)]
    not_idempotent = [create("test.local", payload={"sleep": 60, "idempotent": False}) for _ in range(3)]
    ids = [t.pk for t in idempotent + not_idempotent]
    process = spawn_process("tests.automation.workers:dispatch_until_done", ("doomed", 120))
    try:
        wait_for(lambda: AutomationTask.objects.filter(pk__in=ids, status=S.RUNNING).count() == 6)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.join(10)

    running = AutomationTask.objects.filter(pk__in=ids, status=S.RUNNING)
    assert running.count() == 6  # killed: nobody wrote an outcome
    leases = list(running.values_list("lease_until", flat=True))
    assert tasks_reclaim_expired(actor="survivor", now=min(leases) - 1, retry=retry_policy(random.Random())) == []
    reclaimed = tasks_reclaim_expired(actor="survivor", now=max(leases) + 1, retry=retry_policy(random.Random(1)))

    assert sorted(t.pk for t in reclaimed) == sorted(ids)
    states = {t.pk: t for t in AutomationTask.objects.filter(pk__in=ids)}
    for task in idempotent:
        assert (states[task.pk].status, states[task.pk].attempt_count) == (S.RETRY_WAIT, 1)
    for task in not_idempotent:
        assert states[task.pk].status == S.FAILED
        assert "interrupted" in states[task.pk].last_error


def test_a_heartbeat_keeps_a_long_task_from_being_reclaimed_by_another_process():
    task = create("test.local", payload={"sleep": 3})
    process = spawn_process("tests.automation.workers:dispatch_until_done", ("holder", 30, 1000))
    try:
        wait_for(lambda: AutomationTask.objects.get(pk=task.pk).status == S.RUNNING)
        # Another dispatcher keeps looking for expired leases the whole time (lease: 1 s).
        leases_seen = set()
        while (running := AutomationTask.objects.get(pk=task.pk)).status == S.RUNNING:
            leases_seen.add(running.lease_until)
            assert tasks_reclaim_expired(actor="rival", now=now_ms(), retry=retry_policy(random.Random())) == []
            time.sleep(0.1)
    finally:
        process.join(30)

    done = AutomationTask.objects.get(pk=task.pk)
    assert (done.status, done.attempt_count) == (S.SUCCEEDED, 1)
    assert not done.events.filter(action="reclaim").exists()
    assert len(leases_seen) >= 5  # renewed every third of its lease over 3 s


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_dispatch_loop_stops_promptly_on_a_signal(tmp_path, signum):
    env = {**os.environ, "CONDUCTOR_DATA_DIR": str(tmp_path), "DATABASE_URL": database_url()}
    process = subprocess.Popen(
        [sys.executable, "manage.py", "dispatch", "--loop", "--interval", "5"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    wait_for(lambda: process.poll() is not None or _ticked(), timeout=30)
    started = time.monotonic()
    process.send_signal(signum)
    output, _ = process.communicate(timeout=15)
    assert process.returncode == 0, output
    assert time.monotonic() - started < 3
    assert "stopped" in output


def _ticked():
    from automation.models import DispatcherWorker

    return DispatcherWorker.objects.exists()
