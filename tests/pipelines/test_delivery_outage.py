"""A channel layer that does not take a delivery's frame (Redis away) loses no result (SPEC §4).

The real delivery kind through a real dispatcher tick: the layer's send
raises as channels_redis does when Redis refuses; the task waits, using no
attempt, and is delivered once the layer answers again.
"""

import random

import pytest
from channels.layers import get_channel_layer
from django.utils import timezone

from automation.dispatcher import Dispatcher, DispatcherConfig
from automation.models import AutomationTask, TaskStatus
from automation.services.tasks import task_create
from core.clock import now_ms
from ingest.models import DeliveryRequest
from pipelines.renewal import RENEWAL_DELIVER
from tests.factories import ConversationFactory, ConversationLinkFactory, PluginClientFactory
from tests.pipelines.test_delivery_executor import Plugin

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


class RedisRefused(ConnectionError):
    """What channels_redis raises while Redis is down (``redis.exceptions.ConnectionError`` is no OSError either)."""


def test_a_delivery_whose_layer_send_fails_waits_without_an_attempt_and_is_delivered_when_the_layer_is_back(
    monkeypatch, settings,
):
    settings.CONDUCTOR_DELIVERY_TIMEOUT_SECONDS = 5
    client = PluginClientFactory(capabilities=["proxy_delivery"], connected=True, last_seen_at=timezone.now())
    link = ConversationLinkFactory(client=client, conversation=ConversationFactory(remote_id="conv-9"),
                                   organization_id="org-9", last_assistant_message_id="assistant-1")
    task, _ = task_create(kind=RENEWAL_DELIVER, payload={"conversation_id": link.conversation_id,
                                                         "text": "Please continue."},
                          actor="test", conversation_id=link.conversation_id)
    dispatcher = Dispatcher(owner="d1", rng=random.Random(1), config=DispatcherConfig(
        max_tasks_per_tick=5, lease_ms=60_000, outbound_jitter_max_ms=0, retry_backoff_seconds=(1,),
        retry_jitter_max_ms=0,
    ))
    layer = get_channel_layer()
    real_send = layer.group_send

    async def refused(group, message):
        raise RedisRefused("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(layer, "group_send", refused)
    for _ in range(4):  # more outages than the task has attempts
        dispatcher.tick()
        assert dispatcher.wait_idle(30)
        waiting = AutomationTask.objects.get(pk=task.pk)
        assert (waiting.status, waiting.attempt_count) == (TaskStatus.RETRY_WAIT, 0), waiting.last_error
        assert "waiting for the channel layer" in waiting.last_error and "Connection refused" in waiting.last_error
        AutomationTask.objects.filter(pk=task.pk).update(execute_after=now_ms())

    # The requests recorded before each refused send never reached a plugin: none answers them.
    DeliveryRequest.objects.filter(task_id=task.pk).update(answered_at=0)
    monkeypatch.setattr(layer, "group_send", real_send)
    plugin = Plugin(body='event: message_start\ndata: {"type": "message_start", "message": {"uuid": "a-2"}}\n\n')
    plugin.start()
    dispatcher.tick()
    assert dispatcher.wait_idle(30)
    plugin.join()
    done = AutomationTask.objects.get(pk=task.pk)
    assert (done.status, done.attempt_count, done.part_away_since) == (TaskStatus.SUCCEEDED, 1, None), done.last_error
    assert DeliveryRequest.objects.filter(task_id=task.pk, delivered=True).count() == 1
    dispatcher.stop(grace=1)
