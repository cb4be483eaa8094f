"""django-q2 jobs (the functions its schedules and queue name): parse nothing, call services (STYLE rule 1)."""

from __future__ import annotations

import signal
import threading

from django.conf import settings

from automation.loop import dispatcher_loop
from automation.services.prune import prune


def dispatch_run() -> dict[str, int | bool]:
    """The dispatcher loop as a django-q2 task: runs until SIGINT or SIGTERM.

    Scheduled with no timeout (``automation.schedules``). Returns within a
    tick when an older loop of this server runs (``serve``'s own, say). django-q2 workers ignore
    SIGINT, and the cluster waits for a running task before it stops, so the
    loop installs its own handlers: `make run` sends SIGINT to the cluster's
    process group on Ctrl-C (a process manager sends SIGTERM to the group),
    and the loop stops within a tick, giving running tasks their grace.
    """
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    try:
        report = dispatcher_loop(
            stop=stop, tick_seconds=settings.CONDUCTOR_TICK_SECONDS, exit_when_covered=True
        )
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return {"ticks": report.ticks, "woken": report.woken, "covered": report.covered}


def prune_daily() -> str:
    return str(prune(older_than_days=settings.CONDUCTOR_RETENTION_DAYS))
