"""The admin login is throttled (django-axes): wrong passwords lock a username out from that address."""

import datetime as dt

import pytest
from django.core.management import call_command
from django.test import Client

from tests.factories import make_staff

pytestmark = pytest.mark.django_db

LOGIN = "/admin/login/?next=/admin/"


def log_in(browser: Client, username: str, password: str) -> int:
    return browser.post(LOGIN, {"username": username, "password": password}).status_code


@pytest.fixture
def staff(settings):
    settings.AXES_FAILURE_LIMIT = 5
    return make_staff("operator")


def test_the_right_password_after_the_failure_limit_is_refused_until_reset(staff):
    browser = Client()
    # Wrong passwords get the login form again, until the limit is reached.
    assert [log_in(browser, "operator", f"guess-{n}") for n in range(6)] == [200] * 4 + [429] * 2
    assert log_in(browser, "operator", "pw") == 429
    assert "_auth_user_id" not in browser.session
    assert browser.get("/admin/").status_code == 302  # still not signed in

    call_command("axes_reset_username", "operator")
    assert log_in(browser, "operator", "pw") == 302
    assert browser.get("/admin/").status_code == 200


def test_a_lockout_ends_after_the_cool_off(staff, settings):
    browser = Client()
    for n in range(5):
        log_in(browser, "operator", f"guess-{n}")
    assert log_in(browser, "operator", "pw") == 429
    settings.AXES_COOLOFF_TIME = dt.timedelta(seconds=0)
    assert log_in(browser, "operator", "pw") == 302


def test_a_lockout_is_of_one_username_and_a_success_forgets_earlier_failures(staff):
    make_staff("colleague")
    browser = Client()
    for n in range(4):
        log_in(browser, "operator", f"guess-{n}")
    assert log_in(browser, "operator", "pw") == 302  # four failures: not yet locked; a success resets them
    browser.logout()
    for n in range(4):
        assert log_in(browser, "operator", f"guess-{n}") == 200  # counted from zero again
    for n in range(2):
        log_in(browser, "operator", f"again-{n}")
    assert log_in(browser, "operator", "pw") == 429
    assert log_in(browser, "colleague", "pw") == 302


@pytest.mark.parametrize(
    "next_url",
    [None, "", "https://evil.example/admin/", "//evil.example/", "javascript:alert(1)", "http://testserver@evil.example/"],
)
def test_a_login_without_a_safe_next_lands_on_the_admins_index(staff, next_url):
    url = "/admin/login/" if next_url is None else f"/admin/login/?next={next_url}"
    response = Client().post(url, {"username": "operator", "password": "pw", **(
        {"next": next_url} if next_url is not None else {})})
    assert (response.status_code, response["Location"]) == (302, "/admin/")


def test_a_login_with_a_safe_next_goes_there(staff):
    response = Client().post("/admin/login/?next=/admin/automation/automationtask/",
                             {"username": "operator", "password": "pw",
                              "next": "/admin/automation/automationtask/"})
    assert response["Location"] == "/admin/automation/automationtask/"
