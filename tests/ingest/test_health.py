"""Capture health per platform (ingest.health): the admin's words, the overview's warnings, /metrics."""

import datetime as dt
import re

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from conversations.models import Message
from ingest.health import capture_warnings, platform_health
from ingest.models import AdapterReport
from tests.factories import ConversationFactory, MessageFactory, PluginClientFactory

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
SIGNATURE = ["event:delta", "keys:kind,payload"]


def answers(client, platform, capture, *, start, n):
    conversation = ConversationFactory(platform=platform)
    for i in range(n):
        MessageFactory(conversation=conversation, client=client, capture=capture,
                       received_at=start + dt.timedelta(minutes=i))


def report(client, platform, kind, *, first_at, count=1, detail=None):
    return AdapterReport.objects.create(
        client=client, platform=platform, adapter="2026-12-03", kind=kind, count=count,
        first_at=first_at, last_at=first_at + dt.timedelta(minutes=1), detail=detail or {},
    )


def hhmm(when):
    return timezone.localtime(when).strftime("%H:%M")


@pytest.fixture
def client():
    return PluginClientFactory(client_id="laptop-chrome")


def test_a_stream_no_longer_recognised_is_told_with_since_when_and_how_many_answers_the_page_gave(client):
    switched = NOW - dt.timedelta(minutes=30)
    answers(client, "chatgpt", Message.Capture.NETWORK, start=NOW - dt.timedelta(hours=2), n=3)
    answers(client, "chatgpt", Message.Capture.DOM, start=switched, n=14)
    report(client, "chatgpt", "stream_unrecognised", first_at=switched, count=14,
           detail={"path": "/backend-api/f/conversation", "signature": SIGNATURE})
    report(client, "chatgpt", "dom_fallback_used", first_at=switched, count=14, detail={"reason": "stream_unrecognised"})

    assert capture_warnings(now=NOW) == [
        f"ChatGPT's stream is no longer recognised (since {hhmm(switched)}, 14 answers read from the page instead)"
    ]
    [health] = [h for h in platform_health(client_pk=client.pk) if h.platform == "chatgpt"]
    assert health.summary().startswith(
        f"DOM fallback since {hhmm(switched)} (14 answers) / stream unrecognised: signature event:delta, keys:kind,payload"
    )


def test_reports_from_before_the_last_network_capture_are_history_not_warnings(client):
    report(client, "claude", "stream_unrecognised", first_at=NOW - dt.timedelta(hours=3))
    answers(client, "claude", Message.Capture.NETWORK, start=NOW - dt.timedelta(hours=1), n=2)
    assert capture_warnings(now=NOW) == []
    [health] = [h for h in platform_health(client_pk=client.pk) if h.platform == "claude"]
    assert health.summary() == "network capture ok"


def test_a_switch_to_the_page_a_missing_selector_and_a_silent_platform_are_warned_about(client, settings):
    settings.CONDUCTOR_CAPTURE_SILENCE_HOURS = 6
    answers(client, "claude", Message.Capture.NETWORK, start=NOW - dt.timedelta(hours=1), n=1)
    answers(client, "claude", Message.Capture.DOM, start=NOW - dt.timedelta(minutes=20), n=2)
    report(client, "claude", "selector_missing", first_at=NOW - dt.timedelta(minutes=10), count=3,
           detail={"selectors": "composer"})
    answers(client, "gemini", Message.Capture.NETWORK, start=NOW - dt.timedelta(hours=7), n=1)

    warnings = capture_warnings(now=NOW)
    assert warnings[0] == (
        f"Claude's captures switched from the network to the page (since {hhmm(NOW - dt.timedelta(minutes=20))}, 2 answers)"
    )
    assert warnings[1].startswith("Claude's page no longer matches its composer selectors")
    assert re.fullmatch(r"Gemini had captures but none for 6 hours \(the last at .*\)", warnings[2])
    assert len(warnings) == 3


def test_the_overview_and_the_clients_page_show_it(admin_client, client):
    switched = NOW - dt.timedelta(minutes=5)
    answers(client, "chatgpt", Message.Capture.NETWORK, start=NOW - dt.timedelta(hours=1), n=1)
    answers(client, "chatgpt", Message.Capture.DOM, start=switched, n=2)
    report(client, "chatgpt", "stream_unrecognised", first_at=switched, detail={"signature": SIGNATURE})

    overview = admin_client.get("/admin/overview/").content.decode()
    assert "ChatGPT&#x27;s stream is no longer recognised" in overview
    page = admin_client.get(f"/admin/ingest/pluginclient/{client.pk}/change/").content.decode()
    assert f"DOM fallback since {hhmm(switched)} (2 answers) / stream unrecognised: signature event:delta" in page


def test_metrics_count_captures_by_platform_and_method_and_reports_by_kind(admin_client, client, settings):
    settings.CONDUCTOR_METRICS_TOKEN = "t" * 40
    answers(client, "chatgpt", Message.Capture.NETWORK, start=NOW - dt.timedelta(hours=1), n=2)
    answers(client, "chatgpt", Message.Capture.DOM, start=NOW - dt.timedelta(minutes=5), n=3)
    report(client, "chatgpt", "stream_unrecognised", first_at=NOW, count=4)
    body = admin_client.get("/metrics", HTTP_AUTHORIZATION="Bearer " + "t" * 40).content.decode()
    figures = {
        family.name: {tuple(sorted(s.labels.items())): s.value for s in family.samples}
        for family in text_string_to_metric_families(body)
    }
    captures = figures["conductor_captures"]
    assert captures[(("capture", "network"), ("platform", "chatgpt"))] == 2
    assert captures[(("capture", "dom"), ("platform", "chatgpt"))] == 3
    assert captures[(("capture", "dom"), ("platform", "claude"))] == 0
    reports = figures["conductor_adapter_reports"]
    assert reports[(("kind", "stream_unrecognised"), ("platform", "chatgpt"))] == 4
    assert reports[(("kind", "selector_missing"), ("platform", "gemini"))] == 0
