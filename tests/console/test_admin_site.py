"""The admin says Conductor, lists what an operator works with in that order, and keeps django-q2's tables
for superusers."""

import re

import pytest
from django.contrib.auth.models import Permission

from tests.factories import make_staff

pytestmark = pytest.mark.django_db


def listed_models(page: str) -> list[str]:
    """The model list pages the index links to, in the order it shows them."""
    return re.findall(r'<th scope="row" id="[^"]*">\s*<a href="/admin/([a-z_]+/[a-z]+)/"', page)


def test_the_index_names_conductor_and_lists_the_operators_work_first(admin_client):
    page = admin_client.get("/admin/").content.decode()
    assert "<title>Operations | Conductor</title>" in page
    assert ">Conductor</a>" in page  # the header
    assert "?status__exact=blocked" in page and "Approvals" in page
    order = listed_models(page)
    assert order[:8] == [
        "automation/automationtask", "conversations/conversation", "conversations/message",
        "ingest/pluginclient", "ingest/instruction", "ingest/toolpolicy", "ingest/sitedescription",
        "mcp_servers/mcpserver",
    ]
    assert "django_q/schedule" in order and order.index("django_q/schedule") > order.index("auth/user")


def test_staff_who_may_see_django_q2s_tables_do_not_get_them_listed(client):
    staff = make_staff("ops")
    staff.user_permissions.add(*Permission.objects.filter(content_type__app_label__in=["django_q", "automation"]))
    client.force_login(staff)
    order = listed_models(client.get("/admin/").content.decode())
    assert "automation/automationtask" in order
    assert not any(model.startswith("django_q/") for model in order)


def test_the_admin_names_its_icon_and_favicon_ico_leads_to_it(client):
    from django.contrib.staticfiles import finders

    page = client.get("/admin/login/").content.decode()
    assert 'rel="icon"' in page and "console/favicon" in page
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and "console/favicon" in response["Location"]
    assert finders.find("console/favicon.png")
