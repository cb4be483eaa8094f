import pytest
from django.contrib.auth.models import User

from ingest.models import ToolPolicy


@pytest.fixture
def staff(db):
    return User.objects.create_user("staff", password="pw", is_staff=True)


@pytest.mark.django_db
def test_a_superuser_edits_tool_policies_in_the_admin(admin_client):
    page = admin_client.get("/admin/ingest/toolpolicy/add/")
    assert page.status_code == 200
    assert "shell.run (default: approve)" in page.content.decode()

    response = admin_client.post(
        "/admin/ingest/toolpolicy/add/", {"tool": "shell.run", "policy": "deny", "note": "no shell"}
    )
    assert response.status_code == 302
    assert ToolPolicy.objects.get().policy == "deny"


@pytest.mark.django_db
def test_unknown_tools_cannot_be_chosen(admin_client):
    response = admin_client.post("/admin/ingest/toolpolicy/add/", {"tool": "rm.rf", "policy": "allow"})
    assert response.status_code == 200
    assert not ToolPolicy.objects.exists()


@pytest.mark.django_db
def test_staff_without_superuser_cannot_see_tool_policies(client, staff):
    client.force_login(staff)
    assert client.get("/admin/ingest/toolpolicy/").status_code == 403


@pytest.mark.django_db
def test_the_admin_needs_a_login(client):
    response = client.get("/admin/ingest/toolpolicy/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


ADMIN_PAGES = [
    "/admin/",
    "/admin/overview/",
    "/admin/automation/automationtask/",
    "/admin/automation/automationtask/some-task/change/",
    "/admin/ingest/toolpolicy/",
    "/admin/conversations/conversation/",
    "/admin/conversations/conversation/1/change/",
    "/admin/conversations/message/",
    "/admin/conversations/message/1/change/",
    "/admin/ingest/pluginclient/",
    "/admin/ingest/pluginclient/add/",
    "/admin/ingest/instruction/",
]


@pytest.mark.django_db
@pytest.mark.parametrize("url", ADMIN_PAGES)
def test_every_admin_page_needs_a_login(client, url):
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url", ["/admin/ingest/toolpolicy/add/", "/admin/ingest/pluginclient/", "/admin/ingest/pluginclient/add/"]
)
def test_staff_without_superuser_cannot_reach_superuser_pages(client, staff, url):
    client.force_login(staff)
    assert client.get(url).status_code == 403
    assert client.post(url, {"tool": "shell.run", "policy": "allow", "name": "x"}).status_code == 403
    assert not ToolPolicy.objects.exists()


@pytest.mark.django_db
def test_staff_without_permissions_see_no_models_and_no_overview_link_on_the_index(client, staff):
    client.force_login(staff)
    page = client.get("/admin/").content.decode()
    assert "/admin/overview/" not in page
    for model in ("automationtask", "toolpolicy", "conversation", "pluginclient"):
        assert f"/admin/{model}" not in page and f"/{model}/" not in page


@pytest.mark.django_db
def test_every_console_page_writes_times_one_way_iso_like_with_the_zone(admin_client):
    import datetime as dt
    import re

    from tests.factories import ConversationFactory, MessageFactory

    moment = dt.datetime(2026, 12, 3, 18, 48, 5, tzinfo=dt.UTC)
    conversation = ConversationFactory(title="Times", last_activity_at=moment)
    MessageFactory(conversation=conversation, received_at=moment)
    for url in ["/admin/conversations/conversation/", f"/admin/conversations/conversation/{conversation.pk}/change/",
                "/admin/conversations/message/"]:
        page = admin_client.get(url).content.decode()
        assert "2026-12-03 18:48:05 UTC" in page, url
        assert not re.search(r"\b(a\.m\.|p\.m\.)", page), url
        assert "Dec. 3, 2026" not in page, url
