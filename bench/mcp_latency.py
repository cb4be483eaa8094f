"""MCP call latency through the dispatcher: p50 over --calls calls, a kept-alive server vs a fresh process per call.

Each call is one chat message with one ``everything::echo`` block (server-everything
over stdio, from tests/mcp_servers: run ``make install`` first), ingested and
run by a dispatcher in this process, one after another. Two timings per call:
``call`` is the task's running time (started_at to finished_at: the tool call
with its session), ``through`` is from ingest to the task's success (claim
and bookkeeping included). Uses a throw-away SQLite database unless
DATABASE_URL is set.

    uv run python bench/mcp_latency.py [--calls 50]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_bench uv run python bench/mcp_latency.py
"""

import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
if "DATABASE_URL" not in os.environ:
    os.environ["CONDUCTOR_DATA_DIR"] = tempfile.mkdtemp(prefix="conductor-bench-mcp-")

from bench.common import option_parser, percentile, setup_django  # noqa: E402

EVERYTHING = ROOT / "tests" / "mcp_servers" / "node_modules" / ".bin" / "mcp-server-everything"


def prepare():
    setup_django(migrate=True)
    from automation.models import AutomationTask
    from ingest.models import PluginClient, ToolPolicy
    from mcp_servers.models import McpServer
    from mcp_servers.services import mcp_server_refresh

    AutomationTask.objects.filter(payload_json__contains='"target": "bench-everything"').delete()
    McpServer.objects.filter(name="bench-everything").delete()
    server = McpServer.objects.create(name="bench-everything", command=str(EVERYTHING), args=["stdio"])
    if not mcp_server_refresh(server=server):
        sys.exit(f"server-everything did not list its tools: {server.last_error} (run make install)")
    ToolPolicy.objects.get_or_create(target=server.name, tool="echo", client=None, conversation=None,
                                     defaults={"policy": "allow", "note": "bench/mcp_latency.py"})
    client, _ = PluginClient.objects.get_or_create(client_id="bench-mcp", defaults={"name": "bench-mcp"})
    return client


def run(client, *, calls: int, keep_alive: bool) -> tuple[list[float], list[float]]:
    from django.conf import settings

    from automation.dispatcher import Dispatcher, DispatcherConfig
    from automation.models import AutomationTask
    from ingest.frames import parse_final_message
    from ingest.services.messages import message_ingest
    from tools.mcp_client import mcp_sessions_close

    settings.CONDUCTOR_MCP_KEEP_ALIVE = keep_alive
    dispatcher = Dispatcher(
        config=DispatcherConfig(max_tasks_per_tick=20, lease_ms=60_000, outbound_jitter_max_ms=0,
                                retry_backoff_seconds=(5,), retry_jitter_max_ms=0),
        rng=random.Random(1),
    )
    call_ms, through_ms = [], []
    mode = "kept" if keep_alive else "fresh"
    try:
        for n in range(calls):
            text = f'```baa\nbench-everything::echo\n{json.dumps({"message": f"call {n}"})}\n```'
            frame = {"type": "browser.final_message", "platform": "claude", "conversation_id": f"bench-mcp-{mode}",
                     "message_id": f"{mode}-{n}-{time.time_ns()}", "text": text}
            started = time.perf_counter()
            result = message_ingest(message=parse_final_message(frame), client=client)
            task = AutomationTask.objects.get(kind="instruction.execute", message_id=result.message_id)
            while True:
                dispatcher.tick()
                dispatcher.wait_idle(60)
                task.refresh_from_db()
                if task.is_terminal:
                    break
            through_ms.append((time.perf_counter() - started) * 1000)
            if task.status != "succeeded":
                sys.exit(f"call {n} {task.status}: {task.last_error}")
            call_ms.append(task.finished_at - task.started_at)
    finally:
        dispatcher.stop(grace=10)
        mcp_sessions_close()
    return call_ms, through_ms


def main() -> None:
    args = option_parser(__doc__, calls=50).parse_args()
    client = prepare()
    print(f"{args.calls} calls of everything::echo through the dispatcher, one after another")
    for keep_alive in (True, False):
        call_ms, through_ms = run(client, calls=args.calls, keep_alive=keep_alive)
        label = "kept-alive session" if keep_alive else "fresh process    "
        print(f"{label}  call p50={percentile(call_ms, 50):.0f} ms p90={percentile(call_ms, 90):.0f} ms   "
              f"ingest-to-success p50={percentile(through_ms, 50):.0f} ms p90={percentile(through_ms, 90):.0f} ms")


if __name__ == "__main__":
    main()
