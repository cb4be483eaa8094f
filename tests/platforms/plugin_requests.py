"""The delivery requests the server builds, as the plugin's allow-list test reads them.

``plugin/tests/fixtures/delivery-requests.json`` holds a ``browser.proxy_delivery``
frame's fields (``platform``, ``conversation_id``, ``page_url``, ``request``)
for every platform, for each target of ``fixtures/platforms/<platform>/requests.json``
and each text below. ``plugin/tests/delivery-rules.test.js`` checks that the
plugin's rules allow every one (before and after the page values are filled
in); ``test_plugin_requests.py`` checks that the file is what ``platforms/``
builds today. So a change on either side that the other does not follow
fails a test.

Written again with ``uv run --frozen python -m tests.platforms.plugin_requests``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from platforms import platforms
from platforms.registry import DeliveryMethod, DeliveryTarget

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "plugin" / "tests" / "fixtures" / "delivery-requests.json"
TARGETS = ROOT / "fixtures" / "platforms"
TEXTS = [
    "```baa-result\n{\"ok\": true}\n```",
    'quotes " and \\ and & = ? # / %2F in text',
    "a placeholder {{page:access_token}} stays text",
    "unicode é 中文 👍 \u2028 end",
]


def frames() -> list[dict[str, Any]]:
    """The frame fields the plugin checks, in a stable order."""
    built = []
    for adapter in sorted(platforms, key=lambda adapter: adapter.name):
        if DeliveryMethod.HTTP not in adapter.performs:
            continue  # a page site makes no request of its own
        cases = json.loads((TARGETS / adapter.name / "requests.json").read_text())["cases"]
        for case in cases:
            for number, text in enumerate(TEXTS):
                target = replace(DeliveryTarget(**case["target"]), text=text, delivery_key=f"task-{number}")
                built.append({
                    "name": f"{adapter.name}-{case['name']}-{number}",
                    "platform": adapter.name,
                    "conversation_id": target.conversation_id,
                    "page_url": target.page_url,
                    "request": adapter.build_request(target).as_frame(),
                })
    return built


def fixture_text() -> str:
    about = "Written by tests/platforms/plugin_requests.py from platforms/; do not edit."
    return json.dumps({"_about": about, "frames": frames()}, indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    FIXTURE.write_text(fixture_text())
    print(f"wrote {FIXTURE.relative_to(ROOT)}")
