"""The admin login's lockout behind a reverse proxy: an attacker's guesses lock out the attacker, never the user.

Requests come from the proxy's address (``REMOTE_ADDR``) with the client in
``X-Forwarded-For``, as nginx's ``$proxy_add_x_forwarded_for`` appends it
(``deploy/nginx/conductor.conf``).
"""

import pytest
from axes.models import AccessAttempt
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

pytestmark = pytest.mark.django_db

LOGIN = "/admin/login/?next=/admin/"
PROXY = "10.0.0.10"
ATTACKER = "203.0.113.66"
HOME = "198.51.100.7"  # where root really signs in from


def log_in(browser: Client, password: str, *, remote: str, forwarded: str | None = None) -> int:
    headers = {"REMOTE_ADDR": remote}
    if forwarded is not None:
        headers["HTTP_X_FORWARDED_FOR"] = forwarded
    return browser.post(LOGIN, {"username": "root", "password": password}, **headers).status_code


@pytest.fixture
def root(settings):
    settings.AXES_FAILURE_LIMIT = 5
    return User.objects.create_superuser("root", password="pw")


@pytest.fixture
def behind_the_proxy(settings):
    settings.CONDUCTOR_TRUSTED_PROXIES = (PROXY,)


def test_behind_a_named_proxy_an_attackers_guesses_lock_out_only_the_attacker(root, behind_the_proxy):
    # The attacker also writes root's own address into the header: nginx appends
    # the real one after it, and only that one is read. The fifth failure locks out.
    guesses = [log_in(Client(), f"guess-{n}", remote=PROXY, forwarded=f"{HOME}, {ATTACKER}") for n in range(5)]
    assert guesses == [200] * 4 + [429]
    assert log_in(Client(), "pw", remote=PROXY, forwarded=ATTACKER) == 429

    assert log_in(Client(), "pw", remote=PROXY, forwarded=HOME) == 302
    assert list(AccessAttempt.objects.values_list("ip_address", flat=True)) == [ATTACKER]


def test_without_the_setting_a_forged_forwarded_for_changes_nothing(root):
    for n in range(5):
        log_in(Client(), f"guess-{n}", remote=ATTACKER, forwarded=f"192.0.2.{n}")
    assert log_in(Client(), "pw", remote=ATTACKER, forwarded=HOME) == 429
    assert list(AccessAttempt.objects.values_list("ip_address", flat=True)) == [ATTACKER]
    assert log_in(Client(), "pw", remote=HOME) == 302


def test_without_the_setting_the_proxy_is_every_clients_address(root):
    """What the finding saw: behind an unnamed proxy, anyone's guesses lock root out everywhere."""
    for n in range(5):
        log_in(Client(), f"guess-{n}", remote=PROXY, forwarded=ATTACKER)
    assert log_in(Client(), "pw", remote=PROXY, forwarded=HOME) == 429


def test_a_client_that_is_not_a_named_proxy_cannot_choose_its_address(root, behind_the_proxy):
    for n in range(5):
        log_in(Client(), f"guess-{n}", remote=ATTACKER, forwarded=f"192.0.2.{n}")
    assert log_in(Client(), "pw", remote=ATTACKER, forwarded=f"{HOME}, {PROXY}") == 429
    assert list(AccessAttempt.objects.values_list("ip_address", flat=True)) == [ATTACKER]


def lock_out_from(address: str) -> None:
    for n in range(5):
        log_in(Client(), f"guess-{n}", remote=PROXY, forwarded=address)
    assert log_in(Client(), "pw", remote=PROXY, forwarded=address) == 429


def test_the_command_lifts_one_lockout(root, behind_the_proxy):
    lock_out_from(HOME)
    call_command("axes_reset_ip_username", HOME, "root")
    assert log_in(Client(), "pw", remote=PROXY, forwarded=HOME) == 302


def test_a_superuser_lifts_a_lockout_from_the_admin(root, behind_the_proxy):
    lock_out_from(HOME)
    admin = Client()
    admin.force_login(User.objects.create_superuser("admin", password=None))
    attempt = AccessAttempt.objects.get(username="root", ip_address=HOME)

    listed = admin.get("/admin/axes/accessattempt/", {"locked_out": "yes"})
    assert listed.status_code == 200
    assert HOME in listed.content.decode()
    assert "/admin/axes/accessattempt/" in admin.get("/admin/").content.decode()

    answer = admin.post("/admin/axes/accessattempt/", {
        "action": "delete_selected", ACTION_CHECKBOX_NAME: [attempt.pk], "post": "yes",
    })
    assert answer.status_code == 302
    assert not AccessAttempt.objects.exists()
    assert log_in(Client(), "pw", remote=PROXY, forwarded=HOME) == 302
