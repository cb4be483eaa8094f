"""``echo`` and ``time.now`` (SPEC §5.1)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from tools.registry import ToolCall


def echo(call: ToolCall) -> dict[str, Any]:
    return call.params


def time_now(call: ToolCall) -> dict[str, str]:
    now = dt.datetime.now(dt.UTC)
    return {"now": now.isoformat(timespec="milliseconds").replace("+00:00", "Z")}
