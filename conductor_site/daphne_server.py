"""daphne for Conductor: a plugin socket reads at most 64 KiB until its client says hello.

daphne reads a whole WebSocket message, up to ``--websocket-max-message-size``
(16 MiB, so that a frame over 1 MiB reaches the consumer and gets
``too_large``), before the application sees it. Before ``hello`` that would
let anyone who can reach the port make the server hold 16 MiB per socket.

So every socket starts with autobahn's message and frame limits at
``MAX_HELLO_FRAME_BYTES``: autobahn fails a larger message with close code
1009 as soon as its header announces the size, without reading the payload
(SPEC §6: "before hello: a frame over 64 KiB — closed with 1009"). The server
offers the ASGI extension ``conductor.frame_limit``; the consumer sends
``{"type": "conductor.frame_limit.lift"}`` after a valid hello, which restores
the limits daphne was started with.

After the lift, a message over ``MAX_FRAME_BYTES`` (1 MiB) is not kept
either: from the frame header that takes it over, its payload is read off
the wire and dropped as it arrives (and not checked as UTF-8), and when it
ends the application gets ``{"type": "conductor.frame_limit.too_large",
"bytes": <its size>}`` instead of the message, so the consumer answers
``too_large`` and the socket stays open, at the memory cost of one read
buffer. A message over daphne's own limit (``--websocket-max-message-size``,
``CONDUCTOR_SOCKET_MAX_MESSAGE_BYTES``) still fails the connection with 1009.

    python -m conductor_site.daphne_server [daphne's own arguments]
"""

from __future__ import annotations

import daphne.server
from daphne.cli import CommandLineInterface
from daphne.server import Server
from daphne.ws_protocol import WebSocketFactory, WebSocketProtocol

from ingest.protocol import (
    FRAME_LIMIT_EXTENSION,
    FRAME_LIMIT_LIFT,
    FRAME_TOO_LARGE,
    MAX_FRAME_BYTES,
    MAX_HELLO_FRAME_BYTES,
)


class PluginWebSocketProtocol(WebSocketProtocol):
    is_lifted = False  # the client said hello: frames up to the full limits
    is_oversized = False  # the message being received is over MAX_FRAME_BYTES: dropped as it comes

    def onConnect(self, request):
        # autobahn copied the factory's limits onto this protocol when the
        # connection was made; keep them for later and start small.
        self.full_limits = (self.maxMessagePayloadSize, self.maxFramePayloadSize)
        small = min([MAX_HELLO_FRAME_BYTES, *(limit for limit in self.full_limits if limit > 0)])
        self.maxMessagePayloadSize = self.maxFramePayloadSize = small
        # Fail a connection with a close frame (1009 here) rather than a
        # dropped TCP connection, so the client learns why. The refused
        # message's payload is still discarded unread.
        self.failByDrop = False
        return super().onConnect(request)

    def handle_reply(self, message):
        if message.get("type") == FRAME_LIMIT_LIFT:
            self.maxMessagePayloadSize, self.maxFramePayloadSize = self.full_limits
            self.is_lifted = True
            return
        super().handle_reply(message)

    # autobahn's streaming hooks: each keeps the message's data unless it is oversized.

    def onMessageBegin(self, isBinary):
        self.is_oversized = False
        super().onMessageBegin(isBinary)

    def onMessageFrameBegin(self, length):
        super().onMessageFrameBegin(length)  # counts the frame's announced length; fails one over the limits
        self._drop_if_oversized()

    def onMessageFrameData(self, payload):
        if not self.is_oversized:
            super().onMessageFrameData(payload)
            # A compressed message grows as it is inflated: autobahn counts that before this call.
            self._drop_if_oversized()

    def onMessageFrameEnd(self):
        if self.is_oversized:
            self.frame_data = None
            return
        super().onMessageFrameEnd()

    def onMessageEnd(self):
        if not self.is_oversized:
            super().onMessageEnd()
            return
        self.message_data = None
        if not self.failedByMe and not self.muted:
            self.application_queue.put_nowait({"type": FRAME_TOO_LARGE, "bytes": self.message_data_total_length})

    def _drop_if_oversized(self):
        if self.is_oversized or not self.is_lifted or self.failedByMe:
            return
        if self.message_data_total_length > MAX_FRAME_BYTES:
            self.is_oversized = True
            self.message_data, self.frame_data = [], []
            self.utf8validateIncomingCurrentMessage = False  # nothing of it will be decoded


class PluginWebSocketFactory(WebSocketFactory):
    protocol = PluginWebSocketProtocol


class ConductorServer(Server):
    def create_application(self, protocol, scope):
        if isinstance(protocol, PluginWebSocketProtocol):
            scope = {**scope, "extensions": {**scope.get("extensions", {}), FRAME_LIMIT_EXTENSION: {}}}
        return super().create_application(protocol, scope)


def main() -> None:
    # Server.run builds its WebSocket factory from this module-level name;
    # this process runs only this server, so the swap touches nothing else.
    daphne.server.WebSocketFactory = PluginWebSocketFactory
    CommandLineInterface.server_class = ConductorServer
    CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
