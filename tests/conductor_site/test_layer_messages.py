"""Messages between processes are sealed (conductor_site/layer_messages.py): a forged one reaches no socket.

The forger writes where the configured layer reads (Redis, or the embedded
layer's database) with the layer's own library but without the installation's
key, as anyone who can write to Redis or to that file could.
"""

import asyncio
import logging
import re

import pytest
from channels.testing import WebsocketCommunicator
from django.conf import settings

from conductor_site.asgi import application
from conductor_site.layer_messages import channel_layer_key, channel_layer_keys
from ingest.models import PluginClient
from tests.factories import TEST_TOKEN, PluginClientFactory

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

HELLO = {"type": "hello", "token": TEST_TOKEN, "plugin_version": "1.0.0", "platforms": ["claude"]}
GIVE_UP_SECONDS = 10


def forger():
    """A layer of the configured kind, writing where the configured one reads, without its key."""
    config = settings.CHANNEL_LAYERS["default"]["CONFIG"]
    if settings.REDIS_URL:
        from channels_redis.core import RedisChannelLayer

        return RedisChannelLayer(hosts=[{"address": settings.REDIS_URL}], prefix=config["prefix"])
    from conductor_site.channel_layer import DoorbellSQLiteChannelLayer

    # A key of its own, so that it rings the receiver's doorbell (the registry is
    # readable to whoever can write the layer's file): the row is read at once.
    return DoorbellSQLiteChannelLayer(
        database="channels", capacity=1000, expiry=60, symmetric_encryption_keys=["not the installation's key"]
    )


def refused_count(caplog) -> int:
    """How many messages the ``channel_message_refused`` lines logged so far count."""
    lines = [r.getMessage() for r in caplog.records if "action=channel_message_refused" in r.getMessage()]
    return sum(int(re.search(r"messages=(\d+)", line).group(1)) for line in lines)


async def refusals_seen(caplog, count: int) -> None:
    async with asyncio.timeout(GIVE_UP_SECONDS):
        while refused_count(caplog) < count:
            await asyncio.sleep(0.02)


@pytest.fixture
def client(channel_layer):
    return PluginClientFactory(client_id="laptop-chrome")


async def test_forged_deliveries_and_revocations_reach_no_socket_and_close_none(client, channel_layer, caplog):
    caplog.set_level(logging.WARNING, logger="conductor_site.layer_messages")
    channel_layer._refusals.interval = 0  # a line for each run of refusals, not one a minute
    communicator = WebsocketCommunicator(application, "/ws/plugin/")
    assert (await communicator.connect())[0]
    await communicator.send_json_to({**HELLO, "client_id": "laptop-chrome"})
    assert (await communicator.receive_json_from())["type"] == "hello.ok"

    forged = forger()
    frame = {"type": "browser.proxy_delivery", "request_id": "r1", "method": "DELETE", "url": "https://claude.ai/x"}
    await forged.group_send(client.group_name, {"type": "plugin.deliver", "frame": frame})
    await forged.group_send(client.group_name, {"type": "plugin.revoked"})
    await refusals_seen(caplog, 2)

    assert await communicator.receive_nothing(timeout=0.3)  # no frame, no close
    await communicator.send_json_to({"type": "ping"})
    assert await communicator.receive_json_from() == {"type": "pong"}
    assert (await PluginClient.objects.aget(pk=client.pk)).connected
    # What a Conductor process sends still arrives.
    await channel_layer.group_send(client.group_name, {"type": "plugin.deliver", "frame": {"type": "x"}})
    assert await communicator.receive_json_from(timeout=GIVE_UP_SECONDS) == {"type": "x"}
    await communicator.disconnect()


async def test_a_message_sealed_with_a_fallback_key_is_opened_and_one_with_an_unlisted_key_refused(caplog):
    """Rotation: a process still on the old SECRET_KEY is understood by one that lists it in SECRET_KEY_FALLBACKS."""
    caplog.set_level(logging.WARNING, logger="conductor_site.layer_messages")
    new = layer_with(channel_layer_keys("new key", ["old key"]))
    old = layer_with(channel_layer_keys("old key"))
    stranger = layer_with(channel_layer_keys("another installation's key"))
    me = await new.new_channel()

    await stranger.send(me, {"type": "forged"})
    await old.send(me, {"type": "from.the.old.key"})
    assert await asyncio.wait_for(new.receive(me), GIVE_UP_SECONDS) == {"type": "from.the.old.key"}
    assert "action=channel_message_refused" in caplog.text


def layer_with(keys):
    backend = settings.CHANNEL_LAYERS["default"]
    config = {**backend["CONFIG"], "symmetric_encryption_keys": keys}
    if not settings.REDIS_URL:
        config["doorbell_fallback_interval"] = 0.05
    from django.utils.module_loading import import_string

    return import_string(backend["BACKEND"])(**config)


def test_the_layers_key_is_derived_from_the_secret_key_not_the_secret_key_itself():
    assert channel_layer_key("s3cret") != "s3cret"
    assert channel_layer_key("s3cret") == channel_layer_key("s3cret") != channel_layer_key("s3cret2")
    assert channel_layer_keys("new", ["old", ""]) == [channel_layer_key("new"), channel_layer_key("old")]


def test_a_layer_without_keys_does_not_start():
    from django.core.exceptions import ImproperlyConfigured
    from django.utils.module_loading import import_string

    backend = settings.CHANNEL_LAYERS["default"]
    config = {**backend["CONFIG"], "symmetric_encryption_keys": []}
    with pytest.raises(ImproperlyConfigured, match="symmetric_encryption_keys"):
        import_string(backend["BACKEND"])(**config)
