"""DOM delivery: from a server sending ``browser.dom_delivery`` with a 20,000-character text
to its ``browser.dom_delivery.result`` arriving, in real Chromium with the reference plugin.

Loads ``plugin/`` into Debian's Chromium (as the browser tests do), pairs it with a scripted
server peer (``tests/plugin/extension.py``) and delivers into each mock app's composer
(``tests/plugin/chat_apps.py``: editors that keep their own state, as ProseMirror and Quill
do), --deliveries times per platform after --warmup unmeasured ones. Each text differs
(the plugin would answer a repeat of the last user turn without typing). Each latency is
the server's clock from sending the frame to reading the answer, so it holds the plugin's
whole path: the socket, the worker, the tab's content script typing, sending and seeing
the new user turn (the answer is polled every 5 ms). Prints p50, p90 and max in
milliseconds per platform.

    uv run python bench/dom_delivery.py [--deliveries 10] [--chars 20000]
"""

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import option_parser, percentile, setup_django

PLATFORMS = ("claude", "chatgpt", "gemini")
RESULT = "browser.dom_delivery.result"


def text_of(n: int, chars: int) -> str:
    """A text of ``chars`` characters like Conductor's results: fences, unicode, newlines."""
    block = f'```baa-result\n{{"ok": true, "n": {n}, "text": "🎉 中文 עברית"}}\n```\n\n'
    text = f"Results {n}:\n\n"
    text += block * ((chars - len(text)) // len(block))
    return text + "x" * (chars - len(text))


def measure(chars: int, count: int, warmup: int) -> dict[str, list[float]]:
    from tests.browser import CHROMIUM
    from tests.plugin.chat_apps import chat_app
    from tests.plugin.extension import ScriptedServer, plugin_browser

    if not CHROMIUM:
        raise SystemExit("Chromium is not installed (apt-get install chromium)")
    latencies: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as profile, plugin_browser(CHROMIUM, Path(profile)) as browser, \
            ScriptedServer(sleep=lambda _seconds: browser.pause(0.005)) as server:
        browser.pair(server.url, "bench", "bench-token")
        browser.wait_for_state("connected")
        for platform in PLATFORMS:
            app = chat_app(platform)
            app.install(browser.context)
            page = browser.open_chat(app)
            latencies[platform] = []
            for n in range(warmup + count):
                answered = len(server.frames(RESULT))
                sent_at = time.perf_counter()
                server.send({"type": "browser.dom_delivery", "request_id": f"{platform}-{n}",
                             "delivery_key": f"bench-{platform}-{n}", "platform": platform,
                             "conversation_id": app.conversation, "page_url": app.page_url,
                             "text": text_of(n, chars), "timeout_ms": 30_000})
                result = server.wait_for_frames(RESULT, answered + 1)[-1]
                elapsed = (time.perf_counter() - sent_at) * 1000
                if not result["ok"]:
                    raise SystemExit(f"{platform} delivery {n} failed: {result}")
                if n >= warmup:
                    latencies[platform].append(elapsed)
            page.close()
    return latencies


def main() -> None:
    args = option_parser(__doc__, deliveries=10, warmup=2, chars=20_000).parse_args()
    setup_django()
    for platform, values in measure(args.chars, args.deliveries, args.warmup).items():
        print(f"dom delivery of {args.chars} characters, {platform}, {len(values)} deliveries: "
              f"latency_ms p50={percentile(values, 50):.0f} p90={percentile(values, 90):.0f} max={max(values):.0f}")


if __name__ == "__main__":
    main()
