"""Twenty MCP calls across two servers, run by two dispatcher processes: each call runs once."""

import json
from collections import Counter

import pytest

from automation.models import AutomationTask, TaskStatus
from ingest.frames import parse_final_message
from ingest.models import ToolPolicy
from ingest.services.messages import message_ingest
from tests.factories import PluginClientFactory
from tests.mcp_servers.conftest import own_stdio_server
from tests.procs import run_in_processes
from tools.registry import Policy

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def test_twenty_calls_across_two_servers_and_two_dispatchers_each_run_once(tmp_path, workspace):
    logs = {name: workspace / f"{name}.log" for name in ("alpha", "beta")}  # where a stdio server may write
    for name, log in logs.items():
        own_stdio_server(name, log=log)
        ToolPolicy.objects.create(target=name, tool="", policy=Policy.ALLOW)
    client = PluginClientFactory(client_id="laptop")
    # Ten conversations, each with one call to each server: calls of different
    # conversations run side by side, within a conversation one after another.
    for n in range(10):
        text = "\n".join(
            f"```baa\n{name}::count\n{json.dumps({'key': f'{name}-{n}', 'sleep_ms': 100})}\n```" for name in logs
        )
        frame = {"type": "browser.final_message", "platform": "claude", "conversation_id": f"c{n}",
                 "message_id": f"m{n}", "text": text}
        message_ingest(message=parse_final_message(frame), client=client)

    ticks = run_in_processes(
        "tests.mcp_servers.workers:dispatch_calls_until_done",
        [("one", str(workspace), 120), ("two", str(workspace), 120)], timeout=180,
    )

    calls = AutomationTask.objects.filter(kind="instruction.execute")
    assert calls.count() == 20
    assert set(calls.values_list("status", flat=True)) == {TaskStatus.SUCCEEDED}
    assert set(calls.values_list("attempt_count", flat=True)) == {1}
    runs = Counter(line.split()[2] for log in logs.values() for line in log.read_text().splitlines())
    assert runs == Counter({f"{name}-{n}": 1 for name in logs for n in range(10)})
    starters = Counter(event.actor for task in calls for event in task.events.filter(action="start"))
    assert set(starters) <= {"one", "two"} and sum(starters.values()) == 20
    assert min(ticks) > 0
