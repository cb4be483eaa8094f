import asyncio
import json
import threading
from unittest import mock

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import OperationalError

from automation.models import AutomationTask
from conductor_site.asgi import application
from conversations.models import Message
from ingest.frames import parse_plugin_info
from ingest.models import DeliveryRequest, Instruction, PluginClient
from ingest.prehello import PreHelloRoom
from ingest.protocol import FRAME_TOO_LARGE, CloseCode
from ingest.services.clients import plugin_client_revoke
from ingest.services.deliveries import MAX_STORED_BODY_CHARS, body_capped
from platforms import platforms
from platforms.registry import BodyReading, ProxyAnswer
from tests.factories import TEST_TOKEN, PluginClientFactory, make_task

# Consumers run their database work in another thread, so tests commit their
# rows (transaction=True); the embedded channel layer has its own database.
pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

HELLO = {"type": "hello", "token": TEST_TOKEN, "plugin_version": "1.0.0", "platforms": ["claude"]}


async def open_socket(headers=None):
    communicator = WebsocketCommunicator(application, "/ws/plugin/", headers=headers or [])
    connected, code = await communicator.connect()
    return communicator, connected, code


async def hello(client_id, **fields):
    communicator, connected, _ = await open_socket()
    assert connected
    await communicator.send_json_to({**HELLO, "client_id": client_id, **fields})
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
    ("oldest", "version", "outdated"),
    [("1.0.0", "1.0.0", False), ("1.0.0", "1.2", False), ("1.2.0", "1.1.9", True), ("1.10", "1.9.9", True),
     ("1.0.0", "dev", True), ("", "0.0.1", False), ("", "dev", False)],
)
async def test_hello_ok_says_whether_the_plugin_is_older_than_the_server_supports(
    client, settings, oldest, version, outdated
):
    settings.CONDUCTOR_OLDEST_PLUGIN_VERSION = oldest
    communicator, reply = await hello("laptop-chrome", plugin_version=version)
    assert reply["plugin_outdated"] is outdated
    await communicator.disconnect()


async def test_hello_stores_what_the_plugin_says_about_itself_and_the_next_hello_replaces_it(client):
    communicator, _ = await hello("laptop-chrome", capabilities=["proxy_delivery", "dom_delivery"],
                                  adapters={"claude": "2026-11-29", "gemini": "2026-11-01"})
    await communicator.disconnect()
    stored = await PluginClient.objects.aget(pk=client.pk)
    assert (stored.plugin_version, stored.capabilities, stored.adapters) == (
        "1.0.0", ["proxy_delivery", "dom_delivery"], {"claude": "2026-11-29", "gemini": "2026-11-01"},
    )
    assert stored.has_capability("dom_delivery") and stored.has_capability("proxy_delivery")

    communicator, _ = await hello("laptop-chrome", plugin_version="1.1.0", capabilities=["dom_delivery"],
                                  adapters={"chatgpt": "2026-12-01"})
    await communicator.disconnect()
    stored = await PluginClient.objects.aget(pk=client.pk)
    assert (stored.plugin_version, stored.capabilities, stored.adapters) == (
        "1.1.0", ["dom_delivery"], {"chatgpt": "2026-12-01"},
    )
    assert not stored.has_capability("proxy_delivery")


async def test_a_hello_without_capabilities_means_proxy_delivery_only(client):
    frame = {key: value for key, value in HELLO.items() if key != "plugin_version"}
    communicator, _, _ = await open_socket()
    await communicator.send_json_to({**frame, "client_id": "laptop-chrome"})
    assert (await communicator.receive_json_from())["type"] == "hello.ok"
    await communicator.disconnect()
    stored = await PluginClient.objects.aget(pk=client.pk)
    assert (stored.plugin_version, stored.capabilities, stored.adapters) == ("", ["proxy_delivery"], {})
    assert stored.has_capability("proxy_delivery") and not stored.has_capability("dom_delivery")


async def test_unknown_capabilities_and_platforms_are_dropped_not_refused(client):
    communicator, _ = await hello(
        "laptop-chrome", capabilities=["teleport", "dom_delivery", "dom_delivery"],
        adapters={"bard": "1", "claude": "2026-11-29"}, platforms=["bard", "gemini", "claude"],
    )
    await communicator.disconnect()
    stored = await PluginClient.objects.aget(pk=client.pk)
    assert (stored.capabilities, stored.adapters) == (["dom_delivery"], {"claude": "2026-11-29"})


def test_a_hellos_platforms_keep_the_known_ones_in_the_registrys_order():
    info = parse_plugin_info({**HELLO, "platforms": ["bard", "gemini", "claude", "claude"]})
    assert info.platforms == tuple(name for name in platforms.names() if name in ("claude", "gemini"))
    assert parse_plugin_info({**HELLO, "platforms": None}).platforms == ()


@pytest.mark.parametrize(
    "change,detail",
    [
        ({"capabilities": "proxy_delivery"}, "'capabilities' must be a list of strings"),
        ({"capabilities": ["proxy_delivery", 7]}, "'capabilities' must be a list of strings"),
        ({"capabilities": ["x"] * 17}, "'capabilities' has more than 16 entries"),
        ({"capabilities": ["x" * 65]}, "'capabilities' has a name longer than 64"),
        ({"adapters": ["claude"]}, "'adapters' must be an object of platform names to version strings"),
        ({"adapters": {"claude": 20261129}}, "'adapters' must be an object"),
        ({"adapters": {f"p{n}": "1" for n in range(17)}}, "'adapters' has more than 16 entries"),
        ({"adapters": {"claude": "1" * 65}}, "'adapters' has a name or version longer than 64"),
        ({"platforms": "claude"}, "'platforms' must be a list of strings"),
        ({"platforms": ["claude", None]}, "'platforms' must be a list of strings"),
        ({"platforms": ["x"] * 17}, "'platforms' has more than 16 entries"),
        ({"platforms": ["x" * 65]}, "'platforms' has a name longer than 64"),
        ({"plugin_version": 1}, "'plugin_version' must be str"),
        ({"plugin_version": "1" * 65}, "'plugin_version' is longer than 64"),
    ],
)
async def test_a_hello_with_a_malformed_description_is_unauthorized_and_names_the_field(client, change, detail):
    communicator, _, _ = await open_socket()
    await communicator.send_json_to({**HELLO, "client_id": "laptop-chrome", **change})
    error = await communicator.receive_json_from()
    assert (error["type"], error["code"]) == ("error", "unauthorized")
    assert detail in error["detail"]
    assert await closed_with(communicator) == CloseCode.UNAUTHORIZED
    stored = await PluginClient.objects.aget(pk=client.pk)
    assert (stored.connected, stored.capabilities, stored.plugin_version) == (False, [], "")


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


async def test_only_an_id_a_frame_may_have_is_echoed(client):
    communicator, _ = await hello("laptop-chrome")
    for frame_type, code in (("teleport", "unknown_type"), ("browser.final_message", "invalid"), ("hello", "invalid")):
        for frame_id in ("x" * 50_000, {"nested": ["an object"]}, 7):
            await communicator.send_json_to({"type": frame_type, "id": frame_id})
            error = await communicator.receive_json_from()
            assert (error["code"], error["id"]) == (code, None)
    await communicator.send_json_to({"type": "teleport", "id": "x" * 255})
    assert (await communicator.receive_json_from())["id"] == "x" * 255
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


async def test_an_open_socket_renews_its_place_in_its_clients_group(client, settings, channel_layer):
    """A restarted Redis forgets every group: deliveries find the socket again at its next refresh."""
    settings.CONDUCTOR_PING_INTERVAL_SECONDS = 0.1
    communicator, _ = await hello("laptop-chrome")
    channel = (await PluginClient.objects.aget(pk=client.pk)).connection_channel
    await channel_layer.group_discard(client.group_name, channel)  # as a restarted Redis would
    await asyncio.sleep(0.3)
    await channel_layer.group_send(client.group_name, {"type": "plugin.deliver", "frame": {"type": "x"}})
    assert await communicator.receive_json_from(timeout=3) == {"type": "x"}
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


FINAL = {
    "type": "browser.final_message", "id": "frame-1", "platform": "claude",
    "conversation_id": "conv-1", "message_id": "msg-1",
    "text": "Reading it now.\n```baa\nfiles.read\n{\"path\": \"notes/todo.md\"}\n```\n```baa\nnope\n```",
}


async def test_final_message_is_acknowledged_after_it_is_committed(client):
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to(FINAL)
    ack = await communicator.receive_json_from()

    message = await Message.objects.aget()
    assert ack == {
        "type": "ack", "id": "frame-1", "message_id": str(message.pk), "instructions": 2, "duplicate": False,
    }
    assert await Instruction.objects.filter(message=message).acount() == 2
    await communicator.disconnect()


async def test_the_same_final_message_again_is_acknowledged_as_a_duplicate(client):
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to(FINAL)
    first = await communicator.receive_json_from()
    await communicator.send_json_to({**FINAL, "id": "frame-2"})
    again = await communicator.receive_json_from()
    assert again == {**first, "id": "frame-2", "duplicate": True}
    assert await Message.objects.acount() == 1
    await communicator.disconnect()


async def test_frames_that_arrive_while_a_batch_is_stored_are_stored_together_and_each_acked(client):
    from ingest.batching import final_message_queue
    from ingest.services import messages

    batches, release = [], threading.Event()

    def held_first(*, arrivals):
        batches.append([arrival.message.frame_id for arrival in arrivals])
        release.wait(10)  # the first batch waits until the other frames queue behind it
        return messages.final_messages_ingest(arrivals=arrivals)

    communicator, _ = await hello("laptop-chrome")
    frames = [{**FINAL, "id": f"frame-{n}", "message_id": f"msg-{n}", "conversation_id": f"conv-{n % 3}"}
              for n in range(8)] + [{**FINAL, "id": "frame-again", "message_id": "msg-1", "conversation_id": "conv-1"}]
    with mock.patch("ingest.batching.final_messages_ingest", side_effect=held_first):
        for frame in frames:
            await communicator.send_json_to(frame)
        for _ in range(3000):  # until every frame is read (the socket reads on while the first is stored)
            if final_message_queue().waiting == len(frames) - 1:
                break
            await asyncio.sleep(0.01)
        release.set()
        acks = {ack["id"]: ack for ack in [await communicator.receive_json_from(timeout=10) for _ in frames]}

    assert batches == [["frame-0"], [frame["id"] for frame in frames[1:]]]
    stored = {m.remote_message_id: m.pk async for m in Message.objects.all()}
    for n in range(8):
        assert acks[f"frame-{n}"] == {"type": "ack", "id": f"frame-{n}", "message_id": str(stored[f"msg-{n}"]),
                                      "instructions": 2, "duplicate": False}
    assert acks["frame-again"] == {**acks["frame-1"], "id": "frame-again", "duplicate": True}
    # Tasks follow the frames' order.
    ordered = [t.message.remote_message_id async for t in AutomationTask.objects.select_related("message")
               .order_by("sequence")]
    assert ordered == [f"msg-{n}" for n in range(8)]
    await communicator.disconnect()


async def test_a_frame_of_80000_blocks_is_acknowledged_with_the_32_stored_and_one_rejection(client):
    communicator, _ = await hello("laptop-chrome")
    frame = {**FINAL, "text": "~~~baa\n~~~\n" * 80_000}
    assert len(json.dumps(frame)) < 1024 * 1024  # within the frame limit: ingested, not refused
    await communicator.send_json_to(frame)
    ack = await communicator.receive_json_from(timeout=30)

    assert (ack["type"], ack["instructions"]) == ("ack", 33)
    message = await Message.objects.aget()
    assert await Instruction.objects.filter(message=message).acount() == 33
    overflow = await Instruction.objects.aget(message=message, block_index=33)
    assert "79968 more blocks" in overflow.error
    await communicator.disconnect()


@pytest.mark.parametrize(
    "change,detail",
    [
        ({"platform": None}, "'platform' is required"),
        ({"platform": "bard"}, "unknown platform 'bard'"),
        ({"conversation_id": ""}, "'conversation_id' must not be empty"),
        ({"conversation_id": 42}, "'conversation_id' must be str, got int"),
        ({"text": None}, "'text' is required"),
        ({"text": ["a"]}, "'text' must be str, got list"),
        ({"message_id": 5}, "'message_id' must be str"),
        ({"observed_at": "yesterday"}, "'observed_at' is not an ISO-8601 time"),
        ({"page_url": "https://x/" + "a" * 3000}, "'page_url' is longer than 2000"),
    ],
)
async def test_a_final_message_with_bad_fields_is_invalid_and_stores_nothing(client, change, detail):
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to({key: value for key, value in {**FINAL, **change}.items() if value is not None})
    error = await communicator.receive_json_from()
    assert (error["type"], error["code"], error["id"]) == ("error", "invalid", "frame-1")
    assert detail in error["detail"]
    assert not await Message.objects.aexists()
    await communicator.send_json_to(FINAL)  # the connection keeps working
    assert (await communicator.receive_json_from())["type"] == "ack"
    await communicator.disconnect()


@pytest.mark.parametrize("capture", ["network", "dom", None])
async def test_a_final_message_keeps_how_the_plugin_captured_it(client, capture):
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to({**FINAL, "capture": capture})
    assert (await communicator.receive_json_from())["type"] == "ack"
    assert (await Message.objects.aget()).capture == (capture or "")
    await communicator.disconnect()


@pytest.mark.parametrize(
    "capture,detail",
    [
        ("screenshot", "unknown capture 'screenshot'; expected one of network, dom"),
        (1, "'capture' must be str, got int"),
    ],
)
async def test_a_final_message_with_an_unknown_capture_is_invalid_and_the_socket_stays(client, capture, detail):
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to({**FINAL, "capture": capture})
    error = await communicator.receive_json_from()
    assert (error["code"], error["id"], error["detail"]) == ("invalid", "frame-1", detail)
    assert not await Message.objects.aexists()
    await communicator.send_json_to({**FINAL, "capture": "dom"})
    assert (await communicator.receive_json_from())["type"] == "ack"
    await communicator.disconnect()


async def test_a_final_message_the_database_cannot_store_gets_no_ack(client):
    communicator, _ = await hello("laptop-chrome")
    with mock.patch("ingest.services.messages.messages_store", side_effect=OperationalError("disk I/O error")):
        await communicator.send_json_to(FINAL)
        error = await communicator.receive_json_from()
    assert (error["code"], error["id"]) == ("server_error", "frame-1")
    await communicator.send_json_to(FINAL)
    assert (await communicator.receive_json_from())["type"] == "ack"
    await communicator.disconnect()


async def test_frames_past_the_rate_limit_are_dropped_with_rate_limited(client, settings):
    settings.CONDUCTOR_MAX_FRAMES_PER_SECOND = 5
    communicator, _ = await hello("laptop-chrome")
    for _ in range(8):
        await communicator.send_json_to({"type": "ping"})
    replies = [await communicator.receive_json_from() for _ in range(8)]
    assert replies.count({"type": "pong"}) == 5
    assert [r["code"] for r in replies if r["type"] == "error"] == ["rate_limited"] * 3
    await asyncio.sleep(1.05)
    await communicator.send_json_to({"type": "ping"})
    assert await communicator.receive_json_from() == {"type": "pong"}
    await communicator.disconnect()


async def test_rate_limiting_one_client_leaves_others_alone(client, settings):
    settings.CONDUCTOR_MAX_FRAMES_PER_SECOND = 2
    await sync_to_async(PluginClientFactory)(client_id="desktop")
    noisy, _ = await hello("laptop-chrome")
    quiet, _ = await hello("desktop")
    for _ in range(5):
        await noisy.send_json_to({"type": "ping"})
    await quiet.send_json_to({"type": "ping"})
    assert await quiet.receive_json_from() == {"type": "pong"}
    await noisy.disconnect()
    await quiet.disconnect()


async def test_a_frame_the_server_dropped_as_too_large_is_answered_too_large(client):
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_input({"type": FRAME_TOO_LARGE, "bytes": 15 * 1024 * 1024})
    error = await communicator.receive_json_from()
    assert (error["code"], error["detail"]) == ("too_large", "frame is over 1048576 bytes (15728640 bytes); not read")
    await communicator.send_json_to({"type": "ping"})
    assert await communicator.receive_json_from() == {"type": "pong"}
    await communicator.disconnect()


DELIVERY_RESULT = {"type": "browser.proxy_delivery.result", "request_id": "req-1", "ok": True, "status": 200, "body": "{}", "error": None}


async def test_a_result_for_a_request_never_sent_is_invalid(client):
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to(DELIVERY_RESULT)
    error = await communicator.receive_json_from()
    assert error["code"] == "invalid" and "req-1" in error["detail"]
    await communicator.disconnect()


async def test_a_result_for_a_request_sent_to_another_client_is_invalid(client):
    other = await sync_to_async(PluginClientFactory)(client_id="desktop")
    await sync_to_async(_delivery_request)(other, "req-1")
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to(DELIVERY_RESULT)
    assert (await communicator.receive_json_from())["code"] == "invalid"
    await communicator.disconnect()


async def test_a_result_for_a_request_sent_to_this_client_is_recorded(client):
    await sync_to_async(_delivery_request)(client, "req-1")
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to(DELIVERY_RESULT)
    await communicator.send_json_to({"type": "ping"})
    assert await communicator.receive_json_from() == {"type": "pong"}  # no error came first
    request = await DeliveryRequest.objects.aget(pk="req-1")
    assert request.answered_at is not None
    assert request.result == {
        "ok": True, "status": 200, "body": "{}", "error": None, "error_code": None, "evidence": None,
    }
    await communicator.disconnect()


@pytest.mark.parametrize("error_code", ["page_value_missing", "no_tab", "blocked"])
async def test_a_result_with_an_error_code_is_recorded_and_read_as_a_failure(client, error_code):
    await sync_to_async(_delivery_request)(client, "req-1")
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to(
        {**DELIVERY_RESULT, "ok": False, "status": None, "body": None, "error": "no csrf", "error_code": error_code}
    )
    await communicator.send_json_to({"type": "ping"})
    assert await communicator.receive_json_from() == {"type": "pong"}
    request = await DeliveryRequest.objects.aget(pk="req-1")
    assert request.result == {
        "ok": False, "status": None, "body": None, "error": "no csrf", "error_code": error_code, "evidence": None,
    }
    verdict = platforms.get("claude").read_answer(ProxyAnswer.from_result(request.result))
    assert not verdict.is_delivered and "no csrf" in verdict.error
    await communicator.disconnect()


async def test_a_long_result_body_is_stored_capped_with_its_size_and_both_ends_still_read(client):
    await sync_to_async(_delivery_request)(client, "req-1")
    start = 'event: message_start\ndata: {"type": "message_start", "message": {"uuid": "m-1"}}\n\n'
    filler = 'event: completion\ndata: {"completion": "words"}\n\n' * 10_000
    end = 'event: error\ndata: {"type": "error", "error": {"message": "overloaded"}}\n\n'
    body = start + filler + end
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to({**DELIVERY_RESULT, "body": body, "error": "e" * 300_000})
    await communicator.send_json_to({"type": "ping"})
    assert await communicator.receive_json_from() == {"type": "pong"}
    stored = (await DeliveryRequest.objects.aget(pk="req-1")).result
    assert len(stored["body"]) <= MAX_STORED_BODY_CHARS + 2 and stored["body_chars"] == len(body)
    assert len(stored["error"]) <= MAX_STORED_BODY_CHARS + 2 and stored["error_chars"] == 300_000
    # The adapter still finds the new message's id at the start and the error event at the end.
    assert platforms.get("claude").read_body(stored["body"]) == BodyReading(error="overloaded")
    assert platforms.get("claude").read_body(body_capped(start + filler)).remote_message_id == "m-1"
    await communicator.disconnect()


@pytest.mark.parametrize(
    "body,expected",
    [
        ("short", "short"),
        ("x" * 20, "x" * 20),  # at the limit: kept whole
        ("x" * 21, "x" * 10 + "\n\n" + "x" * 10),  # no line breaks: cut mid-line
        ("aaaa\nbbbbbbbbbbbbbbbb\ncccc\n", "aaaa\n\n\ncccc\n"),  # each end cut at a line break
    ],
)
def test_body_capped_keeps_both_ends_cut_at_line_breaks(body, expected):
    assert body_capped(body, limit=20) == expected


@pytest.mark.parametrize(
    "change,detail",
    [
        ({"request_id": None}, "'request_id' is required"),
        ({"ok": "yes"}, "'ok' must be bool"),
        ({"status": True}, "'status' must be int"),
        ({"ok": False, "error_code": "timeout"}, "unknown error_code 'timeout'"),
        ({"ok": False, "error_code": 3}, "'error_code' must be str"),
        ({"ok": True, "error_code": "blocked"}, "'ok' must be false when 'error_code' is given"),
    ],
)
async def test_a_delivery_result_with_bad_fields_is_invalid(client, change, detail):
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to({k: v for k, v in {**DELIVERY_RESULT, **change}.items() if v is not None})
    error = await communicator.receive_json_from()
    assert error["code"] == "invalid" and detail in error["detail"]
    await communicator.send_json_to({"type": "ping"})
    assert await communicator.receive_json_from() == {"type": "pong"}
    await communicator.disconnect()


DOM_RESULT = {
    "type": "browser.dom_delivery.result", "request_id": "req-1", "ok": True, "error": None, "error_code": None,
    "evidence": {"user_turn_seen": True},
}


async def test_a_dom_result_for_a_dom_request_is_recorded_with_its_evidence(client):
    await sync_to_async(_delivery_request)(client, "req-1", method="dom")
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to(DOM_RESULT)
    await communicator.send_json_to({"type": "ping"})
    assert await communicator.receive_json_from() == {"type": "pong"}
    request = await DeliveryRequest.objects.aget(pk="req-1")
    assert request.result == {
        "ok": True, "status": None, "body": None, "error": None, "error_code": None,
        "evidence": {"user_turn_seen": True},
    }
    await communicator.disconnect()


async def test_an_answer_in_the_other_methods_frame_is_invalid_and_records_nothing(client):
    await sync_to_async(_delivery_request)(client, "req-1", method="http")
    await sync_to_async(_delivery_request)(client, "req-2", method="dom")
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to(DOM_RESULT)
    error = await communicator.receive_json_from()
    assert error["code"] == "invalid"
    assert error["detail"] == "no browser.dom_delivery with request_id 'req-1' is awaiting this client's answer"
    await communicator.send_json_to({**DELIVERY_RESULT, "request_id": "req-2"})
    assert (await communicator.receive_json_from())["code"] == "invalid"
    assert await DeliveryRequest.objects.filter(answered_at__isnull=False).acount() == 0
    await communicator.disconnect()


@pytest.mark.parametrize(
    "change,detail",
    [
        ({"evidence": None}, "'ok' may be true only with evidence.user_turn_seen true"),
        ({"evidence": {"user_turn_seen": "yes"}}, "'ok' may be true only with evidence.user_turn_seen true"),
        ({"evidence": [True]}, "'evidence' must be dict"),
        ({"evidence": {"user_turn_seen": True, "page": {"deep": 1}}}, "'evidence' 'page' must be a short string"),
        ({"evidence": {"user_turn_seen": True, "note": "x" * 201}}, "'evidence' 'note' must be a short string"),
        ({"evidence": {f"k{n}": True for n in range(17)}}, "'evidence' has more than 16 entries"),
        ({"ok": True, "error_code": "blocked"}, "'ok' must be false when 'error_code' is given"),
        ({"ok": False, "error_code": "typo"}, "unknown error_code 'typo'"),
    ],
)
async def test_a_dom_result_with_bad_fields_is_invalid(client, change, detail):
    await sync_to_async(_delivery_request)(client, "req-1", method="dom")
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to({k: v for k, v in {**DOM_RESULT, **change}.items() if v is not None})
    error = await communicator.receive_json_from()
    assert error["code"] == "invalid" and detail in error["detail"]
    await communicator.send_json_to({"type": "ping"})
    assert await communicator.receive_json_from() == {"type": "pong"}
    assert (await DeliveryRequest.objects.aget(pk="req-1")).answered_at is None
    await communicator.disconnect()


def _delivery_request(client, request_id, method="http"):
    task = make_task(kind="instruction.deliver", target_client_id=client.client_id, target_platform="claude")
    return DeliveryRequest.objects.create(request_id=request_id, task=task, client=client, method=method, sent_at=1)


# --- hostile input ------------------------------------------------------------------------------

def final_with(raw_field: str, raw_value: str) -> str:
    """FINAL as JSON text with one field's value written raw (so it can hold what json.dumps won't)."""
    text = json.dumps({key: value for key, value in FINAL.items() if key != raw_field})
    return text[:-1] + f', "{raw_field}": {raw_value}}}'


@pytest.mark.parametrize(
    "text,code,detail",
    [
        *[(final_with(field, '"a\\ud800b"'), "invalid", "lone surrogate")
          for field in ("text", "conversation_id", "title", "message_id")],
        *[(final_with(field, '"a\\u0000b"'), "invalid", "NUL character")
          for field in ("text", "conversation_id", "title", "message_id")],
        (final_with("text", '"\\udfff"'), "invalid", "lone surrogate"),
        (final_with("extra", "NaN"), "invalid", "NaN is not a number JSON allows"),
        (final_with("extra", "-Infinity"), "invalid", "-Infinity is not a number"),
        (final_with("extra", "1e999"), "invalid", "1e999 is not a finite number"),
        (final_with("extra", "[" * 1500 + "]" * 1500), "bad_frame", "nested deeper than 100"),
        (final_with("extra", "[" * 101 + "]" * 101), "bad_frame", "nested deeper than 100"),
        (final_with("extra", "9" * 4301), "bad_frame", "more than 100 digits"),
        (final_with("extra", "1" * 101), "bad_frame", "more than 100 digits"),
        (final_with("extra", "0." + "1" * 120), "bad_frame", "more than 100 digits"),
    ],
    ids=["text-surrogate", "conversation-surrogate", "title-surrogate", "message-id-surrogate",
         "text-nul", "conversation-nul", "title-nul", "message-id-nul",
         "low-surrogate", "nan", "minus-infinity", "1e999", "deep-1500", "deep-101", "int-4301-digits",
         "int-101-digits", "float-120-digits"],
)
async def test_hostile_frames_get_an_error_frame_and_the_socket_stays(client, text, code, detail):
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_to(text_data=text)
    error = await communicator.receive_json_from()
    assert (error["type"], error["code"]) == ("error", code)
    assert detail in error["detail"]
    assert not await Message.objects.aexists()
    await communicator.send_json_to({"type": "ping"})
    assert await communicator.receive_json_from() == {"type": "pong"}
    await communicator.disconnect()


async def test_a_message_nested_just_within_the_limit_is_stored(client):
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_to(text_data=final_with("extra", "[" * 99 + "]" * 99))
    assert (await communicator.receive_json_from())["type"] == "ack"
    await communicator.disconnect()


@pytest.mark.parametrize("field", ["token", "client_id"])
async def test_a_lone_surrogate_in_the_hello_is_unauthorized_not_a_crash(client, field):
    communicator, _, _ = await open_socket()
    text = json.dumps({**HELLO, "client_id": "laptop-chrome", field: "PLACEHOLDER"}).replace(
        "PLACEHOLDER", "x\\ud800")
    await communicator.send_to(text_data=text)
    error = await communicator.receive_json_from()
    assert (error["code"], "lone surrogate" in error["detail"]) == ("unauthorized", True)
    assert await closed_with(communicator) == CloseCode.UNAUTHORIZED


@pytest.mark.parametrize(
    "page_url,accepted",
    [
        ("https://claude.ai/chat/1", True),
        ("http://127.0.0.1:8000/chat", True),
        ("http://localhost/chat", True),
        ("http://[::1]:3000/", True),
        ("javascript:alert(document.domain)//", False),
        ("JavaScript:alert(1)", False),
        ("data:text/html,<script>alert(1)</script>", False),
        ("http://claude.ai/chat/1", False),
        ("http://127.0.0.1.evil.example/", False),
        ("https://", False),
        ("//claude.ai/chat", False),
        ("http://[::1", False),
    ],
)
async def test_only_https_page_urls_or_http_on_loopback_are_accepted(client, page_url, accepted):
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to({**FINAL, "page_url": page_url})
    reply = await communicator.receive_json_from()
    if accepted:
        assert reply["type"] == "ack"
    else:
        assert (reply["code"], reply["detail"]) == (
            "invalid", "'page_url' must be an https URL (or http on a loopback host)")
        assert not await Message.objects.aexists()
    await communicator.disconnect()


async def test_a_failing_handler_gets_server_error_and_the_socket_stays(client):
    communicator, _ = await hello("laptop-chrome")
    with mock.patch("ingest.services.messages.messages_store", side_effect=RuntimeError("a bug")):
        await communicator.send_json_to(FINAL)
        error = await communicator.receive_json_from()
    assert (error["code"], error["id"]) == ("server_error", "frame-1")
    await communicator.send_json_to(FINAL)
    assert (await communicator.receive_json_from())["type"] == "ack"
    assert (await PluginClient.objects.aget(pk=client.pk)).connected
    await communicator.disconnect()


async def test_a_crashed_socket_is_still_cleaned_up_and_stops_refreshing_presence(client, settings, channel_layer):
    settings.CONDUCTOR_PING_INTERVAL_SECONDS = 0.05
    communicator, _ = await hello("laptop-chrome")
    await sync_to_async(_delivery_request)(client, "req-1")
    channel = (await PluginClient.objects.aget(pk=client.pk)).connection_channel
    # An event the consumer cannot handle: it raises, outside any frame handler.
    await channel_layer.send(channel, {"type": "plugin.deliver"})
    assert await closed_with(communicator) == CloseCode.TRY_AGAIN  # not left open and deaf
    await communicator.wait(timeout=3)  # and cleaned up

    refreshed = await PluginClient.objects.aget(pk=client.pk)
    assert not refreshed.connected
    assert (await DeliveryRequest.objects.aget(pk="req-1")).answered_at is not None  # abandoned
    seen = refreshed.last_seen_at
    await asyncio.sleep(0.3)
    assert (await PluginClient.objects.aget(pk=client.pk)).last_seen_at == seen  # no presence loop left


async def test_a_socket_whose_channel_layer_goes_away_is_closed_for_the_plugin_to_reconnect(client, channel_layer):
    communicator, _ = await hello("laptop-chrome")
    lost = asyncio.Event()

    async def receive_until_lost(channel):
        await lost.wait()
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    with mock.patch.object(type(channel_layer), "receive", side_effect=receive_until_lost):
        communicator2, _ = await hello("laptop-chrome")  # the newest socket of the client reads through the patch
        lost.set()
        assert await closed_with(communicator2) == CloseCode.TRY_AGAIN
        await communicator2.wait(timeout=3)
    assert await closed_with(communicator) == CloseCode.REPLACED
    assert not (await PluginClient.objects.aget(pk=client.pk)).connected


async def test_a_hello_the_channel_layer_cannot_take_is_closed_for_the_plugin_to_reconnect(client, channel_layer):
    communicator, _, _ = await open_socket()
    with mock.patch.object(type(channel_layer), "group_add", side_effect=ConnectionError("Connection reset by peer")):
        await communicator.send_json_to({**HELLO, "client_id": "laptop-chrome"})
        error = await communicator.receive_json_from()
        assert error["code"] == "server_error"
        assert await closed_with(communicator) == CloseCode.TRY_AGAIN
        await communicator.wait(timeout=3)
    assert not (await PluginClient.objects.aget(pk=client.pk)).connected


async def test_a_first_frame_over_64_kib_closes_the_socket_with_1009(client):
    communicator, _, _ = await open_socket()
    await communicator.send_to(text_data=json.dumps({**HELLO, "client_id": "laptop-chrome", "pad": "x" * 65536}))
    assert await closed_with(communicator) == CloseCode.MESSAGE_TOO_BIG


async def open_socket_from(address):
    communicator = WebsocketCommunicator(application, "/ws/plugin/")
    communicator.scope["client"] = [address, 50000]  # read by the application once the test awaits
    connected, _ = await communicator.connect()
    assert connected
    return communicator


def small_room(monkeypatch, *, grace_seconds=0.0):
    from ingest.consumers import PluginConsumer

    room = PreHelloRoom(per_address=2, total=3, grace_seconds=grace_seconds)
    monkeypatch.setattr(PluginConsumer, "pre_hello_room", room)
    return room


async def test_a_newcomer_from_an_address_at_its_share_closes_that_addresss_oldest_idle_socket(client, monkeypatch):
    room = small_room(monkeypatch)
    first, second = [await open_socket_from("10.0.0.1") for _ in range(2)]
    other = await open_socket_from("10.0.0.2")
    third = await open_socket_from("10.0.0.1")
    assert await closed_with(first) == CloseCode.TOO_MANY_WAITING
    for communicator in (second, third, other):
        assert await communicator.receive_nothing(timeout=0.2)
    await third.send_json_to({**HELLO, "client_id": "laptop-chrome"})
    assert (await third.receive_json_from())["type"] == "hello.ok"
    for communicator in (first, second, third, other):
        await communicator.disconnect()
    assert len(room) == 0


async def test_a_full_room_makes_room_from_the_address_holding_the_most(client, monkeypatch):
    room = small_room(monkeypatch)
    crowd = [await open_socket_from("10.0.0.1") for _ in range(2)]
    lone = await open_socket_from("10.0.0.2")
    newcomer = await open_socket_from("10.0.0.3")
    assert await closed_with(crowd[0]) == CloseCode.TOO_MANY_WAITING
    assert await lone.receive_nothing(timeout=0.2) and await crowd[1].receive_nothing(timeout=0.2)
    assert (room.count("10.0.0.1"), room.count("10.0.0.2"), room.count("10.0.0.3")) == (1, 1, 1)
    for communicator in (*crowd, lone, newcomer):
        await communicator.disconnect()


async def test_sockets_in_their_grace_or_sending_their_hello_are_never_made_to_go(client, monkeypatch):
    from ingest.selectors import clients as client_selectors

    room = small_room(monkeypatch, grace_seconds=60)
    hello_under_way = asyncio.Event()
    release = threading.Event()
    authenticate = client_selectors.plugin_client_authenticate

    def slow_authenticate(**kwargs):
        hello_under_way.set()
        release.wait(10)
        return authenticate(**kwargs)

    with mock.patch.object(client_selectors, "plugin_client_authenticate", slow_authenticate):
        plugin = await open_socket_from("10.0.0.1")
        await plugin.send_json_to({**HELLO, "client_id": "laptop-chrome"})
        await asyncio.wait_for(hello_under_way.wait(), 5)
        room.grace_seconds = 0  # from now on every idle socket may go, but not the one saying hello
        idle = await open_socket_from("10.0.0.1")
        newcomer = await open_socket_from("10.0.0.1")
        assert await closed_with(idle) == CloseCode.TOO_MANY_WAITING
        room.grace_seconds = 60
        young = [await open_socket_from("10.0.0.1") for _ in range(3)]  # beyond the share, in their grace
        assert room.count("10.0.0.1") == 5
        release.set()
        assert (await plugin.receive_json_from(timeout=5))["type"] == "hello.ok"
        for communicator in (newcomer, *young):
            assert await communicator.receive_nothing(timeout=0.1)
    for communicator in (plugin, idle, newcomer, *young):
        await communicator.disconnect()
    assert len(room) == 0


async def test_a_socket_to_an_unknown_path_is_refused_quietly(client, caplog):
    communicator = WebsocketCommunicator(application, "/ws/nowhere/")
    connected, _ = await communicator.connect()
    assert not connected
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize(
    "params,error",
    [
        ('{"big": 1e999}', "1e999 is not a finite number"),
        ('{"s": "x\\u0000y"}', "NUL character"),  # PostgreSQL stores no NUL, in text or jsonb
    ],
    ids=["non-finite", "nul"],
)
async def test_a_block_whose_params_cannot_be_stored_is_rejected_not_a_poison_message(client, params, error):
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to({**FINAL, "text": f"Here:\n```baa\necho\n{params}\n```"})
    ack = await communicator.receive_json_from()
    assert (ack["type"], ack["instructions"]) == ("ack", 1)
    instruction = await Instruction.objects.aget()
    assert instruction.status == "rejected" and error in instruction.error
    await communicator.disconnect()
