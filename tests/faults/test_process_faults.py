"""Conductor's own processes killed under load: nothing lost, nothing run twice.

The ASGI server and the django-q2 cluster run as separate processes (as
``manage.py serve`` starts them, each in a process group of its own) on the
configured database and broker, so that either can be killed alone. Four
simulated plugins stream final messages and answer every delivery; one of
them drops its socket on its first delivery frame instead of answering (a
browser closed mid-delivery). After each fault, the load is waited out and
``survey`` checks every invariant (tests/faults/harness.py).
"""

import contextlib
import os
import signal

import pytest
from django.core.management import call_command
from django.db import connection, connections

from automation.models import AutomationTask
from ingest.models import ToolPolicy
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.faults.harness import (
    ALLOWED_TOOLS,
    FAST,
    LEDGER,
    Load,
    survey,
    wait_until_over,
)
from tests.load import plugin_fleet
from tests.server import running_cluster, running_server, wait_for

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

CLIENTS = [f"plugin-{n}" for n in range(4)]
# The plugin that disconnects on its first delivery frame, before answering.
DROPS = {CLIENTS[0]: 1}
WAIT = 90


class Conductor:
    """The ASGI server and the cluster, each restartable on its own."""

    def __init__(self, tmp_path_factory, workspace):
        self.stack = contextlib.ExitStack()
        self.tmp = tmp_path_factory
        self.env = {**FAST, "CONDUCTOR_WORKSPACE": str(workspace)}
        self.server = self.cluster = None
        self.port = None

    def start_server(self):
        self.server = self.stack.enter_context(
            running_server(
                self.tmp.mktemp("server"), command="serve", port=self.port, **self.env
            )
        )
        self.port = self.server.port

    def start_cluster(self):
        self.cluster = self.stack.enter_context(
            running_cluster(self.tmp.mktemp("cluster"), **self.env)
        )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("workspace")
    (root / LEDGER).mkdir()
    return root


@pytest.fixture(scope="module")
def conductor(django_db_setup, django_db_blocker, tmp_path_factory, workspace):
    conductor = Conductor(tmp_path_factory, workspace)
    with conductor.stack:
        conductor.start_server()
        conductor.start_cluster()
        yield conductor
    # The cluster kept ticking after the last test's flush: leave the
    # databases as the next module expects them.
    with django_db_blocker.unblock():
        for alias in connections:
            call_command("flush", interactive=False, database=alias, verbosity=0)


@pytest.fixture(autouse=True)
def clients(db):
    for client_id in CLIENTS:
        PluginClientFactory(client_id=client_id)
    for tool in ALLOWED_TOOLS:
        ToolPolicy.objects.create(tool=tool, policy="allow")


def fleet(conductor):
    return plugin_fleet(
        conductor.server.ws_url, [(c, TEST_TOKEN) for c in CLIENTS], drops=DROPS
    )


def owner_pid(owner: str) -> int:
    """The process id inside a lease owner ("host:pid:suffix")."""
    return int(owner.split(":")[-2])


def running_slow_task() -> AutomationTask | None:
    return (
        AutomationTask.objects.filter(status="running", instruction__tool="shell.run")
        .exclude(lease_owner=None)
        .first()
    )


def over(load, workspace):
    wait_until_over(connection.cursor, load, timeout=WAIT)
    with connection.cursor() as cursor:
        return survey(cursor, load, workspace)


def test_the_asgi_server_killed_mid_stream_loses_no_message_and_delivers_each_once(
    conductor, workspace
):
    with fleet(conductor) as plugins:
        load = Load(plugins, prefix="asgi", count=16).start()
        wait_for(load.streaming, "every plugin to stream", timeout=WAIT)
        conductor.server.kill()
        conductor.start_server()  # on the same port: the plugins reconnect and send again what had no ack
        result = over(load, workspace)
    assert result.messages_stored == 16
    # Every plugin was connected before the kill and connected again after it.
    assert sum(p.connections for p in plugins) >= 2 * len(CLIENTS)


def test_a_cluster_worker_killed_mid_task_runs_nothing_twice(conductor, workspace):
    with fleet(conductor) as plugins:
        load = Load(plugins, prefix="worker", count=12, slow_every=4).start()
        task = wait_for(running_slow_task, "a slow command to run", timeout=WAIT)
        # Tasks run in threads of the worker that runs the dispatcher loop.
        os.kill(owner_pid(task.lease_owner), signal.SIGKILL)
        result = over(load, workspace)
    # The killed command failed as interrupted and was not run again.
    assert result.interrupted >= 1
    task.refresh_from_db()
    assert (task.status, task.attempt_count) == ("failed", 1)


def test_the_whole_cluster_killed_and_restarted_runs_nothing_twice(
    conductor, workspace
):
    with fleet(conductor) as plugins:
        load = Load(plugins, prefix="cluster", count=12, slow_every=4).start()
        wait_for(running_slow_task, "a slow command to run", timeout=WAIT)
        conductor.cluster.kill()
        # The dead loops still hold both places: the new cluster's loops take
        # them over once their leases lapse, rather than going away.
        conductor.start_cluster()
        result = over(load, workspace)
    assert result.interrupted >= 1
