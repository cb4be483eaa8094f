"""Who hears that tasks changed state, once the change has committed.

Every write of a task's ``status`` (its creation, the claim's lease, each
transition) calls ``tasks_changed_on_commit`` with the tasks as written.
The engine knows nobody who listens: a layer above subscribes with
``task_changes.subscribe`` at its app's ``ready`` (ingest, which tells the
person in the chat what became of each block: ``ingest/panel/push.py``).

A listener is called after the commit, in the committing thread, with the
tasks as they were written, and must return at once: it hands the work to a
thread of its own. It reads nothing in the committing thread, so the
dispatcher's hot path pays no statement for it. A listener that raises is
logged and the others still hear; the committed change stands.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from django.db import transaction

from automation.models import AutomationTask
from core.logfmt import log_event

logger = logging.getLogger(__name__)

TasksListener = Callable[[Sequence[AutomationTask]], None]


class TaskChanges:
    def __init__(self) -> None:
        self._listeners: list[TasksListener] = []

    def subscribe(self, listener: TasksListener) -> None:
        if listener not in self._listeners:
            self._listeners.append(listener)

    def unsubscribe(self, listener: TasksListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def on_commit(self, tasks: Sequence[AutomationTask]) -> None:
        """Tell every listener about ``tasks`` once the current transaction commits (at once outside one)."""
        if not self._listeners or not tasks:
            return
        changed = list(tasks)
        transaction.on_commit(lambda: self._tell(changed))

    def _tell(self, tasks: list[AutomationTask]) -> None:
        for listener in list(self._listeners):
            try:
                listener(tasks)
            except Exception:
                log_event(logger, "task_change_listener_failed", level=logging.ERROR, exc_info=True,
                          listener=getattr(listener, "__qualname__", repr(listener)), tasks=len(tasks))


task_changes = TaskChanges()


def tasks_changed_on_commit(tasks: Sequence[AutomationTask]) -> None:
    task_changes.on_commit(tasks)
