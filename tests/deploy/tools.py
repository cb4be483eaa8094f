"""The programs others wrote that check ``deploy/``: promtool (Debian's
``prometheus`` package), nginx, openssl and systemd-analyze.

A missing program skips its tests, unless ``CONDUCTOR_REQUIRE_TOOLS=1`` (as
``.ci/run`` sets it), which makes it a failure; systemd-analyze is optional
everywhere (containers seldom have systemd).
"""

from __future__ import annotations

import os
import re
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


def alert_rules() -> dict[str, str]:
    """Each alert of alerts.yml by name, with the text of its rule (up to the next ``- alert:``).

    Read as text: the project has no YAML library, and promtool checks the
    file's YAML itself; the tests only look into each rule for what it must hold.
    """
    parts = re.split(r"^\s*- alert: (\w+)\s*$", ALERTS.read_text(), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def alert_expr(rule: str) -> str:
    """A rule's ``expr`` on one line: plain, or folded (``>-``) over the lines indented below it."""
    lines = rule.splitlines()
    for n, line in enumerate(lines):
        key, _, value = line.partition("expr:")
        if key.strip() or not value:
            continue
        if value.strip() != ">-":
            return value.strip()
        indent = len(line) - len(line.lstrip())
        folded = []
        for more in lines[n + 1:]:
            if more.strip() and len(more) - len(more.lstrip()) <= indent:
                break
            folded.append(more.strip())
        return " ".join(part for part in folded if part)
    raise ValueError("no expr")
