"""django-q2 task functions: parse nothing, call services (STYLE rule 1)."""

from __future__ import annotations

import signal
import threading

from django.conf import settings

from automation.dispatcher import dispatcher_run
from automation.services.prune import prune
from automation.services.renewal import renewal_project

# A scheduled run lasts about as long as the schedule's period, so that runs
# follow each other. django-q2 starts a one-minute schedule 30 to 60 s after
# the previous start, so the next run stands by at most that long before it
# takes over: one run and at most one standby occupy a worker each. Both
# together stay well under Q_CLUSTER["timeout"].
DISPATCH_RUN_SECONDS = 60
DISPATCH_STANDBY_SECONDS = 35


def dispatch_run(seconds: float = DISPATCH_RUN_SECONDS) -> dict[str, int]:
    """The scheduled dispatcher run. Stops early on SIGINT or SIGTERM.

    django-q2 workers ignore SIGINT, and the cluster waits for a running task
    before it stops, so this run installs its own handlers: `make run` sends
    SIGINT to the cluster's process group on Ctrl-C, and the run ends within
    a tick.
    """
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    try:
        report = dispatcher_run(
            seconds=seconds, tick_seconds=settings.CONDUCTOR_TICK_SECONDS, stop=stop,
            standby_seconds=min(seconds, DISPATCH_STANDBY_SECONDS),
        )
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return {"ticks": report.ticks, "woken": report.woken}


def prune_daily() -> str:
    return str(prune(older_than_days=settings.CONDUCTOR_RETENTION_DAYS))


def renew_scheduled() -> dict[str, int]:
    report = renewal_project()
    # Counts only: this runs every minute and django-q2 keeps each result.
    return {"created": len(report.created), "skipped": len(report.skipped)}
