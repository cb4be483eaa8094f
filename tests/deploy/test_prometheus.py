"""The alert rules and the dashboard's queries, checked by promtool, and
checked against the names /metrics exports."""

from __future__ import annotations

import json
import re

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from automation.models import TaskStatus
from automation.services.dispatcher_state import dispatcher_worker_heartbeat
from conductor_site import metrics as conductor_metrics
from core.clock import now_ms
from tests.deploy.tools import ALERTS, ALERTS_TESTS, DASHBOARD, alert_rules, require_tool, run
from tests.factories import MessageFactory, make_task
from tests.server import running_server

# Suffixes Prometheus adds to a family's name for its samples.
SAMPLE_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")
TOKEN = "scrape-" + "d" * 40


@pytest.fixture
def promtool():
    return require_tool("promtool", package="prometheus")


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


@pytest.mark.database_free
def test_alert_rules_pass_promtool_check(promtool):
    result = run([promtool, "check", "rules", str(ALERTS)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


@pytest.mark.database_free
def test_every_alert_passes_its_promtool_unit_tests(promtool):
    result = run([promtool, "test", "rules", ALERTS_TESTS.name], cwd=ALERTS_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.database_free
def test_every_alert_is_tested_firing_and_staying_silent():
    evaluations = re.split(r"^\s*- eval_time: ", ALERTS_TESTS.read_text(), flags=re.MULTILINE)[1:]
    silent, firing = set(), set()
    for evaluation in evaluations:
        name = re.search(r"alertname: (\w+)", evaluation).group(1)
        (silent if re.search(r"exp_alerts: \[\]", evaluation) else firing).add(name)
    assert set(alert_rules()) == silent == firing


@pytest.mark.database_free
@pytest.mark.parametrize("name", list(alert_rules()))
def test_every_alert_waits_and_says_how_bad_and_what(name):
    rule = alert_rules()[name]
    assert re.search(r"^\s+for: \d+[smh]$", rule, flags=re.MULTILINE), "no for:"
    assert re.search(r"^\s+severity: (critical|warning)$", rule, flags=re.MULTILINE)
    assert re.search(r"^\s+summary: \S", rule, flags=re.MULTILINE)
    assert re.search(r"^\s+description: \S", rule, flags=re.MULTILINE)


@pytest.mark.database_free
def test_the_dashboards_queries_are_promql_promtool_parses(promtool, tmp_path):
    # promtool parses PromQL in rule files only: each query becomes a
    # recording rule. JSON is YAML, so no YAML library is needed to write it.
    rules = [{"record": f"dashboard:query_{n}", "expr": expr} for n, expr in enumerate(dashboard_exprs())]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run([promtool, "check", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.django_db
def test_every_metric_the_rules_and_the_dashboard_name_is_exported():
    exported = {family.name for family in conductor_metrics.registry.collect()}
    for path in (ALERTS, DASHBOARD):
        named = set(re.findall(r"\bconductor_[a-z_]+", path.read_text()))
        assert named, f"{path.name} names no Conductor metric"
        unknown = {
            name for name in named
            if name not in exported and not any(
                name.endswith(suffix) and name.removesuffix(suffix) in exported for suffix in SAMPLE_SUFFIXES
            )
        }
        assert not unknown, f"{path.name} names metrics /metrics does not export: {sorted(unknown)}"


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_promtool_check_metrics_accepts_a_live_scrape(promtool, tmp_path):
    # Rows for every family, so that each has samples, not only its HELP and TYPE.
    make_task(TaskStatus.FAILED, kind="test.instruction")
    MessageFactory()
    dispatcher_worker_heartbeat(owner="test", server="test", now=now_ms())
    with running_server(tmp_path, CONDUCTOR_METRICS_TOKEN=TOKEN) as server:
        response = requests.get(
            f"{server.base_url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        )
    assert response.status_code == 200, response.text
    families = {family.name: family for family in text_string_to_metric_families(response.text)}
    assert families["conductor_dispatcher_last_tick_age_seconds"].samples
    assert families["conductor_messages"].samples
    result = run([promtool, "check", "metrics"], input=response.text)
    assert result.returncode == 0, result.stdout + result.stderr
