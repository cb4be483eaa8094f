"""Faults under load: Redis, the database's connections and the whole server fail while plugins
send, and every message's result must still reach its chat exactly once.

One ``manage.py serve`` (as ``make run`` starts it) and --plugins simulated plugins that behave
as the reference plugin does (``bench/soak.py``'s ``SoakPlugin``: reconnect after a close, send
again a final message that got no ack, answer every delivery) send one-block messages, --rate a
second in all, for --seconds. Meanwhile, on PostgreSQL + Redis (a Redis of its own, on a port
of its own, and a throw-away database on --postgres):

- at 15 s Redis is killed (SIGKILL) and started again on the same port 5 s later, empty;
- at 35 s every connection of the server to its database is terminated (``pg_terminate_backend``,
  as a database restart or a failover does);
- at 45 s the whole server (``serve`` and every process under it) is SIGKILLed and started
  again on the same data, as a supervisor would.

On the embedded default (SQLite, the channel layer in a database file beside it) the whole
server is killed at 30 s. The times scale with --seconds (60 is the reference).

Prints, per fault, what happened: seconds until ``/healthz`` answered 200 again and until the
next delivery reached a plugin, the plugins' reconnects and the messages they sent again, and
the tasks that waited for a part of the server (``retry_later`` naming it), retried for another
reason, or were taken back from a dead loop (``reclaim``). Then the tally of ``bench/soak.py``.
The exit status is 1 when any message's result was not delivered exactly once within
--drain-seconds of the load's end, or any task did not succeed. An ``echo`` that was running
when its server was killed runs again (it is idempotent): its timeline is shown, and it is
not a failure.

    uv run python bench/faults.py [--config both|postgres|embedded] [--plugins 20] [--rate 5]
    make soak   # runs it after the soak
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    ROOT, child_env, fresh_plugin_client, interrupt, option_parser, plugin_url, server_url, setup_django, shown,
    stop_on_signals, throwaway_database,
)
from bench.processes import process_tree  # noqa: E402
from bench.soak import SoakPlugin, database_view, report, tasks_finished  # noqa: E402
from bench.soak_tally import tally  # noqa: E402

CONFIGS = ("postgres", "embedded")
# How long a server may take to answer /healthz after a start or a fault.
HEALTHY_SECONDS = 120.0
REDIS_AWAY_SECONDS = 5.0


class Server:
    """``manage.py serve`` on ``port`` with its log appended to ``log``; killed and started again on the same data."""

    def __init__(self, port: int, log, env: dict[str, str]) -> None:
        self.port, self.log, self.env = port, log, env
        self.process: subprocess.Popen | None = None

    def start(self) -> Server:
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(self.port)], cwd=ROOT, env=self.env,
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=self.log,
        )
        return self

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{server_url(self.port)}/healthz", timeout=2) as answer:
                return answer.status == 200
        except OSError:  # refused, or 503 naming a part that is away
            return False

    def wait_healthy(self, timeout: float = HEALTHY_SECONDS) -> float | None:
        """Seconds until ``/healthz`` answers 200; None if not within ``timeout``."""
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            if self.healthy():
                return time.monotonic() - began
            time.sleep(0.2)
        return None

    def kill(self) -> None:
        """SIGKILL to ``serve`` and every process under it at once, as a power cut or an OOM killer of the group."""
        for pid in process_tree(self.process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None:
            interrupt(self.process)


@dataclass
class Fault:
    """One fault: its name, when it happens (a fraction of the load), and what does it."""

    name: str
    at_fraction: float
    action: Callable[[], None]
    # Filled in as it runs.
    began_at: float = 0.0  # perf_counter, as the plugins' times
    began_ms: int = 0  # epoch ms, as the task events
    healthy_after_s: float | None = None
    counters_before: dict[str, int] = field(default_factory=dict)


def postgres_faults(server: Server, cache, admin_url: str, database: str) -> list[Fault]:
    def redis_away() -> None:
        cache.kill()
        time.sleep(REDIS_AWAY_SECONDS)
        cache.start()  # empty: the channel layer's groups and the broker's queue are gone

    def connections_cut() -> None:
        import psycopg

        with psycopg.connect(admin_url, autocommit=True) as connection:
            connection.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                [database],
            )

    return [
        Fault("redis_away_5s", 15 / 60, redis_away),
        Fault("database_connections_cut", 35 / 60, connections_cut),
        Fault("server_killed", 45 / 60, lambda: restart(server)),
    ]


def embedded_faults(server: Server) -> list[Fault]:
    return [Fault("server_killed", 30 / 60, lambda: restart(server))]


def restart(server: Server) -> None:
    server.kill()
    server.start()


def plugin_counters(plugins: list[SoakPlugin]) -> dict[str, int]:
    return {
        "reconnects": sum(plugin.reconnects for plugin in plugins),
        "resent": sum(plugin.resent for plugin in plugins),
        "captured_while_away": sum(plugin.captured_while_away for plugin in plugins),
        "error_frames": sum(len(plugin.errors) for plugin in plugins),
    }


def task_events_between(began_ms: int, ended_ms: int) -> dict[str, int]:
    """The task events of one fault's window that say how the tasks lived through it."""
    from automation.models import TaskEvent

    events = TaskEvent.objects.filter(at__gte=began_ms, at__lt=ended_ms)
    retries = events.filter(action="retry_later")
    return {
        "waited_for_part": retries.filter(detail__has_key="part").count(),
        "retried_otherwise": retries.exclude(detail__has_key="part").count(),
        "reclaimed": events.filter(action="reclaim").count(),
    }


def run_faults(faults: list[Fault], server: Server, plugins: list[SoakPlugin], *, began: float,
               seconds: float) -> list[threading.Thread]:
    """Each fault at its time; returns the threads that wait for the server to answer again after each."""
    watchers = []
    for fault in faults:
        time.sleep(max(0.0, began + fault.at_fraction * seconds - time.monotonic()))
        fault.counters_before = plugin_counters(plugins)
        fault.began_at, fault.began_ms = time.perf_counter(), time.time_ns() // 1_000_000
        print(f"[{time.monotonic() - began:5.1f} s] fault: {fault.name}", flush=True)
        fault.action()
        watchers.append(threading.Thread(target=_healthy_again, args=(server, fault), daemon=True))
        watchers[-1].start()
    return watchers


def _healthy_again(server: Server, fault: Fault) -> None:
    if server.wait_healthy() is not None:
        fault.healthy_after_s = time.perf_counter() - fault.began_at


def fault_report(faults: list[Fault], plugins: list[SoakPlugin], ended_ms: int, counters_at_end: dict[str, int]) -> None:
    from django.db import connections

    connections.close_all()  # the cut closed this process's connection too
    deliveries = sorted(d.received_at for plugin in plugins for d in plugin.deliveries)
    for n, fault in enumerate(faults):
        following = faults[n + 1] if n + 1 < len(faults) else None
        after = following.counters_before if following else counters_at_end
        window_end = following.began_ms if following else ended_ms
        changes = {name: after[name] - fault.counters_before[name] for name in after}
        resumed = next((at - fault.began_at for at in deliveries if at > fault.began_at), None)
        events = task_events_between(fault.began_ms, window_end)
        print(
            f"fault {fault.name}: healthy_after_s={_seconds(fault.healthy_after_s)} "
            f"next_delivery_after_s={_seconds(resumed)} "
            + " ".join(f"{name}={value}" for name, value in {**changes, **events}.items()),
            flush=True,
        )


def runs_twice_shown(limit: int = 5) -> None:
    """The timelines of instructions that started more than once: what took them back."""
    from django.db.models import Count

    from automation.models import TaskEvent

    tasks = (TaskEvent.objects.filter(task__kind="instruction.execute", action="start")
             .values("task").annotate(runs=Count("id")).filter(runs__gt=1).values_list("task", flat=True)[:limit])
    for task in tasks:
        steps = TaskEvent.objects.filter(task=task).order_by("at", "id").values_list("action", "actor", "error")
        print(f"  started twice: {task}: " + "; ".join(
            f"{action} by {actor}" + (f" ({(error or '')[:80]})" if error else "") for action, actor, error in steps
        ))


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}"


def load_and_faults(args, server: Server, faults: list[Fault], log_path: Path) -> int:
    clients = [fresh_plugin_client(f"faults-{n}") for n in range(args.plugins)]
    interval = args.plugins / args.rate
    stop_sending, quit = threading.Event(), threading.Event()
    began = time.monotonic()
    plugins = [
        SoakPlugin(n, plugin_url(server.port), client.client_id, token, interval=interval, conversations=2,
                   start_at=began + n * interval / args.plugins, stop_sending=stop_sending, quit=quit)
        for n, (client, token) in enumerate(clients)
    ]
    for plugin in plugins:
        plugin.start()
    try:
        watchers = run_faults(faults, server, plugins, began=began, seconds=args.seconds)
        time.sleep(max(0.0, began + args.seconds - time.monotonic()))
        stop_sending.set()
        print(f"[{time.monotonic() - began:5.1f} s] load over; waiting up to {args.drain_seconds:g} s", flush=True)
        drain_until = time.monotonic() + args.drain_seconds
        for thread in [*plugins, *watchers]:
            thread.join(max(0.0, drain_until - time.monotonic()))
    finally:
        stop_sending.set()
        quit.set()
        for plugin in plugins:
            plugin.join()
    # The last fault's window runs to the end of the drain: its reconnects may come after the load.
    fault_report(faults, plugins, time.time_ns() // 1_000_000, plugin_counters(plugins))
    tasks_finished(max(0.0, drain_until - time.monotonic()))
    sent = {tag: at for plugin in plugins for tag, at in plugin.sent.items()}
    stored, ran_twice, tasks, _ = database_view(list(sent))
    result = tally(sent, stored, [d for plugin in plugins for d in plugin.deliveries], ran_twice=ran_twice)
    report(result, plugins, {}, tasks, log_path)
    if result.ran_twice:
        runs_twice_shown()
    unsucceeded = sum(n for counts in tasks.values() for status, n in counts.items() if status != "succeeded")
    # An echo that was running when its server was killed runs again (it is idempotent, SPEC §4.4):
    # shown, not a failure. A result delivered twice, or never, is.
    failed = result.lost or result.delivered_twice or result.stray or unsucceeded or result.sent == 0
    return 1 if failed else 0


def run_config(args, config: str) -> int:
    """One configuration, in this process (Django is set up for it)."""
    from tests.faults.own_servers import OwnRedis

    with contextlib.ExitStack() as stack:
        data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"conductor-faults-{config}-"))
        log_path = Path(args.log_dir) / f"conductor-faults-{config}.log"
        os.environ["CONDUCTOR_DATA_DIR"] = data_dir
        cache = None
        if config == "postgres":
            database_url = stack.enter_context(throwaway_database(args.postgres))
            cache = OwnRedis().start()
            stack.callback(cache.remove)
            os.environ.update(DATABASE_URL=database_url, REDIS_URL=cache.url)
            where = f"database {shown(database_url)}, its own Redis on port {cache.port}"
        else:
            for name in ("DATABASE_URL", "REDIS_URL", "CONDUCTOR_CHANNEL_LAYER_DB"):
                os.environ.pop(name, None)
            where = f"SQLite and the embedded channel layer in {data_dir}"
        print(f"faults ({config}): {args.plugins} plugins, {args.rate:g} messages/s for {args.seconds:g} s; {where}",
              flush=True)
        setup_django(migrate=True)
        per_hour = max(120, math.ceil(2 * 3600 * args.rate / (args.plugins * 2)))
        log = stack.enter_context(open(log_path, "wb"))
        server = Server(args.port, log, child_env(data_dir, CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR=str(per_hour)))
        stack.callback(server.stop)
        if server.start().wait_healthy() is None:
            print(f"faults ({config}): the server did not answer within {HEALTHY_SECONDS:g} s; log in {log_path}")
            return 1
        if config == "postgres":
            from django.conf import settings

            faults = postgres_faults(server, cache, args.postgres, settings.DATABASES["default"]["NAME"])
        else:
            faults = embedded_faults(server)
        status = load_and_faults(args, server, faults, log_path)
        from django.db import connections

        connections.close_all()
    print(f"faults ({config}): {'FAILED' if status else 'passed'}", flush=True)
    return status


def main() -> int:
    args = option_parser(
        __doc__, config="both", plugins=20, rate=5.0, seconds=60.0, drain_seconds=120.0, port=9170,
        log_dir=tempfile.gettempdir(),
        postgres=os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
    ).parse_args()
    stop_on_signals()
    if args.config in CONFIGS:
        if args.config == "postgres" and (why := postgres_unreachable(args.postgres)):
            print(f"faults (postgres): {why}")
            return 1
        return run_config(args, args.config)
    # Each configuration in a process of its own: Django is set up once per process.
    status = 0
    for config in CONFIGS:
        options = [f"--{name.replace('_', '-')}={value}" for name, value in vars(args).items() if name != "config"]
        status |= subprocess.call([sys.executable, __file__, f"--config={config}", *options])
    return status


def postgres_unreachable(url: str) -> str | None:
    import psycopg

    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"PostgreSQL at {shown(url)} is not reachable ({str(exc).strip().splitlines()[0]})"
    return None


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("faults: interrupted; every server it started is stopped", file=sys.stderr)
        sys.exit(130)
