"""Two chats on two plugin clients exchange mail, over real sockets, through a server as ``make run`` starts it."""

import json

import pytest
from django.core.management import call_command
from django.db import connections

from automation.models import AutomationTask, TaskStatus
from conversations.models import Conversation
from ingest.models import DeliveryRequest
from conductor_site.simulator import SimulatedPlugin
from pipelines.mail import MAIL_DELIVER
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.server import running_server, wait_for

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

WAIT = 60


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory):
    with running_server(
        tmp_path_factory.mktemp("server"), command="serve+cluster",
        CONDUCTOR_TICK_SECONDS="0.5", CONDUCTOR_OUTBOUND_JITTER_MAX_MS="0", CONDUCTOR_RETRY_JITTER_MAX_MS="0",
    ) as running:
        yield running
    with django_db_blocker.unblock():
        for alias in connections:
            call_command("flush", interactive=False, database=alias, verbosity=0)


def final_message(conversation_id, message_id, text):
    return {
        "type": "browser.final_message", "id": f"f-{message_id}", "platform": "claude",
        "conversation_id": conversation_id, "message_id": message_id, "text": text,
        "page_url": f"https://claude.ai/chat/{conversation_id}",
    }


def mail_block(to, text):
    return f"```baa\nmail.send\n{json.dumps({'to': to, 'text': text})}\n```"


def next_delivery(plugin, kind):
    """The next delivery to ``plugin``, answered as delivered; it must be a task of ``kind``."""
    delivery = plugin.next_delivery(timeout=WAIT)
    assert AutomationTask.objects.get(pk=delivery["delivery_key"]).kind == kind
    plugin.answer(delivery, status=200)
    return delivery


def test_two_chats_on_two_clients_exchange_mail(server):
    PluginClientFactory(client_id="laptop")
    PluginClientFactory(client_id="desktop")
    with (
        SimulatedPlugin(url=server.ws_url, client_id="laptop", token=TEST_TOKEN) as laptop,
        SimulatedPlugin(url=server.ws_url, client_id="desktop", token=TEST_TOKEN) as desktop,
    ):
        laptop.send_final_message(final_message("conv-w", "w0", "I write the notes."))
        desktop.send_final_message(final_message("conv-r", "r0", "I review them."))
        # An operator names the two chats in the admin.
        Conversation.objects.filter(remote_id="conv-w").update(handle="writer")
        Conversation.objects.filter(remote_id="conv-r").update(handle="reviewer")

        laptop.send_final_message(final_message("conv-w", "w1", mail_block("reviewer", "Draft v2 is ready.")))
        next_delivery(laptop, "instruction.deliver")  # the writer hears its block ran
        mail = next_delivery(desktop, MAIL_DELIVER)
        assert mail["conversation_id"] == "conv-r"
        assert mail["text"].startswith("Mail from @writer:\n\nDraft v2 is ready.\n\n")
        assert '{"to": "writer", "text": "..."}' in mail["text"]

        # The reviewer's assistant answers the way the mail says to.
        desktop.send_final_message(final_message("conv-r", "r1", mail_block("writer", "Looks good; ship it.")))
        next_delivery(desktop, "instruction.deliver")
        answer = next_delivery(laptop, MAIL_DELIVER)
        assert answer["conversation_id"] == "conv-w"
        assert answer["text"].startswith("Mail from @reviewer:\n\nLooks good; ship it.\n\n")

        wait_for(
            lambda: not AutomationTask.objects.exclude(status=TaskStatus.SUCCEEDED).exists(),
            "every task to succeed", WAIT,
        )
    mails = AutomationTask.objects.filter(kind=MAIL_DELIVER).order_by("sequence")
    assert [(m.conversation.handle, m.target_client_id, m.attempt_count) for m in mails] == [
        ("reviewer", "desktop", 1), ("writer", "laptop", 1),
    ]
    # Point to point: each mail went to its recipient's client alone.
    assert sorted(DeliveryRequest.objects.filter(task__kind=MAIL_DELIVER).values_list("client__client_id", flat=True)) == [
        "desktop", "laptop",
    ]
