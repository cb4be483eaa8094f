"""Why tasks ended, in real headless Chromium: rejections apart from faults, rows that say
what ran at 1280 px, attempts per series, and a failure group retried through the bulk page.

Screenshots of the list, the failure groups and the overview go to
``CONDUCTOR_SCREENSHOT_DIR`` (default ``bench/out``, not committed).
"""

import os
import threading
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from automation.models import AutomationTask, TaskStatus
from automation.services import transitions as tr
from automation.services.tasks import task_create
from automation.wake import wakes_go_to
from conductor_site import metrics as conductor_metrics
from core.clock import now_ms
from ingest.kinds import INSTRUCTION_EXECUTE
from tests.browser import CHROMIUM_ARGS, require_chromium
from tests.console.test_admin_browser import PASSWORD, TASKS, collect_static, log_in
from tests.server import ROOT, running_server
from tests.factories import lease_of, task_lease

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

WIDTH = 1280


@pytest.fixture
def chromium():
    return require_chromium()


@pytest.fixture
def screenshots():
    folder = Path(os.environ.get("CONDUCTOR_SCREENSHOT_DIR", ROOT / "bench" / "out"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def failed_call(tool, params, error, *, retried=False):
    """An instruction.execute task that ran its tool and failed; with ``retried``, retried once and failed again."""
    now = now_ms()
    task, _ = task_create(kind=INSTRUCTION_EXECUTE, payload={"tool": tool, "params": params}, actor="test", now=now)
    for _ in range(2 if retried else 1):
        task_lease(task.pk, lease_owner="d1", lease_until=now + 60_000, now=now)
        tr.task_start(task.pk, lease=lease_of(task.pk), lease_until=now + 60_000, now=now)
        task = tr.task_fail(task.pk, lease=lease_of(task.pk), error=error, now=now)
        if retried and task.retry_count == 0:
            tr.task_retry(task.pk, actor="operator", now=now)
    return task


def failed_metric(reason):
    """conductor_tasks{status="failed", reason=...} summed over kinds, as /metrics says it."""
    family = next(f for f in conductor_metrics.registry.collect() if f.name == "conductor_tasks")
    return sum(s.value for s in family.samples if s.labels["status"] == "failed" and s.labels["reason"] == reason)


def test_rejections_are_not_faults_rows_say_what_ran_and_a_failure_group_is_retried(
    chromium, screenshots, tmp_path_factory, monkeypatch,
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import expect, sync_playwright

    served_dir = tmp_path_factory.mktemp("served")
    collect_static(served_dir)
    User.objects.create_superuser("operator", password=PASSWORD)
    with wakes_go_to(threading.Event()):
        held = [
            task_create(kind=INSTRUCTION_EXECUTE, payload={"tool": "shell.run", "params": {"argv": ["rm", str(n)]}},
                        actor="test", status=TaskStatus.BLOCKED)[0]
            for n in range(20)
        ]
        missing = [
            failed_call("files.read", {"path": f"notes/missing-{n}.md", "max_bytes": 4096},
                        f"no such file: notes/missing-{n}.md (errno 2)\nTraceback ...")
            for n in range(3)
        ]
        timeouts = [
            failed_call("shell.run", {"argv": ["make", "test"], "cwd": "."}, f"timed out after {n}0 s")
            for n in (3, 4)
        ]
        twice = failed_call("files.read", {"path": "notes/gone.md"}, "no such file: notes/gone.md (errno 2)",
                            retried=True)
    faults_before = failed_metric("fault")
    assert faults_before == 6

    with running_server(served_dir) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": WIDTH, "height": 900})
        page.set_default_timeout(20_000)
        log_in(page, server.base_url, "/admin/overview/")
        fault_total = page.locator('#status-totals td[data-status="fault"]')
        expect(fault_total).to_have_text("6")

        # 1. Reject the 20 held tasks.
        page.goto(f"{server.base_url}{TASKS}?status__exact=blocked")
        page.locator("#action-toggle").check()
        page.select_option("select[name=action]", "reject")
        page.click("button[name=index]")
        # Each call first, with a field for the reason; the reason goes on every task.
        page.fill("#decision-reason", "not today")
        page.click("input[type=submit][value='Yes, reject 20 tasks']")
        expect(page.locator("ul.messagelist")).to_contain_text("Rejected 20")
        assert {t.last_error for t in AutomationTask.objects.filter(pk__in=[t.pk for t in held])} == {
            "rejected by operator: not today"}
        assert AutomationTask.objects.filter(pk__in=[t.pk for t in held], finish_reason="rejected").count() == 20
        assert failed_metric("fault") == faults_before and failed_metric("rejected") == 20
        page.goto(f"{server.base_url}/admin/overview/")
        expect(fault_total).to_have_text("6")
        expect(page.locator('#status-totals td[data-status="rejected"]')).to_have_text("20")
        expect(page.locator("#throughput-failed")).to_have_text("6")  # each failed task once, twice too
        expect(page.locator("#throughput-rejected")).to_have_text("20")
        page.screenshot(path=str(screenshots / "overview.png"), full_page=True)

        # 2. The list at 1280 px: tool, args and error, no horizontal scrolling.
        page.goto(f"{server.base_url}{TASKS}?status__exact=failed&outcome=fault")
        rows = page.locator("#result_list")
        expect(rows).to_contain_text("files.read")
        expect(rows).to_contain_text('"path":"notes/missing-1.md"')
        expect(rows).to_contain_text("no such file: notes/missing-1.md (errno 2)")
        expect(rows).not_to_contain_text("Traceback")
        expect(rows).to_contain_text("shell.run")
        assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
        # Nor inside the list's own scrolling box: the table fits it.
        box = page.evaluate("(() => { const box = document.querySelector('#result_list').parentElement;"
                            " return [box.scrollWidth, box.clientWidth]; })()")
        assert box[0] <= box[1], box
        # 3. The retried task: its second series' first run.
        row = page.locator("#result_list tr", has_text=twice.task_id[:8])
        expect(row).to_contain_text("run 1 of 3, series 2")
        expect(row.locator(f'span[title="{twice.task_id}"]')).to_have_count(1)
        page.screenshot(path=str(screenshots / "task-list.png"), full_page=True)

        # 4. Failures by cause: the missing files, whatever their numbers, are one group.
        page.goto(f"{server.base_url}/admin/failures/")
        group = page.locator("tr.failure-group", has_text="missing-<n>")
        expect(group).to_have_count(1)
        expect(group).to_contain_text("files.read")
        expect(group).to_contain_text("no such file: notes/missing-<n>.md (errno <n>)")
        expect(group.locator("td.count")).to_have_text("3")
        expect(page.locator("tr.failure-group")).to_have_count(3)  # and gone.md, and the timeouts
        page.screenshot(path=str(screenshots / "failure-groups.png"), full_page=True)
        group.locator("input.retry-group").click()
        expect(page.locator("h1")).to_contain_text("Retry every task the list matches?")
        page.click("input[type=submit][value^='Yes, retry 3']")
        expect(page.locator("ul.messagelist")).to_contain_text("Retried 3")
        browser.close()

    group_ids = {t.pk for t in missing}
    retried = set(AutomationTask.objects.filter(retry_count__gte=1).exclude(pk=twice.pk).values_list("pk", flat=True))
    assert retried == group_ids
    assert all(
        (t.status, t.retry_count) == (TaskStatus.FAILED, 0)
        for t in AutomationTask.objects.filter(pk__in=[t.pk for t in timeouts])
    )
