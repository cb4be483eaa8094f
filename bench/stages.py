"""Where a delivery's time goes: final_message → delivery, stage by stage, from the tasks' timelines.

Starts one ``manage.py serve`` (daphne + the django-q2 cluster, as ``make
run`` does) on the configured database and channel layer with the outbound
jitter at 0, sends --messages messages with one ``echo`` block one at a time
(as ``delivery_latency.py`` does, each delivery answered 200 at once), then
reads each message's two tasks, their timeline events and the delivery
request from the database and prints, for each stage, its median and p99 in
milliseconds:

- ``ingest``: the frame sent → its ``instruction.execute`` task created (the
  frame read, checked and stored);
- ``execute_claim``: created → leased (the commit, the wake-up, the claim);
- ``execute_start``: leased → running;
- ``execute_run``: running → succeeded (the tool, and the follow-up that
  creates the delivery);
- ``deliver_claim``: the execute task succeeded → its ``instruction.deliver``
  task leased;
- ``deliver_start``: leased → running;
- ``deliver_render``: running → the delivery request recorded (results rendered, the request built);
- ``deliver_send``: recorded → the plugin has the frame (the channel layer's hop).

The stages add up to the total. Client and server share this machine's clock.

    uv run python bench/stages.py [--messages 100]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_bench REDIS_URL=redis://127.0.0.1:6379/14 \\
        uv run python bench/stages.py
"""

import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    channel_layer_backend, database_engine, fresh_plugin_client, option_parser, plugin_url, running_server,
    setup_django, summary,
)
from bench.delivery_latency import Sent, measure_sent  # noqa: E402

STAGES = ("ingest", "execute_claim", "execute_start", "execute_run", "deliver_claim", "deliver_start",
          "deliver_render", "deliver_send")


def stages_of(sent: Sequence[Sent]) -> dict[str, list[float]]:
    """Each stage's durations (ms) over the messages ``sent``, read from the database."""
    from automation.models import AutomationTask, TaskEvent
    from automation.services.diagram import LEASE, START, SUCCEED
    from ingest.models import DeliveryRequest
    from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE

    by_message = {s.message_id: s for s in sent}
    tasks = AutomationTask.objects.filter(
        message__remote_message_id__in=list(by_message), kind__in=[INSTRUCTION_EXECUTE, INSTRUCTION_DELIVER]
    ).values_list("task_id", "kind", "created_at", "message__remote_message_id")
    events: dict[tuple[str, str], int] = {}
    for task_id, action, at in TaskEvent.objects.filter(
        task_id__in=[t[0] for t in tasks], action__in=[LEASE.action, START.action, SUCCEED.action]
    ).order_by("at").values_list("task_id", "action", "at"):
        events.setdefault((task_id, action), at)  # the first of each: a retried task counts its first run
    requests: dict[str, int] = {}
    for task_id, sent_at in DeliveryRequest.objects.filter(task_id__in=[t[0] for t in tasks]).order_by(
        "sent_at"
    ).values_list("task_id", "sent_at"):
        requests.setdefault(task_id, sent_at)
    per_message: dict[str, dict[str, tuple[str, int]]] = {}
    for task_id, kind, created_at, message_id in tasks:
        per_message.setdefault(message_id, {})[kind] = (task_id, created_at)

    durations: dict[str, list[float]] = {stage: [] for stage in (*STAGES, "total")}
    for message_id, kinds in per_message.items():
        if INSTRUCTION_EXECUTE not in kinds or INSTRUCTION_DELIVER not in kinds:
            continue
        (execute, execute_created), (deliver, _) = kinds[INSTRUCTION_EXECUTE], kinds[INSTRUCTION_DELIVER]
        s = by_message[message_id]
        marks = [
            s.sent_at_ms, execute_created, events.get((execute, LEASE.action)), events.get((execute, START.action)),
            events.get((execute, SUCCEED.action)), events.get((deliver, LEASE.action)),
            events.get((deliver, START.action)), requests.get(deliver), s.delivered_at_ms,
        ]
        if None in marks:
            continue
        for stage, (before, after) in zip(STAGES, zip(marks, marks[1:]), strict=True):
            durations[stage].append(after - before)
        durations["total"].append(s.latency_ms)
    return durations


def main() -> None:
    args = option_parser(__doc__, messages=100, warmup=3, port=8951).parse_args()

    setup_django(migrate=True)
    _, token = fresh_plugin_client("bench-delivery")
    with running_server(args.port, CONDUCTOR_OUTBOUND_JITTER_MAX_MS="0", LOG_LEVEL="WARNING"):
        time.sleep(3)  # the cluster's dispatcher loop takes its lease
        sent = measure_sent(plugin_url(args.port), token, args.messages, args.warmup)

    durations = stages_of(sent)
    print(f"database={database_engine()} layer={channel_layer_backend()} messages={len(durations['total'])} "
          f"jitter_ms=0")
    for stage, values in durations.items():
        print(f"stage {stage:<15} {summary(values, decimals=1)}")


if __name__ == "__main__":
    main()
