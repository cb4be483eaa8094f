"""What the simulated plugin says: the frames the reference plugin sends (SPEC §6)."""

import json

import pytest

from conductor_site import simulator
from ingest.frames import parse_delivery_result, parse_final_message, parse_plugin_info
from conductor_site.simulator import SimulatedPlugin


class FakeSocket:
    """Records the frames sent and answers each with the next of ``replies``."""

    def __init__(self, replies):
        self.sent, self.replies = [], list(replies)

    def __enter__(self):
        return self

    def send(self, text):
        self.sent.append(json.loads(text))

    def recv(self, timeout):
        return json.dumps(self.replies.pop(0))

    def close(self):
        pass


@pytest.fixture
def socket(monkeypatch):
    fake = FakeSocket([{"type": "hello.ok"}, {"type": "ack", "id": "f1"}])
    monkeypatch.setattr(simulator, "connect", lambda url, max_size: fake)
    return fake


def test_the_hello_describes_the_plugin_as_the_reference_plugin_does(socket):
    SimulatedPlugin(url="ws://test/ws/plugin/", client_id="demo", token="t", platforms=("claude", "gemini")).connect()
    [hello] = socket.sent
    info = parse_plugin_info(hello)
    assert (info.plugin_version, info.capabilities, info.adapters) == (
        "simulated", ("proxy_delivery",), {"claude": "simulated", "gemini": "simulated"},
    )


def test_final_messages_say_how_they_were_captured_unless_they_say_it_already(socket):
    socket.replies.append({"type": "ack", "id": "f2"})
    plugin = SimulatedPlugin(url="ws://test/ws/plugin/", client_id="demo", token="t").connect()
    frame = {"type": "browser.final_message", "platform": "claude", "conversation_id": "c", "text": "hi"}
    plugin.send_final_message({**frame, "id": "f1"})
    plugin.send_final_message({**frame, "id": "f2", "capture": "dom"})
    assert [parse_final_message(sent).capture for sent in socket.sent[1:]] == ["network", "dom"]


def test_an_answer_can_carry_an_error_code(socket):
    plugin = SimulatedPlugin(url="ws://test/ws/plugin/", client_id="demo", token="t").connect()
    plugin.answer({"request_id": "r1"}, ok=False, status=None, error="no tab", error_code="no_tab")
    result = parse_delivery_result(socket.sent[-1])
    assert (result.ok, result.error_code) == (False, "no_tab")
