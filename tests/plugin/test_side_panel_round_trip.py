"""End to end: the side panel follows three blocks through a running Conductor, one of them approved in the admin.

Real processes: ``manage.py serve`` (daphne and the django-q2 cluster) on
the test databases, Debian's Chromium with ``plugin/`` loaded, a mock
Claude page (``chat_apps.py``). The assistant answers with ``echo``,
``files.list`` and ``shell.run``; the panel (``panel.html?tab=<id>``) shows
the first two queued (or running already, when the dispatcher started one
before the first frame was read) and then succeeded, and ``shell.run`` wait
for approval; the badge counts it, the panel's **Approve in Conductor** opens
the story page, where a staff user logs in and approves it; the panel then
shows it run (it sleeps past the frames' 200 ms window) and succeed, the
results delivered, and the badge clears. How long the panel took to show
each change after the server made it is printed, not asserted.
"""

import json
import re

import pytest

from automation.models import AutomationTask, TaskEvent, TaskStatus
from ingest.kinds import INSTRUCTION_EXECUTE
from tests.factories import TEST_TOKEN, PluginClientFactory, make_staff
from tests.plugin.chat_apps import chat_app
from tests.plugin.extension import plugin_browser
from tests.plugin.test_round_trip import WAIT, chromium, server_env  # noqa: F401 (fixtures)
from tests.server import running_server

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

PASSWORD = "a-long-operator-password-9f2c"
ANSWER = (
    "Three steps.\n\n"
    "```baa\necho\n{\"step\": 1}\n```\n\n"
    "```baa\nfiles.list\n{\"path\": \".\"}\n```\n\n"
    "```baa\nshell.run\n{\"argv\": [\"sh\", \"-c\", \"sleep 0.6; echo approved\"]}\n```\n"
)
ANSWER_HTML = (
    "<p>Three steps.</p>"
    '<pre><code class="language-baa">echo\n{"step": 1}\n</code></pre>'
    '<pre><code class="language-baa">files.list\n{"path": "."}\n</code></pre>'
    '<pre><code class="language-baa">shell.run\n{"argv": ["sh", "-c", "sleep 0.6; echo approved"]}\n</code></pre>'
)
# Keeps, in the panel's page, every status each block and delivery showed, in order, with the time it showed.
RECORD = """() => {
    window.shown = [];
    const last = {};
    const record = () => {
        const now = Date.now();
        for (const node of document.querySelectorAll('.block, .delivery')) {
            const message = node.closest('.message').dataset.conductorMessageId;
            const key = node.classList.contains('block') ? `${message}:${node.dataset.index}` : `${message}:delivery`;
            const status = node.dataset.status ?? node.dataset.delivery;
            if (last[key] !== status) {
                last[key] = status;
                window.shown.push([key, status, now]);
            }
        }
    };
    new MutationObserver(record).observe(document.getElementById('messages'), {childList: true, subtree: true});
    record();
}"""


def shown(panel, key):
    """The statuses block (or delivery) ``key`` showed in the panel, in order, each with when."""
    return [(status, at) for shown_key, status, at in panel.evaluate("window.shown") if shown_key == key]


def statuses(panel, key):
    return [status for status, _ in shown(panel, key)]


def print_latencies(task, panel, key):
    """From each status change of ``task`` in the database to the panel showing it (printed, not asserted)."""
    block_status = {TaskStatus.PENDING: "queued", TaskStatus.BLOCKED: "waiting_approval",
                    TaskStatus.RUNNING: "running", TaskStatus.SUCCEEDED: "succeeded"}
    seen = dict(reversed(shown(panel, key)))  # the first time each status showed
    for event in TaskEvent.objects.filter(task=task).order_by("at", "pk"):
        status = block_status.get(event.status_to)
        if status in seen:
            print(f"{key} {event.action} -> {status}: the panel showed it {seen[status] - event.at} ms later")


def test_the_panel_follows_three_blocks_through_an_approval_in_the_admin(chromium, tmp_path, server_env):
    (tmp_path / "workspace" / "notes.md").write_text("plans\n")
    PluginClientFactory(client_id="laptop")
    make_staff("operator", "conversations.view_conversation", "automation.view_automationtask",
               "automation.change_automationtask", "automation.approve_code", password=PASSWORD)
    app = chat_app("claude")
    with (
        running_server(tmp_path, command="serve+cluster", **server_env) as server,
        plugin_browser(chromium, tmp_path / "profile") as browser,
    ):
        app.install(browser.context)
        browser.pair(server.base_url, "laptop", TEST_TOKEN)
        browser.wait_for_state("connected")
        page = browser.open_chat(app)
        panel = browser.open_panel(browser.tab_id(page))
        browser.wait_in_extension_page(panel, "document.getElementById('empty').hidden === false",
                                       "the panel to show the conversation, without blocks yet")
        panel.evaluate(RECORD)

        app.answer_next(ANSWER)
        page.evaluate("([html]) => mockChat.ask('Run the checks', {html})", [ANSWER_HTML])

        def panel_keys():
            return {key for key, _, _ in panel.evaluate("window.shown")}

        browser.wait_until(lambda: {k for k in panel_keys() if k.endswith((":1", ":2", ":3"))}, "the blocks in the panel", WAIT)
        [message_key] = {key.split(":")[0] for key in panel_keys()}
        browser.wait_until(lambda: statuses(panel, f"{message_key}:3")[-1:] == ["waiting_approval"]
                           and statuses(panel, f"{message_key}:1")[-1:] == ["succeeded"]
                           and statuses(panel, f"{message_key}:2")[-1:] == ["succeeded"],
                           "echo and files.list to succeed and shell.run to wait", WAIT)
        for index in (1, 2):
            went = statuses(panel, f"{message_key}:{index}")
            print(f"block {index} showed {went}")
            # A quick tool may have finished before the first push was read: the latest state wins.
            assert went[0] in ("queued", "running", "succeeded") and went[-1] == "succeeded" and "failed" not in went
        assert statuses(panel, f"{message_key}:3") == ["waiting_approval"]
        assert panel.evaluate("document.querySelector('[data-index=\"3\"] .chip').textContent") == "waiting for approval"
        assert json.loads(panel.evaluate("document.querySelector('[data-index=\"1\"] .result').textContent")) == {"step": 1}
        assert "notes.md" in panel.evaluate("document.querySelector('[data-index=\"2\"] .result').textContent")
        browser.wait_until(lambda: browser.badge() == "1", f"the badge to read 1 (it reads {browser.badge()!r})", WAIT)
        assert panel.is_visible("#approvals")

        # Approve in Conductor: the story page, behind the admin's login.
        href = panel.get_attribute("a.approve", "href")
        assert href.startswith(f"{server.base_url}/admin/")
        with browser.context.expect_page() as opened:
            panel.evaluate("document.querySelector('a.approve').click()")
        admin = opened.value
        admin.set_default_timeout(WAIT * 1000)
        admin.wait_for_selector("#id_username")
        admin.fill("#id_username", "operator")
        admin.fill("#id_password", PASSWORD)
        admin.click("input[type=submit]")
        held = admin.locator(".story-block.held")
        held.get_by_role("button", name="Approve and run").click()
        admin.wait_for_selector("ul.messagelist")
        assert "Approved block 3 (shell.run)" in admin.inner_text("ul.messagelist")

        browser.wait_until(lambda: statuses(panel, f"{message_key}:3")[-1:] == ["succeeded"],
                           "shell.run to succeed in the panel", WAIT)
        went = statuses(panel, f"{message_key}:3")
        print(f"block 3 showed {went}")
        assert went[0] == "waiting_approval" and "running" in went and went[-1] == "succeeded" and "failed" not in went
        assert went.index("running") < went.index("succeeded")
        assert "approved" in panel.evaluate("document.querySelector('[data-index=\"3\"] .result').textContent")
        browser.wait_until(lambda: statuses(panel, f"{message_key}:delivery")[-1:] == ["delivered"],
                           "the delivery in the panel", WAIT)
        assert panel.evaluate("document.querySelector('.delivery').textContent") == "Results delivered via http"
        browser.wait_until(lambda: browser.badge() == "on", "the badge to clear", WAIT)
        assert not panel.is_visible("#approvals")

        [posted] = app.deliveries()
        results = [json.loads(block) for block in re.findall(r"```baa-result\n(.*?)\n```", app.delivered_text(posted), re.S)]
        assert [(result["tool"], result["ok"]) for result in results] == [("echo", True), ("files.list", True), ("shell.run", True)]

        tasks = {task.payload["tool"]: task for task in AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE)}
        for index, tool in enumerate(("echo", "files.list", "shell.run"), start=1):
            print_latencies(tasks[tool], panel, f"{message_key}:{index}")
