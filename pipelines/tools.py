"""Tools that read Conductor's own state (SPEC §5.1): above the task engine, so registered here."""

from __future__ import annotations

from typing import Any

from automation.selectors import task_counts_by_kind_and_status
from tools.catalog import object_schema
from tools.registry import Policy, ToolCall, ToolSpec, tools


def tasks_status(call: ToolCall) -> dict[str, Any]:
    counts = task_counts_by_kind_and_status()
    return {"tasks": counts, "total": sum(n for by_status in counts.values() for n in by_status.values())}


tools.register(ToolSpec(
    name="tasks.status",
    run=tasks_status,
    description="Counts of automation tasks by kind and status.",
    params_schema=object_schema(),
    example={},
    is_idempotent=True,
    default_policy=Policy.ALLOW,
))
