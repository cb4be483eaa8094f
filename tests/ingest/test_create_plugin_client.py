import logging
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ingest.models import PluginClient
from ingest.tokens import token_matches


def _run(*args):
    out = StringIO()
    call_command("create_plugin_client", *args, stdout=out)
    lines = dict(line.split(": ", 1) for line in out.getvalue().splitlines() if ": " in line)
    return lines, out.getvalue()


@pytest.mark.django_db
def test_prints_client_id_and_token_and_stores_only_the_hash(caplog):
    caplog.set_level(logging.DEBUG)
    lines, output = _run("Laptop Chrome")

    client = PluginClient.objects.get()
    token = lines["token"]
    assert lines["client_id"] == client.client_id == "laptop-chrome"
    assert len(token) >= 32
    assert token not in client.token_hash
    assert client.token_hash.startswith("sha256$")
    assert token_matches(token, client.token_hash)
    assert not token_matches(token + "x", client.token_hash)
    assert "not shown again" in output
    assert token not in caplog.text
    assert token not in repr(client) and token not in str(client)


@pytest.mark.django_db
def test_accepts_a_given_token():
    token = "a-token-the-operator-chose-0123456789"
    lines, _ = _run("desktop-firefox", "--token", token)
    assert lines["token"] == token
    assert token_matches(token, PluginClient.objects.get(client_id="desktop-firefox").token_hash)


@pytest.mark.django_db
def test_each_generated_token_is_different():
    first, _ = _run("one")
    second, _ = _run("two")
    assert first["token"] != second["token"]


@pytest.mark.django_db
def test_refuses_a_short_token():
    with pytest.raises(CommandError, match="at least 32 characters"):
        _run("laptop", "--token", "short")
    assert not PluginClient.objects.exists()


@pytest.mark.django_db
def test_refuses_a_name_already_taken():
    _run("laptop")
    with pytest.raises(CommandError, match="already exists"):
        _run("Laptop")
    assert PluginClient.objects.count() == 1


@pytest.mark.django_db
def test_refuses_a_name_without_letters_or_digits():
    with pytest.raises(CommandError, match="empty client id"):
        _run("!!!")


@pytest.mark.django_db
def test_prints_a_pairing_code_for_the_server_url(monkeypatch, caplog):
    from ingest.pairing import pairing_code_decode

    caplog.set_level(logging.DEBUG)
    lines, _ = _run("Laptop Chrome", "--server-url", "https://conductor.example")
    assert pairing_code_decode(lines["pairing code"]) == {
        "server": "https://conductor.example", "client_id": "laptop-chrome", "token": lines["token"],
    }
    assert lines["pairing code"] not in caplog.text

    monkeypatch.setenv("HOST", "0.0.0.0")
    monkeypatch.setenv("PORT", "9000")
    lines, _ = _run("desktop")
    assert pairing_code_decode(lines["pairing code"])["server"] == "http://0.0.0.0:9000"


@pytest.mark.django_db
def test_the_owner_is_default_unless_given_and_a_malformed_one_is_refused():
    lines, _ = _run("laptop")
    assert lines["owner"] == PluginClient.objects.get(client_id="laptop").owner == "default"
    lines, _ = _run("alice laptop", "--owner", "alice")
    assert PluginClient.objects.get(client_id="alice-laptop").owner == "alice"
    with pytest.raises(CommandError, match="An owner starts with"):
        _run("bob laptop", "--owner", "Bob Smith")
    assert not PluginClient.objects.filter(client_id="bob-laptop").exists()
