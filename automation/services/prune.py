"""Deleting what is past the retention (SPEC §8, ``CONDUCTOR_RETENTION_DAYS``)."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from automation.models import (
    OPEN_STATUSES,
    TERMINAL_STATUSES,
    AutomationTask,
    TaskEvent,
)
from conversations.models import Message
from core.clock import ms_from_datetime
from core.logfmt import log_event

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PruneReport:
    tasks: int
    events: int
    messages: int

    def __str__(self) -> str:
        return f"tasks: {self.tasks}, events: {self.events}, messages: {self.messages}"


def prune(
    *, older_than_days: int, dry_run: bool = False, now: dt.datetime | None = None, actor: str = "prune"
) -> PruneReport:
    """Delete finished tasks (with their events) and messages older than the cut-off.

    A message is kept while any task of it is unfinished. With ``dry_run``,
    only count.
    """
    now = now or timezone.now()
    cutoff = now - dt.timedelta(days=older_than_days)
    cutoff_ms = ms_from_datetime(cutoff)
    tasks = AutomationTask.objects.filter(status__in=TERMINAL_STATUSES, finished_at__lt=cutoff_ms)
    messages = Message.objects.filter(received_at__lt=cutoff).exclude(
        tasks__status__in=OPEN_STATUSES
    )
    report = PruneReport(
        tasks=tasks.count(),
        events=TaskEvent.objects.filter(task__in=tasks).count(),
        messages=messages.count(),
    )
    if not dry_run:
        with transaction.atomic():
            tasks.delete()
            Message.objects.filter(pk__in=list(messages.values_list("pk", flat=True))).delete()
        log_event(logger, "prune", actor=actor, older_than_days=older_than_days, tasks=report.tasks,
                  events=report.events, messages=report.messages)
    return report
