import pytest

from automation.models import AutomationTask, TaskEvent, TaskStatus
from tests.factories import LEASE_MS, T0, make_task
from tests.procs import run_in_processes

PROCESSES = 4


@pytest.mark.django_db(transaction=True)
def test_each_task_is_leased_by_exactly_one_of_several_processes():
    task_ids = [make_task().pk for _ in range(60)]

    results = run_in_processes(
        "tests.automation.workers:lease_every_task",
        [(f"dispatcher-{n}", task_ids, T0, T0 + LEASE_MS, n) for n in range(PROCESSES)],
    )

    won = [task_id for result in results for task_id in result]
    assert sorted(won) == sorted(task_ids)  # every task leased, none twice
    owners = {task_id: f"dispatcher-{n}" for n, result in enumerate(results) for task_id in result}
    for task in AutomationTask.objects.filter(pk__in=task_ids):
        assert (task.status, task.lease_owner) == (TaskStatus.LEASED, owners[task.pk])
    assert TaskEvent.objects.filter(task_id__in=task_ids, action="lease").count() == len(task_ids)
