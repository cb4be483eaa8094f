"""The claim's "an earlier task of the lane is unfinished" reads only open tasks, however long the lane's history.

``claim_rules.earlier_in_lane`` is asked for every due task of a
conversation at every claim; on the full (conversation, lane, sequence)
index it walked every earlier task of the lane, finished or not, so its
cost grew with the conversation's age. The partial index
``task_lane_open_idx`` holds only the open tasks, and each database's
planner must pick it for that question.
"""

import pytest
from django.db import connection
from django.db.models import Exists

from automation.claim_rules import earlier_in_lane
from automation.models import AutomationTask, TaskStatus
from tests.factories import ConversationFactory, make_task

pytestmark = pytest.mark.django_db


def plan_of(queryset) -> str:
    sql, params = queryset.query.sql_with_params()
    explain = "EXPLAIN QUERY PLAN " if connection.vendor == "sqlite" else "EXPLAIN "
    with connection.cursor() as cursor:
        cursor.execute(explain + sql, params)
        return "\n".join(" ".join(str(field) for field in row) for row in cursor.fetchall())


def test_the_earlier_open_tasks_of_a_lane_are_found_on_the_partial_index():
    conversation = ConversationFactory()
    history = [make_task(TaskStatus.SUCCEEDED, conversation_id=conversation.pk) for _ in range(40)]
    due = make_task(TaskStatus.PENDING, conversation_id=conversation.pk)
    AutomationTask.objects.filter(pk__in=[task.pk for task in [*history, due]]).update(lane="instructions")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
        if connection.vendor == "postgresql":
            # A table this small is read whole, index or not: is there an index it can use, and which.
            cursor.execute("SET LOCAL enable_seqscan = off")
    blocked = AutomationTask.objects.filter(pk=due.pk).filter(Exists(earlier_in_lane()))
    assert not blocked.exists()  # the history is finished: nothing holds the task back
    assert "task_lane_open_idx" in plan_of(blocked)
