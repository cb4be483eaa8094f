"""The data migration that tells rejections apart and counts series, run on rows made before it."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("automation", "0007_tool_policy_target")]
AFTER = [("automation", "0008_task_outcome_series_kind_pause")]


def test_existing_rejections_and_retries_are_marked():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    apps = executor.loader.project_state(BEFORE).apps
    Task, Event = apps.get_model("automation", "AutomationTask"), apps.get_model("automation", "TaskEvent")

    def task(task_id, status, actions):
        Task.objects.create(task_id=task_id, kind="k", status=status, execute_after=0, max_attempts=3,
                            sequence=len(task_id), created_at=0, updated_at=0, payload_json="{}")
        for at, action in enumerate(actions):
            Event.objects.create(task_id=task_id, action=action, status_to=status, actor="x", at=at)

    task("rejected", "failed", ["create", "reject"])
    task("fault", "failed", ["create", "lease", "start", "fail"])
    task("retried", "failed", ["create", "reject", "retry", "lease", "start", "fail"])
    try:
        executor = MigrationExecutor(connection)
        executor.migrate(AFTER)
        apps = executor.loader.project_state(AFTER).apps
        rows = {
            row.task_id: (row.finish_reason, row.retry_count)
            for row in apps.get_model("automation", "AutomationTask").objects.all()
        }
        assert rows == {"rejected": ("rejected", 0), "fault": (None, 0), "retried": (None, 1)}
    finally:
        MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_tasks_created_blocked_need_approval_and_keep_their_latest_approver():
    before, after = [("automation", "0010_task_approve_code_permission")], [("automation", "0011_task_approval")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    apps = executor.loader.project_state(before).apps
    Task, Event = apps.get_model("automation", "AutomationTask"), apps.get_model("automation", "TaskEvent")

    def task(task_id, status, events):
        Task.objects.create(task_id=task_id, kind="k", status=status, execute_after=0, max_attempts=3,
                            sequence=len(task_id), created_at=0, updated_at=0, payload_json="{}")
        for at, (action, status_to, actor) in enumerate(events):
            Event.objects.create(task_id=task_id, action=action, status_to=status_to, actor=actor, at=at)

    task("rejected", "failed", [("create", "blocked", "ingest"), ("reject", "failed", "bob")])
    task("approved", "failed", [("create", "blocked", "ingest"), ("approve", "pending", "ann"),
                                ("fail", "failed", "d"), ("retry", "pending", "x"), ("approve", "pending", "cy")])
    task("plain", "failed", [("create", "pending", "ingest"), ("fail", "failed", "d")])
    try:
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        apps = executor.loader.project_state(after).apps
        rows = {
            row.task_id: (row.needs_approval, row.approved_by, row.approved_at)
            for row in apps.get_model("automation", "AutomationTask").objects.all()
        }
        assert rows == {"rejected": (True, None, None), "approved": (True, "cy", 4), "plain": (False, None, None)}
    finally:
        MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
