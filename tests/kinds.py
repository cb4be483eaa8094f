"""Task kinds that exist only in tests, registered beside the real ones.

Their executor does what the task's payload says: optionally sleep (checking
for cancellation), optionally record a side effect in the `test_side_effects`
table (see tests/side_effects.py), then return the outcome named in the payload.
"""

import time

from automation.kinds import LANE_INSTRUCTIONS, LANE_OUTBOUND, KindSpec, kinds
from automation.outcomes import (
    ExecutionContext,
    RetryableFailure,
    Success,
    TerminalFailure,
)
from ingest.selectors.clients import plugin_targets

OUTCOMES = {
    "success": lambda payload: Success({"echo": payload.get("n")}),
    "retryable": lambda payload: RetryableFailure("flaky"),
    "terminal": lambda payload: TerminalFailure("broken"),
}


def execute_test_task(ctx: ExecutionContext):
    payload = ctx.task.payload
    started = time.time_ns() // 1_000_000
    deadline = time.monotonic() + payload.get("sleep", 0)
    while time.monotonic() < deadline:
        if ctx.cancelled.wait(0.02):
            return TerminalFailure("cancelled")
    if payload.get("raise"):
        raise RuntimeError(payload["raise"])
    if payload.get("record"):
        from tests.side_effects import record

        record(ctx.task, ctx.lease.owner, started, time.time_ns() // 1_000_000)
    return OUTCOMES[payload.get("outcome", "success")](payload)


def _idempotent(task) -> bool:
    return task.payload.get("idempotent", True)


TEST_KINDS = [
    KindSpec(name="test.local", lane=None, is_idempotent=_idempotent,
             executor=execute_test_task),
    KindSpec(name="test.instruction", lane=LANE_INSTRUCTIONS, is_guarded=True,
             is_idempotent=_idempotent, executor=execute_test_task),
    KindSpec(name="test.outbound", lane=LANE_OUTBOUND, targets=plugin_targets, is_idempotent=_idempotent,
             executor=execute_test_task),
    # Registered without an executor: the dispatcher must leave its tasks alone.
    KindSpec(name="test.unrunnable", lane=None, is_idempotent=_idempotent),
]

for spec in TEST_KINDS:
    kinds.unregister(spec.name)
    kinds.register(spec)
