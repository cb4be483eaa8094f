"""The dispatcher loop in real processes: under `serve` as `make run` starts it, and
as the schedule starts it again and again, on the configured database and broker."""

import itertools
import json
import os
import random
import signal
import time

import pytest
from websockets.sync.client import connect

from automation.models import AutomationTask, DispatcherWorker, TaskEvent
from automation.selectors import dispatcher_worker_newest
from ingest.kinds import INSTRUCTION_EXECUTE
from ingest.models import ToolPolicy
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.procs import spawn_process
from tests.server import running_server, wait_for

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def workers() -> dict[str, str]:
    """The loops at work: ``{owner: server}``."""
    return dict(DispatcherWorker.objects.values_list("owner", "server"))


def last_tick_owner() -> str:
    """The loop that beat last (a loop beats after a tick): "" before any."""
    newest = dispatcher_worker_newest()
    return newest.owner if newest else ""


def owner_pid(owner: str) -> int:
    """The process id inside a lease owner ("host:pid:suffix")."""
    return int(owner.split(":")[-2])


def say_hello(ws, client_id="laptop-chrome"):
    ws.send(json.dumps({"type": "hello", "client_id": client_id, "token": TEST_TOKEN}))
    assert json.loads(ws.recv(timeout=10))["type"] == "hello.ok"


def send_message(ws, n: int, block: str) -> None:
    ws.send(json.dumps({
        "type": "browser.final_message", "id": f"f{n}", "platform": "claude",
        "conversation_id": f"c{n}", "message_id": f"m{n}", "text": f"Step {n}.\n```baa\n{block}\n```",
    }))


def serve_frames(ws, seconds: float) -> list[dict]:
    """Read frames for ``seconds``, answering deliveries as a chat page would; return them."""
    frames, deadline = [], time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            frame = json.loads(ws.recv(timeout=left))
        except TimeoutError:
            break
        frames.append(frame)
        if frame["type"] == "browser.proxy_delivery":
            ws.send(json.dumps({"type": "browser.proxy_delivery.result", "request_id": frame["request_id"],
                                "ok": True, "status": 200, "body": "", "error": None}))
    return frames


def tick_sampler():
    """Record every distinct newest heartbeat (epoch ms, one at most every half tick) seen while polling."""
    ticks = []

    def sample():
        newest = dispatcher_worker_newest()
        last = newest.heartbeat_at if newest else None
        if last and (not ticks or last != ticks[-1]):
            ticks.append(last)

    return ticks, sample


def test_scheduled_again_and_again_one_loop_of_the_server_keeps_ticking_without_a_gap(monkeypatch):
    """Each firing of the schedule starts a loop; the first ticks throughout, the rest see it and return."""
    # Each firing starts a fresh interpreter (a second of CPU on a 2-core
    # machine), so the tick leaves room for the scheduler's hiccups, and the
    # firings come 2.5 s apart, not to keep both cores busy on a loaded CI
    # machine (a late heartbeat is what this test is there to catch, not
    # one caused by the test's own load).
    tick = 0.5
    monkeypatch.setenv("CONDUCTOR_TICK_SECONDS", str(tick))
    monkeypatch.setenv("CONDUCTOR_SERVER_NAME", "server-a")
    ticks, sample = tick_sampler()
    firings = [spawn_process("automation.jobs:dispatch_run", ())]
    try:
        runner = wait_for(lambda: last_tick_owner(), "the first loop to tick")
        next_firing = time.monotonic()
        while len(firings) < 10:
            sample()
            if time.monotonic() >= next_firing:
                firings.append(spawn_process("automation.jobs:dispatch_run", ()))
                next_firing += 2.5
            time.sleep(0.01)
        end = time.monotonic() + 30
        while time.monotonic() < end and any(p.is_alive() for p in firings if p.pid != owner_pid(runner)):
            sample()  # the later firings start (a second or two each), see the runner beat, return
            time.sleep(0.01)

        assert last_tick_owner() == runner and workers() == {runner: "server-a"}
        still_running = [p.pid for p in firings if p.is_alive()]
        assert still_running == [owner_pid(runner)]  # the rest returned
    finally:
        for process in firings:
            if process.is_alive():
                os.kill(process.pid, signal.SIGTERM)
        for process in firings:
            process.join(20)
    gaps = [(b - a) / 1000 for a, b in itertools.pairwise(ticks)]
    assert len(gaps) > 25
    # A loop lost would leave a gap of the stall time (10 s); a few ticks is
    # what a machine running another test worker beside this one costs.
    assert max(gaps) < 6 * tick, max(gaps)
    assert [p.exitcode for p in firings] == [0] * len(firings)
    assert workers() == {}


def test_a_task_much_longer_than_the_clusters_timeout_succeeds_unreclaimed(tmp_path):
    """A live task is bounded by its own lease and heartbeat only, never by the loop's schedule."""
    PluginClientFactory(client_id="laptop-chrome")
    ToolPolicy.objects.create(tool="shell.run", policy="allow")
    env = dict(CONDUCTOR_TICK_SECONDS="0.2", CONDUCTOR_LEASE_SECONDS="2", CONDUCTOR_Q_TIMEOUT_SECONDS="4",
               CONDUCTOR_WORKSPACE=str(tmp_path / "workspace"))
    with running_server(tmp_path, command="serve+cluster", **env) as server, connect(server.ws_url) as ws:
        say_hello(ws)
        runner = wait_for(lambda: last_tick_owner(), "the loop to tick")
        send_message(ws, 1, 'shell.run\n{"argv": ["sleep", "16"], "timeout_s": 30}')

        def finished():
            serve_frames(ws, 0.2)
            task = AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE).first()
            return task if task and task.is_terminal else None

        task = wait_for(finished, "the long command to finish", timeout=60)
        assert last_tick_owner() == runner and runner in workers()  # one loop throughout, 4× the cluster's timeout

    assert (task.status, task.attempt_count) == ("succeeded", 1), task.last_error
    assert json.loads(task.result_json)["exit_code"] == 0
    # Its 2 s lease lapsed eight times over without a reclaim: the heartbeat
    # renewed it throughout (renewals are not events: SPEC §2.1 logs changes of state).
    assert not task.events.filter(action="reclaim").exists()


def test_a_message_committed_at_any_moment_is_claimed_through_the_wake_up(tmp_path):
    """Ticks are 10 s apart, so only the wake-up explains a claim within a second or two."""
    PluginClientFactory(client_id="laptop-chrome")
    rng = random.Random()
    env = dict(CONDUCTOR_TICK_SECONDS="10", CONDUCTOR_OUTBOUND_JITTER_MAX_MS="0")
    with running_server(tmp_path, command="serve+cluster", **env) as server, connect(server.ws_url) as ws:
        say_hello(ws)
        wait_for(lambda: last_tick_owner(), "the loop to tick")
        started, n = time.monotonic(), 0
        while time.monotonic() - started < 60:
            serve_frames(ws, rng.uniform(0, 9))
            n += 1
            send_message(ws, n, f'echo\n{{"n": {n}}}')
        wait_for(lambda: AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE, status="succeeded").count() == n,
                 "every block to run", timeout=30)

    latencies = []
    for task in AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE):
        events = {e.action: e.at for e in TaskEvent.objects.filter(task=task, action__in=["create", "lease"])}
        latencies.append((events["lease"] - events["create"]) / 1000)
    assert n >= 8
    assert max(latencies) < 2.0, sorted(latencies)


def test_killing_a_servers_dispatcher_starts_another_and_the_dead_ones_row_is_pruned(tmp_path):
    tick = 0.5
    with running_server(tmp_path, command="serve+cluster", CONDUCTOR_TICK_SECONDS=str(tick)) as server:
        # Starting the server is not what is measured: under CI's load (browser tests beside it) it can
        # take long before its dispatcher beats.
        first = wait_for(lambda: next(iter(workers()), ""), "the server's dispatcher to beat", timeout=90)
        server_name = workers()[first]
        assert server_name.endswith(f":{server.port}")
        killed_at = time.monotonic()
        os.kill(owner_pid(first), signal.SIGKILL)
        wait_for(lambda: last_tick_owner() not in ("", first), "another dispatcher to tick", timeout=60)
        restarted = time.monotonic() - killed_at
        wait_for(lambda: first not in workers(), "the dead loop's row to be pruned", timeout=30)
        assert set(workers().values()) == {server_name}
        assert len(workers()) == 1  # the cluster's scheduled loop, if it fired, saw serve's and returned
    assert restarted < 1 + 30, restarted  # serve's restart delay, and a Django start on a busy machine
