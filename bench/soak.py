"""Soak: simulated plugins send final messages to two servers for --minutes, and nothing may be
lost or duplicated.

Creates a throw-away database on the PostgreSQL server of --postgres (dropped at the end)
and uses the Redis database --redis, then starts two ``manage.py serve`` on --port and the
port after it: two ASGI servers and two django-q2 clusters on one database and one Redis, as
docs/operations.md deploys them (each server's dispatcher loop claims and runs tasks).
--plugins simulated plugins (``conductor_site/simulator.py``), spread over the two servers, each send
a ``browser.final_message`` with one ```baa ``echo`` block every --interval seconds, over
--conversations conversations each, and answer every delivery at once (HTTP 200), as the
reference plugin does: a plugin whose socket closes reconnects and sends again what was not
acknowledged. After --minutes they stop sending and wait up to --drain-seconds for the
deliveries still due. The servers run with the default settings, except the hourly
instruction limit per conversation, raised to what the message rate needs. A plugin client's
deliveries go out one at a time, each after up to 800 ms of jitter (SPEC §4), so one client
cannot take much more than a message a second even on an idle machine: the default of one
every 3 s per plugin leaves room for a loaded one.

Prints the messages sent, stored and delivered, what was lost (sent but never stored, stored
but never delivered) or duplicated (delivered twice, or an instruction run twice), the
latency from sending a final message to receiving its delivery frame (p50, p99), and each
ASGI server's memory at the start and the end, and the tasks each server's dispatcher ran.
The exit status is 1 when anything was lost or duplicated (or could not be measured), or
when a server ran less than a fifth of the tasks (every server runs tasks), so CI fails on it.

    uv run python bench/soak.py --minutes 10 [--plugins 6] [--interval 3]
    make soak MINUTES=2
    BENCH_POSTGRES_URL=postgres://me:secret@db:5432/postgres BENCH_REDIS_URL=redis://cache:6379/3 make soak
"""

import contextlib
import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    ProcessMeter, asgi_pid, broker_queue_purge, echo_block, final_message, fresh_plugin_client, interrupt_all,
    logged_problem_lines, option_parser, percentile, plugin_url, reachable, rss_bytes, running_manage_py, setup_django,
    shown, stop_on_signals, throwaway_database, wait_until_healthy,
)
from bench.soak_tally import Delivery, Tally, tag_of, tags_in, tally  # noqa: E402

SERVERS = 2
# How long the servers may take to answer, and then the clusters to have a dispatcher loop
# ticking: generous, since a machine busy with other work starts Django slowly.
START_SECONDS = 300
FIRST_TICK_SECONDS = 60
# A plugin whose socket closed tries again after this, doubling up to the maximum.
RECONNECT_SECONDS, RECONNECT_MAX_SECONDS = 0.5, 5.0
# What a plugin waits for a frame at most, so that it sees the end of the run in time.
RECEIVE_SECONDS = 0.5


class SoakPlugin(threading.Thread):
    """One simulated plugin: sends a message every ``interval`` seconds from ``start_at`` until
    ``stop_sending``, answers deliveries, and ends once every message it sent was acknowledged
    and delivered, or at ``quit``. Records what it sent and what it received."""

    def __init__(self, number: int, url: str, client_id: str, token: str, *, interval: float, conversations: int,
                 start_at: float, stop_sending: threading.Event, quit: threading.Event):
        super().__init__(name=f"soak-plugin-{number}", daemon=True)
        self.number, self.url, self.client_id, self.token = number, url, client_id, token
        self.interval, self.conversations, self.start_at = interval, conversations, start_at
        self.stop_sending, self.quit = stop_sending, quit
        self.sent: dict[str, float] = {}  # tag -> perf_counter of its first send
        self.unacked: dict[str, dict] = {}  # tag -> its frame
        self.delivered: set[str] = set()
        self.deliveries: list[Delivery] = []
        self.errors: list[str] = []  # error frames and what ended the plugin early
        self.reconnects = 0
        self.resent = 0  # final messages sent again after a reconnect, having had no ack
        self.captured_while_away = 0  # final messages that waited in the outbox for a socket
        self._on_a_socket: set[str] = set()  # tags sent at least once (a resend of one counts in ``resent``)

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # reported with the figures; its messages count as lost
            self.errors.append(f"plugin stopped: {exc!r}")

    def done(self) -> bool:
        return not self.unacked and self.delivered >= self.sent.keys()

    def _run(self) -> None:
        from websockets.exceptions import ConnectionClosed

        self._n, self._next_send = 0, self.start_at
        plugin = self._connect()
        try:
            while not self.quit.is_set() and not (self.stop_sending.is_set() and self.done()):
                try:
                    if self._due():
                        frame = self._capture()
                        self._on_a_socket.add(frame["id"])
                        plugin.send(frame)
                        continue
                    wait = RECEIVE_SECONDS if self.stop_sending.is_set() else self._next_send - time.monotonic()
                    try:
                        frame = plugin.receive(timeout=max(0.01, min(wait, RECEIVE_SECONDS)))
                    except TimeoutError:
                        continue
                    self._handle(plugin, frame)
                except ConnectionClosed:
                    plugin.close()
                    plugin = self._connect()
                    self.reconnects += 1
                    for tag, frame in list(self.unacked.items()):  # the reference plugin's outbox
                        plugin.send(frame)
                        if tag in self._on_a_socket:
                            self.resent += 1
                        self._on_a_socket.add(tag)
        finally:
            plugin.close()

    def _connect(self):
        from websockets.exceptions import WebSocketException

        from conductor_site.simulator import ProtocolError, SimulatedPlugin

        wait = RECONNECT_SECONDS
        while True:
            try:
                return SimulatedPlugin(url=self.url, client_id=self.client_id, token=self.token).connect()
            except (OSError, TimeoutError, WebSocketException, ProtocolError):  # away, or a part of it is
                # The page goes on: answers finished meanwhile wait in the outbox (sent on connecting).
                deadline = time.monotonic() + wait
                while not self.quit.is_set() and time.monotonic() < deadline:
                    while self._due():
                        self._capture()
                        self.captured_while_away += 1
                    self.quit.wait(min(0.1, wait))
                if self.quit.is_set():
                    raise
                wait = min(2 * wait, RECONNECT_MAX_SECONDS)

    def _due(self) -> bool:
        return not self.stop_sending.is_set() and time.monotonic() >= self._next_send

    def _capture(self) -> dict:
        """The next final message, into the outbox until its ack; returned for sending."""
        n, tag = self._n, tag_of(self.number, self._n)
        self._n, self._next_send = n + 1, self._next_send + self.interval
        frame = {**final_message(tag, f"soak-{self.number}-c{n % self.conversations}",
                                 f"Soak step {n}.\n{echo_block(n, tag=tag)}"),
                 "capture": "network"}
        self.unacked[tag] = frame
        self.sent[tag] = time.perf_counter()
        return frame

    def _handle(self, plugin, frame: dict) -> None:
        from conductor_site.simulator import DELIVERY_TYPES

        kind = frame.get("type")
        if kind == "ack":
            self.unacked.pop(frame.get("id"), None)
        elif kind in DELIVERY_TYPES:
            tags = tags_in(str(frame.get("text", "")))
            self.deliveries.append(Delivery(str(frame.get("delivery_key")), tags, time.perf_counter()))
            self.delivered.update(tags)
            plugin.deliveries.clear()  # kept by the simulator too; answered here
            plugin.answer(frame, status=200)
        elif kind == "error":
            self.errors.append(f"error frame: {frame}")


def dispatcher_ticking(seconds: float) -> bool:
    """Wait until every server's dispatcher loop is at work; False if not within ``seconds``."""
    from automation.models import DispatcherWorker

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if DispatcherWorker.objects.values("server").distinct().count() >= SERVERS:
            return True
        time.sleep(0.2)
    return False


def tasks_finished(seconds: float) -> bool:
    """Wait until no task is open (the dispatcher still has to read the last answers); False if
    some still are after ``seconds``."""
    from automation.models import OPEN_STATUSES, AutomationTask

    deadline = time.monotonic() + seconds
    while AutomationTask.objects.filter(status__in=OPEN_STATUSES).exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def database_view(tags: list[str]) -> tuple[set[str], int, dict[str, dict[str, int]], dict[str, int]]:
    """What the database holds: the tags stored as messages, how many ``instruction.execute``
    tasks started running more than once (their timelines' ``start`` steps; a heartbeat or a
    progress step also leaves a task running), the tasks by kind and status, and the runs each
    server's dispatcher started (read while the servers run: a loop's row names its server)."""
    from django.db.models import Count

    from automation.models import DispatcherWorker, TaskEvent
    from automation.selectors import task_counts_by_kind_and_status
    from automation.services.transitions import START
    from conversations.models import Message

    stored = set(Message.objects.filter(remote_message_id__in=tags).values_list("remote_message_id", flat=True))
    ran_twice = (
        TaskEvent.objects.filter(task__kind="instruction.execute", action=START.action)
        .values("task").annotate(runs=Count("id")).filter(runs__gt=1).count()
    )
    tasks = task_counts_by_kind_and_status()
    server_of = dict(DispatcherWorker.objects.values_list("owner", "server"))
    runs_by_server: dict[str, int] = {}
    for actor, runs in TaskEvent.objects.filter(action=START.action).values_list("actor").annotate(n=Count("id")):
        server = server_of.get(actor, "a loop no longer at work")
        runs_by_server[server] = runs_by_server.get(server, 0) + runs
    return stored, ran_twice, tasks, runs_by_server


def servers_share(runs_by_server: dict[str, int]) -> bool:
    """Every server ran tasks, each at least a fifth of them."""
    total = sum(runs_by_server.values())
    return len(runs_by_server) >= SERVERS and all(runs * 5 >= total for runs in runs_by_server.values())


def report(result: Tally, plugins: list[SoakPlugin], rss: dict[int, tuple[int, int, int]],
           tasks: dict[str, dict[str, int]], log: Path) -> None:
    latencies = result.latencies_ms
    print(f"messages_in={result.sent} stored={result.stored} deliveries_out={result.deliveries}")
    print(f"lost={result.lost} (never_stored={len(result.unstored)} never_delivered={len(result.undelivered)}) "
          f"duplicated={result.duplicated} (delivered_twice={len(result.delivered_twice)} "
          f"instructions_run_twice={result.ran_twice}) stray_deliveries={result.stray} "
          f"deliveries_resent={result.resent}")
    for what, tags in (("never stored", result.unstored), ("never delivered", result.undelivered),
                       ("delivered twice", result.delivered_twice)):
        if tags:
            print(f"  {what}: {', '.join(tags[:10])}{' …' if len(tags) > 10 else ''}")
    if latencies:
        print(f"latency_ms p50={percentile(latencies, 50):.0f} p99={percentile(latencies, 99):.0f} "
              f"max={max(latencies):.0f} (final message sent -> delivery frame received, {len(latencies)} messages)")
    for port, (start, end, peak) in rss.items():
        print(f"asgi_rss_mb port={port} start={start / 1e6:.1f} end={end / 1e6:.1f} peak={peak / 1e6:.1f}")
    for kind, counts in tasks.items():
        print(f"tasks {kind}: {' '.join(f'{status}={n}' for status, n in counts.items())}")
    reconnects = sum(plugin.reconnects for plugin in plugins)
    errors = [error for plugin in plugins for error in plugin.errors]
    print(f"plugin_reconnects={reconnects} plugin_errors={len(errors)}")
    for error in errors[:10]:
        print(f"  {error[:300]}")
    if problems := logged_problem_lines(log):
        print(f"the servers logged {len(problems)} warnings or errors, in {log}; the first:")
        for line in problems[:5]:
            print(f"  {line[:300]}")


def soak(args, log_file) -> int:
    broker_queue_purge()
    clients = [fresh_plugin_client(f"soak-{n}") for n in range(args.plugins)]
    # Each conversation gets a block every interval × conversations seconds: twice that rate may pass.
    per_hour = max(120, math.ceil(2 * 3600 / (args.interval * args.conversations)))
    ports = [args.port + n for n in range(SERVERS)]
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(running_manage_py("serve", "--port", str(port), stderr=log_file,
                                                         CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR=str(per_hour)))
                   for port in ports]
        stack.callback(interrupt_all, servers)  # both at once, before each one's own clean-up
        for server, port in zip(servers, ports, strict=True):
            wait_until_healthy(server, port, timeout=START_SECONDS)
        if not dispatcher_ticking(FIRST_TICK_SECONDS):
            print(f"not every server had a dispatcher loop at work within {FIRST_TICK_SECONDS} s")
            return 1
        asgi = {port: asgi_pid(server) for port, server in zip(ports, servers, strict=True)}
        rss_start = {port: rss_bytes(pid) for port, pid in asgi.items()}
        peaks = {port: ProcessMeter(lambda pid=pid: [pid]) for port, pid in asgi.items()}
        print(f"servers ready in {time.monotonic() - started:.1f} s", flush=True)

        stop_sending, quit = threading.Event(), threading.Event()
        now = time.monotonic()
        plugins = [SoakPlugin(n, plugin_url(ports[n % SERVERS]), client.client_id, token, interval=args.interval,
                              conversations=args.conversations, start_at=now + n * args.interval / args.plugins,
                              stop_sending=stop_sending, quit=quit)
                   for n, (client, token) in enumerate(clients)]
        with contextlib.ExitStack() as meters:
            for meter in peaks.values():
                meters.enter_context(meter)
            for plugin in plugins:
                plugin.start()
            try:
                until = now + args.minutes * 60
                while (left := until - time.monotonic()) > 0:
                    time.sleep(min(60.0, left))
                    print(f"[{time.monotonic() - now:5.0f} s] sent={sum(len(p.sent) for p in plugins)} "
                          f"delivered={sum(len(p.delivered) for p in plugins)}", flush=True)
                stop_sending.set()
                drain_until = time.monotonic() + args.drain_seconds
                for plugin in plugins:
                    plugin.join(max(0.0, drain_until - time.monotonic()))
            finally:
                stop_sending.set()
                quit.set()
                for plugin in plugins:
                    plugin.join()
            tasks_finished(max(0.0, drain_until - time.monotonic()))
        print(f"[{time.monotonic() - now:5.0f} s] drained", flush=True)
        rss = {port: (rss_start[port], rss_bytes(pid), peaks[port].rss_peak_bytes) for port, pid in asgi.items()}
        sent = {tag: at for plugin in plugins for tag, at in plugin.sent.items()}
        stored, ran_twice, tasks, runs_by_server = database_view(list(sent))
        stopping = time.monotonic()
    print(f"servers stopped in {time.monotonic() - stopping:.1f} s", flush=True)
    result = tally(sent, stored, [d for plugin in plugins for d in plugin.deliveries], ran_twice=ran_twice)
    report(result, plugins, rss, tasks, Path(log_file.name))
    print("task_runs_by_server " + " ".join(f"{server}={runs}" for server, runs in sorted(runs_by_server.items())))
    shared = servers_share(runs_by_server)
    if not shared:
        print(f"not every server ran tasks, each at least a fifth of them ({SERVERS} servers)")
    # Every task must have succeeded: one still open or failed is a message not (yet) delivered.
    unsucceeded = sum(n for counts in tasks.values() for status, n in counts.items() if status != "succeeded")
    failed = result.failed or unsucceeded or any(plugin.errors for plugin in plugins) or not shared
    print(f"soak: {'FAILED' if failed else 'passed'}")
    return 1 if failed else 0


def main() -> int:
    args = option_parser(
        __doc__, minutes=10.0, plugins=6, interval=3.0, conversations=3, drain_seconds=60.0, port=9150,
        log=str(Path(tempfile.gettempdir()) / "conductor-soak.log"),
        postgres=os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
        redis=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12"),
    ).parse_args()
    stop_on_signals()
    began = time.monotonic()
    if why := reachable(args.postgres, args.redis):
        print(f"soak: {why}")
        return 1
    with (tempfile.TemporaryDirectory(prefix="conductor-soak-") as data_dir,
          throwaway_database(args.postgres) as database_url, open(args.log, "wb") as log_file):
        os.environ.update(DATABASE_URL=database_url, REDIS_URL=args.redis, CONDUCTOR_DATA_DIR=data_dir)
        os.environ.pop("CONDUCTOR_CHANNEL_LAYER_DB", None)
        print(f"soak: {args.plugins} plugins over {SERVERS} servers (ports {args.port}-{args.port + SERVERS - 1}), "
              f"each a message every {args.interval:g} s over {args.conversations} conversations, for "
              f"{args.minutes:g} min; database {shown(database_url)}, Redis {shown(args.redis)}", flush=True)
        migrating = time.monotonic()
        setup_django(migrate=True)
        print(f"database migrated in {time.monotonic() - migrating:.1f} s", flush=True)
        try:
            status = soak(args, log_file)
        finally:
            from django.db import connections

            connections.close_all()
    print(f"soak took {time.monotonic() - began:.0f} s in all")
    return status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("soak: interrupted; every server it started is stopped", file=sys.stderr)
        sys.exit(130)
