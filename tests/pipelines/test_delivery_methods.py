"""Which delivery method goes out, in what order, and when an attempt moves on (SPEC §6.1).

The executor runs as the dispatcher runs it (the task leased and started);
a thread plays the plugin, answering each request as the consumer stores
a plugin's answer.
"""

import threading
import time

import pytest

from ingest.models import DeliveryRequest
from automation.dispatcher import execution_context
from automation.outcomes import RetryableFailure, Success, TerminalFailure
from automation.services import operator, transitions
from automation.services.tasks import task_create
from conversations.models import Message
from core.clock import now_ms
from ingest.frames import parse_delivery_result, parse_dom_delivery_result
from ingest.services.deliveries import delivery_result_record
from pipelines.delivery_methods import delivery_methods, method_names_for
from pipelines.renewal import RENEWAL_DELIVER, renewal_deliver
from platforms import DELIVERY_METHODS, platforms
from tests.factories import ConversationFactory, ConversationLinkFactory, PluginClientFactory, lease_of, task_lease

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

BOTH = ["proxy_delivery", "dom_delivery"]
DELIVERED = {"http": {"ok": True, "status": 200, "body": ""}, "dom": {"ok": True, "evidence": {"user_turn_seen": True}}}


def refused(error_code, error="refused"):
    return {"ok": False, "status": None, "body": None, "error": error, "error_code": error_code}


@pytest.fixture(autouse=True)
def quick_timeout(settings):
    settings.CONDUCTOR_DELIVERY_TIMEOUT_SECONDS = 2
    settings.CONDUCTOR_DELIVERY_METHODS = {}


def link(capabilities=BOTH, platform="claude", methods=""):
    return ConversationLinkFactory(
        client=PluginClientFactory(capabilities=capabilities),
        conversation=ConversationFactory(platform=platform, delivery_methods=methods),
    )


def running_task(conversation_link):
    task, _ = task_create(
        kind=RENEWAL_DELIVER, payload={"text": "Please continue."}, actor="test",
        conversation_id=conversation_link.conversation_id,
    )
    now = now_ms()
    task_lease(task.pk, lease_owner="test", lease_until=now + 60_000, now=now)
    return transitions.task_start(task.pk, lease=lease_of(task.pk), lease_until=now + 60_000, now=now)


class Plugin(threading.Thread):
    """Answers each request as it is sent, in order: ``(method, answer)`` pairs, or None to stay silent."""

    def __init__(self, *answers, before_answer=None):
        super().__init__(daemon=True)
        self.answers = list(answers)
        self.before_answer = before_answer
        self.methods_seen = []

    def run(self):
        deadline = time.monotonic() + 10
        while self.answers and time.monotonic() < deadline:
            request = DeliveryRequest.objects.filter(answered_at__isnull=True).first()
            if request is None:
                time.sleep(0.01)
                continue
            self.methods_seen.append(request.method)
            method, answer = self.answers.pop(0)
            assert request.method == method, f"expected a {method} request, got {request.method}"
            if self.before_answer:
                self.before_answer(request)
            parse = parse_dom_delivery_result if method == "dom" else parse_delivery_result
            frame = {"request_id": request.pk, **answer}
            delivery_result_record(client_pk=request.client_id, result=parse(frame))


def deliver(task, *answers, before_answer=None):
    plugin = Plugin(*answers, before_answer=before_answer)
    plugin.start()
    outcome = renewal_deliver(execution_context(task))
    plugin.join()
    assert not plugin.answers, f"requests never sent: {plugin.answers}"
    return outcome


def steps(task):
    return [
        (event.action, event.detail["method"], event.detail.get("error_code"))
        for event in task.events.filter(action__in=["deliver", "fallback"])
    ]


@pytest.mark.parametrize("error_code", ["page_value_missing", "no_tab", "blocked"])
def test_http_that_cannot_work_here_moves_on_to_the_composer_in_the_same_attempt(error_code):
    task = running_task(link())
    outcome = deliver(task, ("http", refused(error_code)), ("dom", DELIVERED["dom"]))
    assert isinstance(outcome, Success) and outcome.result["method"] == "dom"
    assert steps(task) == [("deliver", "http", None), ("fallback", "http", error_code), ("deliver", "dom", None)]
    assert Message.objects.filter(source=Message.Source.CONDUCTOR).count() == 1
    assert list(DeliveryRequest.objects.filter(delivered=True).values_list("method", flat=True)) == ["dom"]


@pytest.mark.parametrize("answer", [
    {"ok": True, "status": 500, "body": '{"detail": "boom"}'},
    {"ok": True, "status": 429, "body": '{"detail": "slow down"}'},
    {"ok": False, "status": None, "body": None, "error": "TypeError: Failed to fetch"},
])
def test_any_other_http_failure_ends_the_attempt_without_the_composer(answer):
    task = running_task(link())
    outcome = deliver(task, ("http", answer))
    assert isinstance(outcome, RetryableFailure)
    assert outcome.result["method"] == "http"
    assert steps(task) == [("deliver", "http", None)]
    assert not DeliveryRequest.objects.filter(method="dom").exists()


def test_no_tab_for_the_composer_ends_the_attempt_but_blocked_moves_on():
    task = running_task(link(methods="dom,http"))
    outcome = deliver(task, ("dom", refused("no_tab", "no page of the conversation could be opened")))
    assert isinstance(outcome, RetryableFailure)
    assert "no page of the conversation could be opened" in outcome.error
    assert steps(task) == [("deliver", "dom", None)]

    task = running_task(link(methods="dom,http"))
    outcome = deliver(task, ("dom", refused("blocked")), ("http", DELIVERED["http"]))
    assert isinstance(outcome, Success) and outcome.result["method"] == "http"


def test_a_composer_that_failed_after_typing_is_retryable():
    task = running_task(link(methods="dom"))
    outcome = deliver(task, ("dom", {"ok": False, "error": "no user turn appeared within 30 s"}))
    assert outcome == RetryableFailure(
        "claude composer delivery failed in the page: no user turn appeared within 30 s",
        result={"request_id": DeliveryRequest.objects.get().pk, "method": "dom", "status": None},
    )


def test_when_every_method_falls_through_the_attempt_is_retried_with_the_reasons():
    task = running_task(link())
    outcome = deliver(task, ("http", refused("blocked", "HTTP 403")), ("dom", refused("blocked", "a challenge page")))
    assert isinstance(outcome, RetryableFailure)
    assert outcome.error == (
        "every delivery method fell through: http: blocked: HTTP 403; dom: blocked: a challenge page"
    )


def test_a_method_the_plugin_lacks_is_skipped_as_a_fallback_with_its_reason():
    conversation_link = link(capabilities=["dom_delivery"])
    task = running_task(conversation_link)
    outcome = deliver(task, ("dom", DELIVERED["dom"]))
    assert isinstance(outcome, Success)
    fallback = task.events.get(action="fallback")
    assert fallback.detail == {
        "method": "http", "reason": f"plugin client {conversation_link.client.client_id!r} does not announce proxy_delivery",
    }
    assert steps(task) == [("fallback", "http", None), ("deliver", "dom", None)]


def test_a_plugin_that_performs_no_method_is_terminal():
    conversation_link = link(capabilities=[], methods="http,dom")
    outcome = deliver(running_task(conversation_link))
    assert isinstance(outcome, TerminalFailure)
    assert outcome.error.startswith("no delivery method this plugin client performs: http: plugin client")
    assert not DeliveryRequest.objects.exists()


def test_a_task_cancelled_during_a_method_sends_no_next_method():
    task = running_task(link())

    def cancel(request):
        operator.tasks_cancel(task_ids=[task.pk], actor="operator")

    with pytest.raises(transitions.LeaseLost):
        deliver(task, ("http", refused("blocked")), before_answer=cancel)
    assert not DeliveryRequest.objects.filter(method="dom").exists()
    assert not Message.objects.filter(source=Message.Source.CONDUCTOR).exists()


def test_the_conversation_beats_the_setting_which_beats_the_platform(settings):
    adapter = platforms.get("claude")
    assert method_names_for(adapter=adapter, conversation_methods="") == ("http", "dom")
    settings.CONDUCTOR_DELIVERY_METHODS = {"*": ("dom", "http")}
    assert method_names_for(adapter=adapter, conversation_methods="") == ("dom", "http")
    settings.CONDUCTOR_DELIVERY_METHODS = {"*": ("dom", "http"), "claude": ("http",)}
    assert method_names_for(adapter=adapter, conversation_methods="") == ("http",)
    assert method_names_for(adapter=platforms.get("gemini"), conversation_methods="") == ("dom", "http")
    assert method_names_for(adapter=adapter, conversation_methods="dom") == ("dom",)


def test_the_setting_decides_what_a_delivery_sends(settings):
    settings.CONDUCTOR_DELIVERY_METHODS = {"claude": ("dom",)}
    task = running_task(link())
    assert isinstance(deliver(task, ("dom", DELIVERED["dom"])), Success)
    assert steps(task) == [("deliver", "dom", None)]


def test_chatgpt_is_delivered_through_the_composer_unless_configured_otherwise(settings):
    # Its page-made send needs sentinel, proof-of-work and Turnstile tokens the plugin cannot make.
    chatgpt = platforms.get("chatgpt")
    assert method_names_for(adapter=chatgpt, conversation_methods="") == ("dom",)
    settings.CONDUCTOR_DELIVERY_METHODS = {"chatgpt": ("http", "dom")}
    assert method_names_for(adapter=chatgpt, conversation_methods="") == ("http", "dom")
    settings.CONDUCTOR_DELIVERY_METHODS = {}
    assert method_names_for(adapter=chatgpt, conversation_methods="http,dom") == ("http", "dom")


def test_every_method_name_has_a_registered_method():
    assert delivery_methods.names() == sorted(DELIVERY_METHODS)
    for adapter in platforms:
        assert set(adapter.delivery_methods) <= set(DELIVERY_METHODS)



def test_a_site_described_as_data_is_delivered_through_its_composer_whatever_every_platform_is_set_to(settings):
    perplexity = platforms.get("perplexity")
    settings.CONDUCTOR_DELIVERY_METHODS = {"*": ("http", "dom")}
    assert method_names_for(adapter=perplexity, conversation_methods="") == ("dom",)
    assert method_names_for(adapter=perplexity, conversation_methods="http") == ("dom",)
    assert method_names_for(adapter=platforms.get("claude"), conversation_methods="") == ("http", "dom")
