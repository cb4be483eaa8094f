"""End to end: from a fresh pairing to an assistant that calls ``files.list`` as the tool guide shows it.

Real processes: ``manage.py serve`` (daphne and the django-q2 cluster) on
the test databases, Debian's Chromium with ``plugin/`` loaded, a mock Claude
page (``chat_apps.py``). No prompt is written by hand: the popup's "Insert
tool guide" puts the server's guide into the composer, the person sends it,
and the scripted assistant answers with the guide's own ``files.list``
example, whose result comes back into the chat.
"""

import json
import re

import pytest

from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.plugin.chat_apps import chat_app
from tests.plugin.extension import plugin_browser
from tests.plugin.test_round_trip import WAIT, assistant_messages, chromium, server_env  # noqa: F401 (fixtures)
from tests.server import running_server

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

EXAMPLE = re.compile(r"```baa\n(files\.list(?:\n[^\n]*)?)\n```")


def test_the_inserted_guides_example_runs_and_its_result_comes_back(chromium, tmp_path, server_env):
    (tmp_path / "workspace" / "notes.md").write_text("plans\n")
    PluginClientFactory(client_id="laptop")
    app = chat_app("claude")
    with (
        running_server(tmp_path, command="serve+cluster", **server_env) as server,
        plugin_browser(chromium, tmp_path / "profile") as browser,
    ):
        app.install(browser.context)
        browser.pair(server.base_url, "laptop", TEST_TOKEN)
        browser.wait_for_state("connected")
        page = browser.open_chat(app)
        popup = browser.open_popup(active_tab=page)

        said = browser.insert_guide(popup)

        guide = page.evaluate("mockChat.draft()")
        version = re.match(r"# Conductor tool guide \(([0-9a-f]+)\)", guide).group(1)
        assert said == f"Tool guide {version} inserted: read it and send it."
        assert page.evaluate("mockChat.sent()") == []
        example = EXAMPLE.search(guide).group(1)

        # The person sends the guide; the assistant answers with the guide's example.
        page.click('fieldset button[type="submit"]')
        assert page.evaluate("mockChat.sent()") == [guide]
        app.answer_next(f"Let me look.\n\n```baa\n{example}\n```\n")
        page.evaluate("([html]) => mockChat.ask('(the guide)', {html})", ["<p>Let me look.</p>"])

        browser.wait_until(lambda: assistant_messages(app).first(), "the assistant message in Conductor", WAIT)
        [posted] = browser.wait_until(app.deliveries, "the results posted back to the chat", WAIT)
        text = app.delivered_text(posted)
        result = json.loads(re.search(r"```baa-result\n(.*?)\n```", text, re.S).group(1))
        assert result["ok"] is True and result["tool"] == "files.list"
        assert "notes.md" in json.dumps(result["result"])
