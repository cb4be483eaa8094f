import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from conductor_site.asgi import application
from ingest.models import PluginClient
from ingest.protocol import CloseCode
from ingest.services import plugin_client_revoke
from tests.factories import TEST_TOKEN, PluginClientFactory

# Consumers run their database work in another thread, so tests commit their
# rows (transaction=True); the embedded channel layer has its own database.
pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

HELLO = {"type": "hello", "token": TEST_TOKEN, "plugin_version": "1.0.0", "platforms": ["claude"]}


async def open_socket(headers=None):
    communicator = WebsocketCommunicator(application, "/ws/plugin/", headers=headers or [])
    connected, code = await communicator.connect()
    return communicator, connected, code


async def hello(client_id):
    communicator, connected, _ = await open_socket()
    assert connected
    await communicator.send_json_to({**HELLO, "client_id": client_id})
    reply = await communicator.receive_json_from()
    assert reply["type"] == "hello.ok", reply
    return communicator, reply


async def closed_with(communicator):
    message = await communicator.receive_output(timeout=3)
    assert message["type"] == "websocket.close", message
    return message.get("code")


@pytest.fixture
def client(channel_layer):
    return PluginClientFactory(client_id="laptop-chrome")


async def test_hello_with_a_valid_token_is_accepted_and_marks_the_client_connected(client):
    communicator, reply = await hello("laptop-chrome")
    assert reply["client_id"] == "laptop-chrome"
    assert isinstance(reply["server_time"], int)
    refreshed = await PluginClient.objects.aget(pk=client.pk)
    assert refreshed.connected and refreshed.last_seen_at is not None
    await communicator.disconnect()
    refreshed = await PluginClient.objects.aget(pk=client.pk)
    assert not refreshed.connected


@pytest.mark.parametrize(
    "frame",
    [
        {**HELLO, "client_id": "laptop-chrome", "token": "wrong-token-" + "y" * 32},
        {**HELLO, "client_id": "nobody"},
        {**HELLO, "client_id": "laptop-chrome", "token": None},
        {"type": "ping"},
        {"type": "browser.final_message", "platform": "claude"},
    ],
    ids=["wrong-token", "unknown-client", "token-missing", "ping-first", "message-first"],
)
async def test_anything_but_a_valid_hello_first_is_unauthorized_and_closed(client, frame):
    communicator, _, _ = await open_socket()
    await communicator.send_json_to(frame)
    error = await communicator.receive_json_from()
    assert (error["type"], error["code"]) == ("error", "unauthorized")
    assert await closed_with(communicator) == CloseCode.UNAUTHORIZED


async def test_invalid_json_as_the_first_frame_is_unauthorized(client):
    communicator, _, _ = await open_socket()
    await communicator.send_to(text_data="{not json")
    assert (await communicator.receive_json_from())["code"] == "unauthorized"
    assert await closed_with(communicator) == CloseCode.UNAUTHORIZED


async def test_revoked_client_cannot_say_hello(client):
    await sync_to_async(PluginClient.objects.filter(pk=client.pk).update)(enabled=False)
    communicator, _, _ = await open_socket()
    await communicator.send_json_to({**HELLO, "client_id": "laptop-chrome"})
    assert (await communicator.receive_json_from())["code"] == "unauthorized"
    assert await closed_with(communicator) == CloseCode.UNAUTHORIZED


async def test_no_hello_in_time_closes_with_4408(client, settings):
    settings.CONDUCTOR_HELLO_TIMEOUT_SECONDS = 0.2
    communicator, _, _ = await open_socket()
    assert await closed_with(communicator) == CloseCode.HELLO_TIMEOUT


@pytest.mark.parametrize(
    "send,code",
    [
        ({"text_data": "{oops"}, "bad_frame"),
        ({"text_data": "[1, 2]"}, "bad_frame"),
        ({"bytes_data": b"\x00\x01"}, "bad_frame"),
        ({"text_data": json.dumps({"type": "teleport", "id": "f1"})}, "unknown_type"),
        ({"text_data": json.dumps({"id": "f2"})}, "invalid"),
        ({"text_data": json.dumps({**HELLO, "client_id": "laptop-chrome"})}, "invalid"),
        ({"text_data": json.dumps({"type": "ping", "pad": "x" * (1024 * 1024)})}, "too_large"),
    ],
    ids=["invalid-json", "not-an-object", "binary", "unknown-type", "no-type", "second-hello", "too-large"],
)
async def test_bad_frame_after_hello_gets_an_error_and_the_socket_stays_open(client, send, code):
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_to(**send)
    error = await communicator.receive_json_from()
    assert (error["type"], error["code"]) == ("error", code)
    assert error["detail"]
    await communicator.send_json_to({"type": "ping"})
    assert await communicator.receive_json_from() == {"type": "pong"}
    await communicator.disconnect()


async def test_error_frames_echo_the_frame_id(client):
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to({"type": "teleport", "id": "frame-7"})
    assert (await communicator.receive_json_from())["id"] == "frame-7"
    await communicator.disconnect()


async def test_the_same_client_connecting_again_closes_the_older_socket_with_4409(client):
    older, _ = await hello("laptop-chrome")
    newer, _ = await hello("laptop-chrome")
    assert await closed_with(older) == CloseCode.REPLACED
    await older.wait()
    refreshed = await PluginClient.objects.aget(pk=client.pk)
    assert refreshed.connected  # the older socket's close does not disconnect the newer one
    await newer.send_json_to({"type": "ping"})
    assert await newer.receive_json_from() == {"type": "pong"}
    await newer.disconnect()


async def test_revoking_a_connected_client_closes_its_socket_with_4403(client):
    communicator, _ = await hello("laptop-chrome")
    await sync_to_async(plugin_client_revoke)(client=client, actor="alice")
    assert await closed_with(communicator) == CloseCode.REVOKED


async def test_ping_refreshes_presence(client):
    communicator, _ = await hello("laptop-chrome")
    before = (await PluginClient.objects.aget(pk=client.pk)).last_seen_at
    await asyncio.sleep(0.05)
    await communicator.send_json_to({"type": "ping"})
    assert await communicator.receive_json_from() == {"type": "pong"}
    after = (await PluginClient.objects.aget(pk=client.pk)).last_seen_at
    assert after > before
    await communicator.disconnect()


async def test_open_socket_keeps_presence_fresh_without_pings(client, settings):
    settings.CONDUCTOR_PING_INTERVAL_SECONDS = 0.1
    communicator, _ = await hello("laptop-chrome")
    before = (await PluginClient.objects.aget(pk=client.pk)).last_seen_at
    await asyncio.sleep(0.5)
    after = (await PluginClient.objects.aget(pk=client.pk)).last_seen_at
    assert after > before
    await communicator.disconnect()


@pytest.mark.parametrize(
    "origin,allowed",
    [
        (None, True),
        ("chrome-extension://abcdefghijklmnop", True),
        ("moz-extension://4b0c2a9e-1111-2222-3333-444455556666", True),
        ("https://evil.example", False),
        ("null", False),
        ("chrome-extension://", False),
        ("https://allowed.example", True),
    ],
)
async def test_handshake_origins(client, settings, origin, allowed):
    settings.CONDUCTOR_PLUGIN_ORIGINS = ("https://allowed.example",)
    headers = [(b"origin", origin.encode())] if origin else []
    communicator, connected, _ = await open_socket(headers)
    assert connected is allowed
    await communicator.disconnect()
