"""Mail in the admin: handles on conversations, and a mail seen from its task, its sender and its recipient."""

import logging

import pytest

from automation.services.tasks import task_create
from conversations.models import Conversation
from pipelines.mail import MAIL_DELIVER
from tests.factories import ConversationFactory, ConversationLinkFactory, MessageFactory

pytestmark = pytest.mark.django_db

CONVERSATIONS = "/admin/conversations/conversation/"


def save(admin_client, conversation, **fields):
    return admin_client.post(f"{CONVERSATIONS}{conversation.pk}/change/", {
        "renewal_idle_seconds": conversation.renewal_idle_seconds, "renewal_text": conversation.renewal_text,
        "renewal_daily_cap": conversation.renewal_daily_cap, "delivery_methods": conversation.delivery_methods,
        "handle": conversation.handle or "",
        "links-TOTAL_FORMS": 0, "links-INITIAL_FORMS": 0, "messages-TOTAL_FORMS": 0, "messages-INITIAL_FORMS": 0,
        "_save": "Save", **fields,
    })


def handle_of(conversation):
    return Conversation.objects.get(pk=conversation.pk).handle


def test_an_operator_gives_a_conversation_a_handle_and_takes_it_away(admin_client, caplog):
    conversation = ConversationFactory()
    with caplog.at_level(logging.INFO, logger="conversations.services"):
        assert save(admin_client, conversation, handle="reviewer").status_code == 302
    assert handle_of(conversation) == "reviewer"
    assert "action=conversation_handle" in caplog.text and "handle=reviewer" in caplog.text
    conversation.handle = "reviewer"
    assert save(admin_client, conversation, handle="").status_code == 302
    assert handle_of(conversation) is None  # stored as no handle, so many conversations may have none


@pytest.mark.parametrize("handle,error", [
    ("Reviewer", "A handle starts with a lowercase letter"),
    ("9lives", "A handle starts with a lowercase letter"),
    ("re viewer", "A handle starts with a lowercase letter"),
    ("taken", "Conversation with this Handle already exists."),
])
def test_a_wrong_or_taken_handle_is_refused(admin_client, handle, error):
    ConversationFactory(handle="taken")
    conversation = ConversationFactory()
    response = save(admin_client, conversation, handle=handle)
    assert response.status_code == 200
    assert error in response.content.decode()
    assert handle_of(conversation) is None


def test_the_conversation_list_shows_and_searches_handles(admin_client):
    ConversationFactory(handle="reviewer", title="Review")
    ConversationFactory(handle="writer", title="Write")
    page = admin_client.get(f"{CONVERSATIONS}?q=review").content.decode()
    assert "reviewer" in page and "Write" not in page


def test_a_mail_shows_its_sender_recipient_and_text_from_every_side(admin_client):
    sender = ConversationFactory(handle="writer", title="Write")
    recipient = ConversationLinkFactory(conversation=ConversationFactory(handle="reviewer", title="Review")).conversation
    message = MessageFactory(conversation=sender)
    mail, _ = task_create(
        kind=MAIL_DELIVER, actor="mail.send", conversation_id=recipient.pk, message_id=message.pk,
        payload={"from_conversation_id": sender.pk, "from_handle": "writer", "to": "reviewer",
                 "text": "Mail from @writer:\n\n<script>alert(1)</script> please review"},
    )

    task_page = admin_client.get(f"/admin/automation/automationtask/{mail.pk}/change/").content.decode()
    assert "@writer" in task_page and f"/admin/conversations/conversation/{sender.pk}/change/" in task_page
    assert "@reviewer" in task_page and f"/admin/conversations/conversation/{recipient.pk}/change/" in task_page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; please review" in task_page
    assert "<script>alert(1)" not in task_page

    message_page = admin_client.get(f"/admin/conversations/message/{message.pk}/change/").content.decode()
    assert f"/admin/automation/automationtask/{mail.pk}/change/" in message_page
    assert "@reviewer" in message_page

    recipient_page = admin_client.get(f"{CONVERSATIONS}{recipient.pk}/change/").content.decode()
    assert f"/admin/automation/automationtask/{mail.pk}/change/" in recipient_page
    assert "@writer" in recipient_page
    sender_page = admin_client.get(f"{CONVERSATIONS}{sender.pk}/change/").content.decode()
    assert f"/admin/automation/automationtask/{mail.pk}/change/" not in sender_page
