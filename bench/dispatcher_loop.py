"""The dispatcher loop under the real server: idle tick gaps, a long command, a worker's death.

Starts ``manage.py serve`` (daphne + the django-q2 cluster, as ``make run``
does) on the configured database and channel layer, then:

1. Idle ticks: for --idle-seconds, polls ``/healthz`` twice a second (the
   largest ``dispatcher_last_tick_age_seconds`` it reports) and the newest
   heartbeat in the database every 20 ms (the longest gap between two: a loop
   beats after a tick, at most every half tick).
2. A long command: a simulated plugin sends one ``shell.run`` of
   --shell-seconds (allowed for this client by a tool policy) and waits for
   its delivery; prints the end-to-end time, the task's status, attempts and
   reclaims.
3. Restart: SIGKILL to the server's dispatcher process; prints how long
   until `serve` has started another and it ticks, and until the dead
   loop's row is pruned.

    uv run python bench/dispatcher_loop.py [--idle-seconds 600] [--shell-seconds 250]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_bench REDIS_URL=redis://127.0.0.1:6379/14 \\
        uv run python bench/dispatcher_loop.py
"""

import json
import os
import signal
import sys
import time
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    channel_layer_backend, database_engine, final_message, fresh_plugin_client, option_parser, plugin_url,
    release_dispatcher_loops, running_server, server_url, setup_django,
)

CLIENT_ID = "bench-loop"


def prepare() -> str:
    setup_django(migrate=True)
    from ingest.models import ToolPolicy

    client, token = fresh_plugin_client(CLIENT_ID)
    ToolPolicy.objects.create(tool="shell.run", client=client, policy="allow", note="bench/dispatcher_loop.py")
    release_dispatcher_loops()
    return token


def idle_ticks(port: int, seconds: float) -> None:
    from automation.selectors import dispatcher_worker_newest

    ticks, largest_age, next_poll = [], 0.0, 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        newest = dispatcher_worker_newest()  # a loop beats after a tick, at most every half tick
        last = newest.heartbeat_at if newest else None
        if last and (not ticks or last != ticks[-1]):
            ticks.append(last)
        if time.monotonic() >= next_poll:
            with urllib.request.urlopen(f"{server_url(port)}/healthz", timeout=5) as response:
                age = json.load(response)["dispatcher_last_tick_age_seconds"]
            largest_age = max(largest_age, age or 0.0)
            next_poll = time.monotonic() + 0.5
        time.sleep(0.02)
    gaps = [(b - a) / 1000 for a, b in zip(ticks, ticks[1:], strict=False)]
    print(f"idle {seconds:.0f} s: ticks={len(ticks)} longest_gap={max(gaps):.3f} s "
          f"largest_healthz_tick_age={largest_age:.3f} s")


def long_command(url: str, token: str, seconds: int) -> None:
    from automation.models import AutomationTask
    from ingest.kinds import INSTRUCTION_EXECUTE
    from conductor_site.simulator import SimulatedPlugin

    run = uuid.uuid4().hex[:8]
    params = json.dumps({"argv": ["sleep", str(seconds)], "timeout_s": seconds + 30})
    with SimulatedPlugin(url=url, client_id=CLIENT_ID, token=token) as plugin:
        started = time.perf_counter()
        plugin.send_final_message(final_message(run, f"bench-{run}", f"```baa\nshell.run\n{params}\n```"))
        while True:  # deliveries left over from an earlier run are answered and passed over
            delivery = plugin.next_delivery(timeout=seconds + 120)
            plugin.answer(delivery, status=200)
            if delivery["conversation_id"] == f"bench-{run}":
                break
        elapsed = time.perf_counter() - started
    task = AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE, conversation__remote_id=f"bench-{run}").get()
    print(f"shell.run sleep {seconds}: delivered after {elapsed:.1f} s; status={task.status} "
          f"attempts={task.attempt_count} reclaims={task.events.filter(action='reclaim').count()} "
          f"heartbeats={task.events.filter(action='heartbeat').count()}")


def takeover(tick_seconds: float) -> None:
    from automation.loop import stall_seconds
    from automation.models import DispatcherWorker
    from automation.selectors import dispatcher_worker_newest

    def workers():
        return list(DispatcherWorker.objects.values_list("owner", flat=True))

    deadline = time.monotonic() + 120
    while not workers():
        if time.monotonic() > deadline:
            raise SystemExit("no dispatcher loop came up")
        time.sleep(0.1)
    dead = workers()[0]
    killed = time.monotonic()
    os.kill(int(dead.split(":")[-2]), signal.SIGKILL)
    while getattr(dispatcher_worker_newest(), "owner", dead) == dead:
        time.sleep(0.02)
    ticking = time.monotonic() - killed
    while dead in workers():
        time.sleep(0.05)
    print(f"after SIGKILL of the server's dispatcher: another ticks after {ticking:.2f} s, the dead one's row "
          f"is pruned after {time.monotonic() - killed:.2f} s (stall time {stall_seconds(tick_seconds):.0f} s, "
          f"tick {tick_seconds:g} s)")


def main() -> None:
    args = option_parser(__doc__, idle_seconds=600.0, shell_seconds=250, port=8951).parse_args()

    token = prepare()
    from django.conf import settings

    print(f"database={database_engine()} layer={channel_layer_backend()} tick={settings.CONDUCTOR_TICK_SECONDS} s")
    with running_server(args.port, CONDUCTOR_OUTBOUND_JITTER_MAX_MS="0", LOG_LEVEL="WARNING"):
        if args.idle_seconds:
            idle_ticks(args.port, args.idle_seconds)
        if args.shell_seconds:
            long_command(plugin_url(args.port), token, args.shell_seconds)
        takeover(settings.CONDUCTOR_TICK_SECONDS)


if __name__ == "__main__":
    main()
