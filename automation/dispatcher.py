"""The dispatcher: ticks that reclaim, claim and run tasks (SPEC §4).

One ``Dispatcher`` per process; ``automation.loop`` ticks it. Each tick reclaims expired leases, claims due
tasks through the one claim path, and hands each claimed task to a thread of
its own, so a slow target never delays another. A running task renews its
lease (heartbeat) and is told to stop when it finds itself cancelled. The
executor returns an outcome; only the dispatcher turns it into a state,
through the transitions conditioned on its lease. Clock and random source are injected.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import (
    InterfaceError,
    OperationalError,
    close_old_connections,
)

from automation.kinds import KindSpec, kinds
from automation.models import AutomationTask, FinishReason, Lease, TaskStatus
from automation.outcomes import (
    ExecutionContext,
    Outcome,
    RetryableFailure,
    Success,
    Refused,
    TerminalFailure,
)
from automation.retry import RetryPolicy, outbound_jitter_ms
from automation.services.claim import tasks_claim, tasks_reclaim_expired
from automation.services.dispatcher_state import lease_loss_record
from automation.services.steps import transition_and_follow_up
from automation.services.transitions import (
    LeaseLost,
    TransitionError,
    task_fail,
    task_heartbeat,
    task_progress,
    task_release,
    task_retry_later,
    task_start,
    task_succeed,
    task_wait_for_part,
)
from automation.wake import ThreadWakes, wakes_go_to
from core.clock import now_ms
from core.layer_send import ChannelLayerUnavailable
from core.logfmt import log_event

logger = logging.getLogger(__name__)

# After the stop grace, how long cancelled tasks get to return.
STOP_AFTER_CANCEL_SECONDS = 5.0
# How often, and how far apart, a task's outcome is written again when the
# database connection died under the write (a restart, a cut connection).
# A loop woken by every finished task ticks many times a second under load:
# the reclaim of expired leases (a lease lasts tens of seconds) is done at
# most this often by each dispatcher, on its own clock, and on its first
# tick. Its liveness is its loop's heartbeat (``automation.loop``), written
# at most every half tick, however often it ticks.
HOUSEKEEPING_EVERY_MS = 250
RECORD_ATTEMPTS = 5
RECORD_RETRY_SECONDS = 0.5
# What a lost or cut database connection raises.
CONNECTION_ERRORS = (OperationalError, InterfaceError)
# The server's own parts a task waits for (``RetryableFailure.part``), as the task's error names them.
PART_DATABASE = "the database"
PART_CHANNEL_LAYER = "the channel layer"


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def execution_context(task: AutomationTask, *, lease: Lease | None = None) -> ExecutionContext:
    """The context a leased task's executor runs in, under ``lease`` (the task's own when not given):
    its steps go on the task's timeline through ``task_progress``, under that lease."""
    lease = lease or task.lease
    if lease is None:
        raise ValueError(f"task {task.pk} is not leased: it has no lease to run under")

    def record_step(action: str, detail: dict[str, Any]) -> None:
        task_progress(task.pk, lease=lease, action=action, detail=detail)

    return ExecutionContext(task=task, lease=lease, record_step=record_step)


@dataclass(frozen=True)
class DispatcherConfig:
    max_tasks_per_tick: int
    lease_ms: int
    outbound_jitter_max_ms: int
    retry_backoff_seconds: tuple[int, ...]
    retry_jitter_max_ms: int
    # How long a task waits for a part of the server that does not answer (SPEC §4).
    part_away_max_ms: int = 15 * 60_000

    @classmethod
    def from_settings(cls) -> DispatcherConfig:
        return cls(
            max_tasks_per_tick=settings.CONDUCTOR_MAX_TASKS_PER_TICK,
            lease_ms=settings.CONDUCTOR_LEASE_SECONDS * 1000,
            outbound_jitter_max_ms=settings.CONDUCTOR_OUTBOUND_JITTER_MAX_MS,
            retry_backoff_seconds=settings.CONDUCTOR_RETRY_BACKOFF_SECONDS,
            retry_jitter_max_ms=settings.CONDUCTOR_RETRY_JITTER_MAX_MS,
            part_away_max_ms=settings.CONDUCTOR_PART_AWAY_MAX_MINUTES * 60_000,
        )

    def retry_policy(self, rng: random.Random) -> RetryPolicy:
        return RetryPolicy(
            backoff_seconds=self.retry_backoff_seconds, jitter_max_ms=self.retry_jitter_max_ms, rng=rng
        )

    @property
    def heartbeat_seconds(self) -> float:
        # Well before the lease runs out, with room for two missed beats.
        return self.lease_ms / 1000 / 3


@dataclass
class TickReport:
    reclaimed: list[str] = field(default_factory=list)
    claimed: list[str] = field(default_factory=list)


class Dispatcher:
    def __init__(
        self,
        *,
        owner: str | None = None,
        config: DispatcherConfig | None = None,
        clock: Callable[[], int] = now_ms,
        rng: random.Random | None = None,
    ) -> None:
        self.owner = owner or new_owner()
        self.config = config or DispatcherConfig.from_settings()
        self.clock = clock
        self.rng = rng or random.Random()
        self.retry = self.config.retry_policy(self.rng)
        self.stopping = threading.Event()
        # Set whenever a task of this dispatcher finishes: what it freed (the
        # next block of a conversation, a delivery it created) is due at once,
        # so a running loop ticks without waiting for its next turn.
        self.wake = threading.Event()
        self._housekept_at: int | None = None  # the clock of the last reclaim
        # One thread, and so at most one database connection, per task in flight.
        self._pool = ThreadPoolExecutor(
            max_workers=self.config.max_tasks_per_tick, thread_name_prefix="conductor-task"
        )
        self._running: dict[str, tuple[Future, ExecutionContext]] = {}
        self._heartbeat_due: set[str] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._heartbeat = threading.Thread(
            target=self._heartbeat_loop, name="conductor-heartbeat", daemon=True
        )
        self._heartbeat.start()

    # --- ticks ---------------------------------------------------------------

    def tick(self) -> TickReport:
        """Reclaim expired leases (``HOUSEKEEPING_EVERY_MS``), claim what is due, start running it. Returns at once."""
        now = self.clock()
        housekeeping = self._housekept_at is None or now - self._housekept_at >= HOUSEKEEPING_EVERY_MS
        if housekeeping:
            self._housekept_at = now
        reclaimed = tasks_reclaim_expired(actor=self.owner, now=now, retry=self.retry) if housekeeping else []
        free_slots = self.config.max_tasks_per_tick - self.in_flight()
        claimed = [] if self.stopping.is_set() else tasks_claim(
            lease_owner=self.owner, now=now, limit=free_slots, lease_ms=self.config.lease_ms,
            start_at_once=True, outbound_jitter=self.config.outbound_jitter_max_ms > 0,
        )
        for task in claimed:
            ctx = execution_context(task)
            with self._lock:
                self._running[task.pk] = (self._pool.submit(self._run, ctx), ctx)
        if reclaimed or claimed:
            log_event(logger, "tick", lease_owner=self.owner, reclaimed=len(reclaimed), claimed=len(claimed))
        return TickReport(reclaimed=[t.pk for t in reclaimed], claimed=[t.pk for t in claimed])

    def in_flight(self) -> int:
        with self._lock:
            for task_id in [tid for tid, (future, _) in self._running.items() if future.done()]:
                del self._running[task_id]
            return len(self._running)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait for every task this dispatcher started; True when all finished in time."""
        with self._lock:
            futures = [future for future, _ in self._running.values()]
        _, not_done = wait(futures, timeout=timeout)
        return not not_done

    def stop(self, *, grace: float) -> bool:
        """Claim nothing more; give running tasks ``grace`` seconds; True when all finished.

        Tasks still waiting out their jitter are given back unstarted. Tasks
        still running after the grace are told to stop and their outcomes are
        discarded: they keep their lease until it expires and are then
        reclaimed as interrupted, as if this process had died.
        """
        self.stopping.set()
        finished = self.wait_idle(grace)
        if not finished:
            with self._lock:
                contexts = [ctx for _, ctx in self._running.values()]
            for ctx in contexts:
                ctx.cancelled.set()
            self.wait_idle(STOP_AFTER_CANCEL_SECONDS)
        self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        return finished

    # --- running one task ------------------------------------------------------

    def _run(self, ctx: ExecutionContext) -> None:
        # A broken or too old connection is dropped before and after the
        # thread's tasks, not between a task and its continuation.
        close_old_connections()
        try:
            with wakes_go_to(self.wake) as wakes:
                while ctx is not None:
                    self._run_task(ctx, wakes)
                    ctx = self._continuation(ctx, wakes)
        finally:
            close_old_connections()

    def _continuation(self, previous: ExecutionContext, wakes: ThreadWakes) -> ExecutionContext | None:
        """What runs next in this thread: a task the one before created (its kind's follow-up), leased now.

        The result's delivery, say, need not wait for a wake-up, a tick and a
        claim: the claim's own lease (``tasks_claim`` among the created
        tasks) takes it at once, under the same lease rules, per-target limit and
        lane order, and its lease event says which task it continued. A task
        that may not run yet (its target is busy or offline, its conversation
        or kind is paused) is not leased and waits for the loop's claim; so do
        the other tasks created. The thread keeps the slot it held. Then the
        loop is woken: what the task freed (the next block of its
        conversation, its target) is due at once.
        """
        due, wakes.created[:] = list(wakes.created), []
        try:
            if not due or self.stopping.is_set():
                return None
            leased = tasks_claim(
                lease_owner=self.owner, now=self.clock(), limit=1, lease_ms=self.config.lease_ms,
                among=due, detail={"continues": previous.task.pk}, start_at_once=True,
                outbound_jitter=self.config.outbound_jitter_max_ms > 0,
            )
        except Exception:
            log_event(logger, "continuation_failed", level=logging.ERROR, exc_info=True, task_id=previous.task.pk,
                      kind=previous.task.kind, lease_owner=self.owner, detail="the loop's claim takes the tasks")
            close_old_connections()
            return None
        finally:
            self.wake.set()
        if not leased:
            return None
        ctx = execution_context(leased[0])
        with self._lock:
            future, _ = self._running.pop(previous.task.pk)
            self._running[ctx.task.pk] = (future, ctx)
        log_event(logger, "continuation", task_id=ctx.task.pk, kind=ctx.task.kind, lease_owner=self.owner,
                  continues=previous.task.pk)
        return ctx

    def _run_task(self, ctx: ExecutionContext, wakes: ThreadWakes) -> None:
        task = ctx.task
        try:
            spec = kinds.get(task.kind)
            if task.status != TaskStatus.RUNNING and (task := self._start(spec, ctx)) is None:
                return
            outcome = self._execute(spec, ctx)
            if ctx.is_cancelled():
                log_event(logger, "outcome_discarded", task_id=task.pk, kind=task.kind, lease_owner=self.owner)
                return
            with wakes.held():
                self._record(ctx, outcome)
        except LeaseLost as exc:
            # Lease lost: the task was cancelled, reclaimed or finished under another lease.
            self._lease_lost(ctx, exc)
        except TransitionError as exc:
            log_event(logger, "transition_refused", level=logging.WARNING, task_id=task.pk, kind=task.kind,
                      lease_owner=self.owner, error=str(exc))
        except Exception:
            log_event(logger, "task_run_failed", level=logging.ERROR, exc_info=True, task_id=task.pk, kind=task.kind,
                      lease_owner=self.owner)
            close_old_connections()

    def _start(self, spec: KindSpec, ctx: ExecutionContext) -> AutomationTask | None:
        """Start a task the claim only leased (an outbound one): its jitter, its client, then running.

        Returns it running, or None when it was given back unstarted. (The
        claim starts the others itself: ``tasks_claim(start_at_once=True)``.)
        """
        task = ctx.task
        jitter = self._wait_jitter(spec)
        if jitter is None:
            task_release(task.pk, lease=ctx.lease, reason="dispatcher stopping", now=self.clock())
            return None
        if (
            spec.targets is not None
            and task.target_client_id is not None
            and not spec.targets.is_present(client_id=task.target_client_id)
        ):
            # Gone since the claim: the task waits for its hello, using no attempt.
            # (A task with no route at all runs, and its executor fails it.)
            task_release(task.pk, lease=ctx.lease, reason="client offline", now=self.clock())
            return None
        ctx.task = task_start(
            task.pk, lease=ctx.lease, lease_until=self.clock() + self.config.lease_ms,
            jitter_ms=jitter if spec.is_outbound else None, now=self.clock(),
        )
        return ctx.task

    def _wait_jitter(self, spec: KindSpec) -> int | None:
        """Wait the outbound jitter; None when the dispatcher began stopping meanwhile."""
        if not spec.is_outbound:
            return 0
        jitter = outbound_jitter_ms(jitter_max_ms=self.config.outbound_jitter_max_ms, rng=self.rng)
        return None if self.stopping.wait(jitter / 1000) else jitter

    def _execute(self, spec: KindSpec, ctx: ExecutionContext) -> Outcome:
        """Run the executor while the heartbeat keeps its lease; unexpected errors are terminal.

        ``LeaseLost`` from a step the executor recorded passes up as a lost lease.
        """
        with self._lock:
            self._heartbeat_due.add(ctx.task.pk)
        try:
            return spec.executor(ctx)
        except LeaseLost:
            # Found by a step the executor recorded: the task is no longer this dispatcher's.
            ctx.cancelled.set()
            raise
        except CONNECTION_ERRORS as exc:
            # The database went away under the executor: not the task's own
            # failure, but an interruption (SPEC 4.4). An idempotent task waits
            # for it and runs again; another, which may have acted already, fails as interrupted.
            log_event(logger, "executor_connection_lost", level=logging.ERROR, exc_info=True, task_id=ctx.task.pk, kind=spec.name)
            close_old_connections()
            error = f"interrupted: the database connection failed while it ran ({type(exc).__name__})"
            return self._part_away(spec, ctx, PART_DATABASE, error)
        except ChannelLayerUnavailable as exc:
            log_event(logger, "executor_channel_layer_away", level=logging.WARNING, task_id=ctx.task.pk,
                      kind=spec.name, error=str(exc))
            part = f"{PART_CHANNEL_LAYER} ({'Redis' if settings.REDIS_URL else 'its SQLite database'})"
            return self._part_away(spec, ctx, part, f"the channel layer did not take a message: {exc}")
        except Exception as exc:
            log_event(logger, "executor_raised", level=logging.ERROR, exc_info=True, task_id=ctx.task.pk, kind=spec.name)
            return TerminalFailure(f"executor error: {type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._heartbeat_due.discard(ctx.task.pk)

    @staticmethod
    def _part_away(spec: KindSpec, ctx: ExecutionContext, part: str, error: str) -> Outcome:
        """A part of the server failed under the executor: the task waits for it where running it
        again is safe (an idempotent kind: a delivery, whose key makes a second send harmless), and
        fails as interrupted where the run may have acted already (SPEC §4, §4.4)."""
        return RetryableFailure(error, part=part) if spec.is_idempotent(ctx.task) else TerminalFailure(error)

    def _heartbeat_loop(self) -> None:
        """Renew the lease of every task this dispatcher is running, well before it runs out.

        One thread (and one database connection) for all of them. A task found
        cancelled or reclaimed is told to stop.
        """
        while not self._closed.wait(self.config.heartbeat_seconds):
            with self._lock:
                beating = [(task_id, self._running[task_id][1]) for task_id in self._heartbeat_due]
            for task_id, ctx in beating:
                try:
                    task_heartbeat(
                        task_id, lease=ctx.lease,
                        lease_until=self.clock() + self.config.lease_ms, now=self.clock(),
                    )
                except LeaseLost as exc:
                    with self._lock:
                        # The list was read before this beat: a task whose executor has
                        # returned since is no longer beating, and its worker records it.
                        still_running = task_id in self._heartbeat_due
                    if still_running:
                        self._lease_lost(ctx, exc)
                        ctx.cancelled.set()
                except TransitionError:
                    ctx.cancelled.set()
                except Exception:
                    # A database hiccup: the lease has two more beats of slack.
                    log_event(logger, "heartbeat_failed", level=logging.ERROR, exc_info=True, task_id=task_id, kind=ctx.task.kind,
                              detail="the lease has two more beats of slack")
            close_old_connections()

    def _lease_lost(self, ctx: ExecutionContext, exc: LeaseLost) -> None:
        """The task's lease no longer holds it: log it, and count it (once a run) unless an operator cancelled it.

        An operator's cancel ends a lease on purpose; anything else (a lease
        that expired under a live worker and was reclaimed, a task another
        lease ran) is what ``conductor_leases_lost_total`` counts, and stays 0
        on a healthy system.
        """
        with self._lock:
            if ctx.lease_lost:
                return
            ctx.lease_lost = True
        is_cancel = exc.status == TaskStatus.CANCELLED
        log_event(logger, "lease_ended_by_cancel" if is_cancel else "lease_lost",
                  level=logging.INFO if is_cancel else logging.WARNING, task_id=ctx.task.pk, kind=ctx.task.kind,
                  lease_owner=self.owner, lease_token=f"{ctx.lease.token:016x}", error=str(exc))
        if not is_cancel:
            try:
                lease_loss_record(kind=ctx.task.kind)
            except Exception:
                log_event(logger, "lease_loss_record_failed", level=logging.ERROR, exc_info=True,
                          task_id=ctx.task.pk, kind=ctx.task.kind)
                close_old_connections()

    def _record(self, ctx: ExecutionContext, outcome: Outcome) -> None:
        """Turn the outcome into the task's next state; the kind's follow-up commits with it.

        The outcome is known, only its write failed: when the database
        connection dies under it, it is written again on a fresh connection
        (``RECORD_ATTEMPTS`` times), rather than left for the reclaim, which
        would fail a non-idempotent task that did run as interrupted. The write
        is conditioned on the lease, so one that committed before the connection died is not
        applied twice: the next finds the lease ended (``LeaseLost``), which
        after a cut write is the earlier write's own doing, not a lost lease.
        """
        task = ctx.task
        for attempt in range(1, RECORD_ATTEMPTS + 1):
            try:
                transition_and_follow_up(
                    lambda: self._record_outcome(task, ctx.lease, outcome, self.clock()), actor=self.owner
                )
                return
            except LeaseLost as exc:
                if attempt == 1:
                    raise
                log_event(logger, "record_written_before_the_cut", task_id=task.pk, kind=task.kind,
                          lease_owner=self.owner, attempt=attempt, error=str(exc))
                return
            except CONNECTION_ERRORS as exc:
                if attempt == RECORD_ATTEMPTS:
                    raise
                log_event(logger, "record_retry", level=logging.WARNING, task_id=task.pk, kind=task.kind,
                          lease_owner=self.owner, attempt=attempt, error=f"{type(exc).__name__}: {exc}")
                close_old_connections()
                time.sleep(RECORD_RETRY_SECONDS)

    def _wait_for_part(self, task: AutomationTask, lease: Lease, *, part: str, error: str, now: int) -> AutomationTask:
        """Put the task back to wait for ``part``, using no attempt; fail it, naming the part, once it
        has waited longer than ``part_away_max_ms``. How long it waits is the retry policy's."""
        since = task.part_away_since or now
        waited = now - since
        if waited > self.config.part_away_max_ms:
            return task_fail(task.pk, lease=lease, now=now,
                             error=f"{part} did not answer for {waited // 60_000} min: {error}")
        delay = self.retry.part_away_delay(waited_ms=waited)
        return task_wait_for_part(task.pk, lease=lease, part=part, error=f"waiting for {part}: {error}",
                                  since=since, retry_at=now + delay.total_ms, now=now)

    def _record_outcome(self, task: AutomationTask, lease: Lease, outcome: Outcome, now: int) -> AutomationTask:
        match outcome:
            case Success(result=result):
                return task_succeed(task.pk, lease=lease, result=result, now=now)
            case RetryableFailure(error=error, part=part) if part:
                return self._wait_for_part(task, lease, part=part, error=error, now=now)
            case RetryableFailure(error=error, result=result):
                delay = self.retry.next_delay(attempt_count=task.attempt_count, max_attempts=task.max_attempts)
                if delay is not None:
                    return task_retry_later(
                        task.pk, lease=lease, error=error, retry_at=now + delay.total_ms,
                        backoff_ms=delay.backoff_ms, jitter_ms=delay.jitter_ms, now=now,
                    )
                return task_fail(
                    task.pk, lease=lease, now=now, result=result,
                    error=f"{error} (attempt {task.attempt_count} of {task.max_attempts}, none left)",
                )
            case TerminalFailure(error=error, result=result):
                return task_fail(task.pk, lease=lease, error=error, result=result, now=now)
            case Refused(error=error):
                return task_fail(task.pk, lease=lease, error=error, now=now,
                                 reason=FinishReason.REJECTED)
        raise TypeError(f"an executor returned {outcome!r}, not an Outcome")
