"""One step of the engine: a transition, then its kind's follow-up, in one transaction.

The state machine (``automation.services.transitions``) decides nothing
after a change; what follows it is the kind's ``follow_up``
(``automation.kinds``). Every caller that moves a task (the dispatcher
recording an outcome, the reclaim, the operator services) takes this one
step, so that a follow-up that fails takes its transition back with it: the
task never stands in a state its pipeline did not follow.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction

from automation.kinds import kinds
from automation.models import AutomationTask


def transition_and_follow_up(transition: Callable[[], AutomationTask], *, actor: str) -> AutomationTask:
    """Apply ``transition`` (a call of one transition service), then the moved task's kind's follow-up.

    Both commit or neither does: an error from either rolls the other back and
    is raised (a refused move raises its ``TransitionError``, and no follow-up
    runs). Return the task in its new state.
    """
    with transaction.atomic():
        task = transition()
        kinds.follow_up(task, actor=actor)
    return task
