"""Pair a browser: a client and its pairing code, shown once (console/admin/clients.py)."""

import logging
import re

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.sessions.models import Session

from ingest.models import PluginClient
from ingest.pairing import pairing_code_decode
from ingest.selectors.clients import plugin_client_authenticate
from tests.factories import PluginClientFactory, make_staff

CLIENTS = "/admin/ingest/pluginclient/"
PAIR = f"{CLIENTS}pair/"


def shown_codes(page: str) -> list[str]:
    return re.findall(r"conductor-pair:v1:[A-Za-z0-9_-]+", page)


@pytest.mark.django_db
def test_pairing_creates_a_client_and_shows_its_code_once(admin_client, caplog, settings):
    settings.ALLOWED_HOSTS = ["conductor.example", "testserver"]
    caplog.set_level(logging.DEBUG)
    form = admin_client.get(PAIR).content.decode()
    assert 'value="browser 1"' in form and not shown_codes(form)

    response = admin_client.post(PAIR, {"name": "browser 1"}, HTTP_HOST="conductor.example:8000")

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    page = response.content.decode()
    [code] = set(shown_codes(page))
    fields = pairing_code_decode(code)
    client = PluginClient.objects.get()
    assert fields["server"] == "http://conductor.example:8000"
    assert fields["client_id"] == client.client_id == "browser-1"
    assert plugin_client_authenticate(client_id="browser-1", token=fields["token"]) == client
    assert fields["token"] not in client.token_hash
    assert 'data-copy="pairing-code"' in page and "console/copy.js" in page
    assert "<svg" in page and "pairing code" in page  # the QR image
    # Never shown, logged or kept again.
    for url in (PAIR, CLIENTS, f"{CLIENTS}{client.pk}/change/", "/admin/"):
        again = admin_client.get(url, HTTP_HOST="conductor.example:8000").content.decode()
        assert not shown_codes(again) and fields["token"] not in again
    assert admin_client.get(PAIR, HTTP_HOST="conductor.example").content.decode().count('value="browser 2"') == 1
    for secret in (code, fields["token"]):
        assert secret not in caplog.text
        assert all(secret not in session.session_data for session in Session.objects.all())
        assert secret not in str(response.cookies)
        assert not LogEntry.objects.filter(change_message__contains=secret).exists()
    assert LogEntry.objects.get().change_message == "Paired a browser; its pairing code was shown once"


@pytest.mark.django_db
def test_the_code_names_https_when_the_admin_is_reached_over_https(admin_client):
    page = admin_client.post(PAIR, {"name": "work"}, secure=True).content.decode()
    [code] = set(shown_codes(page))
    assert pairing_code_decode(code)["server"] == "https://testserver"


@pytest.mark.django_db
def test_a_taken_name_shows_the_form_again_and_no_code(admin_client):
    PluginClientFactory(client_id="laptop", name="laptop")
    page = admin_client.post(PAIR, {"name": "laptop"}).content.decode()
    assert not shown_codes(page) and "errornote" in page
    assert PluginClient.objects.count() == 1


@pytest.mark.django_db
def test_the_list_offers_pairing(admin_client):
    assert f'href="{PAIR}"' in admin_client.get(CLIENTS).content.decode()


@pytest.mark.django_db
def test_staff_cannot_pair(client):
    client.force_login(make_staff("staff", "ingest.add_pluginclient", "ingest.view_pluginclient", password=None))
    assert client.get(PAIR).status_code == 403
    assert client.post(PAIR, {"name": "sneaky"}).status_code == 403
    assert not PluginClient.objects.exists()


@pytest.mark.django_db
def test_pairing_a_browser_gives_it_the_owner_asked_for(admin_client):
    assert 'name="owner" value="default"' in admin_client.get(PAIR).content.decode()
    admin_client.post(PAIR, {"name": "alice phone", "owner": "alice"})
    assert PluginClient.objects.get(client_id="alice-phone").owner == "alice"
