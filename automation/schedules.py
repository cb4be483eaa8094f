"""The django-q2 schedules Conductor needs, registered idempotently after migrate."""

from __future__ import annotations

DISPATCH_FUNC = "automation.tasks.dispatch_run"

# The dispatcher loop runs until the cluster stops, so the cluster must never
# time it out: django-q2 reads a task timeout of -1 as "none"
# (django_q/worker.py and django_q/timeout.py, 1.11).
DISPATCH_Q_OPTIONS = {"timeout": -1}

SCHEDULES = {
    # name: (function, schedule type, minutes between runs, keyword arguments)
    # Every minute a dispatcher loop is started; it returns at once while one
    # loop ticks and another stands by (automation.loop), so this only fills
    # a gap: after start-up, or after a worker died.
    "conductor.dispatch": (DISPATCH_FUNC, "I", 1, {"q_options": DISPATCH_Q_OPTIONS}),
    "conductor.prune": ("automation.tasks.prune_daily", "D", None, None),
    "conductor.renew": ("automation.tasks.renew_scheduled", "I", 1, None),
}


def schedules_register(*, using: str = "default", **kwargs) -> None:
    """Create or update each schedule by name; safe to run any number of times."""
    from django.db import router
    from django_q.models import Schedule

    if not router.allow_migrate_model(using, Schedule):
        return  # e.g. the channel layer's own database
    for name, (func, schedule_type, minutes, func_kwargs) in SCHEDULES.items():
        Schedule.objects.using(using).update_or_create(
            name=name,
            defaults={
                "func": func, "schedule_type": schedule_type, "minutes": minutes, "repeats": -1,
                "kwargs": repr(func_kwargs) if func_kwargs else None,
            },
        )


def dispatcher_loops_start() -> None:
    """Queue two dispatcher loops at once: one ticks, the other stands by to take over.

    django-q2 first looks at its schedules half a minute after it starts, so
    `make run` calls this to have a loop ticking within a second. Loops that
    find both places taken (another cluster's, say) return at once.
    """
    from django_q.tasks import async_task

    for _ in range(2):
        async_task(DISPATCH_FUNC, task_name="conductor.dispatch.start", q_options=DISPATCH_Q_OPTIONS)
