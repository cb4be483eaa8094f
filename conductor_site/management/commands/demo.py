"""A browserless demo of the whole loop against a running Conductor (``make run`` in another terminal).

A simulated plugin connects over the real WebSocket, replays a fixture
conversation's assistant messages, answers every ``browser.proxy_delivery``
as the chat page would (HTTP 200), and prints what went in and what came
back. Each run uses fresh conversation and message ids, so it can be run
again and again.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from automation.models import AutomationTask, TaskStatus
from automation.selectors import dispatcher_heartbeat_age_seconds
from automation.services.operator import has_every_permission, tasks_approve
from conductor_site.simulator import SimulatedPlugin
from console.story.waits import conversation_waits
from conversations.models import Conversation
from core.clock import now_ms
from ingest.kinds import INSTRUCTION_EXECUTE
from ingest.models import PluginClient
from ingest.services.clients import plugin_client_create, plugin_client_rotate
from pipelines.results_text import parse_results

DEMO_CLIENT = "demo-plugin"
ACTOR = "demo"
# Files the fixture conversations look at, put in the workspace when missing;
# the fixtures' first block lists their folder, notes/.
SEED_FILES = {
    "notes/todo.md": "# Todo\n- water the plants\n- ship the release\n",
    "notes/ideas.md": "# Ideas\n- a plugin for every chat\n",
}


def _preview(value, limit=100) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def held_because(remote_ids: set[str]) -> str:
    """Why the demo's tasks are not delivered: what holds its conversations, or a dispatcher that does not tick."""
    reasons: list[str] = []
    for conversation in Conversation.objects.filter(remote_id__in=remote_ids):
        for wait in conversation_waits(conversation):
            if wait.level in ("paused", "held") and wait.text not in reasons:
                reasons.append(wait.text)
    age = dispatcher_heartbeat_age_seconds(now_ms=now_ms())
    if age is None or age > 3 * settings.CONDUCTOR_TICK_SECONDS:  # three ticks missed, as the overview says
        ticked = "never ticked" if age is None else f"last beat {age:.0f} s ago"
        reasons.append(f"the dispatcher {ticked}: is the django-q2 cluster running (make run starts it)?")
    if not reasons:
        reasons.append("nothing holds its tasks; they may still be running (try a longer --timeout)")
    return "; ".join(reasons)


class Command(BaseCommand):
    help = "Connect a simulated plugin to the running server, replay a fixture conversation, print the round trip."

    def add_arguments(self, parser):
        host, port = os.environ.get("HOST", "127.0.0.1"), os.environ.get("PORT", "8000")
        parser.add_argument("--url", default=f"ws://{host}:{port}/ws/plugin/", help="The server's plugin socket.")
        parser.add_argument(
            "--fixture", default=str(settings.BASE_DIR / "fixtures" / "claude.jsonl"),
            help="A JSON Lines file of plugin frames (default: fixtures/claude.jsonl).",
        )
        parser.add_argument(
            "--approve", action="store_true",
            help="Approve the blocks that need approval (files.write, shell.run) as the operator 'demo'.",
        )
        parser.add_argument("--timeout", type=float, default=60, help="Seconds to wait for each delivery.")

    def handle(self, *args, url, fixture, approve, timeout, **options):
        # The services' log lines would bury the demo's own output.
        logging.disable(logging.INFO)
        frames = self._messages(Path(fixture))
        token = self._demo_token()
        self._seed_workspace()
        run_id = time.strftime("%Y%m%d%H%M%S")
        shown = Path(fixture).resolve()
        if shown.is_relative_to(settings.BASE_DIR):
            shown = shown.relative_to(settings.BASE_DIR)
        self.stdout.write(f"demo {run_id}: {len(frames)} assistant messages from {shown} to {url}\n")

        expected = 0
        conversations: set[str] = set()
        try:
            plugin = SimulatedPlugin(url=url, client_id=DEMO_CLIENT, token=token).connect()
        except OSError as exc:
            raise CommandError(
                f"cannot reach {url} ({exc}); start the server first with `make run`, or, when it listens "
                "elsewhere, give its socket: --url ws://HOST:PORT/ws/plugin/"
            ) from exc
        with plugin:
            for frame in frames:
                frame = {
                    **frame,
                    "conversation_id": f"{frame['conversation_id']}-{run_id}",
                    "message_id": f"{frame.get('message_id') or frame.get('id')}-{run_id}",
                }
                ack = plugin.send_final_message(frame)
                conversations.add(frame["conversation_id"])
                first_line = _preview(frame["text"].splitlines()[0] if frame["text"] else "", 70)
                blocks = ack["instructions"]
                self.stdout.write(
                    f"→ assistant: {first_line!r}  ({blocks} block{'' if blocks == 1 else 's'}"
                    f"{', duplicate' if ack['duplicate'] else ''})"
                )
                if ack["instructions"] and not ack["duplicate"]:
                    expected += self._held(int(ack["message_id"]), approve)
            for _ in range(expected):
                try:
                    delivery = plugin.next_delivery(timeout=timeout)
                except TimeoutError:
                    raise CommandError(f"no delivery within {timeout:g} s: {held_because(conversations)}") from None
                self._show(delivery)
                plugin.answer(delivery, status=200)
                self._confirm(delivery["delivery_key"], timeout)
        self.stdout.write(f"\n{expected} deliveries answered. Browse them at /admin/ (Messages, Automation tasks).")

    def _messages(self, path: Path) -> list[dict]:
        try:
            lines = path.read_text().splitlines()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc}") from exc
        frames = [json.loads(line) for line in lines if line.strip()]
        return [frame for frame in frames if frame.get("type") == "browser.final_message"]

    def _demo_token(self) -> str:
        """A fresh token for the demo's own plugin client, created on first use."""
        client = PluginClient.objects.filter(client_id=DEMO_CLIENT, enabled=True).first()
        if client is None:
            PluginClient.objects.filter(client_id=DEMO_CLIENT).delete()  # a revoked one
            return plugin_client_create(name=DEMO_CLIENT)[1]
        return plugin_client_rotate(client=client, actor=ACTOR)

    def _seed_workspace(self) -> None:
        for name, content in SEED_FILES.items():
            path = Path(settings.CONDUCTOR_WORKSPACE) / name
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content)

    def _held(self, message_id: int, approve: bool) -> int:
        """1 when the message will be delivered; 0 when it waits for an operator's approval."""
        blocked = list(AutomationTask.objects.filter(
            kind=INSTRUCTION_EXECUTE, message_id=message_id, status=TaskStatus.BLOCKED
        ))
        if not blocked:
            return 1
        tools = ", ".join(task.payload["tool"] for task in blocked)
        if approve:
            # The demo runs as the server's owner, on its own server.
            tasks_approve(task_ids=[task.pk for task in blocked], actor=ACTOR, has_perm=has_every_permission)
            self.stdout.write(f"  ✓ approved {tools} (--approve)")
            return 1
        self.stdout.write(f"  ⏸ {tools} waits for approval in the admin (or run the demo with --approve)")
        return 0

    def _confirm(self, task_id: str, timeout: float) -> None:
        """Wait for the server to record the answer, and say what it made of it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            task = AutomationTask.objects.get(pk=task_id)
            if task.status != TaskStatus.RUNNING:
                self.stdout.write(f"  → answered HTTP 200; delivery {task.status}")
                return
            time.sleep(0.05)
        raise CommandError(f"the server did not record the answer to delivery {task_id} within {timeout:g} s")

    def _show(self, delivery: dict) -> None:
        self.stdout.write(f"\n← delivery {delivery['delivery_key']} to {delivery['platform']}, "
                          f"{delivery['request']['method']} {delivery['request']['url']}")
        for result in parse_results(delivery["text"]):
            mark = "✓" if result["ok"] else "✗"
            detail = result.get("result") if result["ok"] else f"{result.get('status')}: {result.get('error')}"
            self.stdout.write(f"  {mark} block {result['block']} {result['tool']}: {_preview(detail)}")
