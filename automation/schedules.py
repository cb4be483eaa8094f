"""The django-q2 schedules Conductor needs, registered idempotently after migrate."""

from __future__ import annotations

SCHEDULES = {
    # name: (function, schedule type, minutes between runs)
    "conductor.dispatch": ("automation.tasks.dispatch_run", "I", 1),
    "conductor.prune": ("automation.tasks.prune_daily", "D", None),
    "conductor.renew": ("automation.tasks.renew_scheduled", "I", 1),
}


def schedules_register(*, using: str = "default", **kwargs) -> None:
    """Create or update each schedule by name; safe to run any number of times."""
    from django.db import router
    from django_q.models import Schedule

    if not router.allow_migrate_model(using, Schedule):
        return  # e.g. the channel layer's own database
    for name, (func, schedule_type, minutes) in SCHEDULES.items():
        Schedule.objects.using(using).update_or_create(
            name=name,
            defaults={"func": func, "schedule_type": schedule_type, "minutes": minutes, "repeats": -1},
        )
