"""``echo``, ``time.now`` and ``tasks.status`` (SPEC §5.1)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from automation.tools.registry import ToolCall


def echo(call: ToolCall) -> dict[str, Any]:
    return call.params


def time_now(call: ToolCall) -> dict[str, str]:
    now = dt.datetime.now(dt.UTC)
    return {"now": now.isoformat(timespec="milliseconds").replace("+00:00", "Z")}


def tasks_status(call: ToolCall) -> dict[str, Any]:
    from automation.selectors import task_counts_by_kind_and_status

    counts = task_counts_by_kind_and_status()
    return {"tasks": counts, "total": sum(n for by_status in counts.values() for n in by_status.values())}
