"""Why a task that is not running waits: the claim's own rules (``claim_rules``), read back for each task.

``task_waits`` answers for many tasks in one statement (one per
``BATCH`` tasks): each rule of the claim becomes a column of the task's row,
and the first rule that holds it back, in the order of ``REASONS``, is its
``Wait``: a stable short ``code`` (the console shows it, the side panel's
``waiting_for`` carries it, docs/protocol.md names them) and a sentence
for an operator. A task that waits for nothing, because it runs, has
finished, or is due and the next claim takes it, has no ``Wait``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db.models import BooleanField, Case, Exists, ExpressionWrapper, IntegerField, Subquery, Value, When
from django.utils import timezone

from automation.claim_rules import (
    conversation_paused,
    dispatcher_paused,
    earlier_in_lane,
    in_flight_to_target,
    kind_paused,
    target_present,
)
from automation.kinds import kinds
from automation.models import CLAIMABLE_STATUSES, AutomationTask, TaskStatus
from core.clock import datetime_from_ms, now_ms

# The reasons, by their codes; when several hold, the first of ``REASONS`` is told.
APPROVAL = "approval"  # it waits for its own approval (blocked)
LEASED = "leased"  # a dispatcher holds its lease and has not started it yet
NO_EXECUTOR = "no_executor"  # its kind has no executor here: nothing claims it
DISPATCHER_PAUSED = "dispatcher_paused"
KIND_PAUSED = "kind_paused"
CONVERSATION_PAUSED = "conversation_paused"
BEHIND_APPROVAL = "behind_approval"  # an earlier task of its conversation's lane waits for approval
BEHIND_EARLIER = "behind_earlier"  # an earlier task of its conversation's lane is unfinished
BACKOFF = "backoff"  # not due yet: its retry's backoff, or a later start
NO_PLUGIN = "no_plugin"  # outbound, and its plugin client is not connected
TARGET_BUSY = "target_busy"  # outbound, and another task is in flight to its target

# How many tasks one statement asks about (SQLite binds at most 999 parameters).
BATCH = 500


@dataclass(frozen=True)
class Wait:
    """Why a task waits: ``code`` (one of the codes above) and ``text``, a sentence for an operator.

    ``until``: when a backoff ends or a lease runs out (epoch ms).
    ``ahead_task_id``: the task it waits on (``behind_*``: the earlier task
    of its lane; ``target_busy``: the one in flight to its target), with
    ``ahead``, the fields of it the caller asked for (``ahead_fields``).
    """

    code: str
    text: str
    until: int | None = None
    ahead_task_id: str | None = None
    ahead: Mapping[str, Any] = field(default_factory=dict)


def task_waits(
    *, task_ids: Iterable[str], now: int | None = None, ahead_fields: Mapping[str, str] | None = None,
) -> dict[str, Wait]:
    """Why each of ``task_ids`` waits: its ``Wait``, absent for a task that waits for nothing (or no such task).

    ``ahead_fields``: name -> a lookup on the task ahead of it in its lane
    (``"instruction_id"``, or a layer above naming its own fields), read by
    the same statement into ``Wait.ahead``. One statement per ``BATCH`` tasks.
    """
    now = now_ms() if now is None else now
    ahead_fields = ahead_fields or {}
    waits: dict[str, Wait] = {}
    for batch in itertools.batched(sorted(set(task_ids)), BATCH):
        for row in _facts(batch, now, ahead_fields):
            if (wait := wait_of(row, now=now)) is not None:
                waits[row["task_id"]] = wait
    return waits


def task_wait(*, task_id: str, now: int | None = None) -> Wait | None:
    """Why one task waits (``task_waits`` for one)."""
    return task_waits(task_ids=[task_id], now=now).get(task_id)


def _ahead() -> Any:
    """The task its lane waits on: the first earlier one waiting for approval, else the first unfinished one.

    An approval is what a person must give; a running or retrying task ahead ends by itself.
    """
    approval_first = Case(When(status=TaskStatus.BLOCKED, then=Value(0)), default=Value(1), output_field=IntegerField())
    return earlier_in_lane().order_by(approval_first, "sequence")


def _facts(batch: Iterable[str], now: int, ahead_fields: Mapping[str, str]) -> list[dict[str, Any]]:
    """The tasks of ``batch`` with a column for each rule of the claim: one statement."""
    ahead = _ahead()
    extra = {f"ahead__{name}": Subquery(ahead.values(lookup)[:1]) for name, lookup in ahead_fields.items()}
    return list(
        AutomationTask.objects.filter(pk__in=list(batch))
        .annotate(
            is_dispatcher_paused=dispatcher_paused(),
            is_kind_paused=ExpressionWrapper(kind_paused(), output_field=BooleanField()),
            is_conversation_paused=Exists(conversation_paused()),
            ahead_id=Subquery(ahead.values("pk")[:1]),
            ahead_status=Subquery(ahead.values("status")[:1]),
            ahead_kind=Subquery(ahead.values("kind")[:1]),
            busy_id=Subquery(in_flight_to_target().values("pk")[:1]),
            is_target_present=ExpressionWrapper(
                target_present(now, kinds.runnable()), output_field=BooleanField()
            ),
            **extra,
        )
        .values(
            "task_id", "kind", "status", "execute_after", "lease_owner", "lease_until", "conversation_id", "lane",
            "target_client_id", "target_platform", "is_dispatcher_paused", "is_kind_paused", "is_conversation_paused",
            "ahead_id", "ahead_status", "ahead_kind", "busy_id", "is_target_present", *extra,
        )
    )


def moment(ms: int) -> str:
    """Epoch milliseconds as the console writes a time to the second: ``2026-12-03 18:48:05 UTC``."""
    return f"{timezone.localtime(datetime_from_ms(ms)):%Y-%m-%d %H:%M:%S %Z}"


def _short(task_id: str) -> str:
    return task_id[:8]


# --- the reasons, in the order they are told ------------------------------------------------
# Each takes a row of ``_facts`` and ``now`` and returns its ``Wait`` when it holds the task back.

Reason = Callable[[Mapping[str, Any], int], Wait | None]


def _approval(row, now):
    if row["status"] == TaskStatus.BLOCKED:
        return Wait(APPROVAL, "It waits for an operator's approval.")
    return None


def _leased(row, now):
    if row["status"] == TaskStatus.LEASED:
        return Wait(
            LEASED, f"Leased by {row['lease_owner']} until {moment(row['lease_until'])}: it starts in a moment, "
            "or goes back to the queue when that lease runs out.", until=row["lease_until"],
        )
    return None


def _no_executor(row, now):
    if row["kind"] not in kinds.runnable():
        return Wait(NO_EXECUTOR, f"No dispatcher runs {row['kind']} tasks: the kind has no executor here.")
    return None


def _dispatcher_paused(row, now):
    if row["is_dispatcher_paused"]:
        return Wait(DISPATCHER_PAUSED, "The dispatcher is paused (the overview's switch): no task starts until "
                    "it is resumed.")
    return None


def _kind_paused(row, now):
    if row["is_kind_paused"]:
        return Wait(KIND_PAUSED, f"Tasks of its kind, {row['kind']}, are paused from the overview.")
    return None


def _conversation_paused(row, now):
    if row["conversation_id"] is not None and row["is_conversation_paused"]:
        return Wait(CONVERSATION_PAUSED, "Its conversation is paused: its tasks wait until it is resumed.")
    return None


def _behind(row, now):
    if row["ahead_id"] is None:
        return None
    noun = f"{kinds.noun(row['ahead_kind'])} {_short(row['ahead_id'])}"
    in_order = "its conversation's tasks run one at a time, in order"
    if row["ahead_status"] == TaskStatus.BLOCKED:
        code, text = BEHIND_APPROVAL, f"It waits behind {noun}, which waits for an operator's approval: {in_order}."
    else:
        state = TaskStatus(row["ahead_status"]).label.lower()
        code, text = BEHIND_EARLIER, f"It waits behind {noun} ({state}): {in_order}."
    return Wait(code, text, ahead_task_id=row["ahead_id"], ahead=_ahead_values(row))


def _ahead_values(row: Mapping[str, Any]) -> dict[str, Any]:
    return {name.removeprefix("ahead__"): value for name, value in row.items() if name.startswith("ahead__")}


def _backoff(row, now):
    if row["execute_after"] <= now:
        return None
    why = "its retry waits out its backoff" if row["status"] == TaskStatus.RETRY_WAIT else "it is not due yet"
    return Wait(BACKOFF, f"Due at {moment(row['execute_after'])}: {why}.", until=row["execute_after"])


def _no_plugin(row, now):
    if row["target_client_id"] is not None and not row["is_target_present"]:
        return Wait(NO_PLUGIN, f"Plugin client {row['target_client_id']} is not connected: it waits, using no "
                    "attempt, until the client says hello again.")
    return None


def _target_busy(row, now):
    if row["target_client_id"] is not None and row["busy_id"] is not None:
        return Wait(
            TARGET_BUSY, f"Task {_short(row['busy_id'])} is in flight to {row['target_client_id']}/"
            f"{row['target_platform']}: one task at a time goes to a target.", ahead_task_id=row["busy_id"],
        )
    return None


# The reasons of a task that is due or will be (pending, retry_wait), in the order they are told:
# the ones a person lifts first, then the one that ends by itself.
REASONS: tuple[Reason, ...] = (
    _no_executor, _dispatcher_paused, _kind_paused, _conversation_paused, _behind, _backoff, _no_plugin, _target_busy,
)


def wait_of(row: Mapping[str, Any], *, now: int) -> Wait | None:
    """The ``Wait`` of one row of ``_facts``: none for a task that runs, has finished, or is due and free to go."""
    if (held := _approval(row, now) or _leased(row, now)) is not None:
        return held
    if row["status"] not in CLAIMABLE_STATUSES:
        return None
    return next((wait for reason in REASONS if (wait := reason(row, now)) is not None), None)
