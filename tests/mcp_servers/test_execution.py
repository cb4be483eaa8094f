"""MCP calls as ``instruction.execute`` tasks through the real dispatcher, against real servers (SPEC §5.4)."""

import json
import random
import time

import pytest

from automation.dispatcher import Dispatcher, DispatcherConfig
from automation.models import AutomationTask, TaskStatus
from ingest.frames import parse_final_message
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from ingest.models import ToolPolicy
from ingest.services.messages import message_ingest
from pipelines.results_text import parse_results
from pipelines.deliveries import message_results_text
from tests.factories import PluginClientFactory
from tests.mcp_servers.conftest import everything_server, own_http_server, own_stdio_server, time_server
from tests.server import is_alive
from tools.registry import Policy

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

CONFIG = DispatcherConfig(
    max_tasks_per_tick=20, lease_ms=60_000, outbound_jitter_max_ms=0,
    retry_backoff_seconds=(0,), retry_jitter_max_ms=0,
)


@pytest.fixture
def dispatcher():
    dispatcher = Dispatcher(config=CONFIG, rng=random.Random(1))
    yield dispatcher
    dispatcher.stop(grace=5)


def allow(target):
    ToolPolicy.objects.create(target=target, tool="", policy=Policy.ALLOW)


def ingest(*blocks, message_id="m1"):
    client = PluginClientFactory(client_id=f"laptop-{message_id}")
    text = "\n".join(f"```baa\n{header}\n{json.dumps(params)}\n```" for header, params in blocks)
    frame = {"type": "browser.final_message", "platform": "claude", "conversation_id": "c1",
             "message_id": message_id, "text": text}
    return message_ingest(message=parse_final_message(frame), client=client)


def run_until_quiet(dispatcher, ticks=40):
    for _ in range(ticks):
        report = dispatcher.tick()
        dispatcher.wait_idle(60)
        if not report.claimed and not dispatcher.in_flight():
            return
    raise AssertionError("the dispatcher never went quiet")


def executed(message_id):
    return list(AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE, message_id=message_id).order_by("sequence"))


def delivered_results(message_id):
    """The results the message's one delivery carries, and its text."""
    assert AutomationTask.objects.filter(kind=INSTRUCTION_DELIVER, message_id=message_id).count() == 1
    text = message_results_text(message_id=message_id)
    return parse_results(text), text


def test_server_everything_results_come_back_as_spec_5_4_says(dispatcher):
    everything_server()
    allow("everything")
    result = ingest(
        ("everything::echo", {"message": "hi"}),
        ("everything::get-tiny-image", {}),
        ("everything::get-structured-content", {"location": "Chicago"}),
        ("everything::get-resource-links", {"count": 1}),
        ("everything::get-env", {}),
    )
    run_until_quiet(dispatcher)

    tasks = executed(result.message_id)
    assert [task.status for task in tasks] == [TaskStatus.SUCCEEDED] * 5
    echo, image, structured, links, env = (json.loads(task.result_json) for task in tasks)
    assert echo == {"content": [{"type": "text", "text": "Echo: hi"}]}
    [picture] = [item for item in image["content"] if item["type"] == "image"]
    assert picture["type"] == "image" and picture["mimeType"] == "image/png" and picture["bytes"] > 100
    assert "data" not in picture
    assert set(structured["structuredContent"]) == {"temperature", "conditions", "humidity"}
    assert links["content"][1] == {"type": "resource_link", "uri": "demo://resource/dynamic/blob/1",
                                   "name": "Blob Resource 1", "mimeType": "text/plain"}
    # The server's environment: shell.run's minimal one, never Conductor's.
    environment = json.loads(env["content"][0]["text"])
    assert environment["PATH"] == "/usr/local/bin:/usr/bin:/bin" and environment["LANG"] == "C.UTF-8"
    assert "DJANGO_SETTINGS_MODULE" not in environment and "SECRET_KEY" not in environment
    results, _ = delivered_results(result.message_id)
    assert [(r["tool"], r["ok"]) for r in results] == [
        ("everything::echo", True), ("everything::get-tiny-image", True),
        ("everything::get-structured-content", True), ("everything::get-resource-links", True),
        ("everything::get-env", True),
    ]


def test_mcp_server_time_and_an_http_server_run_too(dispatcher, own_http_url):
    time_server()
    own_http_server(own_http_url)
    allow("time")
    allow("web")
    result = ingest(("time::get_current_time", {"timezone": "UTC"}), ("web::add", {"a": 2, "b": 40}))
    run_until_quiet(dispatcher)
    now, added = (json.loads(task.result_json) for task in executed(result.message_id))
    assert now["structuredContent"]["timezone"] == "UTC" or '"timezone": "UTC"' in now["content"][0]["text"]
    assert added["structuredContent"] == {"result": 42}


def test_is_error_is_a_failed_block_with_the_servers_text(dispatcher):
    own_stdio_server()
    allow("own")
    result = ingest(("own::fail", {"city": "Atlantis"}))
    run_until_quiet(dispatcher)
    [task] = executed(result.message_id)
    assert task.status == TaskStatus.FAILED and task.attempt_count == 1
    assert "no weather for Atlantis" in task.last_error
    [block], _ = delivered_results(result.message_id)
    assert block["ok"] is False and "no weather for Atlantis" in block["error"]


def test_a_server_that_exits_mid_call_fails_the_call_as_interrupted_and_it_is_not_run_again(dispatcher, tmp_path):
    log = tmp_path / "workspace" / "calls.log"  # a stdio server writes only in the workspace and its own folders
    own_stdio_server(log=log)
    allow("own")
    result = ingest(("own::crash", {}), ("own::add", {"a": 1, "b": 1}))
    run_until_quiet(dispatcher)
    crash, add = executed(result.message_id)
    assert crash.status == TaskStatus.FAILED and crash.attempt_count == 1
    assert "interrupted" in crash.last_error and "not re-run" in crash.last_error
    # The next call starts the server again.
    assert add.status == TaskStatus.SUCCEEDED
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["crash", "add"]


def test_a_hanging_call_times_out_and_its_whole_process_group_is_killed(dispatcher, tmp_path):
    log = tmp_path / "workspace" / "calls.log"  # a stdio server writes only in the workspace and its own folders
    own_stdio_server(log=log, timeout_seconds=2)
    allow("own")
    started = time.monotonic()
    result = ingest(("own::hang", {}), ("own::add", {"a": 2, "b": 2}))
    run_until_quiet(dispatcher)
    hang, add = executed(result.message_id)
    assert hang.status == TaskStatus.FAILED and "timed out after 2 s" in hang.last_error
    assert add.status == TaskStatus.SUCCEEDED
    assert time.monotonic() - started < 40
    child = int(log.read_text().split()[2])

    deadline = time.monotonic() + 10
    while is_alive(child):
        assert time.monotonic() < deadline, "the hanging tool's child outlived the timeout"
        time.sleep(0.1)


def test_a_flooding_server_neither_blocks_nor_breaks_the_delivery_limit(dispatcher, settings):
    own_stdio_server()
    allow("own")
    result = ingest(("own::flood", {"megabytes": 20}), ("own::add", {"a": 1, "b": 2}))
    run_until_quiet(dispatcher)
    flood, add = executed(result.message_id)
    assert flood.status == TaskStatus.SUCCEEDED and add.status == TaskStatus.SUCCEEDED
    results, text = delivered_results(result.message_id)
    assert len(text) <= settings.CONDUCTOR_RESULT_MAX_CHARS
    assert results[0]["truncated"] is True and results[1]["result"]["structuredContent"] == {"result": 3}


def test_an_interrupted_idempotent_tool_runs_again(dispatcher, tmp_path):
    log = tmp_path / "workspace" / "calls.log"  # a stdio server writes only in the workspace and its own folders
    server = own_stdio_server(log=log)
    # The server says its crash tool is idempotent: then an interruption is worth another attempt.
    server.tools.filter(name="crash").update(annotations={"idempotentHint": True})
    allow("own")
    result = ingest(("own::crash", {}))
    run_until_quiet(dispatcher)
    [crash] = executed(result.message_id)
    assert crash.status == TaskStatus.FAILED and crash.attempt_count == 3
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["crash"] * 3
