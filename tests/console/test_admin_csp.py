"""The admin's pages carry a Content-Security-Policy, and the console works under it.

The header through the test client on every kind of page; the pages in real
Chromium (``tests/browser.py``) with the live refresh on, listening for any
``securitypolicyviolation`` the browser reports.
"""

import threading

import pytest
from django.contrib.auth.models import User
from django.db import connections

from automation.models import TaskStatus
from automation.wake import wakes_go_to
from conversations.models import Conversation
from ingest.frames import parse_final_message
from ingest.services.messages import message_ingest
from tests import factories
from tests.browser import CHROMIUM_ARGS, require_chromium
from tests.console.test_admin_browser import PASSWORD, collect_static, log_in
from tests.factories import PluginClientFactory
from tests.server import running_server

PAGES = [
    "/",
    "/admin/",
    "/admin/login/",
    "/admin/overview/",
    "/admin/automation/automationtask/",
    "/admin/ingest/pluginclient/",
    "/admin/ingest/pluginclient/pair/",
    "/admin/conversations/conversation/",
]


def directives(header: str) -> dict[str, list[str]]:
    return {name: values for name, *values in (part.split() for part in header.split(";") if part.strip())}


@pytest.mark.django_db
@pytest.mark.parametrize("path", PAGES)
def test_every_admin_page_sends_a_content_security_policy(client, path):
    client.force_login(User.objects.create_superuser("operator", password=PASSWORD))
    response = client.get(path)
    assert response.status_code in (200, 302)
    policy = directives(response.headers["Content-Security-Policy"])
    assert policy["default-src"] == ["'self'"]
    # Scripts and styles: this server's files, and elements carrying this response's nonce; nothing inline else.
    for directive in ("script-src", "style-src"):
        assert policy[directive][0] == "'self'"
        assert all(value == "'self'" or value.startswith("'nonce-") for value in policy[directive])
    assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
    assert policy["base-uri"] == ["'none'"] and policy["form-action"] == ["'self'"]


@pytest.mark.django_db
def test_a_pages_script_and_style_elements_carry_the_nonce_the_header_allows(client):
    client.force_login(User.objects.create_superuser("operator", password=PASSWORD))
    response = client.get("/admin/overview/")
    nonce = next(
        value for value in directives(response.headers["Content-Security-Policy"])["script-src"]
        if value.startswith("'nonce-")
    )[len("'nonce-"):-1]
    page = response.content.decode()
    assert f'<script src="/static/console/live.js" defer nonce="{nonce}">' in page
    assert f'<style nonce="{nonce}">' in page
    assert " style=" not in page  # attributes the policy refuses
    # Each response its own nonce.
    assert nonce not in client.get("/admin/overview/").headers["Content-Security-Policy"]


VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", event => window.__violations.push(
    `${event.violatedDirective} ${event.blockedURI} ${event.sourceFile}:${event.lineNumber}`));
"""


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_the_console_runs_under_its_policy_in_chromium_with_the_live_refresh_on(monkeypatch, tmp_path):
    chromium = require_chromium()
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import expect, sync_playwright

    User.objects.create_superuser("operator", password=PASSWORD)
    PluginClientFactory(client_id="laptop")
    message_ingest(message=parse_final_message({
        "type": "browser.final_message", "id": "f1", "platform": "claude", "conversation_id": "conv-1",
        "message_id": "m1", "title": "Plan", "text": "Reading.\n```baa\necho\n{\"n\": 1}\n```",
    }), client=None)
    conversation = Conversation.objects.get()

    def make_task(status):
        with wakes_go_to(threading.Event()):  # no dispatcher here; Playwright's loop owns this thread
            return factories.make_task(status)

    collect_static(tmp_path)
    with running_server(tmp_path) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_default_timeout(20_000)
        page.add_init_script(VIOLATIONS)
        reported = []
        page.on("console", lambda message: "Content Security Policy" in message.text
                and reported.append(message.text))
        page.clock.install()

        def violations():
            return page.evaluate("window.__violations") + reported

        log_in(page, server.base_url)
        expect(page.locator("#live-toggle")).to_be_checked()
        expect(page.locator("#blocked-count")).to_have_text("0")
        # The overview refreshes itself: live.js runs, and what it swaps in breaks no rule either.
        make_task(TaskStatus.BLOCKED)
        page.clock.run_for(5_000)
        expect(page.locator("#blocked-count")).to_have_text("1")
        assert violations() == []

        for path in [
            "/admin/", "/admin/automation/automationtask/", "/admin/ingest/pluginclient/pair/",
            f"/admin/conversations/conversation/{conversation.pk}/story/",
            f"/admin/conversations/conversation/{conversation.pk}/tool-guide/",
        ]:
            page.goto(f"{server.base_url}{path}")
            page.wait_for_load_state("load")
            assert violations() == [], path
        # The pairing page's copy button (console/copy.js) and QR image, under the policy.
        page.goto(f"{server.base_url}/admin/ingest/pluginclient/pair/")
        page.fill("#id_name", "csp browser")
        page.click("input[name=_save]")
        expect(page.locator("#pairing-qr svg")).to_be_visible()
        assert violations() == []

        # The policy is enforced, and the listener hears it: markup slipped into the page runs no script.
        page.evaluate("""document.body.insertAdjacentHTML(
            "beforeend", '<img src="x:" onerror="window.__ran = 1"><p style="color: red">x</p>')""")
        page.wait_for_timeout(300)
        assert page.evaluate("window.__ran") is None
        assert {violation.split()[0] for violation in violations()} >= {"script-src-attr", "style-src-attr"}
        browser.close()
    connections.close_all()


def test_no_template_writes_what_the_policy_refuses():
    """Inline style attributes, event handler attributes and inline scripts without the nonce, in any template."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    refused = re.compile(r"""\sstyle=["']|\son[a-z]+=["']|<script(?![^>]*\bsrc=)(?![^>]*csp_nonce_attr)""")
    found = [
        f"{path.relative_to(root)}:{number}"
        for folder in ("templates", "console/templates")
        for path in sorted((root / folder).rglob("*.html"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if refused.search(re.sub(r"\{#.*?#\}", "", line))  # a template comment may name them
    ]
    assert found == []
