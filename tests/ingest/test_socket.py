"""The plugin protocol over a real socket, against a running server (daphne)."""

import asyncio
import collections
import json
import threading
import time

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from conversations.models import Message
from ingest.protocol import MAX_FRAME_BYTES, CloseCode
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.server import running_server, wait_for

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
        # Only the header of a masked text frame of 17 MiB, over CONDUCTOR_SOCKET_MAX_MESSAGE_BYTES
        # (16 MiB): the server refuses it from the header. (Sending the payload too would leave
        # unread bytes on a socket the server closes: its reset may discard the close frame.)
        ws.socket.sendall(bytes([0x81, 0x80 | 127]) + (17 * 1024 * 1024).to_bytes(8, "big") + b"\0\0\0\0")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=30)
        assert ws.close_code == 1009


class IdleFlood:
    """``sockets`` sockets from this address that never say hello, each reopened as soon as it is closed.

    Runs on an event loop of its own thread; counts what the server did to them.
    """

    def __init__(self, url: str, sockets: int):
        self.url, self.sockets = url, sockets
        self.open = self.opened = 0
        self.closes: collections.Counter = collections.Counter()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._run(),), daemon=True)

    async def _hold_one(self) -> None:
        from websockets.asyncio.client import connect as connect_async

        while True:
            try:
                async with connect_async(self.url, open_timeout=60) as ws:
                    self.open += 1
                    self.opened += 1
                    try:
                        await ws.wait_closed()
                    finally:
                        self.open -= 1
                    self.closes[ws.close_code] += 1
            except (OSError, TimeoutError, ConnectionClosed, InvalidStatus) as exc:
                self.closes[type(exc).__name__] += 1
                await asyncio.sleep(0.05)

    async def _run(self) -> None:
        self.tasks = [asyncio.ensure_future(self._hold_one()) for _ in range(self.sockets)]
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        for task in self.tasks:
            self.loop.call_soon_threadsafe(task.cancel)
        self.thread.join(timeout=60)


@pytest.fixture
def flood_server(django_db_setup, django_db_blocker, tmp_path):
    """A server with the default ten-second hello timeout: its idle sockets outlive their grace."""
    with running_server(tmp_path) as server:
        yield server


def plugin_says_hello_on_its_first_try(server) -> None:
    with connect(server.ws_url, open_timeout=60) as ws:  # no retry: a refusal fails the test
        ws.send(json.dumps(HELLO))
        assert json.loads(ws.recv(timeout=60))["type"] == "hello.ok"
        assert answers_ping(ws)


def test_three_hundred_idle_sockets_from_one_address_do_not_keep_a_plugin_out(flood_server):
    """The flood that locked every plugin out (32 sockets without hello per server, then 4429 for all).

    It comes from the plugin's own address, the hardest case: no share per
    address can tell them apart. Its sockets are reopened as soon as the
    server closes them.
    """
    with IdleFlood(flood_server.ws_url, 300) as flood:
        wait_for(lambda: flood.opened >= 300, "the flood's 300 sockets to open")
        for _ in range(3):  # while the flood's sockets are in their first seconds
            plugin_says_hello_on_its_first_try(flood_server)
        time.sleep(2.5)  # past their grace: each newcomer now closes one, and the flood reopens it
        for _ in range(3):
            plugin_says_hello_on_its_first_try(flood_server)
        # The flood's address is brought back towards its share by closing its idle sockets.
        wait_for(lambda: flood.closes[CloseCode.TOO_MANY_WAITING] > 0, "a flood socket to make room")
    assert "Traceback" not in flood_server.log()


def test_a_socket_to_an_unknown_path_is_refused_without_a_traceback(server):
    with pytest.raises(InvalidStatus) as excinfo:
        connect(f"ws://127.0.0.1:{server.port}/ws/elsewhere/")
    # daphne can refuse a handshake only with 403 (see ingest/routing.py).
    assert excinfo.value.response.status_code in (403, 404)
    assert "Traceback" not in server.log() and "No route found" not in server.log()
