"""One configuration's share of ``make bench`` (``bench/suite.py`` starts one per configuration,
each with the database, channel layer and data folder of its environment).

Idle phases, on one ``manage.py serve`` as ``make run`` starts it (outbound jitter 0), after
--settle seconds for start-up, while the dispatcher's ticks are sampled throughout:

1. quiet at rest: --quiet-seconds of every process of the server, with no
   plugin and nothing queued;
2. --plugins plugins connect and ping every --ping-every seconds, plus one
   latency plugin that sends --idle-messages messages spread over
   --idle-seconds; the ASGI process's CPU and memory are measured over those
   seconds.

Then it prints ``@idle-done`` and waits for ``go`` on stdin before the load phases, one after
the other, each also ending when its --*-seconds have passed: --messages messages one at a
time on the same server (latency, --latency-seconds, and the CPU seconds every process of the server used
meanwhile per message); on the same server, --cost-plugins plugins of one owner sending
--cost-messages one-block messages at --cost-rate a second in all (``bench/cost.py``: CPU per
message in all and per process role, on PostgreSQL transactions and rows fetched per message,
the latency and how many were delivered within --cost-drain-seconds; none with
``--cost-messages 0``); --tasks no-op tasks through the dispatcher and
--q-tasks through django-q2's ``async_task`` (capacity, --capacity-seconds each);
--ingest-messages final messages on ``serve --no-cluster`` (ingest, --ingest-seconds); on
PostgreSQL only, the scale phase of ``bench/scale.py`` (--scale-steps plugins, --scale-seconds
each, on a ``serve`` of its own; about 4½ minutes with the defaults, none with ``--scale-steps
0``), which also draws ``bench/out/scale.png``. Each measurement's raw line goes to stdout as
it completes, in the form ``bench/goals.py`` reads.
"""

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import (  # noqa: E402
    cost, delivery_latency, dispatcher_capacity, dispatcher_scheduling, idle_cost, ingest_throughput, scale,
)
from bench.common import (  # noqa: E402
    UNLIMITED_INGEST, ProcessMeter, TickSampler, asgi_pid, broker_queue_purge, channel_layer_backend, database_engine,
    fresh_plugin_client, option_parser, plugin_url, running_server, setup_django, stop_on_signals, summary,
)
from bench.processes import process_tree, processes_cpu_seconds  # noqa: E402

# The size of each phase: what `make bench BENCH_ARGS=...` can change. The defaults keep the
# whole run within five minutes, plus the cost phase's 45 to 100 s in each configuration and the
# scale phase's four and a half on PostgreSQL.
# The *_seconds of a load phase bound it on a machine too slow to finish its count in time: its
# figure then covers what was done, and its line says how much that was.
PHASE_OPTIONS = {
    "settle": 8.0, "quiet_seconds": 20.0, "plugins": 200, "ping_every": 20.0, "idle_messages": 10,
    "idle_seconds": 180.0, "messages": 200, "warmup": 3, "latency_seconds": 12.0, "tasks": 300, "per_tick": 50,
    "q_tasks": 100, "capacity_seconds": 8.0, "ingest_messages": 1000, "window": 32, "ingest_seconds": 4.0,
    **{f"cost_{name}": default for name, default in cost.COST_OPTIONS.items()},
    **scale.SCALE_OPTIONS,
}
# After the plugins connected, before their cost is measured.
PLUGINS_SETTLE_SECONDS = 3.0


def emit(line: str) -> None:
    print(line, flush=True)


def idle_phases(server, port: int, args, clients, latency_token: str) -> None:
    url = plugin_url(port)
    time.sleep(args.settle)
    with TickSampler() as ticks:
        emit(idle_cost.quiet_at_rest(server, args.quiet_seconds))
        with idle_cost.plugins_connected(url, clients, ping_every=args.ping_every):
            time.sleep(PLUGINS_SETTLE_SECONDS)
            asgi = asgi_pid(server)
            every = args.idle_seconds / args.idle_messages
            with ProcessMeter(lambda: [asgi]) as meter:
                started = time.monotonic()
                time.sleep(every / 2)  # the messages sit in the middle of their slots
                latencies = delivery_latency.measure(url, latency_token, args.idle_messages, 0, every=every)
                time.sleep(max(0.0, started + args.idle_seconds - time.monotonic()))
            emit(idle_cost.plugins_line(meter, plugins=len(clients), ping_every=args.ping_every))
        emit(f"idle_latency final_message_to_delivery_ms {summary(latencies)} messages={args.idle_messages} "
             f"over_s={args.idle_seconds:g}")
    gap, ended_at = ticks.longest_gap()
    emit(f"ticks count={len(ticks.ticks)} over_s={(ticks.until_ms - ticks.since_ms) / 1000:.0f} "
         f"longest_gap_s={gap:.3f} longest_gap_ended_at_s={ended_at:.0f}")


def latency_phase(server, port: int, args, latency_token: str) -> None:
    """The latency of one message at a time, and what each costs every process of the server in CPU."""
    tree = process_tree(server.pid)
    cpu_before = processes_cpu_seconds(tree)
    latencies = delivery_latency.measure(plugin_url(port), latency_token, args.messages, args.warmup,
                                         seconds=args.latency_seconds)
    # The warm-up messages ran in the same window: they count among the messages.
    cpu_ms = (processes_cpu_seconds(tree) - cpu_before) * 1000
    delivered = len(latencies) + args.warmup
    emit(f"latency final_message_to_delivery_ms {summary(latencies)} messages={len(latencies)}")
    emit(f"latency_cpu ms_per_message={cpu_ms / max(delivered, 1):.1f} cpu_s={cpu_ms / 1000:.2f} "
         f"messages={delivered} processes={len(tree)}")


def capacity_phase(args) -> None:
    seconds, succeeded = dispatcher_capacity.capacity(args.tasks, 1, args.per_tick, seconds=args.capacity_seconds)
    q_rate, q_done = dispatcher_scheduling.async_task_throughput(args.q_tasks, seconds=args.capacity_seconds)
    # No django-q2 task done in time gives no figure to compare with, rather than a rate of 0.
    emit(f"capacity dispatcher={succeeded / seconds:.0f} django_q2={f'{q_rate:.0f}' if q_done else 'none'} "
         f"tasks={succeeded} per_tick={args.per_tick} q_tasks={q_done}")


def ingest_phase(port: int, args, log) -> None:
    from automation.models import AutomationTask
    from conversations.models import Message

    client, token = fresh_plugin_client("bench-client")
    before = Message.objects.count()
    with running_server(port, cluster=False, stderr=log, **UNLIMITED_INGEST):
        seconds, latencies = asyncio.run(ingest_throughput.drive(plugin_url(port), token, args.ingest_messages,
                                                                 args.window, seconds=args.ingest_seconds))
    # Each ack came after its commit; every acknowledged message must be in the database.
    acked = len(latencies)
    unstored = acked - (Message.objects.count() - before)
    # The tasks it queued are not what comes next: the scale phase's cluster would first work
    # off their backlog (a thousand instructions, run a lane at a time), and its figures with it.
    AutomationTask.objects.filter(message__client=client).delete()
    emit(f"ingest throughput={acked / seconds:.0f} messages={acked} unstored={unstored} window={args.window} "
         f"ack_latency_ms {summary(latencies, decimals=1)}")


def main() -> None:
    args = option_parser(__doc__, port=9140, log="", **PHASE_OPTIONS).parse_args()
    stop_on_signals()
    setup_django(with_noop_kind=True, migrate=True)
    from django.conf import settings

    emit(f"configuration database={database_engine()} layer={channel_layer_backend()} "
         f"broker={'redis' if settings.REDIS_URL else 'orm'} tick_s={settings.CONDUCTOR_TICK_SECONDS:g}")
    broker_queue_purge()
    clients = idle_cost.plugin_clients(args.plugins)
    _, latency_token = fresh_plugin_client("bench-delivery")

    # The servers' log goes to --log, so that a burst of warnings does not bury the figures.
    log = open(args.log, "ab") if args.log else None  # noqa: SIM115 (open for the whole run)
    starting = time.monotonic()
    with running_server(args.port, stderr=log, CONDUCTOR_OUTBOUND_JITTER_MAX_MS="0") as server:
        emit(f"server ready_s={time.monotonic() - starting:.1f}")
        idle_phases(server, args.port, args, clients, latency_token)
        emit("@idle-done")
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("not told to go on to the load phases")
        latency_phase(server, args.port, args, latency_token)
        if args.cost_messages:
            emit(cost.measure(server, args.port, plugins=args.cost_plugins, messages=args.cost_messages,
                              rate=args.cost_rate, drain_seconds=args.cost_drain_seconds).line())
    capacity_phase(args)
    ingest_phase(args.port + 1, args, log)
    # The cost curve is the deployment's: PostgreSQL + Redis, as docs/operations.md runs many plugins.
    if database_engine() == "postgresql":
        scale.scale_phase(args.port, args, stderr=log, emit=emit)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)  # its servers are stopped; bench/suite.py says it was interrupted
