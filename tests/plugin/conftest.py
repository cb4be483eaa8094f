"""The browser tests' fixtures: Chromium with the plugin loaded, and a scripted server peer."""

import pytest

from tests.browser import require_chromium
from tests.plugin.extension import ScriptedServer, plugin_browser


@pytest.fixture
def chromium():
    return require_chromium()


@pytest.fixture
def browser(chromium, tmp_path):
    with plugin_browser(chromium, tmp_path / "profile") as browser:
        yield browser


@pytest.fixture
def server(browser):
    with ScriptedServer(sleep=browser.pause) as server:
        yield server
