"""The django-q2 schedules Conductor needs, registered idempotently after migrate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.registry import Registry

DISPATCH_FUNC = "automation.jobs.dispatch_run"

# The dispatcher loop runs until the cluster stops, so the cluster must never
# time it out: django-q2 reads a task timeout of -1 as "none"
# (django_q/worker.py and django_q/timeout.py, 1.11).
DISPATCH_Q_OPTIONS = {"timeout": -1}


@dataclass(frozen=True)
class Schedule:
    """A django-q2 schedule: ``func`` every ``minutes`` (type ``I``) or daily (type ``D``)."""

    name: str
    func: str
    schedule_type: str = "I"
    minutes: int | None = None
    kwargs: dict[str, Any] | None = None


class ScheduleRegistry(Registry[Schedule]):
    what = "schedule"


schedules = ScheduleRegistry()
# Every minute a dispatcher loop is started in whichever cluster takes the
# firing; it returns within a tick when a loop of that cluster's server runs
# (automation.loop), so this only fills a gap: a cluster run without
# `serve`, or a server whose loop died.
schedules.register(Schedule(
    name="conductor.dispatch", func=DISPATCH_FUNC, minutes=1, kwargs={"q_options": DISPATCH_Q_OPTIONS},
))
schedules.register(Schedule(name="conductor.prune", func="automation.jobs.prune_daily", schedule_type="D"))


def schedules_register(*, using: str = "default", **kwargs) -> None:
    """Create or update each registered schedule by name; safe to run any number of times.

    Connected to ``post_migrate``, when every app has registered its schedules.
    """
    from django.db import router
    from django_q.models import Schedule as QSchedule

    if not router.allow_migrate_model(using, QSchedule):
        return  # e.g. the channel layer's own database
    for schedule in schedules:
        QSchedule.objects.using(using).update_or_create(
            name=schedule.name,
            defaults={
                "func": schedule.func, "schedule_type": schedule.schedule_type, "minutes": schedule.minutes,
                "repeats": -1, "kwargs": repr(schedule.kwargs) if schedule.kwargs else None,
            },
        )

