"""One task, one worker under load (SPEC §4.1, §4.4), on a server as ``make run`` starts it.

100 simulated plugins send 25 final messages a second for 60 s, two ``echo``
blocks each, to ``manage.py serve`` (daphne and the django-q2 cluster) on
PostgreSQL and Redis: the load under which a claim once handed one task to two
workers (deliveries sent twice, lost leases, two lease events at one instant).
Every message must come back in exactly one delivery frame, the server must
log no ``lease_lost``, and no task may hold two lease events at one instant.
"""

import json
import os
import re
import time
from collections import Counter

import pytest
from django.core.management import call_command
from django.db import connections
from django.db.models import Count

from automation.models import TaskEvent
from ingest.services.clients import plugin_client_create
from tests.factories import TEST_TOKEN
from tests.load import plugin_fleet
from tests.server import running_server

pytestmark = [
    pytest.mark.django_db(transaction=True, databases="__all__"),
    pytest.mark.skipif(
        not os.environ.get("DATABASE_URL", "").startswith("postgres"),
        reason="the load of the finding, on PostgreSQL and Redis: the PostgreSQL + Redis configuration runs it",
    ),
    pytest.mark.timeout(600),
    pytest.mark.alone,
]

PLUGINS = 100
PER_SECOND = 25
SECONDS = 60
# The backlog a loaded CI machine leaves at the end of the window drains in this.
WAIT = 300


TAG = re.compile(r"load-(\d+)-block")


def final_message(n: int) -> dict:
    conversation = f"load-conv-{n % PLUGINS}"
    blocks = "\n".join(f"```baa\necho\n{json.dumps({'tag': f'load-{n}-block-{b}'})}\n```" for b in (1, 2))
    return {"type": "browser.final_message", "id": f"m{n}", "platform": "claude", "conversation_id": conversation,
            "message_id": f"m{n}", "text": f"Step {n}.\n{blocks}"}


def delivery_frames_per_message(plugins) -> Counter:
    """How many delivery frames named each message (a frame carries its blocks' echoed tags)."""
    frames: Counter = Counter()
    for plugin in plugins:
        for delivery in plugin.seen()["deliveries"]:
            frames.update({int(n) for n in TAG.findall(json.dumps(delivery))})
    return frames


def test_every_message_comes_back_once_and_no_lease_is_lost_under_load(tmp_path):
    clients = [f"load-{n}" for n in range(PLUGINS)]
    for client_id in clients:
        # A hundred people, each with a browser.
        plugin_client_create(name=client_id, token=TEST_TOKEN, owner=client_id)
    total = PER_SECOND * SECONDS
    try:
        with running_server(
            tmp_path, command="serve+cluster",
            CONDUCTOR_OUTBOUND_JITTER_MAX_MS="0", CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR="1000000",
        ) as server, plugin_fleet(server.ws_url, [(c, TEST_TOKEN) for c in clients]) as plugins:
            start = time.monotonic()
            for n in range(total):
                time.sleep(max(0.0, start + n / PER_SECOND - time.monotonic()))
                plugins[n % PLUGINS].send_final_message(final_message(n))
            deadline = time.monotonic() + WAIT
            while len(delivery_frames_per_message(plugins)) < total and time.monotonic() < deadline:
                time.sleep(1)
            time.sleep(3)  # a second frame for a message would come now
            frames = delivery_frames_per_message(plugins)
            log = server.log()
            leased_twice_at_once = list(
                TaskEvent.objects.filter(action="lease").values("task_id", "at")
                .annotate(n=Count("pk")).filter(n__gt=1).values_list("task_id", flat=True)
            )
    finally:
        for alias in connections:
            call_command("flush", interactive=False, database=alias, verbosity=0)

    assert sorted(frames) == list(range(total)), f"{total - len(frames)} messages never came back"
    assert [n for n, count in frames.items() if count != 1] == []
    assert "action=lease_lost" not in log
    assert leased_twice_at_once == []
