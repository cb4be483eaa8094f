"""Memory of the ASGI server while sockets that never said hello send huge first frames.

Starts ``manage.py serve --no-cluster`` (the ASGI server as ``make run`` starts
it), opens --sockets sockets at once, each sending one --mib MiB frame before
any hello, and samples the server's resident memory: before, at its peak, and
after the sockets are gone. Prints how each socket ended.

    uv run python bench/pre_hello_memory.py [--sockets 60] [--mib 15]
"""

import collections
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import asgi_pid, option_parser, plugin_url, rss_mib, running_server, setup_django  # noqa: E402


def send_huge_first_frame(url: str, size: int, outcomes: collections.Counter) -> None:
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    try:
        with connect(url, max_size=None, open_timeout=30) as ws:
            ws.send(json.dumps({"type": "hello", "client_id": "x", "token": "y", "pad": "x" * size}))
            ws.recv(timeout=30)
            outcomes["answered"] += 1
    except ConnectionClosed as exc:
        outcomes[f"closed {exc.rcvd.code if exc.rcvd else 'without a close frame'}"] += 1
    except OSError as exc:
        outcomes[type(exc).__name__] += 1


def main() -> None:
    args = option_parser(__doc__, sockets=60, mib=15, port=8961).parse_args()
    setup_django(migrate=True)
    with running_server(args.port, cluster=False, LOG_LEVEL="ERROR") as server:
        pid = asgi_pid(server)
        before = rss_mib(pid)
        outcomes: collections.Counter = collections.Counter()
        threads = [
            threading.Thread(target=send_huge_first_frame,
                             args=(plugin_url(args.port), args.mib * 1024 * 1024, outcomes))
            for _ in range(args.sockets)
        ]
        peak = before
        started = time.monotonic()
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            peak = max(peak, rss_mib(pid))
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        time.sleep(2)
        after = rss_mib(pid)
    print(f"{args.sockets} sockets x {args.mib} MiB first frame, done in {elapsed:.1f} s: "
          f"server RSS before={before:.0f} MiB peak={peak:.0f} MiB after={after:.0f} MiB; "
          f"outcomes {dict(outcomes)}")


if __name__ == "__main__":
    main()
