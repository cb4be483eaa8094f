"""The tool guide's pages in the admin, and the guide in a conversation's story."""

import html

import pytest
from django.utils import timezone

from ingest.models import ToolGuideServed, ToolPolicy
from ingest.selectors import tool_guide
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
