"""The programs others wrote that check ``deploy/``: promtool (Debian's
``prometheus`` package), nginx, openssl and systemd-analyze.

A missing program skips its tests, unless ``CONDUCTOR_REQUIRE_TOOLS=1`` (as
``.ci/run`` sets it), which makes it a failure; systemd-analyze is optional
everywhere (containers seldom have systemd).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
DEPLOY = ROOT / "deploy"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
ALERTS_TESTS = DEPLOY / "prometheus" / "alerts.test.yml"
DASHBOARD = DEPLOY / "grafana" / "conductor.json"
NGINX_SITE = DEPLOY / "nginx" / "conductor.conf"
SYSTEMD = DEPLOY / "systemd"
OPERATIONS = ROOT / "docs" / "operations.md"


def require_tool(name: str, *, package: str, optional: bool = False) -> str:
    """The program's path, or skip (fail under ``CONDUCTOR_REQUIRE_TOOLS=1``) when it is not installed."""
    path = shutil.which(name) or (shutil.which(name, path="/usr/sbin:/sbin") if name == "nginx" else None)
    if path:
        return path
    if not optional and os.environ.get("CONDUCTOR_REQUIRE_TOOLS") == "1":
        pytest.fail(f"{name} is required (CONDUCTOR_REQUIRE_TOOLS=1) but not installed: apt-get install {package}")
    pytest.skip(f"{name} is not installed (apt-get install {package})")


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run a checker and return what it said; the caller asserts on its status, with its output."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, **kwargs)
