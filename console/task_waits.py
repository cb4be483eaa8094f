"""Why a task waits, as the console shows it: on the task's page, in the task list and in the story.

The reasons are the claim's own (``automation.wait_selectors``): a code
and a sentence, and a link to the task it waits on when there is one (a
block at its place in its conversation's story, where it is approved; any
other task on its own page). Read for a whole page of tasks at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.template.loader import render_to_string
from django.urls import reverse

from automation.models import OPEN_STATUSES, AutomationTask, TaskStatus
from automation.wait_selectors import BEHIND_APPROVAL, Wait, task_waits
from console.lists import ListColumnsChangeList
from ingest.panel.selectors import approval_path

# A task in these may wait for something; a running or finished one does not.
MAY_WAIT = OPEN_STATUSES - {TaskStatus.RUNNING}
# What the console needs of the task waited on: its block, to link to it in the story.
AHEAD_FIELDS = {"instruction_id": "instruction_id"}


@dataclass(frozen=True)
class ShownWait:
    """A ``Wait`` as a page shows it: its code, its sentence, and a link to the task it waits on."""

    code: str
    text: str
    url: str | None = None
    link_text: str = ""

    @property
    def label(self) -> str:
        """The code in words, for a narrow column: ``behind approval``."""
        return self.code.replace("_", " ")


def waits_of(tasks: Iterable[AutomationTask]) -> dict[str, ShownWait]:
    """Why each of ``tasks`` that waits waits, by task id: one statement (none for no tasks).

    Asked of every task given, running and finished ones too (they wait for
    nothing), so that a page costs the same statements whatever its tasks' states.
    """
    tasks = list(tasks)
    if not tasks:
        return {}
    waits = task_waits(task_ids=[task.pk for task in tasks], ahead_fields=AHEAD_FIELDS)
    return {task.pk: shown_wait(waits[task.pk], conversation_id=task.conversation_id)
            for task in tasks if task.pk in waits}


def shown_wait(wait: Wait, *, conversation_id: int | None) -> ShownWait:
    """``wait`` with a link to the task it waits on: a block in its story, any other task on its page."""
    if wait.ahead_task_id is None:
        return ShownWait(wait.code, wait.text)
    instruction_id = wait.ahead.get("instruction_id")
    if instruction_id is not None and conversation_id is not None:
        url = approval_path(conversation_pk=conversation_id, task_id=wait.ahead_task_id, instruction_pk=instruction_id)
        words = "approve or reject it in the story" if wait.code == BEHIND_APPROVAL else "see it in the story"
        return ShownWait(wait.code, wait.text, url, words)
    url = reverse("admin:automation_automationtask_change", args=[wait.ahead_task_id])
    return ShownWait(wait.code, wait.text, url, "see that task")


def wait_html(wait: ShownWait) -> str:
    """The sentence and its link, as the task's page and the story write them."""
    return render_to_string("admin/automation/automationtask/wait.html", {"wait": wait})


class WaitsChangeList(ListColumnsChangeList):
    """The task list's page, each task with why it waits (``task.wait``: a ``ShownWait`` or None): one statement."""

    def get_results(self, request):
        super().get_results(request)
        waits = waits_of(self.result_list)
        for task in self.result_list:
            task.wait = waits.get(task.pk)
