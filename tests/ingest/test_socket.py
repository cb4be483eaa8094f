"""The plugin protocol over a real socket, against a running server (daphne)."""

import json

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from conversations.models import Message
from ingest.protocol import MAX_FRAME_BYTES
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.server import running_server

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

HELLO = {"type": "hello", "client_id": "laptop-chrome", "token": TEST_TOKEN}


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("socket"), CONDUCTOR_HELLO_TIMEOUT_SECONDS="1") as server:
        yield server


@pytest.fixture(autouse=True)
def client(db):
    return PluginClientFactory(client_id="laptop-chrome")


def closed_code(ws):
    with pytest.raises(ConnectionClosed):
        while True:
            ws.recv(timeout=10)
    return ws.close_code


def test_final_message_is_acknowledged(server):
    with connect(server.ws_url) as ws:
        ws.send(json.dumps(HELLO))
        assert json.loads(ws.recv(timeout=10))["type"] == "hello.ok"
        ws.send(json.dumps({
            "type": "browser.final_message", "id": "f1", "platform": "gemini",
            "conversation_id": "c_1", "text": "```baa\ntime.now\n```",
        }))
        ack = json.loads(ws.recv(timeout=10))
    assert ack == {"type": "ack", "id": "f1", "message_id": str(Message.objects.get().pk),
                   "instructions": 1, "duplicate": False}


def test_a_wrong_token_is_closed_with_4401(server):
    with connect(server.ws_url) as ws:
        ws.send(json.dumps({**HELLO, "token": "x" * 40}))
        assert json.loads(ws.recv(timeout=10))["code"] == "unauthorized"
        assert closed_code(ws) == 4401


def test_no_hello_in_time_is_closed_with_4408(server):
    with connect(server.ws_url) as ws:
        assert closed_code(ws) == 4408


def test_the_same_client_again_closes_the_older_socket_with_4409(server):
    with connect(server.ws_url) as older, connect(server.ws_url) as newer:
        older.send(json.dumps(HELLO))
        assert json.loads(older.recv(timeout=10))["type"] == "hello.ok"
        newer.send(json.dumps(HELLO))
        assert json.loads(newer.recv(timeout=10))["type"] == "hello.ok"
        assert closed_code(older) == 4409
        newer.send(json.dumps({"type": "ping"}))
        assert json.loads(newer.recv(timeout=10)) == {"type": "pong"}


def test_bad_frames_leave_the_socket_and_other_clients_working(server):
    PluginClientFactory(client_id="desktop")
    with connect(server.ws_url) as noisy, connect(server.ws_url) as quiet:
        for ws, client_id in ((noisy, "laptop-chrome"), (quiet, "desktop")):
            ws.send(json.dumps({**HELLO, "client_id": client_id}))
            assert json.loads(ws.recv(timeout=10))["type"] == "hello.ok"
        for bad in ("{oops", b"\x00binary", "[]", json.dumps({"type": "nope"})):
            noisy.send(bad)
            assert json.loads(noisy.recv(timeout=10))["type"] == "error"
        for ws in (noisy, quiet):
            ws.send(json.dumps({"type": "ping"}))
            assert json.loads(ws.recv(timeout=10)) == {"type": "pong"}


def test_a_web_page_origin_gets_403(server):
    with pytest.raises(InvalidStatus) as excinfo:
        connect(server.ws_url, origin="https://evil.example")
    assert excinfo.value.response.status_code == 403


def test_hostile_frames_over_a_real_socket_get_error_frames_and_the_socket_stays(server):
    with connect(server.ws_url) as ws:
        ws.send(json.dumps(HELLO))
        assert json.loads(ws.recv(timeout=10))["type"] == "hello.ok"
        for raw, code in [
            ('{"type": "browser.final_message", "platform": "claude", "conversation_id": "c", "text": "\\ud800"}',
             "invalid"),
            ('{"type": "ping", "n": ' + "[" * 1500 + "]" * 1500 + "}", "bad_frame"),
            ('{"type": "ping", "n": ' + "7" * 4301 + "}", "bad_frame"),
            ('{"type": "ping", "n": NaN}', "invalid"),
        ]:
            ws.send(raw)
            assert json.loads(ws.recv(timeout=10))["code"] == code
        ws.send(json.dumps({"type": "ping"}))
        assert json.loads(ws.recv(timeout=10)) == {"type": "pong"}
    assert "Traceback" not in server.log()


def test_a_first_frame_over_64_kib_closes_the_socket_with_1009(server):
    with connect(server.ws_url) as ws:
        ws.send(json.dumps({**HELLO, "pad": "x" * (100 * 1024)}))
        assert closed_code(ws) == 1009


def test_a_huge_first_frame_is_refused_before_it_is_read(server):
    with connect(server.ws_url) as ws:
        with pytest.raises((ConnectionClosed, ConnectionResetError, BrokenPipeError)):
            ws.send(json.dumps({**HELLO, "pad": "x" * (15 * 1024 * 1024)}))
            ws.recv(timeout=10)
    # The server's transport refused it: the consumer never received those 15 MiB.
    assert "hello_too_large" not in server.log()


def said_hello(ws):
    ws.send(json.dumps(HELLO))
    assert json.loads(ws.recv(timeout=10))["type"] == "hello.ok"


def answers_ping(ws):
    ws.send(json.dumps({"type": "ping"}))
    return json.loads(ws.recv(timeout=30)) == {"type": "pong"}


def ping_of(size: int) -> str:
    """A ping frame of exactly ``size`` bytes."""
    frame = json.dumps({"type": "ping", "pad": ""})
    return json.dumps({"type": "ping", "pad": "x" * (size - len(frame))})


def test_a_frame_over_1_mib_after_hello_is_too_large_unread_and_the_socket_stays(server):
    with connect(server.ws_url, max_size=None) as ws:
        said_hello(ws)
        ws.send(ping_of(MAX_FRAME_BYTES))  # at the limit: read and answered
        assert json.loads(ws.recv(timeout=30)) == {"type": "pong"}
        for frame in (ping_of(MAX_FRAME_BYTES + 1), ping_of(15 * 1024 * 1024), b"\x00" * (15 * 1024 * 1024)):
            ws.send(frame)
            error = json.loads(ws.recv(timeout=30))
            assert (error["type"], error["code"]) == ("error", "too_large")
            # The server dropped it unread: the consumer, which reads frames it gets, never had it.
            assert f"({len(frame)} bytes); not read" in error["detail"]
            assert answers_ping(ws)


def test_a_frame_over_the_sockets_hard_limit_closes_it_with_1009(server):
    with connect(server.ws_url, max_size=None) as ws:
        said_hello(ws)
        with pytest.raises(ConnectionClosed):
            ws.send(ping_of(17 * 1024 * 1024))  # over CONDUCTOR_SOCKET_MAX_MESSAGE_BYTES (16 MiB)
            ws.recv(timeout=30)
        assert ws.close_code == 1009


def test_a_socket_to_an_unknown_path_is_refused_without_a_traceback(server):
    with pytest.raises(InvalidStatus) as excinfo:
        connect(f"ws://127.0.0.1:{server.port}/ws/elsewhere/")
    # daphne can refuse a handshake only with 403 (see ingest/routing.py).
    assert excinfo.value.response.status_code in (403, 404)
    assert "Traceback" not in server.log() and "No route found" not in server.log()
