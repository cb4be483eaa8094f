"""Functions that the MCP tests run in child processes (see tests/procs.py)."""

import random
import time
from pathlib import Path


def dispatch_calls_until_done(owner: str, workspace: str, max_seconds: float) -> int:
    """Tick a dispatcher until every ``instruction.execute`` task has finished; return the ticks it made.

    Deliveries stay pending (no plugin is connected); they are not waited for.
    """
    from django.conf import settings

    from automation.dispatcher import Dispatcher, DispatcherConfig
    from automation.models import OPEN_STATUSES, AutomationTask
    from tools.mcp_client import mcp_sessions_close

    settings.CONDUCTOR_WORKSPACE = Path(workspace)
    dispatcher = Dispatcher(
        owner=owner,
        config=DispatcherConfig(max_tasks_per_tick=20, lease_ms=60_000, outbound_jitter_max_ms=0,
                                retry_backoff_seconds=(0,), retry_jitter_max_ms=0),
        rng=random.Random(owner),
    )
    deadline = time.monotonic() + max_seconds
    ticks = 0
    try:
        while time.monotonic() < deadline:
            dispatcher.tick()
            ticks += 1
            open_calls = AutomationTask.objects.filter(kind="instruction.execute", status__in=OPEN_STATUSES)
            if not dispatcher.in_flight() and not open_calls.exists():
                break
            time.sleep(0.02)
    finally:
        dispatcher.stop(grace=30)
        mcp_sessions_close()
    return ticks
