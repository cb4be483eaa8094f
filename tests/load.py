"""A load of simulated plugins, each in a thread of its own, that outlive server restarts.

Each ``LoadPlugin`` behaves as the reference plugin does (SPEC §9): it keeps
the final messages it has had no ``ack`` for and sends them again after every
reconnect and a second after a ``rate_limited`` answer, reconnects whenever
its socket dies, answers every delivery frame with a 2xx, and answers a repeat
of a ``delivery_key`` it already posted with its earlier result instead of
posting it twice. Unlike the reference plugin, it also sends a frame again a
second after a ``server_error`` answer (the server could not store it: its
database was away), where the reference plugin waits for its next reconnect.
It counts what it saw, so a test can check that nothing was lost or done
twice. Used by the fault tests (tests/faults/); no Django, so a benchmark can
drive a server with it too.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from websockets.exceptions import WebSocketException

from conductor_site.simulator import DELIVERY_TYPES, ProtocolError, SimulatedPlugin

# How long a plugin waits before it tries to connect again, and before it
# sends again a frame the server could not take in.
RECONNECT_SECONDS = 0.2
RESEND_SECONDS = 1.0
# Error codes after which a plugin sends its frame again (SPEC §6): the server
# did not process it.
RESEND_CODES = {"rate_limited", "server_error"}


class _Dropped(Exception):
    """The plugin drops its socket on purpose."""


@dataclass
class LoadPlugin:
    """One simulated plugin client running in a thread (see the module docstring).

    ``drops``: how many delivery frames it receives and then disconnects
    without answering (a browser closed mid-delivery); it reconnects at once.
    """

    url: str
    client_id: str
    token: str
    drops: int = 0
    # What it saw.
    acks: dict[str, dict[str, Any]] = field(default_factory=dict)
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    # delivery_key: times posted into the chat.
    posted: Counter = field(default_factory=Counter)
    errors: list[dict[str, Any]] = field(default_factory=list)
    connections: int = 0
    dropped: int = 0

    def __post_init__(self) -> None:
        self._outbox: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        # frame id: frame, in the order sent.
        self._unacked: dict[str, dict[str, Any]] = {}
        self._resend_at: dict[str, float] = {}
        # delivery_key: the result sent for it.
        self._answers: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, name=f"load-{self.client_id}", daemon=True
        )

    # --- from the test's thread ---------------------------------------------

    def start(self) -> LoadPlugin:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def send_final_message(self, frame: dict[str, Any]) -> None:
        """Queue a ``browser.final_message``; it is sent, and sent again, until acknowledged."""
        self._outbox.put(frame)

    def unacked(self) -> int:
        with self._lock:
            return len(self._unacked) + self._outbox.qsize()

    def seen(self) -> dict[str, list[dict[str, Any]]]:
        """A copy of what was seen so far, safe to read while the plugin runs."""
        with self._lock:
            return {
                "acks": list(self.acks.values()),
                "deliveries": list(self.deliveries),
                "errors": list(self.errors),
            }

    # --- in the plugin's thread -----------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            plugin = SimulatedPlugin(
                url=self.url, client_id=self.client_id, token=self.token
            )
            try:
                plugin.connect()
                self.connections += 1
                self._serve(plugin)
            except _Dropped:
                self.dropped += 1
            except (
                OSError,
                TimeoutError,
                WebSocketException,
                ProtocolError,
            ):  # the server is away
                self._stop.wait(RECONNECT_SECONDS)
            finally:
                with contextlib.suppress(Exception):
                    plugin.close()

    def _serve(self, plugin: SimulatedPlugin) -> None:
        with self._lock:
            replay = list(self._unacked.values())
        for (
            frame
        ) in replay:  # what was not acknowledged on the last socket, oldest first
            plugin.send(frame)
        while not self._stop.is_set():
            self._send_new(plugin)
            self._send_again(plugin)
            try:
                frame = plugin.receive(timeout=0.05)
            except TimeoutError:
                continue
            plugin.deliveries.clear()  # kept here instead
            self._handle(plugin, frame)

    def _send_new(self, plugin: SimulatedPlugin) -> None:
        while True:
            try:
                frame = self._outbox.get_nowait()
            except queue.Empty:
                return
            frame = {"capture": plugin.capture, **frame}
            with self._lock:
                self._unacked[frame["id"]] = (
                    frame  # before sending: a dead socket replays it
                )
            plugin.send(frame)

    def _send_again(self, plugin: SimulatedPlugin) -> None:
        now = time.monotonic()
        for frame_id, at in list(self._resend_at.items()):
            if at <= now:
                del self._resend_at[frame_id]
                with self._lock:
                    frame = self._unacked.get(frame_id)
                if frame is not None:
                    plugin.send(frame)

    def _handle(self, plugin: SimulatedPlugin, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "ack":
            with self._lock:
                if self._unacked.pop(frame["id"], None) is not None:
                    self.acks[frame["id"]] = frame
        elif kind == "error":
            with self._lock:
                self.errors.append(frame)
            if frame.get("code") in RESEND_CODES and frame.get("id") in self._unacked:
                self._resend_at[frame["id"]] = time.monotonic() + RESEND_SECONDS
        elif kind in DELIVERY_TYPES:
            with self._lock:
                self.deliveries.append(frame)
            if self.drops > 0:
                self.drops -= 1
                raise _Dropped
            key = frame["delivery_key"]
            if key not in self._answers:
                # Posted into the chat: the one side effect a repeat must not cause again.
                self.posted[key] += 1
                self._answers[key] = {"ok": True, "status": 200, "body": "{}"}
            plugin.answer(frame, **self._answers[key])


@contextlib.contextmanager
def plugin_fleet(
    url: str, clients: list[tuple[str, str]], *, drops: dict[str, int] | None = None
) -> Iterator[list[LoadPlugin]]:
    """Start one ``LoadPlugin`` per ``(client_id, token)``; stop them all on exit."""
    drops = drops or {}
    plugins = [
        LoadPlugin(
            url=url, client_id=client_id, token=token, drops=drops.get(client_id, 0)
        ).start()
        for client_id, token in clients
    ]
    try:
        yield plugins
    finally:
        for plugin in plugins:
            plugin.stop()
