"""A closed socket's clean-up (ingest/cleanup.py): group, presence and delivery requests, none skipping another."""

import logging
from unittest import mock

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import OperationalError
from redis.exceptions import MaxConnectionsError

from conductor_site.asgi import application
from ingest.cleanup import FAILED, with_retries
from ingest.models import DeliveryRequest, PluginClient, plugin_owner_group_name
from tests.factories import TEST_TOKEN, PluginClientFactory, make_task

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

HELLO = {"type": "hello", "token": TEST_TOKEN, "plugin_version": "1.0.0", "platforms": ["claude"]}


@pytest.fixture
def client(channel_layer):
    return PluginClientFactory(client_id="laptop-chrome")


async def connected_socket():
    communicator = WebsocketCommunicator(application, "/ws/plugin/")
    assert (await communicator.connect())[0]
    await communicator.send_json_to({**HELLO, "client_id": "laptop-chrome"})
    assert (await communicator.receive_json_from())["type"] == "hello.ok"
    return communicator


def delivery_request(client, request_id):
    task = make_task(kind="instruction.deliver", target_client_id=client.client_id, target_platform="claude")
    return DeliveryRequest.objects.create(request_id=request_id, task=task, client=client, method="http", sent_at=1)


async def test_a_clean_up_whose_group_discard_keeps_failing_still_clears_presence_and_requests(
    client, channel_layer, caplog
):
    communicator = await connected_socket()
    await sync_to_async(delivery_request)(client, "req-1")
    channel = (await PluginClient.objects.aget(pk=client.pk)).connection_channel
    failing = mock.AsyncMock(side_effect=MaxConnectionsError("Too many connections"))
    with mock.patch.object(channel_layer, "group_discard", failing):
        await communicator.disconnect(timeout=10)

    refreshed = await PluginClient.objects.aget(pk=client.pk)
    assert (refreshed.connected, refreshed.connection_channel) == (False, "")
    assert (await DeliveryRequest.objects.aget(pk="req-1")).answered_at is not None
    assert failing.await_count == 6  # each of its two groups (its client's, its owner's) tried three times
    assert "step=group attempt=3 tries=3" in caplog.text
    # What the failure left on a shared Redis goes, or another test's client of the same id would find it there.
    for group in (client.group_name, plugin_owner_group_name(client.owner)):
        await channel_layer.group_discard(group, channel)


async def test_a_group_discard_that_fails_once_is_retried_and_the_socket_leaves_its_group(client, channel_layer):
    communicator = await connected_socket()
    channel = (await PluginClient.objects.aget(pk=client.pk)).connection_channel
    discard = channel_layer.group_discard
    calls = []

    async def flaky(group, channel_name):
        calls.append(group)
        if len(calls) == 1:
            raise MaxConnectionsError("Too many connections")
        await discard(group, channel_name)

    with mock.patch.object(channel_layer, "group_discard", flaky):
        await communicator.disconnect(timeout=10)

    assert calls.count(client.group_name) == 2  # its owner's group was left at the first try
    assert len(calls) == 3
    # Out of its group: a delivery sent to the client now reaches no channel.
    await channel_layer.group_send(client.group_name, {"type": "plugin.deliver", "frame": {"type": "x"}})
    await channel_layer.group_add("probe", channel)  # the channel itself still takes messages
    with pytest.raises(TimeoutError):
        import asyncio

        await asyncio.wait_for(channel_layer.receive(channel), timeout=0.5)


async def test_a_presence_step_that_keeps_failing_still_leaves_the_group_and_abandons_requests(
    client, channel_layer
):
    communicator = await connected_socket()
    await sync_to_async(delivery_request)(client, "req-1")
    discard = mock.AsyncMock(wraps=channel_layer.group_discard)
    with (
        mock.patch("ingest.services.clients.plugin_clients_disconnect", side_effect=OperationalError("gone")),
        mock.patch.object(channel_layer, "group_discard", discard),
    ):
        await communicator.disconnect(timeout=10)

    assert sorted(call.args[0] for call in discard.await_args_list) == sorted([
        client.group_name, plugin_owner_group_name(client.owner)
    ])
    assert (await DeliveryRequest.objects.aget(pk="req-1")).answered_at is not None


async def test_with_retries_returns_the_result_of_the_first_try_that_works_and_failed_when_none_does(caplog):
    caplog.set_level(logging.WARNING, logger="ingest.cleanup")
    outcomes = iter([OSError("one"), OSError("two"), "done"])

    async def operation():
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert await with_retries("step", operation, client_id="c", pauses=(0, 0)) == "done"

    async def never():
        raise OSError("never")

    assert await with_retries("step", never, client_id="c", pauses=(0,)) is FAILED
    assert caplog.text.count("action=socket_clean_up_failed") == 4
