"""CPU of the ASGI server while any local user floods its channel layer's doorbell with datagrams.

The embedded channel layer's receiving process listens on a loopback UDP port
(conductor_site/channel_layer.py); any local user can send to it. This starts
``manage.py serve --no-cluster`` on the embedded configuration, connects one
plugin (so that the server's poller opens its doorbell), reads the doorbell's
port from the registry beside the layer's database, and measures the ASGI
(daphne) process's CPU for --seconds at rest, then for --seconds while this
process sends it datagrams as fast as it can (one byte each, the ring an
unauthenticated doorbell took). Prints one line per window.

    uv run python bench/doorbell_flood.py [--seconds 10] [--port 9150]
"""

import asyncio
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    ProcessMeter, asgi_pid, fresh_plugin_client, option_parser, plugin_socket, plugin_url, running_server,
    setup_django, stop_on_signals,
)


def doorbell_port(pid: int, *, timeout: float = 30) -> int:
    """The port of a doorbell that process ``pid`` registered."""
    from django.conf import settings

    folder = Path(f"{settings.DATABASES['channels']['NAME']}-doorbells")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in folder.glob("*"):
            fields = entry.read_text().split()
            if len(fields) >= 2 and int(fields[1]) == pid:
                return int(fields[0])
        time.sleep(0.1)
    raise SystemExit(f"no doorbell of process {pid} in {folder}")


def flood(port: int, seconds: float) -> int:
    """Send one-byte datagrams to ``port`` for ``seconds``; return how many."""
    sent = 0
    deadline = time.monotonic() + seconds
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        while time.monotonic() < deadline:
            for _ in range(100):
                try:
                    sender.sendto(b"\x01", ("127.0.0.1", port))
                    sent += 1
                except OSError:  # the receiver's buffer is full: the kernel drops it, as it would
                    pass
    return sent


def window(name: str, meter: ProcessMeter, **fields) -> str:
    extra = "".join(f" {key}={value}" for key, value in fields.items())
    return (f"{name} window_s={meter.seconds:.1f} asgi_cpu_s={meter.cpu_seconds:.2f} "
            f"asgi_cpu_percent={meter.cpu_percent:.1f}{extra}")


async def measure(port: int, seconds: float, client_id: str, token: str, asgi: int) -> list[str]:
    async with plugin_socket(plugin_url(port), client_id, token):
        bell = await asyncio.to_thread(doorbell_port, asgi)
        await asyncio.sleep(2)  # the hello's own work settles
        with ProcessMeter(lambda: [asgi]) as meter:
            await asyncio.sleep(seconds)
        lines = [window("at_rest", meter)]
        with ProcessMeter(lambda: [asgi]) as meter:
            sent = await asyncio.to_thread(flood, bell, seconds)
        lines.append(window("flooded", meter, datagrams=sent, datagrams_per_s=int(sent / meter.seconds)))
    return lines


def main() -> None:
    parser = option_parser(__doc__, seconds=10.0, port=9150)
    options = parser.parse_args()
    stop_on_signals()
    setup_django(migrate=True)
    from django.conf import settings

    if "channels" not in settings.DATABASES:
        raise SystemExit("the doorbell is the embedded channel layer's: run without REDIS_URL")
    client, token = fresh_plugin_client("bench-doorbell")
    with running_server(options.port, cluster=False) as server:
        lines = asyncio.run(measure(options.port, options.seconds, client.client_id, token, asgi_pid(server)))
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
