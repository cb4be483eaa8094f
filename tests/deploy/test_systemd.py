"""deploy/systemd's units: what systemd-analyze says of them, and the stop
timing docs/operations.md gives."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

from conductor_site.management.commands.serve import GRACE_SECONDS
from tests.deploy.tools import ROOT, SYSTEMD, require_tool, run

pytestmark = pytest.mark.database_free

UNITS = sorted(SYSTEMD.glob("*.service"))
CHECKOUT = "/srv/conductor"


def unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True, comment_prefixes=("#", ";"))
    parser.optionxform = str  # systemd's keys are case-sensitive
    parser.read_string(path.read_text())
    return parser


def test_there_are_units_for_serve_for_daphne_alone_and_for_a_cluster_alone():
    assert [path.name for path in UNITS] == [
        "conductor-cluster.service", "conductor-web.service", "conductor.service",
    ]
    commands = {path.name: unit(path)["Service"]["ExecStart"] for path in UNITS}
    assert commands["conductor.service"].endswith("manage.py serve --host 10.0.0.11 --port 8000")
    assert commands["conductor-web.service"].endswith("manage.py serve --no-cluster --host 10.0.0.11 --port 8000")
    assert commands["conductor-cluster.service"].endswith("manage.py qcluster")


@pytest.mark.parametrize("path", UNITS, ids=lambda path: path.name)
def test_systemd_waits_longer_than_conductor_takes_to_stop(path):
    service = unit(path)["Service"]
    assert int(service["TimeoutStopSec"]) > GRACE_SECONDS
    assert service["Restart"] == "on-failure"
    if "serve" in service["ExecStart"]:
        # SIGTERM to serve alone: it stops its children in order.
        assert service["KillMode"] == "mixed"
        assert "KillSignal" not in service
    else:
        # As serve stops its cluster: SIGINT to every process of it.
        assert service["KillMode"] == "control-group"
        assert service["KillSignal"] == "SIGINT"


@pytest.mark.parametrize("path", UNITS, ids=lambda path: path.name)
def test_systemd_analyze_verify_accepts_the_unit(path, tmp_path):
    systemd_analyze = require_tool("systemd-analyze", package="systemd", optional=True)
    # It checks that ExecStart's program exists: point the unit at this checkout.
    local = tmp_path / path.name
    local.write_text(path.read_text().replace(CHECKOUT, str(ROOT)))
    result = run([systemd_analyze, "verify", str(local)])
    assert result.returncode == 0, result.stderr
    # Unknown keys and bad values are only warnings to it.
    assert str(local) not in result.stderr, result.stderr
