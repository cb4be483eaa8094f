"""What an executor returns (STYLE rule 5): the dispatcher alone turns it into a state."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from automation.models import AutomationTask, Lease


@dataclass(frozen=True)
class Success:
    result: Any = None


@dataclass(frozen=True)
class RetryableFailure:
    """Worth another attempt (a timeout, a 5xx); the dispatcher retries while attempts remain.

    ``part``: the failure was a part of the server's own (the database, the
    channel layer), not the target's or the tool's: the task waits for the
    part, with backoff, using no attempt, until ``CONDUCTOR_PART_AWAY_MAX_MINUTES``
    have passed (SPEC §4). The dispatcher says so for what its executors raise.
    """

    error: str
    result: Any = None
    part: str = ""


@dataclass(frozen=True)
class TerminalFailure:
    """Will fail again the same way (a tool error, a missing route): no retry."""

    error: str
    result: Any = None


@dataclass(frozen=True)
class Refused:
    """A decision, not a fault: a policy says no when the task is about to run (a tool denied since ingest).

    The task fails with ``finish_reason`` rejected, as an operator's no does,
    so the failure counts and alerts see only faults.
    """

    error: str


Outcome = Success | RetryableFailure | TerminalFailure | Refused


@dataclass
class ExecutionContext:
    """What an executor gets besides its task.

    ``cancelled`` is set when the task was cancelled or its lease was lost
    (found at a heartbeat), or the dispatcher is stopping: long work checks it
    and stops. Its outcome is then discarded.
    """

    task: AutomationTask
    # The lease the task runs under (its lease token): every write the
    # worker makes for this run is conditioned on it.
    lease: Lease
    # Puts a step on the task's timeline, under the lease: given by the
    # dispatcher (``automation.dispatcher.execution_context``), which knows
    # the transition services; this module does not.
    record_step: Callable[[str, dict[str, Any]], None]
    cancelled: threading.Event = field(default_factory=threading.Event)
    # Set once the worker found its lease gone (the dispatcher counts a run's loss once).
    lease_lost: bool = False

    def is_cancelled(self) -> bool:
        return self.cancelled.is_set()

    def progress(self, action: str, **detail: Any) -> None:
        """Put a step of this attempt on the task's timeline (``record_step``: ``task_progress``).

        Raises ``LeaseLost`` when the task was cancelled or reclaimed
        meanwhile: the executor's work is then unwanted, and the dispatcher
        discards whatever it returns.
        """
        self.record_step(action, detail)
