"""Real headless Chromium for the browser tests: Debian's ``chromium`` driven by Playwright.

Playwright downloads no browser here. Without Chromium the browser tests are
skipped, unless ``CONDUCTOR_REQUIRE_BROWSER=1`` (as ``.ci/run`` sets it),
which makes a missing browser a failure.
"""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = os.environ.get("CONDUCTOR_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
# Flags for a machine without a GPU or outside network (background fetches would only fail).
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]


def require_chromium() -> str:
    """The Chromium executable, or skip (fail under ``CONDUCTOR_REQUIRE_BROWSER=1``) when there is none."""
    if not CHROMIUM:
        if os.environ.get("CONDUCTOR_REQUIRE_BROWSER") == "1":
            pytest.fail("Chromium is required (CONDUCTOR_REQUIRE_BROWSER=1) but not installed: apt-get install chromium")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    return CHROMIUM
