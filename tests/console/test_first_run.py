"""The first run: `make run` and the login page say how to create the first admin user."""

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from tests.factories import make_staff


def hint(*args) -> str:
    out = StringIO()
    call_command("first_run_hint", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_make_run_says_how_to_create_the_first_user_until_there_is_one():
    line = hint("--host", "127.0.0.1", "--port", "8123")
    assert line.count("\n") == 1
    assert "make user" in line and "http://127.0.0.1:8123/admin/" in line

    User.objects.create_superuser("admin", password=None)
    assert hint() == ""


@pytest.mark.django_db
def test_a_user_who_cannot_reach_the_admin_does_not_end_the_first_run():
    User.objects.create_user("plain", password=None)
    assert "make user" in hint()
    make_staff("staff", password=None)
    assert hint() == ""


@pytest.mark.django_db
def test_the_login_page_says_the_same_until_a_user_exists(client):
    page = client.get("/admin/login/").content.decode()
    assert 'id="first-run"' in page and "make user" in page
    assert 'name="password"' in page  # still the login form

    User.objects.create_superuser("admin", password=None)
    assert 'id="first-run"' not in client.get("/admin/login/").content.decode()
    # Unauthenticated admin pages still go to the login page.
    assert client.get("/admin/").url.startswith("/admin/login/")
