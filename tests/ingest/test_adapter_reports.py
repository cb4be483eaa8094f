"""``browser.adapter_report`` (SPEC §6): checked, stored counted and bounded, acknowledged; ``plugin_outdated``."""

import datetime as dt

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from conductor_site.asgi import application
from ingest.frames import MAX_REPORT_COUNT, AdapterReportFrame
from ingest.models import AdapterReport
from ingest.services.reports import MAX_REPORTS_PER_CLIENT, adapter_report_record
from ingest.protocol import plugin_is_outdated
from tests.factories import TEST_TOKEN, PluginClientFactory

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

HELLO = {"type": "hello", "client_id": "laptop-chrome", "token": TEST_TOKEN, "plugin_version": "1.0.0"}
REPORT = {
    "type": "browser.adapter_report", "id": "r1", "platform": "chatgpt", "adapter": "2026-11-29",
    "kind": "stream_unrecognised", "count": 3,
    "detail": {"path": "/backend-api/f/conversation", "content_type": "text/event-stream",
               "signature": ["event:delta", "keys:o,p,v"]},
}


@pytest.fixture
def client(channel_layer):
    return PluginClientFactory(client_id="laptop-chrome")


def adapter_report_samples(admin_client) -> dict:
    """``conductor_adapter_reports`` in /metrics, by its sorted labels (CONDUCTOR_METRICS_TOKEN "t" * 40)."""
    body = admin_client.get("/metrics", HTTP_AUTHORIZATION="Bearer " + "t" * 40).content.decode()
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body) if family.name == "conductor_adapter_reports"
        for sample in family.samples
    }


async def said_hello(**fields):
    communicator = WebsocketCommunicator(application, "/ws/plugin/")
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_json_to({**HELLO, **fields})
    reply = await communicator.receive_json_from()
    assert reply["type"] == "hello.ok", reply
    return communicator, reply


async def test_a_report_is_acknowledged_and_stored_counted_with_its_latest_detail(client):
    communicator, _ = await said_hello()
    await communicator.send_json_to(REPORT)
    assert await communicator.receive_json_from() == {"type": "ack", "id": "r1"}
    await communicator.send_json_to({**REPORT, "id": "r2", "count": 2, "detail": {"path": "/x"}})
    assert await communicator.receive_json_from() == {"type": "ack", "id": "r2"}
    await communicator.disconnect()
    row = await AdapterReport.objects.aget(client=client)
    assert (row.platform, row.adapter, row.kind, row.count, row.detail) == (
        "chatgpt", "2026-11-29", "stream_unrecognised", 5, {"path": "/x"},
    )
    assert row.first_at <= row.last_at


def test_a_count_over_the_cap_is_counted_as_the_cap_in_the_table_and_in_metrics(client, admin_client, settings):
    settings.CONDUCTOR_METRICS_TOKEN = "t" * 40
    reports = 45

    async def send_reports():
        communicator, _ = await said_hello()
        for number in range(reports):
            await communicator.send_json_to({**REPORT, "id": f"r{number}", "count": 1_000_000})
            assert await communicator.receive_json_from() == {"type": "ack", "id": f"r{number}"}
        await communicator.disconnect()

    async_to_sync(send_reports)()
    assert AdapterReport.objects.get(client=client).count == reports * MAX_REPORT_COUNT == 4_500
    samples = adapter_report_samples(admin_client)
    assert samples[(("kind", "stream_unrecognised"), ("platform", "chatgpt"))] == 4_500


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"platform": "myspace"}, "unknown platform"),
        ({"kind": "text_seen"}, "unknown kind"),
        ({"kind": None}, "'kind' is required"),
        ({"detail": ["a"]}, "'detail' must be an object"),
        ({"detail": {f"k{i}": "v" for i in range(17)}}, "more than 16 entries"),
        ({"detail": {"path": "x" * 201}}, "longer than 200 characters"),
        ({"detail": {"signature": ["x" * 150, "y" * 60]}}, "longer than 200 characters"),
        ({"detail": {"nested": {"text": "secret"}}}, "must be a string"),
        ({"count": 0}, "'count' must be from 1"),
        ({"count": "3"}, "'count' must be int"),
        ({"first_at": "yesterday"}, "ISO-8601"),
    ],
)
async def test_a_malformed_report_is_invalid_and_the_socket_stays_open(client, change, detail):
    communicator, _ = await said_hello()
    await communicator.send_json_to({**REPORT, **change})
    error = await communicator.receive_json_from()
    assert (error["type"], error["code"], error["id"]) == ("error", "invalid", "r1")
    assert detail in error["detail"]
    await communicator.send_json_to({"type": "ping"})
    assert (await communicator.receive_json_from())["type"] == "pong"
    await communicator.disconnect()
    assert not await AdapterReport.objects.filter(client=client).aexists()


def test_one_client_cannot_grow_the_table_beyond_its_bound(client):
    start = timezone.now() - dt.timedelta(hours=1)
    for version in range(MAX_REPORTS_PER_CLIENT + 5):
        report = AdapterReportFrame(
            frame_id=None, platform="claude", adapter=f"v{version}", kind="selector_missing", detail={},
            count=1, first_at=None, last_at=None,
        )
        adapter_report_record(client_pk=client.pk, report=report, now=start + dt.timedelta(seconds=version))
    kept = AdapterReport.objects.filter(client=client)
    assert kept.count() == MAX_REPORTS_PER_CLIENT
    assert not kept.filter(adapter__in=["v0", "v4"]).exists()  # the oldest gave way
    assert kept.filter(adapter=f"v{MAX_REPORTS_PER_CLIENT + 4}").exists()


async def test_hello_ok_says_whether_the_plugin_is_older_than_the_server_supports(client, settings):
    settings.CONDUCTOR_OLDEST_PLUGIN_VERSION = "1.2.0"
    communicator, reply = await said_hello(plugin_version="1.1.9")
    assert reply["plugin_outdated"] is True
    await communicator.disconnect()
    communicator, reply = await said_hello(plugin_version="1.10.0")
    assert reply["plugin_outdated"] is False
    await communicator.disconnect()


@pytest.mark.parametrize(
    ("version", "minimum", "outdated"),
    [("1.0.0", "", False), ("1.0", "1.0.0", False), ("0.9.9", "1.0.0", True), ("", "1.0.0", True),
     ("1.0.0-beta", "1.0.0", True), ("2", "1.9.9.9", False)],
)
def test_plugin_is_outdated_compares_dotted_numbers(version, minimum, outdated):
    assert plugin_is_outdated(version, oldest=minimum) is outdated


def test_a_site_described_as_data_reports_a_missing_selector_and_metrics_count_it(client, admin_client, settings):
    settings.CONDUCTOR_METRICS_TOKEN = "t" * 40

    async def report():
        communicator, _ = await said_hello()
        await communicator.send_json_to({
            **REPORT, "platform": "perplexity", "adapter": "2026-02-09", "kind": "selector_missing",
            "detail": {"selectors": "composer"},
        })
        assert await communicator.receive_json_from() == {"type": "ack", "id": "r1"}
        await communicator.disconnect()

    async_to_sync(report)()
    samples = adapter_report_samples(admin_client)
    assert samples[(("kind", "selector_missing"), ("platform", "perplexity"))] == 3
    assert (("kind", "selector_missing"), ("platform", "kimi")) in samples  # every site has its row
    health = admin_client.get(f"/admin/ingest/pluginclient/{client.pk}/change/").content.decode()
    assert "Perplexity" in health


def test_an_answer_that_stopped_early_is_counted_in_metrics_and_shown_on_the_client_page(client, admin_client, settings):
    settings.CONDUCTOR_METRICS_TOKEN = "t" * 40

    async def report():
        communicator, _ = await said_hello()
        await communicator.send_json_to({
            **REPORT, "kind": "stream_incomplete", "count": 2,
            "detail": {"reason": "max_tokens", "path": "/backend-api/f/conversation"},
        })
        assert await communicator.receive_json_from() == {"type": "ack", "id": "r1"}
        await communicator.disconnect()

    async_to_sync(report)()
    row = AdapterReport.objects.get(client=client)
    assert (row.kind, row.count, row.detail["reason"]) == ("stream_incomplete", 2, "max_tokens")
    assert adapter_report_samples(admin_client)[(("kind", "stream_incomplete"), ("platform", "chatgpt"))] == 2
    page = admin_client.get(f"/admin/ingest/pluginclient/{client.pk}/change/").content.decode()
    assert "stream_incomplete ×2" in page
