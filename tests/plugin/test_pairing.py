"""From an empty data folder to a connected extension: the admin page and one paste.

Real processes, as a new person meets them: `make run`'s steps on a fresh
data folder (collectstatic, then ``manage.py serve`` with the cluster, on
the test databases), the first admin user made as ``make user`` makes it, and
Debian's Chromium with ``plugin/`` loaded. In that one browser the person
logs in to the admin, pairs a browser, presses "Copy", pastes into the
extension's options, and sees "Connected"; the admin then shows the client
connected.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import expect

from ingest.models import PluginClient
from ingest.pairing import pairing_code_encode
from tests.plugin.extension import plugin_browser
from tests.plugin.test_round_trip import WAIT, chromium, server_env  # noqa: F401 (fixtures)
from tests.server import ROOT, free_port, running_server
from tests.server import server_env as process_env

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

PASSWORD = "first-operator-password-1"


@pytest.fixture
def screenshots():
    """Where the pages are pictured, as the admin's browser tests do (``CONDUCTOR_SCREENSHOT_DIR``)."""
    folder = Path(os.environ.get("CONDUCTOR_SCREENSHOT_DIR", ROOT / "data" / "screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def manage(data_dir, *args, **env):
    """``manage.py`` on the server's databases, as the Makefile's targets run it."""
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env={**process_env(data_dir), **env},
        check=True, capture_output=True, text=True,
    )


def test_an_empty_data_folder_to_a_connected_extension_with_the_admin_and_one_paste(
    chromium, tmp_path, server_env, screenshots,  # noqa: F811
):
    assert not PluginClient.objects.exists()
    manage(tmp_path, "collectstatic", "--noinput", "--verbosity", "0")  # as `make run` does first
    with (
        running_server(tmp_path, command="serve+cluster", **server_env) as server,
        plugin_browser(chromium, tmp_path / "profile") as browser,
    ):
        browser.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.base_url)
        admin = browser.context.new_page()
        admin.set_default_timeout(WAIT * 1000)

        # First run: the login page says how to make the first user; `make user` makes one.
        admin.goto(f"{server.base_url}/admin/")
        assert "make user" in admin.inner_text("#first-run")
        manage(tmp_path, "createsuperuser", "--noinput", "--username", "operator", "--email", "",
               DJANGO_SUPERUSER_PASSWORD=PASSWORD)
        admin.reload()
        assert admin.locator("#first-run").count() == 0
        admin.fill("#id_username", "operator")
        admin.fill("#id_password", PASSWORD)
        admin.click("input[type=submit]")

        # Plugin clients > Pair a browser: the code, once, with a copy button and a QR image.
        admin.goto(f"{server.base_url}/admin/ingest/pluginclient/")
        admin.click("#pair-browser")
        admin.click("input[name=_save]")
        code = admin.input_value("#pairing-code")
        assert re.fullmatch(r"conductor-pair:v1:[A-Za-z0-9_-]+", code)
        assert admin.locator("#pairing-qr svg").count() == 1
        admin.click("#copy-pairing-code")
        # The clipboard answers asynchronously: the status follows the click.
        expect(admin.locator("#pairing-code-status")).to_have_text("Copied.", timeout=WAIT * 1000)
        admin.screenshot(path=str(screenshots / "pair-a-browser.png"), full_page=True)

        # One paste into the extension's options.
        options = browser.open_options()
        browser.paste_pairing_code(options)
        browser.wait_in_extension_page(
            options, "document.getElementById('pairing-outcome').textContent.startsWith('Connected')",
            "the options page to say Connected",
        )
        assert browser.pairing_outcome(options) == f"Connected to {server.base_url} as browser-1."
        assert options.input_value("#pairing-code") == ""  # the code (and its token) left the page
        assert options.is_visible("#next-step") and "Insert tool guide" in options.inner_text("#next-step")
        assert browser.storage()["settings"]["clientId"] == "browser-1"
        # The quiet period of sites read from the page, its default kept with the pairing.
        assert browser.storage()["settings"]["answerQuietMs"] == 3000
        options.screenshot(path=str(screenshots / "options-paired.png"), full_page=True)

        # The admin shows the client connected; the page does not show the code again.
        admin.goto(f"{server.base_url}/admin/ingest/pluginclient/")
        row = admin.locator("#result_list tbody tr", has_text="browser-1")
        assert row.locator("td.field-is_connected img").get_attribute("alt") == "True"
        admin.goto(f"{server.base_url}/admin/ingest/pluginclient/pair/")
        assert code not in admin.content()
        assert code not in server.log()


def wait_for_outcome(browser, page, start: str) -> str:
    browser.wait_in_extension_page(
        page, f"document.getElementById('pairing-outcome').textContent.startsWith({start!r})",
        f"the options page to say {start!r} (it says {browser.pairing_outcome(page)!r})",
    )
    return browser.pairing_outcome(page)


def test_a_code_it_cannot_read_says_why_and_changes_nothing(browser):
    options = browser.open_options()
    code = pairing_code_encode(server_url="http://127.0.0.1:9", client_id="laptop", token="t" * 43)
    for text, reason in [
        (code[:-5], "This pairing code is damaged or cut short"),
        ("otherapp-pair:v1:" + code.split(":", 2)[2], "This is not a Conductor pairing code"),
        (code.replace(":v1:", ":v2:"), "This pairing code is version v2"),
    ]:
        options.fill("#pairing-code", text)
        assert wait_for_outcome(browser, options, reason.split(":")[0])
        assert "settings" not in browser.storage()
        assert options.is_hidden("#next-step")


def test_the_options_say_why_a_paired_browser_is_not_connected(browser, server, chromium):
    options = browser.open_options()

    # Nothing listens on the code's server.
    unreachable = pairing_code_encode(server_url=f"http://127.0.0.1:{free_port()}", client_id="laptop", token="t" * 43)
    options.fill("#pairing-code", unreachable)
    assert "does not answer" in wait_for_outcome(browser, options, "Server unreachable")

    # The server refuses the token.
    server.on_hello = lambda hello: 4401
    options.fill("#pairing-code", pairing_code_encode(server_url=server.url, client_id="laptop", token="t" * 43))
    assert "Pair again from the admin" in wait_for_outcome(browser, options, "Token refused")

    # The server supports newer plugins only: connected, and told to update.
    server.on_hello = lambda hello: None
    server.plugin_outdated = True
    options.fill("#pairing-code", pairing_code_encode(server_url=server.url, client_id="laptop", token="u" * 43))
    assert wait_for_outcome(browser, options, "Connected").endswith("this plugin is outdated: the server supports "
                                                                     "newer versions only. Update the plugin.")
    assert "update it" in browser.popup_text()


def test_plain_http_to_another_machine_is_refused_until_the_box_is_ticked(browser):
    options = browser.open_options()
    code = pairing_code_encode(server_url="http://192.0.2.1:8000", client_id="laptop", token="t" * 43)
    options.fill("#pairing-code", code)
    refused = wait_for_outcome(browser, options, "This server is on another machine over plain http://")
    assert "I understand this is unencrypted" in refused
    assert options.is_visible("#unencrypted-consent")
    assert "settings" not in browser.storage()

    # The server URL typed under "Advanced" meets the same rule.
    options.fill("#pairing-code", "")
    options.click("#advanced summary")
    options.fill("#server-url", "http://192.0.2.1:8000")
    options.fill("#client-id", "laptop")
    options.fill("#token", "t" * 43)
    options.click("#save")
    browser.wait_in_extension_page(options, "document.getElementById('saved').textContent !== ''", "the form's answer")
    assert options.inner_text("#saved").startswith("This server is on another machine over plain http://")
    assert "settings" not in browser.storage()

    # Ticked, the code is read, with the warning. (Saving then waits on
    # Chrome's prompt for host access, which no one answers here.)
    options.fill("#pairing-code", code)
    options.check("#unencrypted")
    browser.wait_in_extension_page(options, "document.getElementById('pairing-warning').textContent !== ''",
                                   "the warning")
    assert "unencrypted" in options.inner_text("#pairing-warning")
