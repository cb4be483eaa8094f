"""A simulated plugin: speaks the plugin protocol (SPEC §6) over a real socket, without a browser.

Used by ``manage.py demo`` and by the end-to-end tests. It says hello, sends
frames, and answers delivery frames the way a plugin would with a chosen
outcome: ``browser.proxy_delivery`` after making the request inside the chat
page, ``browser.dom_delivery`` (when its hello announces ``dom_delivery``)
after sending the text through the composer.
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from websockets.sync.client import ClientConnection, connect

DELIVERY_TYPES = ("browser.proxy_delivery", "browser.dom_delivery")
STATUS_TYPE = "instruction.status"
# What the server pushes unasked to the side panel and the badge: kept apart from the answers.
PUSHED_TYPES = frozenset({STATUS_TYPE, "approvals.waiting"})
MAX_STATUSES_KEPT = 1000


class ProtocolError(RuntimeError):
    pass


@dataclass
class SimulatedPlugin:
    url: str
    client_id: str
    token: str
    platforms: tuple[str, ...] = ("claude", "chatgpt", "gemini")
    # What its hello says about itself, as the reference plugin's does (SPEC §6).
    plugin_version: str = "simulated"
    capabilities: tuple[str, ...] = ("proxy_delivery",)
    adapter_version: str = "simulated"
    # Said in every final message that does not say it already.
    capture: str = "network"
    # Deliveries received but not yet answered, and frames not yet read.
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    # The latest ``instruction.status`` and ``approvals.waiting`` frames received, oldest first (the side panel's
    # and the badge's), kept apart from the rest.
    statuses: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_STATUSES_KEPT))
    _inbox: list[dict[str, Any]] = field(default_factory=list)
    _socket: ClientConnection | None = None

    def __enter__(self) -> SimulatedPlugin:
        return self.connect()

    def __exit__(self, *exc_info) -> None:
        self.close()

    def connect(self) -> SimulatedPlugin:
        self._socket = connect(self.url, max_size=None).__enter__()
        self.send({
            "type": "hello", "client_id": self.client_id, "token": self.token,
            "plugin_version": self.plugin_version, "platforms": list(self.platforms),
            "capabilities": list(self.capabilities),
            "adapters": {platform: self.adapter_version for platform in self.platforms},
        })
        reply = self.receive(timeout=10)
        if reply.get("type") != "hello.ok":
            raise ProtocolError(f"hello refused: {reply}")
        return self

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def send(self, frame: dict[str, Any]) -> None:
        self._socket.send(json.dumps(frame))

    def receive(self, *, timeout: float) -> dict[str, Any]:
        """The next frame but an ``instruction.status``; a delivery met on the way is kept in ``deliveries`` too."""
        if self._inbox:
            return self._inbox.pop(0)
        return self._read(timeout=timeout)

    def _read(self, *, timeout: float) -> dict[str, Any]:
        """The next frame from the socket, passing over (and keeping in ``statuses``) the pushed statuses."""
        deadline = time.monotonic() + timeout
        while True:
            frame = json.loads(self._socket.recv(timeout=max(0.0, deadline - time.monotonic())))
            if frame.get("type") in PUSHED_TYPES:
                self.statuses.append(frame)
                continue
            if frame.get("type") in DELIVERY_TYPES:
                self.deliveries.append(frame)
            return frame

    def send_final_message(self, frame: dict[str, Any], *, timeout: float = 10) -> dict[str, Any]:
        """Send a ``browser.final_message`` and return its ``ack`` (deliveries arriving meanwhile are kept)."""
        return self._ask({"capture": self.capture, **frame}, answer="ack", timeout=timeout)

    def look_at(self, platform: str, conversation_id: str, *, timeout: float = 10) -> dict[str, Any]:
        """The side panel's ``status.get``: its ``status`` answer; the conversation's ``instruction.status``
        frames reach this socket from now on."""
        frame = {"type": "status.get", "id": f"look-{time.monotonic_ns()}", "platform": platform,
                 "conversation_id": conversation_id}
        return self._ask(frame, answer="status", timeout=timeout)

    def _ask(self, frame: dict[str, Any], *, answer: str, timeout: float) -> dict[str, Any]:
        """Send ``frame`` and return its answer of type ``answer``; an ``error`` meanwhile raises, and the other
        frames are kept for ``receive`` (deliveries in ``deliveries``)."""
        self.send(frame)
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(timeout=max(0.01, deadline - time.monotonic()))
            if reply.get("type") == answer and reply.get("id") == frame.get("id"):
                return reply
            if reply.get("type") == "error":
                raise ProtocolError(f"frame refused: {reply}")
            if reply.get("type") not in DELIVERY_TYPES:
                self._inbox.append(reply)

    def next_delivery(self, *, timeout: float) -> dict[str, Any]:
        """The oldest delivery not yet answered, waiting up to ``timeout`` seconds for one."""
        deadline = time.monotonic() + timeout
        while not self.deliveries:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no delivery within {timeout} s")
            # From the socket: a frame kept for a later reader is not read again here.
            frame = self._read(timeout=remaining)
            if frame.get("type") not in DELIVERY_TYPES:
                self._inbox.append(frame)
        return self.deliveries.pop(0)

    def answer(
        self, delivery: dict[str, Any], *, ok: bool = True, status: int | None = 200, body: str = "",
        error: str | None = None, error_code: str | None = None,
    ) -> None:
        """Answer a delivery as it came out (``error_code``: it could not be made).

        A ``browser.proxy_delivery`` as the page's request did (``status``,
        ``body``); a ``browser.dom_delivery`` as the composer did, having seen
        the user turn appear when ``ok``.
        """
        if delivery.get("type") == "browser.dom_delivery":
            self.send({
                "type": "browser.dom_delivery.result", "request_id": delivery["request_id"],
                "ok": ok, "error": error, "error_code": error_code, "evidence": {"user_turn_seen": ok},
            })
            return
        self.send({
            "type": "browser.proxy_delivery.result", "request_id": delivery["request_id"],
            "ok": ok, "status": status, "body": body, "error": error, "error_code": error_code,
        })
