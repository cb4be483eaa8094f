"""The Firefox package `make plugin` builds: its manifest, and Mozilla's web-ext lint over it.

web-ext comes from tests/web_ext (npm ci in `make install-test`); without it
the lint is skipped, unless ``CONDUCTOR_REQUIRE_TOOLS=1`` (as ``.ci/run`` sets it).
"""

import json
import os
import subprocess
import zipfile

import pytest

from tests.server import ROOT

pytestmark = pytest.mark.database_free

WEB_EXT = ROOT / "tests" / "web_ext" / "node_modules" / ".bin" / "web-ext"
VERSION = json.loads((ROOT / "plugin" / "manifest.json").read_text())["version"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    dist = tmp_path_factory.mktemp("dist")
    done = subprocess.run([str(ROOT / "bin" / "build-plugin"), str(dist)], check=True, capture_output=True, text=True)
    return dist, done.stdout


def firefox_zip(built):
    return zipfile.ZipFile(built[0] / f"conductor-plugin-{VERSION}-firefox.zip")


def test_make_plugin_builds_both_packages_with_the_same_files(built):
    dist, said = built
    chromium = zipfile.ZipFile(dist / f"conductor-plugin-{VERSION}.zip")
    assert f"conductor-plugin-{VERSION}-firefox.zip" in said
    assert chromium.namelist() == firefox_zip(built).namelist()
    assert json.loads(chromium.read("manifest.json")) == json.loads((ROOT / "plugin" / "manifest.json").read_text())


def test_the_firefox_manifest_has_background_scripts_an_id_the_sidebar_and_no_chrome_only_keys(built):
    manifest = json.loads(firefox_zip(built).read("manifest.json"))
    assert manifest["background"] == {"scripts": ["background.js"], "type": "module"}
    gecko = manifest["browser_specific_settings"]["gecko"]
    assert gecko["id"] and gecko["strict_min_version"] == "140.0"
    assert gecko["data_collection_permissions"] == {"required": ["none"]}
    # Without it Firefox's default adds upgrade-insecure-requests: ws://127.0.0.1 would become wss://.
    assert manifest["content_security_policy"] == {"extension_pages": "script-src 'self'; object-src 'self'"}
    assert manifest["sidebar_action"]["default_panel"] == "panel/panel.html"
    assert "sidePanel" not in manifest["permissions"]
    assert not {"side_panel", "minimum_chrome_version"} & set(manifest)
    assert manifest["version"] == VERSION


def test_web_ext_lint_finds_no_error_in_the_firefox_package(built, tmp_path):
    if not WEB_EXT.exists():
        if os.environ.get("CONDUCTOR_REQUIRE_TOOLS") == "1":
            pytest.fail("web-ext is required (CONDUCTOR_REQUIRE_TOOLS=1): make install-test")
        pytest.skip("web-ext is not installed (make install-test)")
    firefox_zip(built).extractall(tmp_path / "firefox")
    command = [str(WEB_EXT), "lint", "--source-dir", str(tmp_path / "firefox"), "--output", "json",
               "--no-config-discovery"]
    # Without LOG_LEVEL (Conductor's own setting, e.g. "WARNING"): addons-linter hands it to pino,
    # which knows only lower-case levels and stops before linting. Its own home: web-ext keeps state there.
    env = {name: value for name, value in os.environ.items() if name != "LOG_LEVEL"}
    linted = subprocess.run(command, capture_output=True, text=True, timeout=120, env={**env, "HOME": str(tmp_path)})
    assert linted.stdout.strip(), f"web-ext gave no report (exit {linted.returncode}): {linted.stderr[-2000:]}"
    report = json.loads(linted.stdout)
    assert report["errors"] == [], report["errors"]
    assert report["summary"]["errors"] == 0
