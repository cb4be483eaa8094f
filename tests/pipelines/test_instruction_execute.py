"""``instruction.execute`` through the real dispatcher: results persisted, outcomes as SPEC §3 says."""

import hashlib
import json
import random
import socket
import urllib.parse

import pytest

from automation.dispatcher import Dispatcher, DispatcherConfig
from automation.models import AutomationTask, TaskStatus
from automation.selectors import faults
from automation.services.tasks import task_create
from ingest.frames import parse_final_message
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from ingest.models import Instruction, ToolPolicy
from ingest.services.messages import message_ingest
from ingest.signals import tool_policies_changed
from pipelines.results_text import parse_results
from pipelines.deliveries import message_results_text
from tests.factories import PluginClientFactory
from tools import files as files_module
from tools import landlock
from tools.registry import Policy, ToolSpec, tools

pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = DispatcherConfig(
    max_tasks_per_tick=20, lease_ms=60_000, outbound_jitter_max_ms=0,
    retry_backoff_seconds=(5, 15, 45), retry_jitter_max_ms=0,
)


@pytest.fixture(autouse=True)
def workspace(settings, tmp_path):
    settings.CONDUCTOR_WORKSPACE = tmp_path / "workspace"
    settings.CONDUCTOR_WORKSPACE.mkdir()
    return settings.CONDUCTOR_WORKSPACE


@pytest.fixture
def dispatcher():
    dispatcher = Dispatcher(config=CONFIG, rng=random.Random(1))
    yield dispatcher
    dispatcher.stop(grace=5)


def ingest(text, message_id="m1"):
    client = PluginClientFactory(client_id=f"laptop-{message_id}")
    frame = {"type": "browser.final_message", "platform": "claude", "conversation_id": "c1",
             "message_id": message_id, "text": text}
    return message_ingest(message=parse_final_message(frame), client=client)


def block(tool, params=None):
    return f"```baa\n{tool}\n{json.dumps(params or {})}\n```"


def run_until_quiet(dispatcher, ticks=20):
    """Tick until a tick claims nothing; blocks of a conversation run one per tick."""
    for _ in range(ticks):
        report = dispatcher.tick()
        dispatcher.wait_idle(30)
        if not report.claimed and not dispatcher.in_flight():
            return
    raise AssertionError("the dispatcher never went quiet")


def executed(message_id):
    return list(AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE, message_id=message_id).order_by("sequence"))


def test_blocks_run_in_order_and_their_results_are_persisted(dispatcher, workspace):
    (workspace / "todo.md").write_text("- ship\n")
    result = ingest("\n".join([
        block("files.read", {"path": "todo.md"}),
        block("echo", {"said": "hi"}),
        block("files.read", {"path": "missing.md"}),
        block("files.list", {"path": "../"}),
    ]))
    run_until_quiet(dispatcher)

    tasks = executed(result.message_id)
    assert [t.status for t in tasks] == ["succeeded", "succeeded", "failed", "failed"]
    assert json.loads(tasks[0].result_json) == {"path": "todo.md", "text": "- ship\n", "size": 7, "truncated": False}
    assert json.loads(tasks[1].result_json) == {"said": "hi"}
    assert tasks[2].last_error == "missing.md: no such file or folder"
    assert tasks[3].last_error == "path '../' leads outside the workspace"
    # Tool errors are terminal: one attempt each.
    assert [t.attempt_count for t in tasks] == [1, 1, 1, 1]
    assert list(Instruction.objects.filter(message_id=result.message_id).order_by("block_index")
                .values_list("status", "error")) == [
        ("succeeded", ""), ("succeeded", ""),
        ("failed", "missing.md: no such file or folder"),
        ("failed", "path '../' leads outside the workspace"),
    ]
    # The message's one delivery follows its last block.
    assert AutomationTask.objects.filter(kind=INSTRUCTION_DELIVER, message_id=result.message_id).count() == 1


def test_a_failed_command_keeps_its_output_with_the_error(dispatcher, settings):
    ToolPolicy.objects.create(tool="shell.run", policy="allow")
    result = ingest(block("shell.run", {"argv": ["sh", "-c", "echo partial; exit 2"]}))
    run_until_quiet(dispatcher)
    [task] = executed(result.message_id)
    assert (task.status, task.last_error) == ("failed", "exited with code 2")
    assert json.loads(task.result_json)["stdout"] == "partial\n"


def test_a_tool_denied_after_ingest_is_rejected_by_policy_not_counted_as_a_fault(dispatcher):
    result = ingest(block("time.now"))
    ToolPolicy.objects.create(tool="time.now", policy="deny")
    run_until_quiet(dispatcher)
    [task] = executed(result.message_id)
    assert (task.status, task.last_error) == ("failed", "permission denied: tool time.now is denied by policy")
    assert (task.finish_reason, task.outcome) == ("rejected", "rejected")
    assert not faults().filter(pk=task.pk).exists()


@pytest.mark.parametrize("payload,error", [
    ({"tool": "files.delete", "params": {}}, "unknown tool 'files.delete' for target 'conductor'"),
    ({"tool": "echo", "target": "laptop", "params": {}}, "unknown target 'laptop'"),
    ({"tool": "files.read", "params": {"path": 3}}, "params.path: 3 is not of type 'string'"),
])
def test_a_task_the_registry_cannot_run_fails_terminally(dispatcher, payload, error):
    task, _ = task_create(kind=INSTRUCTION_EXECUTE, payload=payload, actor="test")
    run_until_quiet(dispatcher)
    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED
    assert task.last_error.startswith(error)
    assert task.attempt_count == 1


# --- bounded results ------------------------------------------------------------------------


def test_a_10_mib_binary_read_is_stored_as_a_short_description(dispatcher, workspace):
    data = random.Random(7).randbytes(10 * 1024 * 1024)
    (workspace / "big.bin").write_bytes(data)
    result = ingest(block("files.read", {"path": "big.bin", "max_bytes": files_module.MAX_READ_BYTES}))
    run_until_quiet(dispatcher)

    [task] = executed(result.message_id)
    assert task.status == TaskStatus.SUCCEEDED
    # Before: 39,420,935 bytes of escaped U+FFFD.
    assert len(task.result_json.encode()) < 1024
    assert json.loads(task.result_json) == {
        "path": "big.bin", "binary": True, "size": len(data), "type": "application/octet-stream",
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def test_a_result_over_the_cap_is_stored_cut_with_its_size_and_the_delivery_says_so(dispatcher, workspace, settings):
    settings.CONDUCTOR_RESULT_STORE_MAX_BYTES = 4096
    (workspace / "long.txt").write_text("line of text\n" * 10_000)
    result = ingest(block("files.read", {"path": "long.txt", "max_bytes": 200_000}))
    run_until_quiet(dispatcher)

    [task] = executed(result.message_id)
    assert task.status == TaskStatus.SUCCEEDED
    assert len(task.result_json.encode()) <= 4096
    stored = json.loads(task.result_json)
    whole = json.dumps({"path": "long.txt", "text": "line of text\n" * 10_000, "size": 130_000, "truncated": False})
    assert stored["result_cut"] is True
    assert stored["result_bytes"] == len(whole)
    assert stored["max_bytes"] == 4096
    assert whole.startswith(stored["preview"].removesuffix("…"))

    text = message_results_text(message_id=result.message_id)
    [delivered] = parse_results(text)
    assert delivered["result"]["result_cut"] is True
    assert delivered["result"]["result_bytes"] == len(whole)


def test_an_mcp_tools_result_is_bounded_too(dispatcher, settings, monkeypatch):
    settings.CONDUCTOR_RESULT_STORE_MAX_BYTES = 2048
    spec = ToolSpec(
        name="dump", target="huge", description="", params_schema={"type": "object"}, is_idempotent=True,
        default_policy=Policy.ALLOW, run=lambda call: {"content": [{"type": "text", "text": "x" * 100_000}]},
    )
    monkeypatch.setattr(tools, "external", lambda target, name: spec)
    task, _ = task_create(kind=INSTRUCTION_EXECUTE, payload={"tool": "dump", "target": "huge", "params": {}},
                          actor="test")
    run_until_quiet(dispatcher)
    task.refresh_from_db()
    assert task.status == TaskStatus.SUCCEEDED
    assert len(task.result_json) <= 2048
    assert json.loads(task.result_json)["result_bytes"] > 100_000


def test_a_failed_commands_output_is_bounded_too(dispatcher, settings):
    settings.CONDUCTOR_RESULT_STORE_MAX_BYTES = 2048
    ToolPolicy.objects.create(tool="shell.run", policy="allow")
    result = ingest(block("shell.run", {"argv": ["sh", "-c", "yes | head -c 20000; exit 3"]}))
    run_until_quiet(dispatcher)
    [task] = executed(result.message_id)
    assert (task.status, task.last_error) == ("failed", "exited with code 3")
    assert len(task.result_json) <= 2048
    assert json.loads(task.result_json)["result_cut"] is True


# --- the secret key file out of shell.run's reach ------------------------------------------------


@pytest.mark.skipif(landlock.sandbox_problem() is not None, reason="no Landlock on this kernel")
def test_a_command_cannot_read_the_servers_secret_key_file(dispatcher, settings, tmp_path):
    # The files the settings name: the generated key in the data folder, and a .env.
    assert settings.SECRET_KEY_FILE == settings.DATA_DIR / "secret_key"
    assert settings.SECRET_KEY_FILE in settings.CONDUCTOR_SECRET_FILES
    # The default layout, in a folder of this test's own: the workspace beside the key.
    data = tmp_path / "data"
    settings.CONDUCTOR_WORKSPACE = data / "workspace"
    settings.CONDUCTOR_WORKSPACE.mkdir(parents=True)
    (data / "secret_key").write_text("the-secret-key-value")
    settings.CONDUCTOR_SECRET_FILES = (data / "secret_key", tmp_path / ".env")
    ToolPolicy.objects.create(tool="shell.run", policy="allow")
    result = ingest("\n".join([
        block("shell.run", {"argv": ["cat", "../secret_key"]}),
        block("shell.run", {"argv": ["env"]}),
    ]))
    run_until_quiet(dispatcher)
    cat, env = executed(result.message_id)
    assert (cat.status, cat.last_error) == ("failed", "exited with code 1")
    assert "Permission denied" in json.loads(cat.result_json)["stderr"]
    assert env.status == "succeeded"
    for task in (cat, env):
        assert "the-secret-key-value" not in task.result_json
        assert settings.SECRET_KEY not in task.result_json


# --- nothing of the server's state within reach, and no one to talk to (SPEC §5.1) ----------------


def _database_probes(settings) -> list[str]:
    """Python lines a command would try on this configuration's databases, Redis and key."""
    probes = [f"open({str(settings.SECRET_KEY_FILE)!r}).read()"]
    for database in settings.DATABASES.values():
        if "sqlite3" in database["ENGINE"]:
            for name in {str(database["NAME"]), str(database.get("TEST", {}).get("NAME") or database["NAME"])}:
                probes.append(
                    f"import sqlite3; sqlite3.connect('file:{name}?mode=ro', uri=True).execute('select 1').fetchall()"
                )
        else:
            host, port = database["HOST"] or "127.0.0.1", int(database["PORT"] or 5432)
            probes.append(f"import socket; socket.create_connection(({host!r}, {port}), 3)")
    if redis := urllib.parse.urlparse(getattr(settings, "REDIS_URL", "") or ""):
        if redis.hostname:
            probes.append(f"import socket; socket.create_connection(({redis.hostname!r}, {redis.port or 6379}), 3)")
    return probes


@pytest.mark.skipif(landlock.sandbox_problem() is not None, reason="no Landlock on this kernel")
def test_an_approved_command_reaches_neither_the_database_nor_the_channel_layer_nor_the_key(dispatcher, settings):
    ToolPolicy.objects.create(tool="shell.run", policy="allow")
    probes = _database_probes(settings)
    result = ingest("\n".join(block("shell.run", {"argv": ["python3", "-c", probe]}) for probe in probes))
    run_until_quiet(dispatcher)
    tasks = executed(result.message_id)
    assert len(tasks) == len(probes)
    for task, probe in zip(tasks, probes):
        assert task.status == "failed", (probe, task.result_json)
        stderr = json.loads(task.result_json)["stderr"]
        assert any(word in stderr for word in ("Permission denied", "unable to open", "Connection refused")), stderr


@pytest.mark.skipif(landlock.sandbox_problem() is not None, reason="no Landlock on this kernel")
def test_a_policy_that_allows_the_network_lets_the_command_reach_this_machines_loopback(dispatcher):
    connect = "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 3); print('connected')"
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = str(server.getsockname()[1])
        ToolPolicy.objects.create(tool="shell.run", policy="allow")
        first = ingest(block("shell.run", {"argv": ["python3", "-c", connect, port]}), message_id="m1")
        run_until_quiet(dispatcher)
        ToolPolicy.objects.filter(tool="shell.run").update(allow_network=True)
        tool_policies_changed()
        second = ingest(block("shell.run", {"argv": ["python3", "-c", connect, port]}), message_id="m2")
        run_until_quiet(dispatcher)
    [without] = executed(first.message_id)
    [with_network] = executed(second.message_id)
    assert without.status == "failed" and "Connection refused" in json.loads(without.result_json)["stderr"]
    assert with_network.status == "succeeded", with_network.result_json
    assert json.loads(with_network.result_json)["stdout"] == "connected\n"
