"""The plugin WebSocket at /ws/plugin/ (SPEC §6).

The consumer speaks protocol only: it decodes and checks frames and calls
services through ``database_sync_to_async`` (STYLE rule 7). It accepts every
handshake that passed the origin check and judges frames afterwards, so that
bad input gets an ``error`` frame or a close code rather than a dead socket.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db import DatabaseError

from automation.services.delivery import (
    delivery_requests_abandon,
    delivery_result_record,
)
from automation.wake import dispatcher_wake_async
from conductor_site.logfmt import log_event
from ingest import selectors
from ingest.frames import frame_id, parse_delivery_result, parse_final_message
from ingest.models import plugin_group_name
from ingest.protocol import MAX_FRAME_BYTES, CloseCode, ErrorCode, FrameError
from ingest.ratelimit import SlidingWindowLimiter
from ingest.services import clients
from ingest.services.messages import ingest_final_message

logger = logging.getLogger(__name__)

FrameHandler = Callable[["PluginConsumer", dict[str, Any]], Awaitable[None]]


class PluginConsumer(AsyncWebsocketConsumer):
    # Frame type -> handler, for frames after a successful hello. Adding a
    # frame type is adding one entry (see `frame_handler`).
    frame_handlers: dict[str, FrameHandler] = {}

    client_pk: int | None = None
    client_id: str | None = None

    @classmethod
    def frame_handler(cls, frame_type: str) -> Callable[[FrameHandler], FrameHandler]:
        def register(handler: FrameHandler) -> FrameHandler:
            if frame_type in cls.frame_handlers:
                raise ValueError(f"frame type {frame_type!r} already has a handler")
            cls.frame_handlers[frame_type] = handler
            return handler

        return register

    # --- connection life cycle ---------------------------------------------

    async def connect(self) -> None:
        self._background: list[asyncio.Task] = []
        self._limiter = SlidingWindowLimiter(settings.CONDUCTOR_MAX_FRAMES_PER_SECOND)
        await self.accept()
        self._background.append(asyncio.ensure_future(self._close_without_hello()))

    async def disconnect(self, code: int) -> None:
        for task in self._background:
            task.cancel()
        if self.client_pk is not None:
            await self.channel_layer.group_discard(self._group_name, self.channel_name)
            was_current = await database_sync_to_async(clients.plugin_client_disconnect)(
                client_pk=self.client_pk, channel_name=self.channel_name
            )
            if was_current:
                # Nobody is left to answer what this socket was sent: its
                # executors retry later instead of waiting out their timeout.
                # (A socket replaced by a newer one leaves them to the newer one.)
                await database_sync_to_async(delivery_requests_abandon)(
                    client_pk=self.client_pk, reason="the plugin disconnected before answering"
                )
        log_event(logger, "socket_closed", client_id=self.client_id, code=code)

    async def _close_without_hello(self) -> None:
        await asyncio.sleep(settings.CONDUCTOR_HELLO_TIMEOUT_SECONDS)
        if self.client_pk is None:
            log_event(logger, "hello_timeout", level=logging.WARNING)
            await self.close(code=CloseCode.HELLO_TIMEOUT)

    async def _keep_presence(self) -> None:
        """Refresh presence while the socket lives; a killed server stops refreshing."""
        while True:
            await asyncio.sleep(settings.CONDUCTOR_PING_INTERVAL_SECONDS)
            await self._touch()

    async def _touch(self) -> None:
        await database_sync_to_async(clients.plugin_client_touch)(
            client_pk=self.client_pk, channel_name=self.channel_name
        )

    @property
    def _group_name(self) -> str:
        return plugin_group_name(self.client_pk)

    # --- frames from the plugin ----------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            if self.client_pk is not None and not self._limiter.allow():
                raise FrameError(
                    ErrorCode.RATE_LIMITED,
                    f"more than {self._limiter.limit} frames in one second; this frame was dropped",
                )
            frame = self._decode(text_data, bytes_data)
            if self.client_pk is None:
                await self._hello(frame)
                return
            handler = self.frame_handlers.get(frame["type"])
            if handler is None:
                raise FrameError(
                    ErrorCode.UNKNOWN_TYPE, f"unknown frame type {frame['type']!r}", frame.get("id")
                )
            await handler(self, frame)
        except FrameError as error:
            if self.client_pk is None:
                # Before a valid hello every problem is the same problem.
                await self.send_error(ErrorCode.UNAUTHORIZED, error.detail, frame_id=error.frame_id)
                await self.close(code=CloseCode.UNAUTHORIZED)
                return
            await self.send_error(error.code, error.detail, frame_id=error.frame_id)

    def _decode(self, text_data: str | None, bytes_data: bytes | None) -> dict[str, Any]:
        if text_data is None:
            raise FrameError(ErrorCode.BAD_FRAME, "binary frames are not accepted; send JSON text")
        if len(text_data) > MAX_FRAME_BYTES or len(text_data.encode()) > MAX_FRAME_BYTES:
            raise FrameError(ErrorCode.TOO_LARGE, f"frame is over {MAX_FRAME_BYTES} bytes")
        try:
            frame = json.loads(text_data)
        except json.JSONDecodeError as exc:
            raise FrameError(
                ErrorCode.BAD_FRAME, f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
        if not isinstance(frame, dict):
            raise FrameError(ErrorCode.BAD_FRAME, "a frame must be a JSON object")
        if not isinstance(frame.get("type"), str):
            raise FrameError(ErrorCode.INVALID, "'type' must be a string", frame_id(frame))
        return frame

    async def _hello(self, frame: dict[str, Any]) -> None:
        if frame["type"] != "hello":
            raise FrameError(ErrorCode.UNAUTHORIZED, "the first frame must be a hello")
        client_id, token = frame.get("client_id"), frame.get("token")
        client = None
        if isinstance(client_id, str) and isinstance(token, str):
            client = await database_sync_to_async(selectors.plugin_client_authenticate)(
                client_id=client_id, token=token
            )
        if client is None:
            log_event(logger, "hello_refused", level=logging.WARNING, client_id=client_id)
            raise FrameError(ErrorCode.UNAUTHORIZED, "unknown client, wrong token or revoked client")

        self.client_pk, self.client_id = client.pk, client.client_id
        await self.channel_layer.group_add(self._group_name, self.channel_name)
        try:
            replaced = await database_sync_to_async(clients.plugin_client_connect)(
                client=client, channel_name=self.channel_name
            )
        except clients.PluginClientRevoked:
            await self.channel_layer.group_discard(self._group_name, self.channel_name)
            self.client_pk = self.client_id = None
            log_event(logger, "hello_refused", level=logging.WARNING, client_id=client.client_id)
            raise FrameError(ErrorCode.UNAUTHORIZED, "unknown client, wrong token or revoked client") from None
        if replaced:
            await self.channel_layer.send(replaced, {"type": "plugin.replaced"})
        # Deliveries that waited for this client are due now.
        await dispatcher_wake_async(self.channel_layer)
        self._background.append(asyncio.ensure_future(self._keep_presence()))
        await self.send_frame(
            {
                "type": "hello.ok",
                "client_id": client.client_id,
                "server_time": time.time_ns() // 1_000_000,
                "ping_interval_ms": int(settings.CONDUCTOR_PING_INTERVAL_SECONDS * 1000),
            }
        )

    # --- messages from other processes (channel layer) ---------------------------

    async def plugin_replaced(self, event: dict[str, Any]) -> None:
        """A newer socket of the same client said hello: this one is closed."""
        await self.close(code=CloseCode.REPLACED)

    async def plugin_revoked(self, event: dict[str, Any]) -> None:
        await self.close(code=CloseCode.REVOKED)

    async def plugin_deliver(self, event: dict[str, Any]) -> None:
        """A dispatcher sends a ``browser.proxy_delivery`` frame to this client."""
        await self.send_frame(event["frame"])

    # --- sending -------------------------------------------------------------------

    async def send_frame(self, frame: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(frame))

    async def send_error(self, code: str, detail: str, *, frame_id: str | None = None) -> None:
        await self.send_frame({"type": "error", "id": frame_id, "code": code, "detail": detail})


@PluginConsumer.frame_handler("browser.final_message")
async def handle_final_message(consumer: PluginConsumer, frame: dict[str, Any]) -> None:
    message = parse_final_message(frame)
    try:
        result = await database_sync_to_async(ingest_final_message)(
            message=message, client_pk=consumer.client_pk
        )
    except DatabaseError:
        # Not stored, so not acknowledged: the plugin keeps the message and resends it.
        logger.exception("ingest failed for frame %s", message.frame_id)
        raise FrameError(
            ErrorCode.SERVER_ERROR, "the message could not be stored; send it again later",
            message.frame_id,
        ) from None
    await consumer.send_frame(
        {
            "type": "ack",
            "id": message.frame_id,
            "message_id": str(result.message_id),
            "instructions": result.instructions,
            "duplicate": result.duplicate,
        }
    )


@PluginConsumer.frame_handler("browser.proxy_delivery.result")
async def handle_delivery_result(consumer: PluginConsumer, frame: dict[str, Any]) -> None:
    result = parse_delivery_result(frame)
    recorded = await database_sync_to_async(delivery_result_record)(
        client_pk=consumer.client_pk, result=result
    )
    if not recorded:
        raise FrameError(
            ErrorCode.INVALID,
            f"no delivery with request_id {result.request_id!r} is awaiting this client's answer",
            frame_id(frame),
        )


@PluginConsumer.frame_handler("ping")
async def handle_ping(consumer: PluginConsumer, frame: dict[str, Any]) -> None:
    await consumer._touch()
    await consumer.send_frame({"type": "pong"})


@PluginConsumer.frame_handler("hello")
async def handle_repeated_hello(consumer: PluginConsumer, frame: dict[str, Any]) -> None:
    raise FrameError(ErrorCode.INVALID, "already said hello on this socket", frame.get("id"))
