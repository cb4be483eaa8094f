"""deploy/grafana/conductor.json is a dashboard Grafana imports as it is."""

from __future__ import annotations

import json

import pytest

from tests.deploy.tools import DASHBOARD

pytestmark = pytest.mark.database_free

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_COLUMNS = 24


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_dashboard_has_its_identity_and_a_schema_version(dashboard):
    assert dashboard["uid"] == "conductor"
    assert dashboard["title"] == "Conductor"
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    # An id ties a dashboard to one Grafana's database: an importable one has none.
    assert "id" not in dashboard


def test_the_data_source_is_a_variable_so_any_prometheus_can_be_picked(dashboard):
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), panel["title"]


def test_panels_have_unique_ids_and_refids_and_do_not_overlap(dashboard):
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    taken: set[tuple[int, int]] = set()
    for panel in panels:
        ref_ids = [target["refId"] for target in panel.get("targets", [])]
        assert len(set(ref_ids)) == len(ref_ids), panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= GRID_COLUMNS, panel["title"]
        cells = {(grid["y"] + dy, grid["x"] + dx) for dy in range(grid["h"]) for dx in range(grid["w"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
