"""Adapter reports in real Chromium: a chat site that changes under the plugin.

The mock pages (``chat_apps.py``) switch their stream to a shape no adapter
knows, or lose their composer; the plugin keeps reading the page, says what
changed (``browser.adapter_report``, without any chat text), and an operator
sees it in the admin and on /metrics. Also: the zip ``make plugin`` builds
loads unpacked and works.
"""

import json
import subprocess
import zipfile
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from conversations.models import Message
from ingest.models import AdapterReport
from tests.browser import require_chromium
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.plugin.chat_apps import chat_app
from tests.plugin.extension import ScriptedServer, plugin_browser
from tests.plugin.test_dom_delivery import delivery, open_app
from tests.plugin.test_plugin import TOKEN
from tests.server import running_server

ROOT = Path(__file__).resolve().parents[2]
WAIT = 60
METRICS_TOKEN = "m" * 40


def ask(page, html: str, **options) -> None:
    page.evaluate("([html, options]) => mockChat.ask('Go on', {html, ...options})", [html, options])


def reports(server, kind=None):
    return [frame for frame in server.frames("browser.adapter_report") if kind is None or frame["kind"] == kind]


@pytest.mark.database_free
def test_a_fast_answer_in_an_unknown_stream_is_read_from_the_page_and_reported_without_its_text(browser, server):
    browser.pair(server.url, "laptop", TOKEN)
    browser.wait_for_state("connected")
    app, page = open_app(browser, "chatgpt")
    secret = "Violet-kangaroo-7731 keeps the launch codes"
    app.answer_next(secret, unknown_format=True)
    # The stop button shows for 200 ms only: the page's signal is checked at once, not only after a debounce.
    ask(page, f"<p>{secret}</p>", holdMs=200)

    [frame] = server.wait_for_frames("browser.final_message", timeout=WAIT)
    assert (frame["capture"], frame["text"]) == ("dom", secret)
    browser.wait_until(lambda: {r["kind"] for r in reports(server)} >= {"stream_unrecognised", "dom_fallback_used"},
                       "the reports of the unknown stream", WAIT)
    [unrecognised] = reports(server, "stream_unrecognised")
    assert unrecognised["detail"] == {
        "path": "/backend-api/f/conversation", "content_type": "text/event-stream",
        "signature": ["event:x-turn-begin", "keys:kind,seq", "event:x-turn-chunk", "keys:kind,payload", "event:x-turn-end"],
    }
    assert unrecognised["platform"] == "chatgpt" and unrecognised["count"] == 1
    assert "kangaroo" not in json.dumps(reports(server)) and "Violet" not in json.dumps(reports(server))


@pytest.mark.database_free
def test_a_composer_whose_selector_changed_fails_the_delivery_with_selector_missing_and_reports_it(browser, server):
    browser.pair(server.url, "laptop", TOKEN)
    browser.wait_for_state("connected")
    app, _ = open_app(browser, "claude", has_composer=False)
    server.send(delivery(app, "task-9", "results", timeout_ms=3_000))
    [result] = server.wait_for_frames("browser.dom_delivery.result", timeout=3 + 5)
    assert (result["ok"], result["error_code"]) == (False, "selector_missing")
    [report] = server.wait_for_frames("browser.adapter_report", timeout=WAIT)
    assert (report["platform"], report["kind"], report["detail"]) == ("claude", "selector_missing", {"selectors": "composer"})


@pytest.mark.database_free
def test_the_zip_make_plugin_builds_loads_unpacked_and_reads_an_answer(tmp_path):
    chromium = require_chromium()
    built = subprocess.run([str(ROOT / "bin" / "build-plugin"), str(tmp_path / "dist")], check=True,
                           capture_output=True, text=True)
    version = json.loads((ROOT / "plugin" / "manifest.json").read_text())["version"]
    archive = tmp_path / "dist" / f"conductor-plugin-{version}.zip"
    assert archive.name in built.stdout
    names = zipfile.ZipFile(archive).namelist()
    assert "manifest.json" in names and not [name for name in names if name.startswith("tests/")]
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(archive).extractall(unpacked)
    with plugin_browser(chromium, tmp_path / "profile", extension=unpacked) as browser, \
            ScriptedServer(sleep=browser.pause) as server:
        browser.pair(server.url, "laptop", TOKEN)
        browser.wait_for_state("connected")
        app = chat_app("claude")
        app.install(browser.context)
        page = browser.open_chat(app)
        app.answer_next("From the zip.")
        ask(page, "<p>From the zip.</p>")
        [frame] = server.wait_for_frames("browser.final_message")
        assert (frame["capture"], frame["text"]) == ("network", "From the zip.")
        assert server.hellos[0]["plugin_version"] == version


@pytest.mark.database_free
def test_a_plugin_older_than_the_server_supports_says_update_the_extension(browser, server):
    server.plugin_outdated = True
    browser.pair(server.url, "laptop", TOKEN)
    browser.wait_for_state("connected")
    browser.wait_until(lambda: browser.badge() == "upd", "the badge to say upd")
    assert "update the extension" in browser.popup_text()


@pytest.fixture
def chromium(monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    return require_chromium()


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_stream_that_changes_mid_session_is_read_from_the_page_and_the_operator_sees_it(chromium, tmp_path, settings):
    settings.CONDUCTOR_METRICS_TOKEN = METRICS_TOKEN
    client = PluginClientFactory(client_id="laptop")
    app = chat_app("chatgpt")
    with (
        running_server(tmp_path, command="serve", CONDUCTOR_OLDEST_PLUGIN_VERSION="1.0.0") as server,
        plugin_browser(chromium, tmp_path / "profile") as browser,
    ):
        app.install(browser.context)
        browser.pair(server.base_url, "laptop", TEST_TOKEN)
        browser.wait_for_state("connected")
        page = browser.open_chat(app)
        app.answer_next("The first answer.")
        ask(page, "<p>The first answer.</p>")
        captured = Message.objects.filter(client=client, role=Message.Role.ASSISTANT)
        browser.wait_until(lambda: captured.filter(capture=Message.Capture.NETWORK).exists(), "the network capture", WAIT)

        # The app changes its stream's shape: the answers go on, read from the page.
        read_from_page = captured.filter(capture=Message.Capture.DOM).order_by("received_at")
        for step in range(1, 4):
            app.answer_next(f"Answer {step} in the new shape.", unknown_format=True)
            ask(page, f"<p>Answer {step} in the new shape.</p>")
            # A person reads an answer before asking again.
            browser.wait_until(lambda: read_from_page.count() == step, f"answer {step} read from the page", WAIT)
        dom = list(read_from_page)
        assert [m.text for m in dom] == [f"Answer {step} in the new shape." for step in range(1, 4)]
        report = browser.wait_until(
            lambda: AdapterReport.objects.filter(client=client, kind="stream_unrecognised").first(),
            "the stream_unrecognised report", WAIT,
        )
        # One report: the next ones are counted for a minute and sent then.
        assert (report.platform, report.count) == ("chatgpt", 1)
        assert "new shape" not in json.dumps(report.detail)

        staff = Client()
        staff.force_login(get_user_model().objects.create_superuser("operator", "op@example.test", "pw-not-used-here"))
        # The overview dates the change from the earlier of the report (the plugin's clock) and the
        # first answer read from the page; the client page from that answer. They may straddle a minute.
        dom_since = timezone.localtime(dom[0].received_at).strftime("%H:%M")
        since = timezone.localtime(min(dom[0].received_at, report.first_at)).strftime("%H:%M")
        overview = staff.get("/admin/overview/").content.decode()
        assert (f"ChatGPT&#x27;s stream is no longer recognised (since {since}, 3 answers read from the page instead)"
                in overview)
        client_page = staff.get(f"/admin/ingest/pluginclient/{client.pk}/change/").content.decode()
        assert f"DOM fallback since {dom_since} (3 answers) / stream unrecognised: signature event:x-turn-begin" in client_page
        metrics = staff.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}").content.decode()
        assert 'conductor_captures{capture="dom",platform="chatgpt"} 3.0' in metrics
        assert 'conductor_captures{capture="network",platform="chatgpt"} 1.0' in metrics
        assert 'conductor_adapter_reports{kind="stream_unrecognised",platform="chatgpt"} 1.0' in metrics
        assert browser.badge() == "on"
