"""A change's commit → the side panel showing it, in real Chromium with the reference plugin.

Starts ``manage.py serve`` without the django-q2 cluster (this process moves
the task, as a worker would) on the configured database and channel layer,
loads ``plugin/`` into Debian's Chromium (as the browser tests do), pairs it,
and has a mock Claude page (``tests/plugin/chat_apps.py``) answer once with
one ``echo`` block. Its side panel (``panel.html?tab=<the chat's tab>``) is
open. Then --changes times, one at a time, this process changes the block's
task through the engine's transitions (it starts, then waits for a retry
with an error naming the change, then starts again …), each commit waking
this process's status push as a worker's does, and reads when the panel's
page drew it (a ``MutationObserver`` in the page; one machine, one clock).
Prints the median, p90 and max in milliseconds.

    uv run python bench/panel_latency.py [--changes 100]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_bench REDIS_URL=redis://127.0.0.1:6379/14 \\
        uv run python bench/panel_latency.py
"""

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    channel_layer_backend, database_engine, echo_block, fresh_plugin_client, option_parser, running_server,
    server_url, setup_django, summary,
)

CLIENT_ID = "bench-panel"
# In the panel's page: each block's status and error line as drawn, with the page's clock, in order.
RECORD = """() => {
    window.drawn = [];
    let last = '';
    const record = () => {
        const block = document.querySelector('.block');
        if (!block) return;
        const error = block.querySelector('.error')?.textContent ?? '';
        const seen = `${block.dataset.status}|${error}`;
        if (seen !== last) {
            last = seen;
            window.drawn.push([block.dataset.status, error, Date.now()]);
        }
    };
    new MutationObserver(record).observe(document.getElementById('messages'), {childList: true, subtree: true, characterData: true});
    record();
}"""


def measure(url: str, token: str, changes: int) -> list[int]:
    from concurrent.futures import ThreadPoolExecutor

    from django.db import transaction
    from django.db.models import Q

    from automation.models import AutomationTask
    from automation.services import transitions as tr
    from automation.services.leasing import tasks_lease
    from ingest.kinds import INSTRUCTION_EXECUTE
    from tests.browser import CHROMIUM
    from tests.plugin.chat_apps import chat_app
    from tests.plugin.extension import plugin_browser

    if not CHROMIUM:
        raise SystemExit("Chromium is not installed (apt-get install chromium)")
    latencies = []
    # Playwright's sync API keeps an event loop in this thread: the database is used from another.
    database = ThreadPoolExecutor(1)

    def db(call, *args, **kwargs):
        return database.submit(call, *args, **kwargs).result()

    with tempfile.TemporaryDirectory() as profile, plugin_browser(CHROMIUM, Path(profile)) as browser:
        app = chat_app("claude")
        app.install(browser.context)
        browser.pair(url, CLIENT_ID, token)
        browser.wait_for_state("connected")
        page = browser.open_chat(app)
        panel = browser.open_panel(browser.tab_id(page))
        app.answer_next(f"One step.\n\n{echo_block(1)}\n")
        page.evaluate("mockChat.ask('next', {holdMs: 0})")
        task = None
        for _ in range(600):
            task = db(lambda: AutomationTask.objects.filter(
                kind=INSTRUCTION_EXECUTE, message__client__client_id=CLIENT_ID).first())
            if task is not None and panel.evaluate("document.querySelector('.block') !== null"):
                break
            time.sleep(0.05)
        if task is None:
            raise SystemExit("the block did not reach the panel")
        db(lambda: AutomationTask.objects.filter(pk=task.pk).update(max_attempts=changes + 10))
        panel.evaluate(RECORD)

        def commit(change) -> float:
            with transaction.atomic():
                change()
            return time.time() * 1000

        def start(now: int) -> float:
            def lease_and_start() -> None:  # one commit, as the claim leases and starts a block's task
                tasks_lease({task.pk: AutomationTask.objects.get(pk=task.pk).status}, still_claimable=Q(),
                               lease_owner="bench", lease_until=now + 60_000, now=now)
                lease = AutomationTask.objects.get(pk=task.pk).lease
                tr.task_start(task.pk, lease=lease, lease_until=now + 60_000, now=now)

            return commit(lease_and_start)

        def wait_for_retry(now: int, error: str) -> float:
            lease = AutomationTask.objects.get(pk=task.pk).lease
            return commit(lambda: tr.task_retry_later(
                task.pk, lease=lease, error=error, retry_at=now, backoff_ms=0, jitter_ms=0, now=now))

        for n in range(changes):
            drawn_before = len(panel.evaluate("window.drawn"))
            time.sleep(0.25)  # past the 200 ms window of the last frame: each change is its own frame
            now = int(time.time() * 1000)
            if n % 2 == 0:
                committed = db(start, now)
                expected = ("running", "")
            else:
                committed = db(wait_for_retry, now, f"change {n}")
                expected = ("queued", f"change {n}")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                drawn = [at for status, text, at in panel.evaluate("window.drawn")[drawn_before:]
                         if (status, text) == expected]
                if drawn:
                    latencies.append(int(drawn[0] - committed))
                    break
                time.sleep(0.005)
            else:
                raise SystemExit(f"change {n} ({expected}) did not show in the panel; it drew "
                                 f"{panel.evaluate('window.drawn')[-3:]}")
    return latencies


def main() -> None:
    args = option_parser(__doc__, changes=100, port=8792).parse_args()
    setup_django(migrate=True)
    # This process's commits wake its own status push, as a worker's do.
    from automation.changes import task_changes
    from ingest.panel.push import tasks_changed

    task_changes.subscribe(tasks_changed)
    from conversations.models import Conversation

    Conversation.objects.filter(owner=CLIENT_ID).delete()  # an earlier run's chat, and its tasks
    _, token = fresh_plugin_client(CLIENT_ID)
    with running_server(args.port, cluster=False):
        latencies = measure(server_url(args.port), token, args.changes)
    print(f"commit -> side panel ({database_engine()}, {channel_layer_backend()}), {len(latencies)} changes: "
          f"latency_ms {summary(latencies, tail=90)}")


if __name__ == "__main__":
    main()
