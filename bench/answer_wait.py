"""What a delivery's executor pays while it waits for the plugin's answer, and how soon the answer reaches it.

Two figures, on the configured database and channel layer:

- statements: --waiters deliveries wait at once, each in a thread of its own as
  a dispatcher's task thread waits (``delivery_answer_wait``), for
  --idle-seconds with no answer; the SELECTs each thread ran
  (``connection.execute_wrapper``), per second per waiting delivery;
- answer to wake: a child process waits for --answers requests one after the
  other, as an executor in a django-q2 worker does; this process stores each
  answer as the ASGI server's consumer does (``delivery_result_record``), a
  random 0.2 to 0.8 s into the wait (a plugin's request takes that long or
  more), so the answer lands anywhere between two reads of a polling waiter.
  The latency runs from just before the store to the child's return from its
  wait (both this machine's monotonic clock), median and p99 in ms.

Only functions that also existed before the wake-ups are called, so that the
script runs unchanged on the code before them (in a worktree of the earlier
commit) for the "before" figures.

    uv run python bench/answer_wait.py [--waiters 5 --idle-seconds 5 --answers 100]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_bench REDIS_URL=redis://127.0.0.1:6379/14 \\
        uv run python bench/answer_wait.py
"""

import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    NOOP_KIND, channel_layer_backend, database_engine, fresh_plugin_client, option_parser, setup_django, summary,
)


def pending_requests(client, count: int) -> list[str]:
    from automation.services.tasks import task_create
    from ingest.services.deliveries import delivery_request_create

    task, _ = task_create(kind=NOOP_KIND, payload={"n": random.random()}, actor="bench")
    return [delivery_request_create(task_id=task.pk, client_pk=client.pk, method="http").pk for _ in range(count)]


def answer_store(client, request_id: str) -> None:
    from ingest.frames import parse_delivery_result
    from ingest.services.deliveries import delivery_result_record

    frame = {"type": "browser.proxy_delivery.result", "request_id": request_id,
             "ok": True, "status": 200, "body": "", "error": None}
    assert delivery_result_record(client_pk=client.pk, result=parse_delivery_result(frame))


def selects_while_waiting(request_ids: list[str], seconds: float) -> list[float]:
    """Each request waited for in a thread of its own for ``seconds``: the SELECTs per second of each."""
    from django.db import connection

    from ingest.services.deliveries import delivery_answer_wait

    rates = []

    def wait(request_id: str) -> None:
        selects = 0

        def counted(execute, sql, params, many, context):
            nonlocal selects
            selects += sql.lstrip().upper().startswith("SELECT")
            return execute(sql, params, many, context)

        started = time.monotonic()
        with connection.execute_wrapper(counted):
            delivery_answer_wait(request_id=request_id, timeout=seconds, cancelled=threading.Event())
        rates.append(selects / (time.monotonic() - started))
        connection.close()

    threads = [threading.Thread(target=wait, args=(request_id,)) for request_id in request_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return rates


def wait_each(request_ids: list[str], folder: str, timeout: float) -> list[int]:
    """In a child process: wait for each request's answer in turn, touching ``folder/<n>`` as wait n starts;
    the moment each wait returned (``time.monotonic_ns``)."""
    from ingest.services.deliveries import delivery_answer_wait

    returned = []
    for n, request_id in enumerate(request_ids):
        (Path(folder) / str(n)).touch()
        answer = delivery_answer_wait(request_id=request_id, timeout=timeout, cancelled=threading.Event())
        returned.append(time.monotonic_ns() if answer is not None else -1)
    return returned


def answer_to_wake(client, count: int) -> tuple[list[float], int]:
    """Latencies (ms) from before each answer's store to the waiting process's return, and the waits that
    got no answer."""
    from tests.procs import started_in_processes

    request_ids = pending_requests(client, count)
    rng = random.Random(7)
    stored = []
    with tempfile.TemporaryDirectory() as folder:
        with started_in_processes("bench.answer_wait:wait_each", [(request_ids, folder, 30.0)]) as (pending,):
            for n, request_id in enumerate(request_ids):
                started = Path(folder) / str(n)
                while not started.exists():
                    time.sleep(0.002)
                time.sleep(rng.uniform(0.2, 0.8))
                stored.append(time.monotonic_ns())
                answer_store(client, request_id)
            returned = pending.get(timeout=120)
    latencies = [(back - at) / 1e6 for at, back in zip(stored, returned) if back >= 0]
    return latencies, count - len(latencies)


def main() -> None:
    args = option_parser(__doc__, waiters=5, idle_seconds=5.0, answers=100).parse_args()
    setup_django(with_noop_kind=True, migrate=True)
    client, _ = fresh_plugin_client("bench-answer-wait")
    print(f"database={database_engine()} layer={channel_layer_backend()}")
    rates = selects_while_waiting(pending_requests(client, args.waiters), args.idle_seconds)
    print(f"waiting selects_per_second_per_delivery {summary(rates, decimals=2)} "
          f"waiters={args.waiters} seconds={args.idle_seconds:g}")
    latencies, unanswered = answer_to_wake(client, args.answers)
    print(f"answer_to_wake_ms {summary(latencies, decimals=1)} answers={len(latencies)} not_woken={unanswered}")


if __name__ == "__main__":
    main()
