"""A message status in the chat's words (SPEC §6): every task state, bounds, links made absolute. Pure."""

import pytest

from automation.models import TaskStatus
from automation.wait_selectors import Wait
from ingest.panel import status
from ingest.models import Instruction

S = TaskStatus
T0 = 1_700_000_000_000


def block(**fields):
    row = dict(
        index=1, target="conductor", tool="echo", params={"text": "hi"}, instruction_status="pending",
        instruction_error="", task_id="t-1", task_status=S.PENDING, task_error=None, task_result=None,
        updated_at=1_700_000_000_000,
    )
    row.update(fields)
    return status.BlockRow(**row)


@pytest.mark.parametrize(("task_status", "shown"), [
    (S.PENDING, "queued"), (S.LEASED, "queued"), (S.RETRY_WAIT, "queued"), (S.BLOCKED, "waiting_approval"),
    (S.RUNNING, "running"), (S.SUCCEEDED, "succeeded"), (S.FAILED, "failed"), (S.CANCELLED, "cancelled"),
])
def test_every_task_state_has_a_block_status(task_status, shown):
    assert status.block_status(block(task_status=task_status), approve_url="/approve")["status"] == shown


def test_every_task_state_is_named():
    assert set(status.BLOCK_STATUS_OF_TASK) == set(S.values) == set(status.DELIVERY_STATUS_OF_TASK)


def test_a_rejected_block_has_no_task_and_says_why_on_its_first_line():
    shown = status.block_status(
        block(task_id=None, task_status=None, instruction_status=Instruction.Status.REJECTED,
              instruction_error="\n  unknown tool 'no.such'\nknown tools: echo, files.list"),
        approve_url=None,
    )
    assert (shown["status"], shown["error"]) == ("rejected", "unknown tool 'no.such'")


def test_only_a_block_waiting_for_approval_carries_its_approval_link():
    waiting = status.block_status(block(task_status=S.BLOCKED), approve_url="/admin/story/?task=t-1#block-1")
    running = status.block_status(block(task_status=S.RUNNING), approve_url="/admin/story/?task=t-1#block-1")
    assert waiting["approve_url"] == "/admin/story/?task=t-1#block-1"
    assert running["approve_url"] is None


def test_a_long_error_and_a_long_result_are_cut_and_the_params_are_one_line():
    shown = status.block_status(
        block(task_status=S.FAILED, task_error="x" * 10_000 + "\nsecond line", params={"text": "a\nb" * 500}),
        approve_url=None,
    )
    assert len(shown["error"]) == status.MAX_ERROR_CHARS and shown["error"].endswith("…")
    assert "\n" not in shown["params_preview"] and len(shown["params_preview"]) <= status.MAX_PARAMS_PREVIEW_CHARS
    succeeded = status.block_status(block(task_status=S.SUCCEEDED, task_result={"text": "y" * 5000}), approve_url=None)
    assert len(succeeded["result_preview"]) == status.MAX_PREVIEW_CHARS
    assert succeeded["error"] is None


def test_a_block_waiting_for_its_retry_says_what_failed():
    shown = status.block_status(block(task_status=S.RETRY_WAIT, task_error="timed out\ntrace"), approve_url=None)
    assert (shown["status"], shown["error"]) == ("queued", "timed out")


def test_hostile_text_is_passed_as_text_for_the_plugin_to_render_as_such():
    shown = status.block_status(
        block(task_status=S.FAILED, task_error="<img src=x onerror=alert(1)>\u202egnp.exe"), approve_url=None,
    )
    assert shown["error"] == "<img src=x onerror=alert(1)>\u202egnp.exe"


@pytest.mark.parametrize(("task_status", "result", "error", "expected"), [
    (S.PENDING, None, None, {"status": "waiting", "method": None, "error": None}),
    (S.RETRY_WAIT, None, "no answer from plugin client 'laptop' within 30 s\nmore",
     {"status": "waiting", "method": None, "error": "no answer from plugin client 'laptop' within 30 s"}),
    (S.RUNNING, None, None, {"status": "running", "method": None, "error": None}),
    (S.SUCCEEDED, {"method": "dom", "status": None}, None, {"status": "delivered", "method": "dom", "error": None}),
    (S.FAILED, {"method": "http", "status": 500}, "HTTP 500", {"status": "failed", "method": "http", "error": "HTTP 500"}),
    (S.CANCELLED, None, "cancelled by alice", {"status": "failed", "method": None, "error": "cancelled by alice"}),
])
def test_the_delivery_in_the_chats_words(task_status, result, error, expected):
    shown = status.delivery_status(status.DeliveryRow(status=task_status, result=result, error=error))
    assert shown == {**expected, "waiting_for": None, "results_not_delivered": 0}


def test_a_message_without_a_delivery_yet_says_none():
    assert status.delivery_status(None) == {
        "status": "none", "method": None, "error": None, "waiting_for": None, "results_not_delivered": 0,
    }


def test_links_are_made_absolute_on_a_copy():
    frame = {"type": "instruction.status", "message": {"blocks": [
        {"approve_url": "/admin/x/?task=1#block-2"}, {"approve_url": None},
    ]}}
    shown = status.with_absolute_links(frame, base="https://conductor.example")
    assert [b["approve_url"] for b in shown["message"]["blocks"]] == [
        "https://conductor.example/admin/x/?task=1#block-2", None,
    ]
    assert frame["message"]["blocks"][0]["approve_url"] == "/admin/x/?task=1#block-2"
    answer = status.with_absolute_links({"type": "status", "messages": [frame["message"]]}, base="http://h:8000")
    assert answer["messages"][0]["blocks"][0]["approve_url"] == "http://h:8000/admin/x/?task=1#block-2"


@pytest.mark.parametrize(("scope", "base"), [
    ({"scheme": "ws", "headers": [(b"host", b"127.0.0.1:8000")]}, "http://127.0.0.1:8000"),
    ({"scheme": "wss", "headers": [(b"host", b"conductor.example")]}, "https://conductor.example"),
    ({"scheme": "ws", "headers": [], "server": ("10.0.0.2", 8000)}, "http://10.0.0.2:8000"),
])
def test_the_server_address_is_the_one_the_socket_reached(scope, base):
    assert status.server_base_url(scope) == base


def test_why_a_block_waits_says_its_code_and_what_the_code_names():
    assert status.waiting_for(None) is None
    assert status.waiting_for(Wait("conversation_paused", "Its conversation is paused.")) == {
        "code": "paused", "paused": "conversation"}
    # Starting in a moment, or nothing here runs its kind (the console says which): nothing in the frame.
    assert status.waiting_for(Wait("leased", "…", until=T0)) is None
    assert status.waiting_for(Wait("no_executor", "…")) is None
    assert status.waiting_for(Wait("backoff", "Due at …", until=T0)) == {"code": "backoff", "until": T0}
    behind = Wait("behind_approval", "…", ahead_task_id="t-1",
                  ahead={"message_id": "m-1", "conductor_message_id": 7, "index": 2, "instruction_id": 9})
    assert status.waiting_for(behind, approve_url="/admin/story/?task=t-1#block-9") == {
        "code": "earlier_block", "approval": True, "message_id": "m-1", "conductor_message_id": "7", "index": 2,
        "approve_url": "/admin/story/?task=t-1#block-9",
    }


def test_the_approval_link_of_the_block_waited_behind_is_made_absolute_too():
    waiting = {"code": "earlier_block", "approval": True, "approve_url": "/admin/x/?task=1#block-2"}
    frame = {"type": "instruction.status", "message": {"blocks": [{"approve_url": None, "waiting_for": waiting}]}}
    shown = status.with_absolute_links(frame, base="https://conductor.example")
    assert shown["message"]["blocks"][0]["waiting_for"]["approve_url"] == "https://conductor.example/admin/x/?task=1#block-2"
    assert waiting["approve_url"] == "/admin/x/?task=1#block-2"
