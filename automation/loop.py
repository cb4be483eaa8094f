"""The dispatcher loop: ticks until it is told to stop (SPEC §4).

Every loop claims and runs tasks: one per server (`serve` starts it as its
own child process, `manage.py dispatch --loop` in the foreground), and each
django-q2 cluster's schedule (``automation.jobs.dispatch_run``, with no
django-q2 timeout) starts one where none runs. Claiming is atomic across
processes and the per-target and per-lane limits live in the database
(``automation.services.claim``); each task's lease carries its lease
token, so two loops never run one task.

Each loop has a row in ``DispatcherWorker``: its heartbeat, renewed every
half tick. A loop whose heartbeat is older than the stall time (three ticks,
at least 10 s) died or hangs: the next live loop deletes its row, and its
tasks go back by their own leases (a tick's reclaim), with no hand-over. A
loop started by the schedule returns as soon as it has seen an older loop of
its server (``CONDUCTOR_SERVER_NAME``) beat, so the schedule only fills a
gap; a foreground loop ticks whatever else runs. A scheduled loop joins (writes
its row) only once it ticks, and while it ticks it stops itself, logged
(``dispatcher_loop_superseded``), when it finds a newer live loop of its
server (``serve``'s own loop resumed after a stall, having rejoined, or
started again), or when it rejoins itself after a stall and an older one of
its server is live: one loop per server at any moment once a beat has passed.

What must happen once in the whole system (renewal, pruning) runs as
django-q2 schedules, which fire once per period across clusters.

Nothing about the loop bounds a task: each task lives by its own lease and
heartbeat. On ``stop`` (SIGINT or SIGTERM) running tasks get
``STOP_GRACE_SECONDS``, then are cancelled.

Between ticks the loop listens for wake-ups (ingest committed new tasks, or
one of its own tasks finished and freed the next) and ticks at once. Every
loop listens: a wake-up reaches every server.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.db import close_old_connections

from automation.dispatcher import Dispatcher
from automation.selectors import dispatcher_server_elder, dispatcher_server_newer
from automation.services.dispatcher_state import (
    dispatcher_worker_heartbeat,
    dispatcher_worker_leave,
    dispatcher_workers_prune_stalled,
)
from automation.wake import wake_listener
from core.logfmt import log_event

logger = logging.getLogger(__name__)

# How long a stopping loop lets its running tasks finish before cancelling them.
STOP_GRACE_SECONDS = 10.0
# How often a loop waiting for its next tick looks at its stop signal.
STOP_POLL_SECONDS = 0.2
# A loop whose heartbeat is this many ticks old, and never less than the
# minimum, counts as stalled: a slow tick or a database hiccup must not
# make a live loop look dead.
STALL_TICKS = 3
STALL_MIN_SECONDS = 10.0


def stall_seconds(tick_seconds: float) -> float:
    """How old a loop's heartbeat may be before it counts as stalled."""
    return max(STALL_TICKS * tick_seconds, STALL_MIN_SECONDS)


@dataclass
class LoopReport:
    ticks: int = 0
    woken: int = 0
    tick_errors: int = 0
    covered: bool = False  # a scheduled loop that returned: an older loop of its server runs
    rejoined: int = 0  # times its row was found gone (pruned as stalled) and written again
    superseded_by: str = ""  # a scheduled loop that stopped itself: the loop of its server it left the work to


class DispatcherLoop:
    """One loop's life: beat, tick until stopped, leave."""

    def __init__(
        self,
        *,
        stop: threading.Event,
        tick_seconds: float,
        dispatcher: Dispatcher,
        listen_for_wake: bool,
        exit_when_covered: bool,
        server: str | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stop = stop
        # Paces the ticks; the dispatcher's own clock (epoch ms) stamps heartbeats.
        self.monotonic = monotonic
        self.tick_seconds = tick_seconds
        self.dispatcher = dispatcher
        self.listen_for_wake = listen_for_wake
        self.exit_when_covered = exit_when_covered
        self.server = server or settings.CONDUCTOR_SERVER_NAME
        self.stall_ms = int(stall_seconds(tick_seconds) * 1000)
        self.report = LoopReport()
        self._beat_at = float("-inf")
        self._joined = False  # its row was written once: a row found gone later was pruned

    @property
    def owner(self) -> str:
        return self.dispatcher.owner

    def run(self) -> LoopReport:
        try:
            if not (self.exit_when_covered and self._covered()):
                self._tick_until_stopped()
        finally:
            self._finish()
        return self.report

    # --- one loop per server, for the schedule's loops ---------------------------

    def _covered(self) -> bool:
        """True once an older loop of this server was seen beating (or when stopped).

        The older loop's row may be left by a loop that died with its
        cluster (killed and restarted within the stall time): it must be
        seen to beat, or this loop would leave its server without one until
        the schedule's next firing. A dead one's row stalls, the beats
        below delete it, and this loop ticks.
        """
        first_seen = None
        while not self.stop.is_set():
            try:
                # No row yet: a waiting loop is nobody's newer loop (``_superseded_by``). Two
                # that find no elder at once both tick, and the older of them stops at its next beat.
                elder = dispatcher_server_elder(
                    server=self.server, owner=self.owner, stalled_before=self.dispatcher.clock() - self.stall_ms,
                )
                if elder is None:
                    return False
                if first_seen is None or elder.owner != first_seen.owner:
                    first_seen = elder
                elif elder.heartbeat_at > first_seen.heartbeat_at:
                    self.report.covered = True
                    return True
            except Exception:
                log_event(logger, "dispatcher_worker_read_failed", level=logging.ERROR, exc_info=True,
                          lease_owner=self.owner)
                close_old_connections()
            self.stop.wait(self.tick_seconds / 2)
        return True

    def _beat(self) -> None:
        now = self.dispatcher.clock()
        self._beat_at = self.monotonic()
        had_row = dispatcher_worker_heartbeat(owner=self.owner, server=self.server, now=now)
        dispatcher_workers_prune_stalled(stalled_before=now - self.stall_ms, actor=self.owner)
        is_rejoining = not had_row and self._joined
        if is_rejoining:
            self.report.rejoined += 1
            log_event(logger, "dispatcher_worker_rejoined", level=logging.WARNING, lease_owner=self.owner,
                      detail="its heartbeat had stalled; tasks taken back meanwhile stay with their new leases")
        self._joined = True
        if self.exit_when_covered:
            other = self._superseded_by(now=now, is_rejoining=is_rejoining)
            if other:
                self.report.superseded_by = other
                log_event(logger, "dispatcher_loop_superseded", level=logging.WARNING, lease_owner=self.owner,
                          server=self.server, by=other, detail="another loop of its server runs; this one stops")

    def _superseded_by(self, *, now: int, is_rejoining: bool) -> str:
        """The loop of its server a scheduled loop leaves the work to ("" for none).

        A newer live loop: ``serve``'s own, resumed after a stall (its row
        pruned, it rejoined) or started again, or the other of two scheduled
        loops that found no elder at once. After its own stall, any older live
        loop: the one that took over.
        """
        stalled_before = now - self.stall_ms
        other = dispatcher_server_newer(server=self.server, owner=self.owner, stalled_before=stalled_before)
        if other is None and is_rejoining:
            other = dispatcher_server_elder(server=self.server, owner=self.owner, stalled_before=stalled_before)
        return other.owner if other is not None else ""

    # --- ticking ---------------------------------------------------------------

    def _tick_until_stopped(self) -> None:
        log_event(logger, "dispatcher_loop_start", lease_owner=self.owner, server=self.server,
                  tick_seconds=self.tick_seconds)
        listener = wake_listener(self.dispatcher.wake).start() if self.listen_for_wake else None
        try:
            next_tick = self.monotonic()
            while not self.stop.is_set():
                self._tick()
                if self.report.superseded_by:
                    break
                # The next slot after now. A tick a wake-up brought early keeps
                # the slot it came before: a burst of wake-ups (200 plugins
                # saying hello) must not push the scheduled ticks, and with
                # them the heartbeat, into the future. A slow tick skips slots
                # rather than bunching.
                now = self.monotonic()
                while next_tick <= now:
                    next_tick += self.tick_seconds
                self._wait_for_next_tick(next_tick)
        finally:
            if listener:
                listener.stop()

    def _tick(self) -> None:
        """One tick, then the heartbeat, at most once per half tick.

        Ticks a wake-up brings in quick succession (a busy queue) skip the
        heartbeat's writes; the stall time, at least three ticks, never runs
        short. A failing tick (the database went away, say) is logged and the
        loop goes on: the next tick tries again on a fresh connection.
        """
        try:
            self.dispatcher.tick()
            self.report.ticks += 1
            if self.monotonic() - self._beat_at >= self.tick_seconds / 2:
                self._beat()
        except Exception:
            self.report.tick_errors += 1
            log_event(logger, "dispatcher_tick_failed", level=logging.ERROR, exc_info=True, lease_owner=self.owner)
            close_old_connections()

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
        self.dispatcher.stop(grace=STOP_GRACE_SECONDS)
        try:
            dispatcher_worker_leave(owner=self.owner)
        except Exception:
            log_event(logger, "dispatcher_worker_leave_failed", level=logging.ERROR, exc_info=True,
                      lease_owner=self.owner, detail="its row stalls and a live loop deletes it")
        close_old_connections()
        if not self.report.covered:
            log_event(logger, "dispatcher_loop_end", lease_owner=self.owner, ticks=self.report.ticks,
                      woken=self.report.woken)


def dispatcher_loop(
    *,
    stop: threading.Event,
    tick_seconds: float,
    dispatcher: Dispatcher | None = None,
    listen_for_wake: bool = True,
    exit_when_covered: bool = False,
    server: str | None = None,
) -> LoopReport:
    """Run the dispatcher loop until ``stop`` is set (see the module docstring)."""
    return DispatcherLoop(
        stop=stop,
        tick_seconds=tick_seconds,
        dispatcher=dispatcher or Dispatcher(),
        listen_for_wake=listen_for_wake,
        exit_when_covered=exit_when_covered,
        server=server,
    ).run()
