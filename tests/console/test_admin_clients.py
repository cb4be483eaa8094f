import datetime as dt
import re

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import LogEntry
from django.contrib.sessions.models import Session
from django.utils import timezone

from ingest.models import DeliveryRequest, PluginClient
from conductor_site.asgi import application
from conversations.models import Message
from ingest.protocol import CloseCode
from ingest.selectors.clients import plugin_client_authenticate
from ingest.services.clients import PluginClientRevoked, plugin_client_rotate
from ingest.tokens import token_hash
from tests.factories import (
    T0,
    TEST_TOKEN,
    ConversationFactory,
    InstructionFactory,
    MessageFactory,
    PluginClientFactory,
    create_or_skip,
    make_staff,
    make_task,
)

CLIENTS = "/admin/ingest/pluginclient/"
ADD = f"{CLIENTS}add/"


def shown_tokens(page: str) -> list[str]:
    return re.findall(r'<input type="text" readonly size="50" value="([^"]+)"', page)


def run_action(client, action, clients, **kwargs):
    return client.post(
        CLIENTS, {"action": action, ACTION_CHECKBOX_NAME: [c.pk for c in clients], "index": 0}, **kwargs
    )


def log_messages(client):
    return list(
        LogEntry.objects.filter(object_id=str(client.pk), content_type__model="pluginclient")
        .order_by("action_time", "pk")
        .values_list("user__username", "change_message")
    )


# --- create ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_creating_a_client_shows_its_token_once_and_stores_only_the_hash(admin_client, admin_user):
    assert 'name="name"' in admin_client.get(ADD).content.decode()

    response = admin_client.post(ADD, {"name": "Laptop Chrome"})

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    [token] = shown_tokens(response.content.decode())
    client = PluginClient.objects.get()
    assert (client.client_id, client.name, client.enabled) == ("laptop-chrome", "Laptop Chrome", True)
    assert client.token_hash == token_hash(token) and token not in client.token_hash
    assert plugin_client_authenticate(client_id="laptop-chrome", token=token) == client
    # Never shown or kept again: not on any page, in the admin log, a message or the session.
    for url in (CLIENTS, f"{CLIENTS}{client.pk}/change/", "/admin/"):
        assert token not in admin_client.get(url).content.decode()
    assert log_messages(client) == [(admin_user.username, "Created; its token was shown once")]
    assert all(token not in session.session_data for session in Session.objects.all())
    assert token not in str(response.cookies)


@pytest.mark.django_db
def test_an_operator_can_choose_the_token(admin_client):
    chosen = "my-own-token-" + "z" * 30
    response = admin_client.post(ADD, {"name": "desk", "token": chosen})
    assert shown_tokens(response.content.decode()) == [chosen]
    assert PluginClient.objects.get().token_hash == token_hash(chosen)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "data,error",
    [
        ({"name": "desk", "token": "short"}, "at least 32 characters"),
        ({"name": "!!!"}, "gives an empty client id"),
        ({"name": ""}, "This field is required"),
    ],
)
def test_a_bad_create_request_shows_the_form_again_and_creates_nothing(admin_client, data, error):
    response = admin_client.post(ADD, data)
    page = response.content.decode()
    assert response.status_code == 200 and error in page
    assert shown_tokens(page) == []
    assert not PluginClient.objects.exists()


@pytest.mark.django_db
def test_a_taken_name_is_refused(admin_client):
    PluginClientFactory(client_id="desk")
    page = admin_client.post(ADD, {"name": "Desk"}).content.decode()
    assert "already exists" in page and shown_tokens(page) == []
    assert PluginClient.objects.count() == 1


# --- the list ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_list_shows_presence_not_just_the_stored_flag(admin_client, settings):
    settings.CONDUCTOR_PING_INTERVAL_SECONDS = 20
    now = timezone.now()
    fresh = PluginClientFactory(client_id="fresh", connected=True, last_seen_at=now)
    PluginClientFactory(client_id="stale", connected=True, last_seen_at=now - dt.timedelta(minutes=5))
    PluginClientFactory(client_id="gone", connected=False, last_seen_at=now)
    page = admin_client.get(CLIENTS).content.decode()
    rows = dict(re.findall(r'/pluginclient/\d+/change/">([a-z]+)</a>.*?<td class="field-is_connected">(.*?)</td>',
                           page, flags=re.DOTALL))
    assert {client_id: 'alt="True"' in cell for client_id, cell in rows.items()} == {
        "fresh": True, "stale": False, "gone": False,
    }
    assert fresh.client_id in page


@pytest.mark.django_db
def test_the_list_shows_each_clients_plugin_version(admin_client):
    PluginClientFactory(client_id="desk", plugin_version="1.2.0")
    page = admin_client.get(CLIENTS).content.decode()
    assert '<td class="field-plugin_version">1.2.0</td>' in page


# --- the change page: what the plugin said and did ----------------------------------------------


def change_page(admin_client, client) -> str:
    response = admin_client.get(f"{CLIENTS}{client.pk}/change/")
    assert response.status_code == 200
    return response.content.decode()


def activity_row(page: str, platform_label: str) -> str:
    [row] = re.findall(rf"<tr><th>{platform_label}</th>(.*?)</tr>", page, flags=re.DOTALL)
    return row


def delivery(client, platform, *, sent_at, result=None, answered=True):
    task = make_task(kind="instruction.deliver", target_client_id=client.client_id, target_platform=platform)
    return DeliveryRequest.objects.create(
        task=task, client=client, sent_at=sent_at, answered_at=sent_at + 500 if answered else None, result=result,
    )


@pytest.mark.django_db
def test_the_change_page_shows_the_plugins_version_capabilities_and_adapters(admin_client):
    client = PluginClientFactory(
        plugin_version="1.0.0", capabilities=["proxy_delivery", "dom_delivery"],
        adapters={"claude": "2026-11-29", "gemini": "2026-11-01"},
    )
    page = change_page(admin_client, client)
    assert '<div class="readonly">1.0.0</div>' in page
    assert "proxy_delivery, dom_delivery" in page
    assert "claude: 2026-11-29, gemini: 2026-11-01" in page


@pytest.mark.django_db
def test_the_change_page_shows_the_latest_capture_and_delivery_of_each_platform(
    admin_client, django_assert_max_num_queries
):
    client = PluginClientFactory()
    now = timezone.now()
    claude = ConversationFactory(platform="claude")
    MessageFactory(conversation=claude, client=client, capture="dom", received_at=now - dt.timedelta(hours=1))
    latest = MessageFactory(conversation=claude, client=client, capture="network", received_at=now)
    MessageFactory(conversation=claude, client=client, source=Message.Source.CONDUCTOR, role="user",
                   dedupe_key=None, received_at=now + dt.timedelta(seconds=1))  # a delivered text, not a capture
    MessageFactory(conversation=ConversationFactory(platform="gemini"), client=client, received_at=now)
    delivery(client, "gemini", sent_at=T0, result={"ok": True, "status": 200, "body": "", "error": None})
    MessageFactory(conversation=claude, client=PluginClientFactory(), capture="dom",
                   received_at=now + dt.timedelta(minutes=1))  # another client's
    delivery(client, "claude", sent_at=T0, result={"ok": True, "status": 200, "body": "", "error": None})
    failed = delivery(client, "claude", sent_at=T0 + 1000, result={
        "ok": False, "status": 403, "body": "x" * 10_000, "error": "challenge", "error_code": "blocked",
    })
    waiting = delivery(client, "chatgpt", sent_at=T0, answered=False)

    change_page(admin_client, client)
    # The page, its activity (two queries) and its capture health (three: ingest.health).
    with django_assert_max_num_queries(8) as queries:
        page = change_page(admin_client, client)

    claude_row = activity_row(page, "Claude")
    assert "Network" in claude_row and f"/admin/conversations/message/{latest.pk}/change/" in claude_row
    assert "http · failed [blocked] (HTTP 403): challenge" in claude_row
    assert f"/admin/automation/automationtask/{failed.task_id}/change/" in claude_row
    chatgpt_row = activity_row(page, "ChatGPT")
    assert chatgpt_row.startswith("<td>-</td>")  # no capture
    assert "awaiting the answer" in chatgpt_row and waiting.task_id in chatgpt_row
    gemini_row = activity_row(page, "Gemini")
    assert "capture not said" in gemini_row and "http · ok (HTTP 200)" in gemini_row
    sql = "\n".join(query["sql"] for query in queries.captured_queries)
    assert '"conversations_message"."text"' not in sql and "x" * 100 not in page


@pytest.mark.django_db
def test_the_change_page_escapes_what_the_plugin_sent(admin_client):
    hostile = "<script>alert(1)</script>"
    client = PluginClientFactory(plugin_version=hostile, capabilities=[hostile], adapters={"claude": hostile})
    delivery(client, "claude", sent_at=T0, result={
        "ok": False, "status": None, "body": None, "error": hostile, "error_code": hostile,
    })
    page = change_page(admin_client, client)
    assert "<script>alert(1)" not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 5


# --- revoke and rotate ------------------------------------------------------------------------


@pytest.mark.django_db
def test_revoke_disables_enabled_clients_and_skips_revoked_ones(admin_client, admin_user):
    active, revoked = PluginClientFactory(client_id="active"), PluginClientFactory(client_id="old", enabled=False)
    response = run_action(admin_client, "revoke", [active, revoked], follow=True)
    notes = [str(m) for m in response.context["messages"]]
    assert notes == ["Revoked 1 client(s): active.", "Skipped (already revoked): old."]
    assert not PluginClient.objects.get(pk=active.pk).enabled
    assert plugin_client_authenticate(client_id="active", token=TEST_TOKEN) is None
    assert log_messages(active) == [(admin_user.username, "Revoked; its open socket was closed")]
    assert log_messages(revoked) == []


@pytest.mark.django_db
def test_rotate_shows_each_new_token_once_and_the_old_one_stops_working(admin_client, admin_user):
    first, second = PluginClientFactory(client_id="first"), PluginClientFactory(client_id="second")
    revoked = PluginClientFactory(client_id="revoked", enabled=False)

    response = run_action(admin_client, "rotate", [first, second, revoked])

    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    page = response.content.decode()
    tokens = shown_tokens(page)
    assert len(tokens) == 2 and TEST_TOKEN not in tokens
    for client, token in zip((first, second), tokens, strict=True):
        assert PluginClient.objects.get(pk=client.pk).token_hash == token_hash(token)
        assert plugin_client_authenticate(client_id=client.client_id, token=token) is not None
        assert plugin_client_authenticate(client_id=client.client_id, token=TEST_TOKEN) is None
        assert log_messages(client) == [(admin_user.username, "Rotated its token; its open socket was closed")]
    assert PluginClient.objects.get(pk=revoked.pk).token_hash == token_hash(TEST_TOKEN)
    assert "Skipped: revoked is revoked; create a new client instead" in page
    later = admin_client.get(CLIENTS).content.decode()
    assert all(token not in later for token in tokens)


@pytest.mark.django_db
def test_creating_a_client_gives_it_the_owner_asked_for_or_the_default(admin_client):
    admin_client.post(ADD, {"name": "alice laptop", "owner": "alice"})
    admin_client.post(ADD, {"name": "laptop", "owner": ""})
    owners = dict(PluginClient.objects.values_list("client_id", "owner"))
    assert owners == {"alice-laptop": "alice", "laptop": "default"}
    page = admin_client.post(ADD, {"name": "bob laptop", "owner": "Bob!"}).content.decode()
    assert "An owner starts with" in page and not PluginClient.objects.filter(client_id="bob-laptop").exists()


@pytest.mark.django_db
def test_set_owner_asks_for_the_owner_then_sets_it_on_the_selected_clients(admin_client, admin_user):
    laptop, desktop, other = (PluginClientFactory(client_id=name) for name in ("laptop", "desktop", "other"))
    page = run_action(admin_client, "set_owner", [laptop, desktop]).content.decode()
    assert 'id="owner_form"' in page and "laptop (now default)" in page
    response = admin_client.post(CLIENTS, {
        "action": "set_owner", ACTION_CHECKBOX_NAME: [laptop.pk, desktop.pk], "owner": "alice", "apply": "1",
    }, follow=True)
    assert "Owner of 2 client(s) set to alice: desktop, laptop." in response.content.decode()
    assert dict(PluginClient.objects.values_list("client_id", "owner")) == {
        "laptop": "alice", "desktop": "alice", "other": "default",
    }
    assert log_messages(laptop)[-1] == (admin_user.username, "Owner set to alice")
    # A token rotated meanwhile stays rotated: only the owner is written.
    assert PluginClient.objects.get(pk=laptop.pk).token_hash == laptop.token_hash
    refused = admin_client.post(CLIENTS, {
        "action": "set_owner", ACTION_CHECKBOX_NAME: [other.pk], "owner": "no way", "apply": "1",
    }).content.decode()
    assert "An owner starts with" in refused and PluginClient.objects.get(pk=other.pk).owner == "default"


@pytest.mark.django_db
def test_rotating_a_revoked_client_is_refused():
    client = PluginClientFactory(enabled=False)
    with pytest.raises(PluginClientRevoked):
        plugin_client_rotate(client=client, actor="alice")
    assert PluginClient.objects.get(pk=client.pk).token_hash == token_hash(TEST_TOKEN)


# --- open sockets close with 4403 --------------------------------------------------------------


HELLO = {"type": "hello", "token": TEST_TOKEN, "plugin_version": "1.0.0", "platforms": ["claude"]}


async def connected_socket(client_id):
    communicator = WebsocketCommunicator(application, "/ws/plugin/")
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_json_to({**HELLO, "client_id": client_id})
    assert (await communicator.receive_json_from())["type"] == "hello.ok"
    return communicator


async def closed_with(communicator):
    message = await communicator.receive_output(timeout=3)
    assert message["type"] == "websocket.close", message
    return message.get("code")


@pytest.mark.django_db(transaction=True, databases="__all__")
@pytest.mark.parametrize("action", ["revoke", "rotate"])
async def test_revoking_or_rotating_in_the_admin_closes_the_open_socket_with_4403(channel_layer, admin_client, action):
    # database_sync_to_async closes the worker thread's connection after each call,
    # so PostgreSQL can drop the test database at the end.
    client = await database_sync_to_async(PluginClientFactory)(client_id="laptop-chrome")
    communicator = await connected_socket("laptop-chrome")

    response = await database_sync_to_async(run_action)(admin_client, action, [client])

    assert response.status_code in (200, 302)
    assert await closed_with(communicator) == CloseCode.REVOKED
    await communicator.wait()  # let the consumer finish its disconnect before the test ends
    stored = await database_sync_to_async(PluginClient.objects.get)(pk=client.pk)
    assert not stored.connected


# --- permissions --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_staff_cannot_manage_plugin_clients_even_with_model_permissions(client):
    client.force_login(make_staff(
        "staff", "ingest.view_pluginclient", "ingest.add_pluginclient", "ingest.change_pluginclient",
    ))
    target = PluginClientFactory()
    assert client.get(CLIENTS).status_code == 403
    assert client.get(ADD).status_code == 403
    assert client.post(ADD, {"name": "sneaky"}).status_code == 403
    assert client.get(f"{CLIENTS}{target.pk}/change/").status_code == 403
    assert run_action(client, "revoke", [target]).status_code == 403
    assert run_action(client, "rotate", [target]).status_code == 403
    assert PluginClient.objects.get(pk=target.pk).enabled
    assert PluginClient.objects.count() == 1
    assert "pluginclient" not in client.get("/admin/").content.decode()


@pytest.mark.django_db
def test_plugin_clients_cannot_be_deleted_or_edited(admin_client):
    target = PluginClientFactory()
    assert admin_client.get(f"{CLIENTS}{target.pk}/delete/").status_code == 403
    assert admin_client.post(f"{CLIENTS}{target.pk}/change/", {"name": "renamed", "_save": "Save"}).status_code == 403
    assert PluginClient.objects.get(pk=target.pk).name == target.name


# --- instructions ------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "fields", [{"params": {"path": "notes\ud800.md"}}, {"raw_text": "files.read\nnotes\ud800.md"}],
    ids=["params", "raw-text"],
)
def test_an_instruction_page_shows_a_lone_surrogate_as_a_replacement_character(admin_client, fields):
    instruction = create_or_skip(InstructionFactory, **fields)
    for url in ("/admin/ingest/instruction/", f"/admin/ingest/instruction/{instruction.pk}/change/"):
        response = admin_client.get(url)
        assert response.status_code == 200
    assert "notes\ufffd.md" in response.content.decode()


@pytest.mark.django_db
def test_the_instruction_list_names_messages_without_fetching_their_text(admin_client, django_assert_max_num_queries):
    message = MessageFactory(text="word " * 20_000, raw_frame={"text": "word " * 20_000})
    InstructionFactory.create_batch(3, message=message)
    admin_client.get("/admin/ingest/instruction/")
    with django_assert_max_num_queries(8) as queries:
        response = admin_client.get("/admin/ingest/instruction/")
    assert f"assistant message {message.pk} in {message.conversation}" in response.content.decode()
    sql = "\n".join(query["sql"] for query in queries.captured_queries)
    assert '"conversations_message"."text"' not in sql and '"conversations_message"."raw_frame"' not in sql
    assert '"ingest_instruction"."raw_text"' not in sql and '"ingest_instruction"."params"' not in sql
