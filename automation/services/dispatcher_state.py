"""Dispatcher-wide state: the global pause, the pauses per kind, lost leases, and the loops at work (their rows)."""

from __future__ import annotations

import logging

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from automation.models import DispatcherState, DispatcherWorker, KindPause, LeaseLoss
from automation.wake import dispatcher_wake_on_commit
from core.keys import own_key_fingerprint
from core.logfmt import log_event

logger = logging.getLogger(__name__)


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


def dispatcher_worker_heartbeat(*, owner: str, server: str, now: int) -> bool:
    """Renew ``owner``'s heartbeat, writing its row when it has none; returns whether it had one.

    False when ``owner`` had no row: it starts now, or it stalled itself and a
    live loop pruned it (it rejoins, and its tasks, if any were taken back
    meanwhile, stay with whoever holds their leases now). A new row tells
    which key its server signs with (``core.keys``).
    """
    had_row = bool(DispatcherWorker.objects.filter(owner=owner).update(heartbeat_at=now))
    if not had_row:
        DispatcherWorker.objects.get_or_create(
            owner=owner,
            defaults={"server": server, "started_at": now, "heartbeat_at": now,
                      "key_fingerprint": own_key_fingerprint()},
        )
    return had_row


def dispatcher_workers_prune_stalled(*, stalled_before: int, actor: str) -> int:
    """Delete the rows of loops that stalled (heartbeat before ``stalled_before``); returns how many.

    ``actor`` is the live loop that prunes them, for the log. Their tasks
    need no hand-over: each goes back by its own lease.
    """
    pruned, _ = DispatcherWorker.objects.filter(heartbeat_at__lt=stalled_before).delete()
    if pruned:
        log_event(logger, "dispatcher_workers_pruned", level=logging.WARNING, lease_owner=actor, pruned=pruned,
                  detail="loops that stopped beating; their tasks go back by their own leases")
    return pruned


def dispatcher_worker_leave(*, owner: str) -> None:
    """``owner``'s loop stopped: its row goes at once."""
    DispatcherWorker.objects.filter(owner=owner).delete()
