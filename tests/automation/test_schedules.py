"""The django-q2 schedules, registered after migrate."""

import ast

import pytest
from django_q.models import Schedule

from automation.schedules import schedules_register


@pytest.mark.django_db
def test_the_schedules_are_registered_once_however_often_migrate_runs():
    schedules_register()
    schedules_register()
    rows = {s.name: (s.func, s.schedule_type, s.minutes, s.repeats) for s in Schedule.objects.all()}
    assert rows == {
        "conductor.dispatch": ("automation.jobs.dispatch_run", "I", 1, -1),
        "conductor.prune": ("automation.jobs.prune_daily", "D", None, -1),
        "conductor.renew": ("pipelines.jobs.renew_scheduled", "I", 1, -1),
    }


@pytest.mark.django_db
def test_the_dispatcher_loop_is_scheduled_with_no_cluster_timeout():
    schedules_register()
    kwargs = ast.literal_eval(Schedule.objects.get(name="conductor.dispatch").kwargs)
    # django-q2 reads -1 as "no timeout": the loop runs until the cluster stops.
    assert kwargs == {"q_options": {"timeout": -1}}
    assert Schedule.objects.get(name="conductor.renew").kwargs is None

