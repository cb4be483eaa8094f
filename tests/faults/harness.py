"""What the fault tests share: the settings they run Conductor with, the messages
they send, and the check of what survived.

The check reads the database through a DB-API cursor in plain SQL, so that it
works on the test database (Django's cursor) and on a PostgreSQL a test
started itself (psycopg's).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from django.db import DatabaseError

from tests.load import LoadPlugin

# What reading the results raises while the database restarts, through
# Django's cursor or psycopg's.
DATABASE_ERRORS = (DatabaseError, psycopg.Error)

# Short leases, ticks and timeouts, so that a fault is over within seconds.
# The presence of a socket killed without a close lapses (2 pings) before a
# delivery sent to it times out, as with the defaults (40 s and 30 s).
FAST = {
    "CONDUCTOR_TICK_SECONDS": "0.5",
    "CONDUCTOR_LEASE_SECONDS": "2",
    "CONDUCTOR_OUTBOUND_JITTER_MAX_MS": "0",
    "CONDUCTOR_RETRY_BACKOFF_SECONDS": "1",
    "CONDUCTOR_RETRY_JITTER_MAX_MS": "0",
    "CONDUCTOR_DELIVERY_TIMEOUT_SECONDS": "3",
    "CONDUCTOR_PING_INTERVAL_SECONDS": "1",
}
# Tools the messages use that need an operator's approval by default.
ALLOWED_TOOLS = ("files.write", "shell.run")
LEDGER = "ledger"
TERMINAL = ("succeeded", "failed", "cancelled")


def block(tool: str, params: dict) -> str:
    return f"```baa\n{tool}\n{json.dumps(params)}\n```"


def message_text(tag: str, *, slow: bool = False) -> str:
    """An assistant message whose non-idempotent blocks leave one line in the ledger per run.

    ``slow``: one more block, a command that writes its line and then takes
    ``SLOW_SECONDS``, long enough to be killed in the middle.
    """
    blocks = [
        block("echo", {"tag": tag}),
        block(
            "files.write",
            {"path": f"{LEDGER}/{tag}.write", "content": "ran\n", "mode": "append"},
        ),
    ]
    if slow:
        blocks.append(
            block(
                "shell.run",
                {
                    "argv": [
                        "sh",
                        "-c",
                        f"echo ran >> {LEDGER}/{tag}.shell && sleep {SLOW_SECONDS}",
                    ],
                    "timeout_s": 60,
                },
            )
        )
    return f"Step {tag}.\n" + "\n".join(blocks)


SLOW_SECONDS = 3


@dataclass
class Load:
    """A steady stream of final messages spread over a fleet of plugins, in a thread of its own."""

    plugins: list[LoadPlugin]
    prefix: str
    count: int
    interval: float = 0.2
    slow_every: int = 0  # every n-th message is slow (0: none)
    # (conversation id, message id) of every message sent so far.
    sent: list[tuple[str, str]] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Load:
        threading.Thread(
            target=self._run, name=f"load-{self.prefix}", daemon=True
        ).start()
        return self

    def streaming(self) -> bool:
        """Every plugin has had a message acknowledged: the stream is under way everywhere."""
        return all(plugin.seen()["acks"] for plugin in self.plugins)

    def _run(self) -> None:
        deadline = time.monotonic() + 60
        while (
            not all(plugin.connections for plugin in self.plugins)
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)  # the stream starts once every plugin is connected
        for n in range(self.count):
            plugin = self.plugins[n % len(self.plugins)]
            tag = f"{self.prefix}-{n}"
            # Two conversations per plugin: messages of one conversation run
            # one after another, the other's beside them.
            conversation = f"{plugin.client_id}-c{n // len(self.plugins) % 2}"
            slow = bool(self.slow_every) and n % self.slow_every == 0
            plugin.send_final_message(
                {
                    "type": "browser.final_message",
                    "id": f"f-{tag}",
                    "platform": "claude",
                    "conversation_id": conversation,
                    "organization_id": "org",
                    "message_id": tag,
                    "page_url": f"https://claude.ai/chat/{conversation}",
                    "text": message_text(tag, slow=slow),
                }
            )
            self.sent.append((conversation, tag))
            time.sleep(self.interval)
        self.done.set()


def outstanding(cursor, load: Load) -> str:
    """What keeps the load from being over ("" when it is over): unacked frames, open tasks, undelivered messages."""
    if not load.done.is_set():
        return "still sending"
    if unacked := sum(plugin.unacked() for plugin in load.plugins):
        return f"{unacked} frames not acknowledged"
    cursor.execute(
        f"SELECT status, count(*) FROM automation_tasks WHERE status NOT IN {_in(TERMINAL)} GROUP BY status",
        list(TERMINAL),
    )
    if open_tasks := dict(cursor.fetchall()):
        return f"tasks not finished: {open_tasks}"
    delivered = {message for message, _ in _delivery_keys(cursor, load).items()}
    if missing := {tag for _, tag in load.sent} - delivered:
        return f"{len(missing)} messages not delivered, e.g. {sorted(missing)[:3]}"
    return ""


def wait_until_over(cursor_factory, load: Load, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while (
        left := outstanding_with(cursor_factory, load)
    ) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"the load was not over within {timeout} s: {left}"


def outstanding_with(cursor_factory, load: Load) -> str:
    try:
        with cursor_factory() as cursor:
            return outstanding(cursor, load)
    except DATABASE_ERRORS as exc:  # the database is away for a moment: not over
        return f"database unreachable: {exc}"


@dataclass
class Survey:
    """What the load left behind, counted for the report."""

    messages_sent: int
    messages_stored: int
    instructions_run_twice: int
    deliveries_under_several_keys: int
    messages_lost: int
    interrupted: int
    dropped_deliveries: int


def survey(cursor, load: Load, workspace: Path) -> Survey:
    """Check every invariant of the fault tests and return the counts (asserts on any breach).

    - every message sent was acknowledged and stored exactly once;
    - every non-idempotent instruction ran at most once (its ledger has at most
      one line), exactly once when it succeeded, and failed only as interrupted;
    - every message was delivered, under one ``delivery_key`` in every
      delivery frame any plugin saw, posted into the chat once, by one
      ``instruction.deliver`` task;
    - no task is left unfinished (leased or running past its lease, say).
    """
    sent = Counter(load.sent)
    assert all(count == 1 for count in sent.values())
    acked = {ack["id"] for plugin in load.plugins for ack in plugin.seen()["acks"]}
    assert acked == {f"f-{tag}" for _, tag in load.sent}

    cursor.execute(
        "SELECT c.remote_id, m.remote_message_id, count(*) FROM conversations_message m "
        "JOIN conversations_conversation c ON c.id = m.conversation_id WHERE m.role = 'assistant' "
        "AND m.remote_message_id LIKE %s GROUP BY c.remote_id, m.remote_message_id",
        [f"{load.prefix}-%"],
    )
    stored = {
        (conversation, tag): count for conversation, tag, count in cursor.fetchall()
    }
    assert set(stored) == set(sent), (
        "messages lost or stored under another conversation"
    )
    assert all(count == 1 for count in stored.values()), (
        f"messages stored twice: {stored}"
    )

    cursor.execute(
        "SELECT m.remote_message_id, i.tool, i.status, i.error FROM ingest_instruction i "
        "JOIN conversations_message m ON m.id = i.message_id WHERE m.remote_message_id LIKE %s",
        [f"{load.prefix}-%"],
    )
    instructions = cursor.fetchall()
    run_twice, interrupted = 0, 0
    for tag, tool, status, error in instructions:
        assert status in ("succeeded", "failed"), (tag, tool, status, error)
        ledger = {"files.write": "write", "shell.run": "shell"}.get(tool)
        if ledger is None:
            # Idempotent: retried until it ran.
            assert status == "succeeded", (tag, tool, error)
            continue
        path = workspace / LEDGER / f"{tag}.{ledger}"
        runs = len(path.read_text().splitlines()) if path.exists() else 0
        run_twice += runs > 1
        if status == "succeeded":
            assert runs == 1, (tag, tool, runs)
        else:
            assert "interrupted" in error, (tag, tool, error)
            interrupted += 1
    assert run_twice == 0, "a non-idempotent instruction ran twice"

    keys = _delivery_keys(cursor, load)
    cursor.execute(
        "SELECT m.remote_message_id, t.status, count(*) FROM automation_tasks t "
        "JOIN conversations_message m ON m.id = t.message_id "
        "WHERE t.kind = 'instruction.deliver' AND m.remote_message_id LIKE %s "
        "GROUP BY m.remote_message_id, t.status",
        [f"{load.prefix}-%"],
    )
    delivery_tasks = {tag: (status, count) for tag, status, count in cursor.fetchall()}
    assert delivery_tasks == {tag: ("succeeded", 1) for _, tag in load.sent}, (
        delivery_tasks
    )
    several = {tag: k for tag, k in keys.items() if len(k) > 1}
    assert not several, f"messages delivered under several keys: {several}"
    lost = {tag for _, tag in load.sent} - set(keys)
    assert not lost, f"messages never delivered: {lost}"
    posted = Counter()
    for plugin in load.plugins:
        posted.update(plugin.posted)
    assert set(posted.values()) == {1}, "a delivery was posted into the chat twice"

    cursor.execute(
        "SELECT count(*) FROM automation_tasks WHERE status IN ('leased', 'running', 'pending', "
        "'retry_wait')"
    )
    assert cursor.fetchone()[0] == 0
    return Survey(
        messages_sent=len(sent),
        messages_stored=sum(stored.values()),
        instructions_run_twice=run_twice,
        deliveries_under_several_keys=len(several),
        messages_lost=len(lost),
        interrupted=interrupted,
        dropped_deliveries=sum(plugin.dropped for plugin in load.plugins),
    )


def _delivery_keys(cursor, load: Load) -> dict[str, set[str]]:
    """The delivery keys each message arrived under, over every delivery frame any plugin saw."""
    frames = [frame for plugin in load.plugins for frame in plugin.seen()["deliveries"]]
    keys = sorted({frame["delivery_key"] for frame in frames})
    if not keys:
        return {}
    cursor.execute(
        "SELECT t.task_id, m.remote_message_id FROM automation_tasks t "
        f"JOIN conversations_message m ON m.id = t.message_id WHERE t.task_id IN {_in(keys)}",
        keys,
    )
    message_of = dict(cursor.fetchall())
    by_message: dict[str, set[str]] = defaultdict(set)
    for key in keys:
        if key in message_of:
            by_message[message_of[key]].add(key)
    return dict(by_message)


def _in(values) -> str:
    return "(" + ", ".join(["%s"] * len(values)) + ")"
