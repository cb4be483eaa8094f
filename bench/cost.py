"""Cost: what a message costs the server when a team's plugins send at a steady rate.

--plugins simulated plugins of one owner (``bench/soak.py``'s ``SoakPlugin``: each answers its
deliveries at once, with HTTP 200) send --messages final messages of one ```baa ``echo`` block
each, at a steady --rate a second in all (each plugin every --plugins / --rate seconds, their
sends spread evenly), to one ``manage.py serve`` as ``make run`` starts it (daphne, the
server's dispatcher loop, the django-q2 cluster; outbound jitter 0, the hourly instruction
limit lifted), on the database and channel layer of the environment (SQLite and the embedded
layer without ``DATABASE_URL`` and ``REDIS_URL``). The owner is new on each run, so its
conversations start empty.

The window runs from the first send until every message was delivered, or --drain-seconds
after the last send. Over it: the CPU seconds (user and system, from ``/proc``) of every process
of the server, in all and per role (daphne; the dispatcher loop; the cluster and its workers;
``serve`` itself), and on PostgreSQL the database's committed transactions and rows fetched
(``pg_stat_database``: ``xact_commit``, ``tup_fetched``, read before and after), each divided by
the messages delivered; the latency from sending a final message to receiving the delivery
frame that names it, as the plugins saw it; and how many were delivered within
--drain-seconds of the last send. Prints one ``cost`` line, as ``make bench``'s cost phase does
(``bench/goals.py`` reads it).

    uv run --frozen --group bench python bench/cost.py [--plugins 20 --messages 400 --rate 10]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_bench_cost REDIS_URL=redis://127.0.0.1:6379/12 \\
        uv run --frozen --group bench python bench/cost.py --messages 50
"""

from __future__ import annotations

import math
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    ProcessMeter, broker_queue_purge, channel_layer_backend, database_engine, fresh_plugin_client, option_parser,
    plugin_url, process_tree, running_server, setup_django, stop_on_signals, summary,
)
from bench.soak import SoakPlugin  # noqa: E402
from bench.soak_tally import tally  # noqa: E402

COST_OPTIONS = {"plugins": 20, "messages": 400, "rate": 10.0, "drain_seconds": 60.0}
# The roles of the server's processes, by what their command lines hold (``manage.py serve``
# starts them; the cluster's workers are forks of ``qcluster`` and share its command line).
ROLES = (("daphne", b"daphne"), ("dispatcher", b"manage.py dispatch"), ("cluster", b"qcluster"))
# The plugins connect before their first send: the window measures messages, not hellos.
CONNECT_SECONDS = 2.0
# A backend reports its counts to pg_stat_database at most once a second: wait for the last.
STATS_FLUSH_SECONDS = 1.5
# Each conversation may take the default hourly instruction limit (120) twice over and more.
MESSAGES_PER_CONVERSATION = 60


@dataclass(frozen=True)
class Cost:
    """What one run of the cost phase measured."""

    plugins: int
    rate: float
    sent: int
    delivered: int  # within ``within_s`` of the last send
    within_s: float
    window_s: float
    latencies_ms: list[float]
    cpu_by_role: dict[str, float]  # role -> CPU-seconds over the window
    database: tuple[int, int] | None  # PostgreSQL: committed transactions, rows fetched over the window
    plugin_errors: int = 0

    def line(self) -> str:
        """The raw ``cost`` line (``bench/goals.py`` reads ``ms_per_message`` and ``undelivered``)."""
        per = max(self.delivered, 1)
        cpu = sum(self.cpu_by_role.values())
        parts = [f"ms_per_message={cpu * 1000 / per:.1f}", f"cpu_s={cpu:.2f}"]
        parts += [f"{role}_ms={seconds * 1000 / per:.1f}" for role, seconds in sorted(self.cpu_by_role.items())]
        if self.database:
            transactions, rows = self.database
            parts += [f"xact_per_message={transactions / per:.1f}", f"rows_fetched_per_message={rows / per:.0f}"]
        parts.append(f"final_message_to_delivery_ms {summary(self.latencies_ms)}" if self.latencies_ms
                     else "final_message_to_delivery_ms median=none p99=none max=none")
        parts += [f"sent={self.sent}", f"delivered={self.delivered}", f"undelivered={self.sent - self.delivered}",
                  f"within_s={self.within_s:g}", f"plugins={self.plugins}", f"rate={self.rate:g}",
                  f"window_s={self.window_s:.1f}", f"plugin_errors={self.plugin_errors}"]
        return "cost " + " ".join(parts)


def role_of(pid: int, server_pid: int) -> str:
    """The role of one of the server's processes: ``serve``, ``daphne``, ``dispatcher``,
    ``cluster``; ``other`` for one unknown, ``ended`` for one gone before it was asked."""
    if pid == server_pid:
        return "serve"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return "ended"
    return next((role for role, mark in ROLES if mark in cmdline), "other")


def cpu_by_role(meter: ProcessMeter, server_pid: int) -> dict[str, float]:
    """The meter's CPU-seconds summed per role (asked while the processes still run)."""
    roles: dict[str, float] = {}
    for pid, seconds in meter.cpu_seconds_by_pid.items():
        role = role_of(pid, server_pid)
        roles[role] = roles.get(role, 0.0) + seconds
    return roles


def database_counters() -> tuple[int, int] | None:
    """PostgreSQL's committed transactions and rows fetched in this database so far; None elsewhere."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # the counts as they are now, not as first read
        cursor.execute("SELECT xact_commit, tup_fetched FROM pg_stat_database WHERE datname = current_database()")
        transactions, rows = cursor.fetchone()
    return int(transactions), int(rows)


def team_plugins(port: int, *, plugins: int, messages: int, rate: float, start_at: float,
                 stop_sending: threading.Event, quit: threading.Event) -> list[SoakPlugin]:
    """``plugins`` plugins of one new owner, sending ``rate`` messages a second in all from ``start_at``."""
    owner = f"bench-cost-{time.time_ns() // 1_000_000}"
    clients = [fresh_plugin_client(f"bench-cost-{n}", owner=owner) for n in range(plugins)]
    conversations = max(1, math.ceil(messages / plugins / MESSAGES_PER_CONVERSATION))
    return [SoakPlugin(n, plugin_url(port), client.client_id, token, interval=plugins / rate,
                       conversations=conversations, start_at=start_at + n / rate, stop_sending=stop_sending,
                       quit=quit)
            for n, (client, token) in enumerate(clients)]


def measure(server, port: int, *, plugins: int, messages: int, rate: float, drain_seconds: float) -> Cost:
    """Run the load on the running ``server`` (``manage.py serve`` on ``port``) and measure it."""
    stop_sending, quit = threading.Event(), threading.Event()
    start_at = time.monotonic() + CONNECT_SECONDS
    team = team_plugins(port, plugins=plugins, messages=messages, rate=rate, start_at=start_at,
                        stop_sending=stop_sending, quit=quit)
    for plugin in team:
        plugin.start()
    try:
        time.sleep(max(0.0, start_at - time.monotonic()))
        before = database_counters()
        with ProcessMeter(lambda: process_tree(server.pid)) as meter:
            # The last send is due at (messages - 1) / rate: stop half a slot after it.
            time.sleep(max(0.0, start_at + (messages - 0.5) / rate - time.monotonic()))
            stop_sending.set()
            last_send = time.perf_counter()
            drain_until = time.monotonic() + drain_seconds
            for plugin in team:  # each ends once everything it sent was delivered
                plugin.join(max(0.0, drain_until - time.monotonic()))
        roles = cpu_by_role(meter, server.pid)
    finally:
        stop_sending.set()
        quit.set()
        for plugin in team:
            plugin.join()
    time.sleep(STATS_FLUSH_SECONDS)
    after = database_counters()
    sent = {tag: at for plugin in team for tag, at in plugin.sent.items()}
    deliveries = [d for plugin in team for d in plugin.deliveries if d.received_at <= last_send + drain_seconds]
    result = tally(sent, sent.keys(), deliveries, ran_twice=0)
    return Cost(plugins=plugins, rate=rate, sent=len(sent), delivered=len(result.latencies_ms),
                within_s=drain_seconds, window_s=meter.seconds, latencies_ms=result.latencies_ms, cpu_by_role=roles,
                database=(after[0] - before[0], after[1] - before[1]) if before and after else None,
                plugin_errors=sum(len(plugin.errors) for plugin in team))


def main() -> None:
    args = option_parser(__doc__, port=9175, settle=8.0, log="", **COST_OPTIONS).parse_args()
    stop_on_signals()
    setup_django(migrate=True)
    from django.conf import settings

    print(f"configuration database={database_engine()} layer={channel_layer_backend()} "
          f"broker={'redis' if settings.REDIS_URL else 'orm'}", flush=True)
    broker_queue_purge()
    log = open(args.log, "ab") if args.log else None  # noqa: SIM115 (open for the whole run)
    with running_server(args.port, stderr=log, CONDUCTOR_OUTBOUND_JITTER_MAX_MS="0",
                        CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR="1000000") as server:
        time.sleep(args.settle)  # start-up: the cluster and the dispatcher loop
        cost = measure(server, args.port, plugins=args.plugins, messages=args.messages, rate=args.rate,
                       drain_seconds=args.drain_seconds)
    print(cost.line(), flush=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)  # its server is stopped
