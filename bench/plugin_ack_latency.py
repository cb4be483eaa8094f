"""Stream end → ack: from a chat page's answer stream ending to the plugin's service worker
receiving Conductor's ``ack`` for it, in real Chromium with the reference plugin.

Starts ``manage.py serve`` (daphne + the django-q2 cluster) on the configured
database and channel layer, loads ``plugin/`` into Debian's Chromium (as the
browser tests do), pairs it through its options page, and has a mock Claude
page (``tests/plugin/chat_apps.py``, served at https://claude.ai through
Playwright's routing) stream --messages answers one at a time, each with one
``echo`` block. Each latency is the page's clock when its stream ended to the
worker's clock when the ack arrived (one machine, one clock). Prints the median,
p90 and max in milliseconds.

    uv run python bench/plugin_ack_latency.py [--messages 50]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_bench REDIS_URL=redis://127.0.0.1:6379/14 \\
        uv run python bench/plugin_ack_latency.py
"""

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    channel_layer_backend, database_engine, echo_block, fresh_plugin_client, option_parser, running_server,
    server_url, setup_django, summary,
)

CLIENT_ID = "bench-plugin"


def measure(server_url: str, token: str, count: int, warmup: int) -> list[int]:
    from tests.browser import CHROMIUM
    from tests.plugin.chat_apps import chat_app
    from tests.plugin.extension import plugin_browser

    if not CHROMIUM:
        raise SystemExit("Chromium is not installed (apt-get install chromium)")
    latencies = []
    with tempfile.TemporaryDirectory() as profile, plugin_browser(CHROMIUM, Path(profile)) as browser:
        app = chat_app("claude")
        app.install(browser.context)
        browser.pair(server_url, CLIENT_ID, token)
        browser.wait_for_state("connected")
        page = browser.open_chat(app)
        last_id = None
        for n in range(warmup + count):
            text = f"Step {n}.\n\n{echo_block(n)}\n"
            app.answer_next(text)
            ended_at = page.evaluate("mockChat.ask('next', {holdMs: 0})")
            deadline = time.monotonic() + 30
            while True:
                acks = browser.storage("session").get("acks", [])
                if acks and acks[-1]["id"] != last_id:
                    last_id = acks[-1]["id"]
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"no ack for message {n}")
                browser.pause(0.005)
            if n >= warmup:
                latencies.append(acks[-1]["at"] - ended_at)
    return latencies


def main() -> None:
    args = option_parser(__doc__, messages=50, warmup=3, port=8791).parse_args()
    setup_django(migrate=True)
    _, token = fresh_plugin_client(CLIENT_ID)
    with running_server(args.port, CONDUCTOR_OUTBOUND_JITTER_MAX_MS="0"):
        latencies = measure(server_url(args.port), token, args.messages, args.warmup)
    print(f"stream end -> ack ({database_engine()}, {channel_layer_backend()}), {len(latencies)} messages: "
          f"latency_ms {summary(latencies, tail=90)}")


if __name__ == "__main__":
    main()
