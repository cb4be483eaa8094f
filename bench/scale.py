"""The cost curve: final_message → delivery latency, throughput and the ASGI processes' CPU and
memory as the number of plugins grows, on one ``manage.py serve`` and then on two.

For each count of --scale-servers (1,2), starts that many ``manage.py serve`` (daphne, the
server's dispatcher loop and the django-q2 cluster, as ``make run`` does; outbound jitter 0) on
the configured database and channel layer, on --port and the ports after it, as two machines
would run them; plugins are spread over the servers in turn. Then for each step of --scale-steps
(50,200,500,1000 plugins) connects plugins up to that number (the ones of the step before stay
connected; each is a client of its own, at most 20 connecting at a time) and lets every one send
a ``browser.final_message`` with one ``echo`` block every --scale-interval seconds (10) for
--scale-seconds (60), their first messages spread evenly over the first interval. Each plugin
answers its deliveries at once (HTTP 200). A message's latency runs from its send to the
``browser.proxy_delivery`` naming it; after the window the step waits up to --scale-drain
seconds for the deliveries still due, and any still missing count as undelivered. The daphne
processes alone are measured over the window: their CPU as a percentage of one core and their
largest resident memory, each per ASGI process (the servers' sum divided by their number).
Prints one line per step, then the line of the largest step with the most servers (``scale``,
the goal's) and with one (``scale_one``), and draws latency and CPU against plugins of the run
with the most servers into --chart (a PNG; needs the ``bench`` dependency group).

    uv run --group bench python bench/scale.py --scale-steps 20,50 --scale-seconds 10
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_bench REDIS_URL=redis://127.0.0.1:6379/14 \\
        uv run --group bench python bench/scale.py
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    ProcessMeter, asgi_pid, channel_layer_backend, database_engine, echo_block, final_message, option_parser,
    percentile, plugin_socket, plugin_url, running_server, setup_django, stop_on_signals,
)

# What `make bench BENCH_ARGS=...` and this script's options can change (``--scale-steps 20,50
# --scale-seconds 10`` is a short run). Steps of 0 plugins are left out.
SCALE_OPTIONS = {"scale_steps": "50,200,500,1000", "scale_seconds": 60.0, "scale_interval": 10.0,
                 "scale_drain": 15.0, "scale_servers": "1,2"}
CHART = ROOT / "bench" / "out" / "scale.png"
# Plugins connect at most this many at a time, as browsers coming back after a restart would not
# all at the same instant either.
CONNECTING_AT_ONCE = 20
# Each server answering many plugins is given room: the hourly instruction limit per conversation
# is lifted (each plugin writes in a conversation of its own per step, so it is never reached at
# one message every 10 s, but a shorter --scale-interval would).
SERVER_ENV = {"CONDUCTOR_OUTBOUND_JITTER_MAX_MS": "0", "CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR": "1000000"}

TAG = re.compile(r"scale-\d+-\d+-\d+-\d+")
DELIVERY_TYPES = ("browser.proxy_delivery", "browser.dom_delivery")


def steps_of(text: str) -> list[int]:
    """The plugin counts of ``--scale-steps`` (``"50,200"``), ascending, without zeros or repeats."""
    counts = sorted({int(part) for part in text.split(",") if part.strip()})
    if any(count < 0 for count in counts):
        raise ValueError(f"a step cannot have fewer than 0 plugins: {text!r}")
    return [count for count in counts if count]


def first_send_offsets(plugins: int, interval: float) -> list[float]:
    """When each plugin sends its first message, in seconds after the window opens: spread evenly
    over the first interval, so that the messages of a step come at an even rate."""
    return [interval * n / plugins for n in range(plugins)]


@dataclass
class Step:
    """What one step measured: messages sent over ``seconds``, the latency in ms of each delivered
    one, and the daphne process's CPU (% of a core) and peak resident memory (bytes)."""

    plugins: int
    seconds: float
    sent: int
    latencies: list[float]
    cpu_percent: float  # per ASGI process
    rss_peak_bytes: int  # per ASGI process
    servers: int = 1
    errors: list[str] = field(default_factory=list)

    @property
    def delivered(self) -> int:
        return len(self.latencies)

    def figures(self) -> str:
        """The step's ``key=value`` figures, as ``bench/goals.py`` reads them."""
        if self.latencies:
            latency = (f"median={percentile(self.latencies, 50):.0f} p99={percentile(self.latencies, 99):.0f} "
                       f"max={max(self.latencies):.0f}")
        else:
            latency = "median=none p99=none max=none"
        return (f"servers={self.servers} plugins={self.plugins} window_s={self.seconds:.1f} sent={self.sent} delivered={self.delivered} "
                f"undelivered={self.sent - self.delivered} messages_per_s={self.delivered / self.seconds:.1f} "
                f"final_message_to_delivery_ms {latency} asgi_cpu_percent={self.cpu_percent:.1f} "
                f"asgi_rss_peak_mb={self.rss_peak_bytes / 1e6:.0f} errors={len(self.errors)}")


class Plugins:
    """The plugin sockets open so far, each read by a task of its own that answers deliveries and
    records, for the step under way, when each message it sent was delivered."""

    def __init__(self, urls: Sequence[str], clients: Sequence[tuple[str, str]]):
        self.urls, self.clients = urls, clients
        self.sockets: list = []
        self.sent: dict[str, float] = {}  # tag -> perf_counter of its send, of the step under way
        self.latencies: dict[str, float] = {}
        self.errors: list[str] = []
        self._stack = contextlib.AsyncExitStack()
        self._readers: list[asyncio.Task] = []

    async def __aenter__(self) -> Plugins:
        return self

    async def __aexit__(self, *exc_info) -> None:
        for reader in self._readers:
            reader.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
        await self._stack.aclose()

    async def connect_up_to(self, count: int) -> None:
        if count > len(self.clients):
            raise ValueError(f"{count} plugins asked for, {len(self.clients)} clients made")
        slots = asyncio.Semaphore(CONNECTING_AT_ONCE)

        async def connect(number: int, client_id: str, token: str):
            async with slots:
                # Browsers send no WebSocket-level pings. The servers take the plugins in turn.
                return await self._stack.enter_async_context(
                    plugin_socket(self.urls[number % len(self.urls)], client_id, token, ping_interval=None))

        opened = await asyncio.gather(*(connect(number, *self.clients[number])
                                        for number in range(len(self.sockets), count)))
        self.sockets += opened
        self._readers += [asyncio.create_task(self._read(ws)) for ws in opened]

    async def _read(self, ws) -> None:
        async for raw in ws:
            frame = json.loads(raw)
            kind = frame.get("type")
            if kind in DELIVERY_TYPES:
                arrived = time.perf_counter()
                for tag in TAG.findall(str(frame.get("text", ""))):
                    if tag in self.sent and tag not in self.latencies:
                        self.latencies[tag] = (arrived - self.sent[tag]) * 1000
                await ws.send(json.dumps({"type": "browser.proxy_delivery.result", "request_id": frame["request_id"],
                                          "ok": True, "status": 200, "body": "", "error": None, "error_code": None}))
            elif kind == "error":
                self.errors.append(str(frame))

    async def run_step(self, plugins: int, *, seconds: float, interval: float, drain: float,
                       measure: Callable[[], ProcessMeter]) -> Step:
        """Every one of the first ``plugins`` sockets sends a message every ``interval`` seconds for
        ``seconds`` (under ``measure()``), then up to ``drain`` seconds for what is still due."""
        await self.connect_up_to(plugins)
        self.sent, self.latencies, self.errors = {}, {}, []
        opened = time.monotonic()
        closes = opened + seconds

        async def send(number: int, ws, first: float) -> None:
            next_at, n = opened + first, 0
            while next_at < closes:
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                tag = f"scale-{len(self.urls)}-{plugins}-{number}-{n}"
                self.sent[tag] = time.perf_counter()
                await ws.send(json.dumps({**final_message(tag, f"scale-{len(self.urls)}-{plugins}-{number}",
                                                          f"Step {n}.\n{echo_block(n, tag=tag)}"),
                                          "capture": "network"}))
                next_at, n = next_at + interval, n + 1

        offsets = first_send_offsets(plugins, interval)
        with measure() as meter:
            await asyncio.gather(*(send(number, ws, offsets[number])
                                   for number, ws in enumerate(self.sockets[:plugins])))
            await asyncio.sleep(max(0.0, closes - time.monotonic()))
        drain_until = time.monotonic() + drain
        while len(self.latencies) < len(self.sent) and time.monotonic() < drain_until:
            await asyncio.sleep(0.1)
        servers = len(self.urls)
        return Step(plugins=plugins, seconds=meter.seconds, sent=len(self.sent),
                    latencies=list(self.latencies.values()), cpu_percent=meter.cpu_percent / servers,
                    rss_peak_bytes=meter.rss_peak_bytes // servers, servers=servers, errors=list(self.errors))


def plugin_clients(count: int) -> list[tuple[str, str]]:
    """``count`` fresh plugin clients ``bench-scale-<n>``: (client id, token) of each."""
    from bench.idle_cost import plugin_clients as make

    return make(count, prefix="bench-scale")


def measure_steps(port: int, counts: Sequence[int], clients: Sequence[tuple[str, str]], *, seconds: float,
                  interval: float, drain: float, servers: int = 1, stderr=None,
                  emit: Callable[[str], None] = print) -> list[Step]:
    """Each step of ``counts`` on ``servers`` ``manage.py serve`` from ``port`` on; ``emit`` gets each step's line."""
    steps = []
    ports = [port + n for n in range(servers)]

    async def run(running) -> None:
        asgi = [asgi_pid(server) for server in running]
        async with Plugins([plugin_url(p) for p in ports], clients) as plugins:
            for count in counts:
                step = await plugins.run_step(count, seconds=seconds, interval=interval, drain=drain,
                                              measure=lambda: ProcessMeter(lambda: asgi))
                steps.append(step)
                emit(f"scale_step {step.figures()}")

    with contextlib.ExitStack() as stack:
        running = [stack.enter_context(running_server(p, stderr=stderr, **SERVER_ENV)) for p in ports]
        time.sleep(3)  # each server's dispatcher loop starts
        asyncio.run(run(running))
    return steps


def chart(steps: Sequence[Step], path: Path) -> Path:
    """Draw p50 and p99 latency (left axis) and the ASGI process's CPU (right axis) against the
    number of plugins into the PNG ``path``; return it."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    measured = [step for step in steps if step.latencies]
    plugins = [step.plugins for step in measured]
    figure, latency_axis = pyplot.subplots(figsize=(8, 4.5))
    latency_axis.plot(plugins, [percentile(step.latencies, 50) for step in measured], "o-", label="p50 latency")
    latency_axis.plot(plugins, [percentile(step.latencies, 99) for step in measured], "s-", label="p99 latency")
    latency_axis.set_xlabel("plugins, one message every interval each")
    latency_axis.set_ylabel("final_message → delivery (ms)")
    latency_axis.set_ylim(bottom=0)
    cpu_axis = latency_axis.twinx()
    cpu_axis.plot(plugins, [step.cpu_percent for step in measured], "^--", color="tab:red", label="ASGI CPU")
    cpu_axis.set_ylabel("ASGI process CPU (% of a core)")
    cpu_axis.set_ylim(bottom=0)
    lines = latency_axis.get_lines() + cpu_axis.get_lines()
    latency_axis.legend(lines, [line.get_label() for line in lines], loc="upper left")
    latency_axis.set_title(f"Cost curve on {database_engine()} + {channel_layer_backend()}")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return path


def scale_phase(port: int, args, *, chart_path: Path = CHART, stderr=None,
                emit: Callable[[str], None] = print) -> None:
    """``make bench``'s scale phase: the steps of ``args`` on each count of servers, their lines,
    the goal's lines (the largest step's, on the most servers and on one) and the chart at
    ``chart_path``."""
    counts = steps_of(args.scale_steps)
    server_counts = steps_of(args.scale_servers)
    if not counts or not server_counts:
        return
    clients = plugin_clients(counts[-1])
    runs = {}
    for servers in server_counts:
        runs[servers] = measure_steps(port, counts, clients, seconds=args.scale_seconds, interval=args.scale_interval,
                                      drain=args.scale_drain, servers=servers, stderr=stderr, emit=emit)
    most = runs[server_counts[-1]]
    emit(f"scale {most[-1].figures()}")
    if 1 in runs:
        emit(f"scale_one {runs[1][-1].figures()}")
    try:
        emit(f"scale_chart path={chart(most, chart_path)}")
    except ImportError:
        emit("scale_chart path=none (matplotlib is in the bench group: uv run --group bench)")


def main() -> None:
    args = option_parser(__doc__, port=9180, chart=str(CHART), **SCALE_OPTIONS).parse_args()
    stop_on_signals()
    setup_django(migrate=True)
    print(f"database={database_engine()} layer={channel_layer_backend()} interval_s={args.scale_interval:g}")
    scale_phase(args.port, args, chart_path=Path(args.chart), emit=lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()
