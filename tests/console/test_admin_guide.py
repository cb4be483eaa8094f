"""The tool guide's pages in the admin, and the guide in a conversation's story."""

import html
import re

import pytest
from django.utils import timezone

from ingest.models import ToolGuideServed, ToolPolicy
from ingest.selectors.guides import tool_guide
from tests.console.test_admin_mail import save
from tests.factories import ConversationLinkFactory, make_staff
from tools.registry import Policy

pytestmark = pytest.mark.django_db

CONVERSATIONS = "/admin/conversations/conversation/"
HOSTILE = "<script>alert('guide')</script>"


@pytest.fixture
def admin_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("admin", "admin@example.com", password=None))
    return client


def textarea(response) -> str:
    page = response.content.decode()
    start = page.index('id="tool-guide-text"')
    inner = page[page.index(">", start) + 1:page.index("</textarea>", start)]
    return html.unescape(inner)


def test_the_platform_page_shows_the_guide_to_copy_and_switches_platforms(admin_client):
    response = admin_client.get(f"{CONVERSATIONS}tool-guide/?platform=gemini")
    assert response.status_code == 200
    guide = tool_guide(platform="gemini")
    assert textarea(response) == guide.text
    page = response.content.decode()
    assert 'data-copy="tool-guide-text"' in page and "console/copy.js" in page
    assert 'href="?platform=gemini" class="selected"' in page
    # An unknown platform falls back to the first one, not an error.
    assert admin_client.get(f"{CONVERSATIONS}tool-guide/?platform=%3Cx%3E").status_code == 200


def test_the_conversation_page_follows_its_policies_and_lists_what_was_served(admin_client):
    link = ConversationLinkFactory(conversation__title=HOSTILE)
    ToolPolicy.objects.create(tool="shell.run", policy=Policy.DENY, conversation=link.conversation)
    now = timezone.now()
    ToolGuideServed.objects.create(
        client=link.client, platform="claude", conversation=link.conversation, version="abc123def456",
        text="old text", count=3, first_served_at=now, last_served_at=now,
    )
    response = admin_client.get(f"{CONVERSATIONS}{link.conversation.pk}/tool-guide/")
    assert response.status_code == 200
    text = textarea(response)
    assert "`shell.run`" not in text and "`files.write`" in text
    page = response.content.decode()
    assert HOSTILE not in page and html.escape(HOSTILE) in page
    assert "abc123def456" in page and ">3<" in page
    # Linked from the conversation's page and its story, and the list links the platforms' guides.
    assert f"{link.conversation.pk}/tool-guide/" in admin_client.get(f"{CONVERSATIONS}{link.conversation.pk}/change/").content.decode()
    assert f"{link.conversation.pk}/tool-guide/" in admin_client.get(f"{CONVERSATIONS}{link.conversation.pk}/story/").content.decode()
    assert f"{CONVERSATIONS}tool-guide/" in admin_client.get(CONVERSATIONS).content.decode()


def test_the_story_shows_which_guide_version_was_given_and_when(admin_client):
    link = ConversationLinkFactory()
    now = timezone.now()
    ToolGuideServed.objects.create(
        client=link.client, platform="claude", conversation=link.conversation, version="0123456789ab",
        text=f"guide text {HOSTILE}", count=2, first_served_at=now, last_served_at=now,
    )
    page = admin_client.get(f"{CONVERSATIONS}{link.conversation.pk}/story/").content.decode()
    assert "Tool guide <code>0123456789ab</code> given to" in page and "2 times" in page
    assert HOSTILE not in page


def test_the_pages_need_a_staff_login_and_the_view_permission(client):
    link = ConversationLinkFactory()
    urls = [f"{CONVERSATIONS}tool-guide/", f"{CONVERSATIONS}{link.conversation.pk}/tool-guide/"]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    client.force_login(make_staff("nobody", password=None))
    assert [client.get(url).status_code for url in urls] == [403, 403]
    client.force_login(make_staff("viewer", "conversations.view_conversation", password=None))
    assert [client.get(url).status_code for url in urls] == [200, 200]
    assert client.get(f"{CONVERSATIONS}999999/tool-guide/").status_code == 404


def mail_section(page) -> str:
    start = page.index('id="tool-guide-mail"')
    return page[start:page.index("</div>", start)]


def tool_row(page, header) -> str:
    return re.search(rf"<tr[^>]*><td><code>{re.escape(header)}</code>.*?</tr>", page, re.S).group(0)


def test_with_no_one_to_mail_the_page_says_mail_send_exists_and_how_to_add_a_handle_then_lists_it(admin_client):
    link = ConversationLinkFactory(conversation__owner="alice", conversation__title="Writer")
    url = f"{CONVERSATIONS}{link.conversation.pk}/tool-guide/"
    response = admin_client.get(url)
    text, page = textarea(response), response.content.decode()
    # The text for the assistant leaves it out, as it could not be used ...
    assert "mail.send" not in text and "## Mail" not in text
    # ... and the operator's view says so, and how to add a handle.
    assert 'class="tool-guide-left-out"' in tool_row(page, "mail.send")
    assert "not in the text above" in tool_row(page, "mail.send")
    mail = " ".join(mail_section(page).split())
    assert "<code>mail.send</code> is a tool here, but this conversation has no conversation to write to yet" in mail
    assert "owner <code>alice</code> that has a handle and has been seen through a plugin" in mail
    assert f'href="{CONVERSATIONS}?owner__exact=alice"' in mail
    assert "set <strong>Handle</strong>" in mail and "CONDUCTOR_MAIL_BETWEEN_OWNERS" in mail
    assert "This conversation has no handle: it receives no mail" in mail
    version = tool_guide(platform="claude", conversation=link.conversation, client_pk=link.client.pk).version

    # The operator follows the steps: another of alice's conversations, seen through a plugin, gets a handle.
    other = ConversationLinkFactory(conversation__owner="alice", client=link.client).conversation
    assert admin_client.get(f"{CONVERSATIONS}?owner__exact=alice").status_code == 200
    assert save(admin_client, other, handle="reviewer").status_code == 302
    response = admin_client.get(url)
    text, page = textarea(response), response.content.decode()
    assert "- `mail.send` " in text and "You can write to: reviewer." in text
    assert response.context["guide"].version != version
    assert 'class="tool-guide-left-out"' not in page
    mail = " ".join(mail_section(page).split())
    assert "<code>mail.send</code> can write to 1 conversation: <code>reviewer</code>." in mail
    assert "no conversation to write to" not in mail


def test_another_owners_handle_does_not_count_and_a_paired_owner_is_named(admin_client, settings):
    link = ConversationLinkFactory(conversation__owner="alice", conversation__handle="desk")
    ConversationLinkFactory(conversation__owner="bob", conversation__handle="bob-notes")
    url = f"{CONVERSATIONS}{link.conversation.pk}/tool-guide/"
    mail = " ".join(mail_section(admin_client.get(url).content.decode()).split())
    assert "has no conversation to write to yet" in mail and "bob-notes" not in mail
    assert "This conversation receives mail as <code>desk</code>." in mail
    settings.CONDUCTOR_MAIL_BETWEEN_OWNERS = frozenset({frozenset({"alice", "bob"})})
    response = admin_client.get(url)
    assert "You can write to: bob-notes." in textarea(response)
    assert "can write to 1 conversation: <code>bob-notes</code>" in " ".join(mail_section(response.content.decode()).split())


def test_the_platform_page_says_the_same_for_a_new_conversation(admin_client):
    page = admin_client.get(f"{CONVERSATIONS}tool-guide/?platform=claude").content.decode()
    mail = " ".join(mail_section(page).split())
    assert "a new conversation has no conversation to write to yet" in mail
    assert f'href="{CONVERSATIONS}?owner__exact=default"' in mail


def test_a_denied_mail_send_gets_no_mail_section(admin_client):
    link = ConversationLinkFactory()
    ToolPolicy.objects.create(tool="mail.send", policy=Policy.DENY)
    page = admin_client.get(f"{CONVERSATIONS}{link.conversation.pk}/tool-guide/").content.decode()
    assert 'id="tool-guide-mail"' not in page and "<code>mail.send</code>" not in page
