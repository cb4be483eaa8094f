"""An instruction sent over a real socket runs in the real dispatcher, scheduled by django-q2."""

import json

import pytest
from websockets.sync.client import connect

from automation.models import AutomationTask
from ingest.kinds import INSTRUCTION_EXECUTE
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.server import running_server, wait_for

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def test_a_block_from_the_socket_runs_and_its_result_is_persisted(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "todo.md").write_text("- ship it\n")
    PluginClientFactory(client_id="laptop-chrome")
    text = 'Reading it now.\n```baa\nfiles.read\n{"path": "todo.md"}\n```\n```baa\necho\n{"n": 1}\n```'
    with running_server(tmp_path, command="serve+cluster", CONDUCTOR_WORKSPACE=str(workspace)) as server:
        with connect(server.ws_url) as ws:
            ws.send(json.dumps({"type": "hello", "client_id": "laptop-chrome", "token": TEST_TOKEN}))
            assert json.loads(ws.recv(timeout=10))["type"] == "hello.ok"
            ws.send(json.dumps({
                "type": "browser.final_message", "id": "f1", "platform": "claude",
                "conversation_id": "c1", "message_id": "m1", "text": text,
            }))
            while (reply := json.loads(ws.recv(timeout=10)))["type"] == "instruction.status":
                pass  # what the side panel is told, pushed once the blocks are stored
            assert reply["instructions"] == 2

        def finished():
            tasks = list(AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE).order_by("sequence"))
            return tasks if tasks and all(task.is_terminal for task in tasks) else None

        tasks = wait_for(finished, "the instructions to finish")

    assert [task.status for task in tasks] == ["succeeded", "succeeded"]
    assert json.loads(tasks[0].result_json) == {
        "path": "todo.md", "text": "- ship it\n", "size": 10, "truncated": False,
    }
    assert json.loads(tasks[1].result_json) == {"n": 1}
    assert tasks[0].events.filter(action="start").get().actor != "ingest"
