import datetime as dt

import pytest
from django.utils import timezone

from ingest.models import PluginClient
from ingest.selectors.clients import (
    plugin_client_authenticate,
    plugin_client_is_connected,
    plugin_clients_connected,
    presence_window,
)
from ingest.services.clients import (
    PluginClientRevoked,
    plugin_client_connect,
    plugin_client_disconnect,
    plugin_client_revoke,
    plugin_client_rotate,
    plugin_client_touch,
)
from tests.factories import TEST_TOKEN, PluginClientFactory


@pytest.mark.parametrize("interval,window", [(20, 40), (5, 10), (45, 60), (0.5, 1)])
def test_presence_window_is_twice_the_ping_interval_at_most_a_minute(settings, interval, window):
    settings.CONDUCTOR_PING_INTERVAL_SECONDS = interval
    assert presence_window() == dt.timedelta(seconds=window)


@pytest.mark.django_db
def test_a_client_counts_as_connected_until_its_presence_window_passes(settings):
    settings.CONDUCTOR_PING_INTERVAL_SECONDS = 20
    client = PluginClientFactory()
    now = timezone.now()
    plugin_client_connect(client=client, channel_name="chan-1", now=now)

    assert plugin_client_is_connected(client_id=client.client_id, now=now + dt.timedelta(seconds=39))
    assert not plugin_client_is_connected(client_id=client.client_id, now=now + dt.timedelta(seconds=41))

    plugin_client_touch(client_pk=client.pk, channel_name="chan-1", now=now + dt.timedelta(seconds=30))
    assert plugin_client_is_connected(client_id=client.client_id, now=now + dt.timedelta(seconds=60))


@pytest.mark.django_db
def test_a_newer_socket_replaces_the_older_and_the_older_cannot_touch_or_disconnect():
    client = PluginClientFactory()
    assert plugin_client_connect(client=client, channel_name="old") == ""
    assert plugin_client_connect(client=client, channel_name="new") == "old"

    assert not plugin_client_touch(client_pk=client.pk, channel_name="old")
    assert not plugin_client_disconnect(client_pk=client.pk, channel_name="old")
    assert plugin_clients_connected().filter(pk=client.pk).exists()

    assert plugin_client_disconnect(client_pk=client.pk, channel_name="new")
    assert not plugin_clients_connected().filter(pk=client.pk).exists()


@pytest.mark.django_db
def test_authenticate_checks_id_token_and_enabled():
    client = PluginClientFactory(client_id="laptop")
    assert plugin_client_authenticate(client_id="laptop", token=TEST_TOKEN) == client
    assert plugin_client_authenticate(client_id="laptop", token=TEST_TOKEN + "x") is None
    assert plugin_client_authenticate(client_id="desktop", token=TEST_TOKEN) is None
    client.enabled = False
    client.save()
    assert plugin_client_authenticate(client_id="laptop", token=TEST_TOKEN) is None


@pytest.mark.django_db
@pytest.mark.parametrize("change", ["revoke", "rotate"])
def test_a_client_revoked_or_rotated_after_its_hello_was_checked_cannot_connect(change):
    client = plugin_client_authenticate(client_id=PluginClientFactory().client_id, token=TEST_TOKEN)
    # Between the token check and the connection, an operator acts.
    {"revoke": plugin_client_revoke, "rotate": plugin_client_rotate}[change](
        client=PluginClient.objects.get(pk=client.pk), actor="operator"
    )
    with pytest.raises(PluginClientRevoked):
        plugin_client_connect(client=client, channel_name="chan-1")
    assert not plugin_clients_connected().filter(pk=client.pk).exists()


@pytest.mark.django_db
def test_many_closed_sockets_are_marked_gone_at_once_and_a_client_with_a_newer_socket_stays():
    from ingest.services.clients import plugin_clients_disconnect

    gone, replaced, other = PluginClientFactory.create_batch(3)
    for client, channel in [(gone, "a"), (replaced, "b-newer"), (other, "c")]:
        plugin_client_connect(client=client, channel_name=channel)

    assert plugin_clients_disconnect(sockets=[(gone.pk, "a"), (replaced.pk, "b-older")]) == {gone.pk}
    assert set(PluginClient.objects.filter(connected=True).values_list("pk", flat=True)) == {replaced.pk, other.pk}
    assert plugin_clients_disconnect(sockets=[]) == set()
