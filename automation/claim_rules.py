"""What the claim asks of a task before it runs it (SPEC §3, §4), each rule an expression over the task's row.

The claim (``services/claim.py``) takes a due task only when every rule lets
it; ``wait_selectors`` reads the same expressions to say which rule holds a
task back, so what the console and the side panel say a task waits for is
what the claim checks, never a second opinion of it. Every rule is on the
task's own row or a subquery correlated with it, never a join, so one
expression serves a query, the lease's update and an annotation alike.
"""

from __future__ import annotations

from collections.abc import Collection

import re

from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.db.models.lookups import In

from automation.kinds import kinds
from automation.models import (
    CLAIMABLE_STATUSES,
    LEASE_HOLDING_STATUSES,
    OPEN_STATUSES,
    AutomationTask,
    DispatcherState,
    KindPause,
)
from conversations.models import Conversation


def dispatcher_paused() -> Exists:
    """The overview's global pause is on."""
    return Exists(DispatcherState.objects.filter(pk=1, is_paused=True))


def kind_paused() -> Q:
    """The task's kind is paused from the overview."""
    return Q(kind__in=KindPause.objects.values("kind"))


def claim_not_paused() -> Q:
    """What the overview's pauses leave a claim to take, as a condition of the claim's own statements:
    nothing while the dispatcher is paused, no task of a paused kind. It costs no statement of its
    own, and the lease's update checks it again."""
    return ~kind_paused() & ~dispatcher_paused()


def conversation_paused() -> QuerySet[Conversation]:
    """The task's conversation, when it is paused (for ``Exists``)."""
    return Conversation.objects.filter(pk=OuterRef("conversation_id"), paused=True)


class InWrittenOut(In):
    """``column IN ('a', 'b')`` with the values written into the statement rather than bound.

    A database uses a partial index only for a condition it can match to the
    index's own, and SQLite cannot match bound parameters. For code's own
    constants only: each must be a plain name.
    """

    def process_rhs(self, compiler, connection):
        values = sorted(self.rhs)
        if not all(isinstance(value, str) and re.fullmatch(r"[a-z_]+", value) for value in values):
            raise ValueError(f"not plain names: {values!r}")
        return "(" + ", ".join(f"'{value}'" for value in values) + ")", ()


def earlier_in_lane() -> QuerySet[AutomationTask]:
    """The unfinished tasks before the task in its conversation's lane: any of them holds it back
    (instructions one at a time in arrival order; a blocked instruction or a delivery waiting to
    retry holds back the rest)."""
    return AutomationTask.objects.filter(
        conversation_id=OuterRef("conversation_id"),
        lane=OuterRef("lane"),
        sequence__lt=OuterRef("sequence"),
    ).filter(InWrittenOut(F("status"), OPEN_STATUSES))  # the partial index task_lane_open_idx's condition


def in_flight_to_target() -> QuerySet[AutomationTask]:
    """The task in flight to the task's target (at most one is, SPEC §4.1)."""
    return AutomationTask.objects.filter(
        target_client_id=OuterRef("target_client_id"),
        target_platform=OuterRef("target_platform"),
        status__in=LEASE_HOLDING_STATUSES,
    )


def target_present(now: int, runnable_kinds: Collection[str]) -> Q:
    """Outbound tasks whose target can take them now, as their kinds' ``targets`` say."""
    present = Q(pk__in=[])
    by_targets: dict[int, tuple[object, list[str]]] = {}
    for name in runnable_kinds:
        if (targets := kinds.get(name).targets) is not None:
            by_targets.setdefault(id(targets), (targets, []))[1].append(name)
    for targets, names in by_targets.values():
        present |= Q(kind__in=names, target_client_id__in=targets.present(now=now))
    return present


def claimable(now: int, runnable_kinds: Collection[str]) -> Q:
    """Due tasks that may run now: every rule above lets them.

    A task is held back while the dispatcher or its kind is paused (from the
    overview), while its conversation is paused, while an earlier task of its
    conversation lane is unfinished, and, when it is outbound, while another
    task is in flight to its target or its target client is not connected.
    """
    return (
        Q(status__in=CLAIMABLE_STATUSES, execute_after__lte=now, kind__in=list(runnable_kinds))
        & claim_not_paused()
        & (Q(conversation_id__isnull=True) | ~Exists(conversation_paused()))
        & (Q(lane__isnull=True) | Q(conversation_id__isnull=True) | ~Exists(earlier_in_lane()))
        & (Q(target_client_id__isnull=True)
           | (~Exists(in_flight_to_target()) & target_present(now, runnable_kinds)))
    )
