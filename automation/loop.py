"""The dispatcher loop: ticks until it is told to stop (SPEC §4).

django-q2 starts and supervises it: ``automation.jobs.dispatch_run`` runs it
in a cluster worker, with no django-q2 timeout, and a schedule makes sure one
is running (``automation.schedules``). ``manage.py dispatch --loop`` runs the
same loop in the foreground.

One loop in the whole system ticks. It holds the run lease in
``DispatcherState`` and renews it at every tick, for as long as it runs. One
more loop stands by in the standby slot, trying the lease once a tick, and
takes over as soon as the lease lapses (its holder's process died): within
the lease plus one tick. A loop started while both are taken (the schedule's
next firing) returns when ``exit_when_covered`` as soon as it has seen both
holders renew their places (a tick or two), so the schedule only ever fills
a gap, and places left by dead loops are taken over; a foreground loop keeps
standing by instead.

Nothing about the loop bounds a task: each task lives by its own lease and
heartbeat. On ``stop`` (SIGINT or SIGTERM) running tasks get
``STOP_GRACE_SECONDS``, then are cancelled. A loop that finds its run lease
taken (it stalled past the lease and the standby took over) claims nothing
more and lets its running tasks finish under their own leases.

Between ticks the loop listens for wake-ups (ingest committed new tasks, or
one of its own tasks finished and freed the next) and ticks at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import close_old_connections

from automation.dispatcher import Dispatcher
from automation.selectors import dispatcher_places
from automation.services.dispatcher_state import (
    dispatcher_run_lease,
    dispatcher_run_release,
    dispatcher_standby_lease,
)
from automation.wake import wake_listener
from core.logfmt import log_event

logger = logging.getLogger(__name__)

# How long a stopping loop lets its running tasks finish before cancelling them.
STOP_GRACE_SECONDS = 10.0
# How often a loop waiting for its next tick looks at its stop signal.
STOP_POLL_SECONDS = 0.2
# The run lease and the standby slot last this many ticks, and never less
# than the minimum, so that a slow tick or a database hiccup does not hand
# the loop over while its holder lives.
LEASE_TICKS = 3
LEASE_MIN_SECONDS = 10.0


def lease_seconds(tick_seconds: float) -> float:
    """How long the run lease and the standby slot last without renewal."""
    return max(LEASE_TICKS * tick_seconds, LEASE_MIN_SECONDS)


@dataclass
class LoopReport:
    ticks: int = 0
    woken: int = 0
    tick_errors: int = 0
    stood_by: bool = False  # waited in the standby slot before ticking (or until stopped)
    held_lease: bool = False  # ticked as the system's one loop
    lost_lease: bool = False  # another loop took the lease over while this one lived


class DispatcherLoop:
    """One loop's life: stand by for the run lease, tick until stopped, hand over."""

    def __init__(
        self,
        *,
        stop: threading.Event,
        tick_seconds: float,
        dispatcher: Dispatcher,
        listen_for_wake: bool,
        exit_when_covered: bool,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stop = stop
        # Paces the ticks; the dispatcher's own clock (epoch ms) stamps leases.
        self.monotonic = monotonic
        self.tick_seconds = tick_seconds
        self.dispatcher = dispatcher
        self.listen_for_wake = listen_for_wake
        self.exit_when_covered = exit_when_covered
        self.lease_ms = int(lease_seconds(tick_seconds) * 1000)
        self.report = LoopReport()
        self._renewed_at = float("-inf")

    @property
    def owner(self) -> str:
        return self.dispatcher.owner

    def run(self) -> LoopReport:
        try:
            if self._stand_by():
                self._tick_until_stopped()
        finally:
            self._finish()
        return self.report

    # --- standing by ---------------------------------------------------------

    def _stand_by(self) -> bool:
        """Wait for the run lease; True once held, False when stopped or not needed.

        A loop that may exit when covered returns only once it has seen both
        places renewed: places still held by loops that died with their
        cluster (killed and restarted within the lease) would otherwise send
        the new cluster's loops away, and nothing would tick until the
        schedule's next firing, up to a minute later. Live holders renew
        within a tick; dead ones lapse, and this loop takes their place.
        """
        first_seen = None
        while not self.stop.is_set():
            try:
                if self._hold_lease():
                    return True
                if self._hold_standby():
                    if not self.report.stood_by:
                        log_event(logger, "dispatcher_standby", lease_owner=self.owner)
                    self.report.stood_by = True
                elif self.exit_when_covered:
                    places = dispatcher_places()
                    if first_seen is None or places.owners != first_seen.owners:
                        first_seen = places
                    elif places.renewed_since(first_seen):
                        return False  # one live loop ticks and another stands by: nothing to do
            except Exception:
                log_event(logger, "dispatcher_lease_read_failed", level=logging.ERROR, exc_info=True, lease_owner=self.owner)
                close_old_connections()
            self.stop.wait(self.tick_seconds)
        return False

    def _hold_lease(self) -> bool:
        now = self.dispatcher.clock()
        return dispatcher_run_lease(owner=self.owner, now=now, until=now + self.lease_ms)

    def _hold_standby(self) -> bool:
        now = self.dispatcher.clock()
        return dispatcher_standby_lease(owner=self.owner, now=now, until=now + self.lease_ms)

    # --- ticking ---------------------------------------------------------------

    def _tick_until_stopped(self) -> None:
        self.report.held_lease = True
        log_event(logger, "dispatcher_loop_start", lease_owner=self.owner, tick_seconds=self.tick_seconds)
        listener = wake_listener(self.dispatcher.wake).start() if self.listen_for_wake else None
        try:
            next_tick = self.monotonic()
            while not self.stop.is_set():
                if not self._tick():
                    self.report.lost_lease = True
                    log_event(logger, "dispatcher_lease_lost", level=logging.WARNING, lease_owner=self.owner)
                    return
                # The next slot after now. A tick a wake-up brought early keeps
                # the slot it came before: a burst of wake-ups (200 plugins
                # saying hello) must not push the scheduled ticks, and with
                # them the run lease's renewal, into the future. A slow tick
                # skips slots rather than bunching.
                now = self.monotonic()
                while next_tick <= now:
                    next_tick += self.tick_seconds
                self._wait_for_next_tick(next_tick)
        finally:
            if listener:
                listener.stop()

    def _tick(self) -> bool:
        """One tick, then renew the run lease; False when another loop holds it now.

        The lease is renewed at most once per half tick: ticks a wake-up
        brings in quick succession (a busy queue) skip the renewal's writes,
        and the lease, which lasts at least three ticks, never runs short.
        A failing tick (the database went away, say) is logged and the loop
        goes on: the next tick tries again on a fresh connection.
        """
        try:
            self.dispatcher.tick()
            self.report.ticks += 1
            if self.monotonic() - self._renewed_at < self.tick_seconds / 2:
                return True
            self._renewed_at = self.monotonic()
            return self._hold_lease()
        except Exception:
            self.report.tick_errors += 1
            log_event(logger, "dispatcher_tick_failed", level=logging.ERROR, exc_info=True, lease_owner=self.owner)
            close_old_connections()
            return True

    def _wait_for_next_tick(self, next_tick: float) -> None:
        """Until the next tick: a wake-up ticks at once, a stop ends the wait."""
        wake = self.dispatcher.wake
        while not self.stop.is_set():
            remaining = next_tick - self.monotonic()
            if remaining <= 0:
                return
            if wake.wait(min(remaining, STOP_POLL_SECONDS)):
                wake.clear()
                self.report.woken += 1
                return

    # --- handing over ----------------------------------------------------------

    def _finish(self) -> None:
        dispatcher = self.dispatcher
        if self.report.lost_lease:
            # Another loop ticks now: claim nothing more, but let running tasks
            # finish under their own leases (unless this loop is told to stop).
            dispatcher.stopping.set()
            while not dispatcher.wait_idle(STOP_POLL_SECONDS) and not self.stop.is_set():
                pass
        dispatcher.stop(grace=STOP_GRACE_SECONDS)
        try:
            dispatcher_run_release(owner=self.owner)
        except Exception:
            log_event(logger, "dispatcher_lease_release_failed", level=logging.ERROR, exc_info=True, lease_owner=self.owner,
                      detail="the lease lapses by itself")
        close_old_connections()
        if self.report.held_lease or self.report.stood_by:  # not the schedule's start that found both taken
            log_event(logger, "dispatcher_loop_end", lease_owner=self.owner, ticks=self.report.ticks,
                      woken=self.report.woken)


def dispatcher_loop(
    *,
    stop: threading.Event,
    tick_seconds: float,
    dispatcher: Dispatcher | None = None,
    listen_for_wake: bool = True,
    exit_when_covered: bool = False,
) -> LoopReport:
    """Run the dispatcher loop until ``stop`` is set (see the module docstring)."""
    return DispatcherLoop(
        stop=stop,
        tick_seconds=tick_seconds,
        dispatcher=dispatcher or Dispatcher(),
        listen_for_wake=listen_for_wake,
        exit_when_covered=exit_when_covered,
    ).run()
