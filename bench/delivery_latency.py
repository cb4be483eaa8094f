"""final_message → delivery latency: from sending an assistant message with one ``echo`` block to
receiving its ``browser.proxy_delivery``, through the real servers.

Starts --servers copies of ``manage.py serve`` (daphne + the django-q2 cluster,
as ``make run`` does) on the configured database and channel layer with the
outbound jitter at 0, connects a simulated plugin to the last one, and sends
--messages messages one at a time (each in a conversation of its own),
answering every delivery. Prints the median, p99 and max in milliseconds.

    uv run python bench/delivery_latency.py [--messages 50] [--servers 2]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_bench REDIS_URL=redis://127.0.0.1:6379/14 \\
        uv run python bench/delivery_latency.py
"""

import contextlib
import dataclasses
import math
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    channel_layer_backend, database_engine, echo_block, final_message, fresh_plugin_client, option_parser, plugin_url,
    running_server, setup_django, summary,
)


def measure(url: str, token: str, count: int, warmup: int, *, every: float = 0.0,
            seconds: float | None = None) -> list[float]:
    """Latencies in ms of ``count`` messages after ``warmup`` unmeasured ones, sent one at a time
    by the client ``bench-delivery``; each starts ``every`` seconds after the one before (at once
    after its delivery when 0), so that spread-out messages meet the server idle. With
    ``seconds``, no message starts once that many seconds have passed since the first."""
    return [sent.latency_ms for sent in measure_sent(url, token, count, warmup, every=every, seconds=seconds)]


@dataclasses.dataclass(frozen=True)
class Sent:
    """One measured message: its id, when it was sent and when its delivery arrived (epoch ms)."""

    message_id: str
    sent_at_ms: float
    delivered_at_ms: float

    @property
    def latency_ms(self) -> float:
        return self.delivered_at_ms - self.sent_at_ms


def measure_sent(url: str, token: str, count: int, warmup: int, *, every: float = 0.0,
                 seconds: float | None = None) -> list[Sent]:
    """As ``measure``, each measured message as a ``Sent``."""
    from conductor_site.simulator import SimulatedPlugin

    run = uuid.uuid4().hex[:8]
    measured = []
    deadline = time.monotonic() + seconds if seconds else math.inf
    with SimulatedPlugin(url=url, client_id="bench-delivery", token=token) as plugin:
        next_at = time.monotonic()
        for n in range(warmup + count):
            time.sleep(max(0.0, next_at - time.monotonic()))
            if time.monotonic() >= deadline:
                break
            next_at += every
            message_id = f"{run}-{n}"
            sent_at = time.time_ns() / 1e6
            plugin.send_final_message(final_message(message_id, f"bench-{run}-{n}", echo_block(n)))
            delivery = plugin.next_delivery(timeout=60)
            if n >= warmup:
                measured.append(Sent(message_id, sent_at, time.time_ns() / 1e6))
            plugin.answer(delivery, status=200)
    return measured


def main() -> None:
    args = option_parser(__doc__, messages=50, warmup=3, servers=2, port=8941).parse_args()

    setup_django(migrate=True)
    _, token = fresh_plugin_client("bench-delivery")
    with contextlib.ExitStack() as stack:
        ports = [args.port + n for n in range(args.servers)]
        for port in ports:
            stack.enter_context(running_server(port, CONDUCTOR_OUTBOUND_JITTER_MAX_MS="0", LOG_LEVEL="WARNING"))
        # Give the clusters' dispatcher loops time to take their lease.
        time.sleep(3)
        latencies = measure(plugin_url(ports[-1]), token, args.messages, args.warmup)

    print(f"database={database_engine()} layer={channel_layer_backend()} servers={args.servers} "
          f"messages={args.messages} jitter_ms=0")
    print(f"final_message_to_delivery_ms {summary(latencies)}")


if __name__ == "__main__":
    main()
