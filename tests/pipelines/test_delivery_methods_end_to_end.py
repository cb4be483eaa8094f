"""Delivery methods over a real socket (SPEC §6.1): HTTP in the page first, the composer second.

One server as ``make run`` starts it (daphne and the django-q2 cluster), with
``CONDUCTOR_DELIVERY_METHODS`` sending Gemini through the composer only; a
simulated plugin answers each delivery frame as the page or the composer
came out.
"""

import json

import pytest
from django.core.management import call_command
from django.db import connections

from automation.models import AutomationTask, TaskStatus
from conversations.models import Message
from ingest.kinds import INSTRUCTION_DELIVER
from ingest.models import DeliveryRequest
from conductor_site.simulator import SimulatedPlugin
from tests.factories import TEST_TOKEN, ConversationFactory, PluginClientFactory
from tests.server import running_server, wait_for

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

WAIT = 60
PROXY, DOM = "browser.proxy_delivery", "browser.dom_delivery"
BOTH = ("proxy_delivery", "dom_delivery")


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory):
    with running_server(
        tmp_path_factory.mktemp("server"), command="serve+cluster",
        CONDUCTOR_TICK_SECONDS="0.5", CONDUCTOR_OUTBOUND_JITTER_MAX_MS="0",
        CONDUCTOR_RETRY_BACKOFF_SECONDS="1", CONDUCTOR_RETRY_JITTER_MAX_MS="0",
        CONDUCTOR_DELIVERY_TIMEOUT_SECONDS="10", CONDUCTOR_DELIVERY_METHODS="gemini=dom",
    ) as running:
        yield running
    with django_db_blocker.unblock():
        for alias in connections:
            call_command("flush", interactive=False, database=alias, verbosity=0)


@pytest.fixture(autouse=True)
def client(db):
    return PluginClientFactory(client_id="laptop")


def plugin(server, capabilities=BOTH) -> SimulatedPlugin:
    return SimulatedPlugin(url=server.ws_url, client_id="laptop", token=TEST_TOKEN, capabilities=capabilities)


def final_message(platform="claude", conversation_id="conv-1"):
    return {
        "type": "browser.final_message", "id": "f1", "platform": platform, "conversation_id": conversation_id,
        "message_id": "m1", "text": "```baa\necho\n{\"n\": 1}\n```",
        "page_url": {
            "chatgpt": f"https://chatgpt.com/c/{conversation_id}",
            "claude": f"https://claude.ai/chat/{conversation_id}",
            "gemini": f"https://gemini.google.com/app/{conversation_id}",
        }[platform],
    }


def delivery_task():
    return AutomationTask.objects.get(kind=INSTRUCTION_DELIVER)


def steps(task):
    """The task's timeline as (action, method, error_code) for the delivery steps, else (action,)."""
    return [
        (e.action, e.detail.get("method"), e.detail.get("error_code")) if "method" in e.detail else (e.action,)
        for e in task.events.all()
    ]


def delivered_texts():
    return list(Message.objects.filter(source=Message.Source.CONDUCTOR).values_list("text", flat=True))


def test_a_request_the_app_refuses_goes_out_through_the_composer_in_the_same_attempt(server):
    with plugin(server) as browser:
        browser.send_final_message(final_message())
        http = browser.next_delivery(timeout=WAIT)
        assert http["type"] == PROXY
        browser.answer(http, ok=False, status=403, error="Unusual activity", error_code="blocked")
        dom = browser.next_delivery(timeout=WAIT)
        assert dom["type"] == DOM
        assert (dom["delivery_key"], dom["text"], dom["platform"], dom["conversation_id"], dom["page_url"]) == (
            http["delivery_key"], http["text"], "claude", "conv-1", "https://claude.ai/chat/conv-1",
        )
        assert "request" not in dom
        browser.answer(dom)
        wait_for(lambda: delivery_task().status == TaskStatus.SUCCEEDED, "the delivery to succeed")

    task = delivery_task()
    assert task.attempt_count == 1
    assert steps(task) == [
        ("create",), ("lease",), ("start",),
        ("deliver", "http", None), ("fallback", "http", "blocked"), ("deliver", "dom", None),
        ("succeed",),
    ]
    assert delivered_texts() == [http["text"]]
    assert json.loads(task.result_json)["method"] == "dom"
    assert list(DeliveryRequest.objects.order_by("sent_at").values_list("method", "delivered")) == [
        ("http", False), ("dom", True),
    ]


def test_a_server_error_is_not_a_reason_to_fall_back_and_is_retried_from_http(server):
    with plugin(server) as browser:
        browser.send_final_message(final_message())
        first = browser.next_delivery(timeout=WAIT)
        browser.answer(first, ok=True, status=500, body='{"detail": "Internal error"}')
        second = browser.next_delivery(timeout=WAIT)
        # The next attempt, starting again from the first method: no composer delivery between.
        assert second["type"] == PROXY
        assert second["delivery_key"] == first["delivery_key"]
        browser.answer(second, status=200)
        wait_for(lambda: delivery_task().status == TaskStatus.SUCCEEDED, "the delivery to succeed")

    task = delivery_task()
    assert task.attempt_count == 2
    assert "claude answered HTTP 500" in task.events.get(action="retry_later").error
    assert [s for s in steps(task) if s[0] in ("deliver", "fallback")] == [
        ("deliver", "http", None), ("deliver", "http", None),
    ]
    assert not DeliveryRequest.objects.filter(method="dom").exists()
    assert json.loads(task.result_json)["method"] == "http"


def test_a_plugin_without_the_composer_capability_keeps_http_only(server):
    with plugin(server, capabilities=("proxy_delivery",)) as browser:
        browser.send_final_message(final_message())
        first = browser.next_delivery(timeout=WAIT)
        browser.answer(first, ok=False, status=403, error="Unusual activity", error_code="blocked")
        second = browser.next_delivery(timeout=WAIT)
        assert second["type"] == PROXY  # the retry, not a composer delivery
        browser.answer(second, status=200)
        wait_for(lambda: delivery_task().status == TaskStatus.SUCCEEDED, "the delivery to succeed")

    task = delivery_task()
    retry = task.events.get(action="retry_later")
    assert "every delivery method fell through" in retry.error
    assert "does not announce dom_delivery" in retry.error
    fallback = task.events.filter(action="fallback", detail__method="dom").get()
    assert fallback.detail["reason"] == "plugin client 'laptop' does not announce dom_delivery"
    assert not DeliveryRequest.objects.filter(method="dom").exists()
    assert len(delivered_texts()) == 1


def test_a_conversation_set_to_the_composer_is_delivered_through_it_alone(server):
    ConversationFactory(platform="claude", remote_id="conv-2", delivery_methods="dom")
    with plugin(server) as browser:
        browser.send_final_message(final_message("claude", "conv-2"))
        delivery = browser.next_delivery(timeout=WAIT)
        assert delivery["type"] == DOM
        browser.answer(delivery)
        wait_for(lambda: delivery_task().status == TaskStatus.SUCCEEDED, "the delivery to succeed")
    assert [s for s in steps(delivery_task()) if s[0] in ("deliver", "fallback")] == [("deliver", "dom", None)]


def test_the_setting_orders_a_platforms_methods(server):
    # CONDUCTOR_DELIVERY_METHODS=gemini=dom for this server.
    with plugin(server) as browser:
        browser.send_final_message(final_message("gemini", "c0ffee"))
        delivery = browser.next_delivery(timeout=WAIT)
        assert delivery["type"] == DOM
        browser.answer(delivery, ok=False, error="the composer holds a draft")
        retried = browser.next_delivery(timeout=WAIT)
        assert retried["type"] == DOM and retried["delivery_key"] == delivery["delivery_key"]
        browser.answer(retried)
        wait_for(lambda: delivery_task().status == TaskStatus.SUCCEEDED, "the delivery to succeed")
    task = delivery_task()
    assert "gemini composer delivery failed in the page: the composer holds a draft" in (
        task.events.get(action="retry_later").error
    )
    assert not DeliveryRequest.objects.filter(method="http").exists()
