"""Dispatcher-wide state: the global pause and the record of the last tick."""

from __future__ import annotations

import logging

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from automation.models import DispatcherState, KindPause, LeaseLoss
from automation.wake import dispatcher_wake_on_commit
from core.logfmt import log_event

logger = logging.getLogger(__name__)


def dispatcher_tick_record(*, lease_owner: str, now: int) -> None:
    updated = DispatcherState.objects.filter(pk=1).update(last_tick_at=now, last_tick_owner=lease_owner)
    if not updated:
        DispatcherState.objects.get_or_create(
            pk=1, defaults={"last_tick_at": now, "last_tick_owner": lease_owner}
        )


def lease_loss_record(*, kind: str) -> None:
    """Count one lost lease of a ``kind`` task (``LeaseLoss``): a worker found, at a write, that its lease was gone."""
    if LeaseLoss.objects.filter(kind=kind).update(count=F("count") + 1):
        return
    try:
        with transaction.atomic():
            LeaseLoss.objects.create(kind=kind, count=1)
    except IntegrityError:
        # Another worker counted this kind's first loss at the same moment.
        LeaseLoss.objects.filter(kind=kind).update(count=F("count") + 1)


def dispatcher_pause_set(*, is_paused: bool, actor: str) -> bool:
    """Switch the global pause; returns whether it changed. While paused nothing is claimed.

    Resuming wakes the dispatcher on commit: what waited is due at once.
    """
    DispatcherState.objects.get_or_create(pk=1)
    changed = bool(
        DispatcherState.objects.filter(pk=1)
        .exclude(is_paused=is_paused)
        .update(is_paused=is_paused, paused_by=actor, paused_at=timezone.now() if is_paused else None)
    )
    if changed:
        log_event(logger, "dispatcher_pause" if is_paused else "dispatcher_resume", actor=actor)
        if not is_paused:
            dispatcher_wake_on_commit()
    return changed


def kind_pause_set(*, kind: str, is_paused: bool, actor: str) -> bool:
    """Pause or resume claiming one task kind; returns whether it changed.

    A paused kind's tasks stay due and are not claimed; running ones finish.
    Resuming wakes the dispatcher on commit.
    """
    if is_paused:
        _, changed = KindPause.objects.get_or_create(kind=kind, defaults={"paused_by": actor})
    else:
        changed = bool(KindPause.objects.filter(kind=kind).delete()[0])
    if changed:
        log_event(logger, "kind_pause" if is_paused else "kind_resume", kind=kind, actor=actor)
        if not is_paused:
            dispatcher_wake_on_commit()
    return changed


def dispatcher_run_lease(*, owner: str, now: int, until: int) -> bool:
    """Take or renew the lease of the one ticking dispatcher loop; True if ``owner`` holds it.

    Taking it gives up ``owner``'s standby slot, if it had one, so the next
    loop can stand by.
    """
    DispatcherState.objects.get_or_create(pk=1)
    held = bool(
        DispatcherState.objects.filter(
            Q(run_owner="") | Q(run_until__lt=now) | Q(run_owner=owner), pk=1
        ).update(run_owner=owner, run_until=until)
    )
    if held:
        DispatcherState.objects.filter(pk=1, standby_owner=owner).update(standby_owner="", standby_until=None)
    return held


def dispatcher_standby_lease(*, owner: str, now: int, until: int) -> bool:
    """Take or renew the one standby slot (a loop waiting to take over); True if held."""
    DispatcherState.objects.get_or_create(pk=1)
    return bool(
        DispatcherState.objects.filter(
            Q(standby_owner="") | Q(standby_until__lt=now) | Q(standby_owner=owner), pk=1
        ).update(standby_owner=owner, standby_until=until)
    )


def dispatcher_run_release(*, owner: str) -> None:
    """Give up whatever ``owner`` holds, the run lease or the standby slot, so another takes it at once."""
    DispatcherState.objects.filter(pk=1, run_owner=owner).update(run_owner="", run_until=None)
    DispatcherState.objects.filter(pk=1, standby_owner=owner).update(standby_owner="", standby_until=None)
