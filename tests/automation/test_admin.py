import pytest
from django.contrib.auth.models import User

from automation.models import ToolPolicy


@pytest.fixture
def staff(db):
    return User.objects.create_user("staff", password="pw", is_staff=True)


@pytest.mark.django_db
def test_a_superuser_edits_tool_policies_in_the_admin(admin_client):
    page = admin_client.get("/admin/automation/toolpolicy/add/")
    assert page.status_code == 200
    assert "shell.run (default: approve)" in page.content.decode()

    response = admin_client.post(
        "/admin/automation/toolpolicy/add/", {"tool": "shell.run", "policy": "deny", "note": "no shell"}
    )
    assert response.status_code == 302
    assert ToolPolicy.objects.get().policy == "deny"


@pytest.mark.django_db
def test_unknown_tools_cannot_be_chosen(admin_client):
    response = admin_client.post("/admin/automation/toolpolicy/add/", {"tool": "rm.rf", "policy": "allow"})
    assert response.status_code == 200
    assert not ToolPolicy.objects.exists()


@pytest.mark.django_db
def test_staff_without_superuser_cannot_see_tool_policies(client, staff):
    client.force_login(staff)
    assert client.get("/admin/automation/toolpolicy/").status_code == 403


@pytest.mark.django_db
def test_the_admin_needs_a_login(client):
    response = client.get("/admin/automation/toolpolicy/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
