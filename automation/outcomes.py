"""What an executor returns (STYLE rule 5): the dispatcher alone turns it into a state."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from automation.models import AutomationTask


@dataclass(frozen=True)
class Success:
    result: Any = None


@dataclass(frozen=True)
class RetryableFailure:
    """Worth another attempt (a timeout, a 5xx); the dispatcher retries while attempts remain."""

    error: str
    result: Any = None


@dataclass(frozen=True)
class TerminalFailure:
    """Will fail again the same way (a tool error, a missing route): no retry."""

    error: str
    result: Any = None


Outcome = Success | RetryableFailure | TerminalFailure


@dataclass
class ExecutionContext:
    """What an executor gets besides its task.

    ``cancelled`` is set when the task was cancelled or its lease was lost
    (found at a heartbeat), or the dispatcher is stopping: long work checks it
    and stops. Its outcome is then discarded.
    """

    task: AutomationTask
    lease_owner: str
    cancelled: threading.Event = field(default_factory=threading.Event)

    def is_cancelled(self) -> bool:
        return self.cancelled.is_set()
