"""PostgreSQL and Redis failing under load: nothing lost, nothing run twice.

Conductor (the ASGI server and the django-q2 cluster, as processes of their
own) runs on a PostgreSQL and a Redis this module starts itself, so that it
can cut their connections and restart them; the test reads what survived
with psycopg. Four simulated plugins stream final messages and answer every
delivery (one drops its socket on its first delivery frame); after each fault
the load is waited out and ``survey`` checks every invariant
(tests/faults/harness.py).
"""

import contextlib
import json
import os
import subprocess
import sys
import time

import pytest
from websockets.exceptions import WebSocketException

from tests.factories import TEST_TOKEN
from conductor_site.simulator import ProtocolError, SimulatedPlugin
from ingest.protocol import CloseCode
from tests.faults.harness import (
    ALLOWED_TOOLS,
    FAST,
    LEDGER,
    Load,
    block,
    survey,
    wait_until_over,
)
from tests.faults.own_servers import OwnPostgres, OwnRedis, missing_binaries
from tests.load import plugin_fleet
from tests.server import ROOT, running_cluster, running_server, server_env, wait_for

# Run in the PostgreSQL + Redis configuration only: these faults are faults of
# PostgreSQL and Redis, which the embedded default (SQLite) does not use, and
# their servers take seconds to start that the other run need not pay.
pytestmark = [
    pytest.mark.skipif(
        not os.environ.get("DATABASE_URL", "").startswith("postgres"),
        reason="PostgreSQL and Redis faults run in the PostgreSQL + Redis configuration",
    ),
    pytest.mark.skipif(
        bool(missing_binaries()), reason=f"missing {', '.join(missing_binaries())}"
    ),
]

CLIENTS = [f"plugin-{n}" for n in range(4)]
# A plugin that keeps one socket across a Redis restart (it does not reconnect unless closed).
WATCHER = "watcher"
DROPS = {CLIENTS[0]: 1}
# How long the load may take to be over after a fault. A delivery whose frame the
# fault swallowed waits out its timeout and a backoff before it goes again; with
# the browser tests running beside this one in CI, two such rounds can pass 90 s.
# A lost or doubled message still fails, however long this is.
WAIT = 150

PREPARE = f"""
from django.core.management import call_command
from ingest.models import ToolPolicy
from ingest.services.clients import plugin_client_create
call_command("migrate_all", verbosity=0)
for name in {[*CLIENTS, WATCHER]!r}:
    plugin_client_create(name=name, token={TEST_TOKEN!r})
for tool in {ALLOWED_TOOLS!r}:
    ToolPolicy.objects.create(tool=tool, policy="allow")
"""


@pytest.fixture(scope="module")
def servers():
    postgres, cache = OwnPostgres(), OwnRedis()
    try:
        yield postgres.start(), cache.start()
    finally:
        postgres.remove()
        cache.remove()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("workspace")
    (root / LEDGER).mkdir()
    return root


@pytest.fixture(scope="module")
def conductor(servers, workspace, tmp_path_factory):
    postgres, cache = servers
    env = {
        **FAST,
        "CONDUCTOR_WORKSPACE": str(workspace),
        "DATABASE_URL": postgres.url,
        "REDIS_URL": cache.url,
    }
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", PREPARE],
        cwd=ROOT,
        check=True,
        env=server_env(tmp_path_factory.mktemp("prepare"), **env),
    )
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(
            running_server(tmp_path_factory.mktemp("server"), command="serve", **env)
        )
        stack.enter_context(running_cluster(tmp_path_factory.mktemp("cluster"), **env))
        # Running before any fault: a cluster whose start meets Redis away exits (django-q2 pings it
        # first). Its dispatcher loop's row says it runs.
        wait_for(lambda: loops_at_work(postgres), "the cluster's dispatcher loop", timeout=120)
        yield server


def loops_at_work(postgres) -> int:
    with cursor_of(postgres) as cursor:
        cursor.execute("SELECT count(*) FROM automation_dispatcherworker")
        return cursor.fetchone()[0]


@contextlib.contextmanager
def cursor_of(postgres):
    with postgres.connect() as connection, connection.cursor() as cursor:
        yield cursor


def over(postgres, load, workspace):
    wait_until_over(lambda: cursor_of(postgres), load, timeout=WAIT)
    with cursor_of(postgres) as cursor:
        return survey(cursor, load, workspace)


def fleet(server):
    return plugin_fleet(server.ws_url, [(c, TEST_TOKEN) for c in CLIENTS], drops=DROPS)


def test_connections_cut_mid_transaction_lose_nothing_and_run_nothing_twice(
    servers, conductor, workspace
):
    postgres, _ = servers
    with fleet(conductor) as plugins:
        load = Load(plugins, prefix="cut", count=16).start()
        cut, deadline = 0, time.monotonic() + WAIT
        while (not load.done.is_set() or cut < 3) and time.monotonic() < deadline:
            cut += postgres.terminate_in_transaction()
            time.sleep(0.05)
        result = over(postgres, load, workspace)
    assert result.messages_stored == 16 and cut >= 3


def test_postgresql_restarted_mid_stream_loses_nothing_and_runs_nothing_twice(
    servers, conductor, workspace
):
    postgres, _ = servers
    with fleet(conductor) as plugins:
        load = Load(plugins, prefix="pg-restart", count=16).start()
        wait_for(load.streaming, "every plugin to stream", timeout=WAIT)
        postgres.restart()
        result = over(postgres, load, workspace)
    assert result.messages_stored == 16


# How long Redis stays away: longer than a delivery's send takes, so that sends fail meanwhile.
REDIS_AWAY_SECONDS = 5


def test_redis_restarted_mid_stream_loses_nothing_and_runs_nothing_twice(
    servers, conductor, workspace
):
    postgres, cache = servers
    with fleet(conductor) as plugins:
        load = Load(plugins, prefix="redis-restart", count=16).start()
        wait_for(load.streaming, "every plugin to stream", timeout=WAIT)
        cache.kill()
        time.sleep(REDIS_AWAY_SECONDS)  # deliveries sent meanwhile wait for it, using no attempt
        cache.start()  # empty: the channel layer's groups and the broker's queue are gone
        result = over(postgres, load, workspace)
    assert result.messages_stored == 16


def test_a_socket_open_across_a_redis_restart_is_served_or_closed(servers, conductor):
    """Never a socket that looks open and receives nothing: after Redis is back, a
    message sent on the socket as it stands gets its status and its delivery, or
    the socket was closed and a reconnect gets them."""
    _, cache = servers
    plugin = SimulatedPlugin(url=conductor.ws_url, client_id=WATCHER, token=TEST_TOKEN).connect()
    plugin.look_at("claude", "watch")  # its side panel is open on the conversation
    try:
        cache.kill()
        time.sleep(REDIS_AWAY_SECONDS)
        cache.start()
        time.sleep(2)  # longer than a ping interval (FAST): the socket had its chance to renew
        frame = {
            "type": "browser.final_message", "id": "f-watch", "platform": "claude",
            "conversation_id": "watch", "organization_id": "org", "message_id": "watch-1",
            "page_url": "https://claude.ai/chat/watch", "text": block("echo", {"tag": "watch"}),
        }
        try:
            plugin.send_final_message(frame)
        except (WebSocketException, ProtocolError, TimeoutError) as closed:
            # Closed while Redis was away, saying why: the plugin reconnects, as the reference plugin does.
            assert getattr(getattr(closed, "rcvd", None), "code", None) == CloseCode.TRY_AGAIN, repr(closed)
            plugin.close()
            plugin = SimulatedPlugin(url=conductor.ws_url, client_id=WATCHER, token=TEST_TOKEN).connect()
            plugin.look_at("claude", "watch")  # its panel asks again on reconnecting, as the reference plugin's does
            plugin.send_final_message(frame)
        delivery = plugin.next_delivery(timeout=60)
        assert "watch" in json.dumps(delivery)
        assert any(status.get("conversation_id") == "watch" for status in plugin.statuses)
    finally:
        plugin.close()
