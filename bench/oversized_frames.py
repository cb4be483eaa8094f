"""Memory of the ASGI server while a client that said hello sends frames over the 1 MiB limit.

Starts ``manage.py serve --no-cluster`` (the ASGI server as ``make run`` starts
it), says hello as a fresh plugin client, warms the server up (a ping and one
frame just over 1 MiB), samples its resident memory at rest for --idle-seconds,
then sends --frames frames of --mib MiB each (one after another on one
socket, or at once on as many sockets with --parallel), sampling the memory
every 20 ms until every answer came. Prints the idle and peak memory, their
difference, and what each frame got (``too_large`` and the socket still
answering a ping, when all is well). Then one frame over the socket's hard
limit (``CONDUCTOR_SOCKET_MAX_MESSAGE_BYTES``, 16 MiB): its close code.

    uv run python bench/oversized_frames.py [--frames 5] [--mib 15] [--parallel]
"""

import collections
import contextlib
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    asgi_pid, fresh_plugin_client, option_parser, plugin_url, rss_mib, running_server, setup_django,
)

WAIT = 120  # seconds for one answer: generous, the frames are large and the machine may be shared


def said_hello(stack: contextlib.ExitStack, url: str, client_id: str, token: str):
    from websockets.sync.client import connect

    ws = stack.enter_context(connect(url, max_size=None, open_timeout=30))
    ws.send(json.dumps({"type": "hello", "client_id": client_id, "token": token}))
    reply = json.loads(ws.recv(timeout=WAIT))
    if reply["type"] != "hello.ok":
        raise SystemExit(f"hello refused: {reply}")
    return ws


def send_oversized(ws, size: int, outcomes: collections.Counter) -> None:
    """One frame of ``size`` bytes; counts its answer and whether the socket still answers a ping."""
    from websockets.exceptions import ConnectionClosed

    try:
        ws.send(json.dumps({"type": "ping", "pad": "x" * (size - 26)}))
        reply = json.loads(ws.recv(timeout=WAIT))
        ws.send(json.dumps({"type": "ping"}))
        alive = json.loads(ws.recv(timeout=WAIT)) == {"type": "pong"}
        outcomes[f"{reply.get('code', reply['type'])}{', socket open' if alive else ', no pong'}"] += 1
    except ConnectionClosed as exc:
        outcomes[f"closed {exc.rcvd.code if exc.rcvd else 'without a close frame'}"] += 1


class PeakSampler:
    """The largest RSS of ``pid`` seen every 20 ms while it runs."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mib(self.pid))
            self._stop.wait(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def main() -> None:
    parser = option_parser(__doc__, frames=5, mib=15, port=8962, idle_seconds=3)
    parser.add_argument("--parallel", action="store_true", help="send the frames at once, one socket each")
    args = parser.parse_args()
    setup_django(migrate=True)
    size = args.mib * 1024 * 1024
    with running_server(args.port, cluster=False, LOG_LEVEL="ERROR") as server, contextlib.ExitStack() as stack:
        pid = asgi_pid(server)
        clients = [fresh_plugin_client(f"bench-oversized-{n}") for n in range(args.frames if args.parallel else 1)]
        sockets = [said_hello(stack, plugin_url(args.port), client.client_id, token) for client, token in clients]
        warm_up: collections.Counter = collections.Counter()
        for ws in sockets:
            send_oversized(ws, 1024 * 1024 + 1024, warm_up)
        with PeakSampler(pid) as idle:
            time.sleep(args.idle_seconds)
        outcomes: collections.Counter = collections.Counter()
        started = time.monotonic()
        with PeakSampler(pid) as busy:
            if args.parallel:
                threads = [threading.Thread(target=send_oversized, args=(ws, size, outcomes)) for ws in sockets]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
            else:
                for _ in range(args.frames):
                    send_oversized(sockets[0], size, outcomes)
        elapsed = time.monotonic() - started
        over_hard_limit: collections.Counter = collections.Counter()
        send_oversized(sockets[0], 20 * 1024 * 1024, over_hard_limit)
    how = "at once, one socket each" if args.parallel else "one after another on one socket"
    print(f"{args.frames} frames x {args.mib} MiB after hello ({how}), answered in {elapsed:.1f} s: "
          f"server RSS idle={idle.peak:.1f} MiB peak={busy.peak:.1f} MiB "
          f"(+{busy.peak - idle.peak:.1f} MiB); answers {dict(outcomes)}; "
          f"warm-up {dict(warm_up)}; a 20 MiB frame: {dict(over_hard_limit)}")


if __name__ == "__main__":
    main()
