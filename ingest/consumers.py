"""The plugin WebSocket at /ws/plugin/ (SPEC §6).

The consumer speaks protocol only: it decodes and checks frames and calls
services through ``database_sync_to_async`` (STYLE rule 7). It accepts every
handshake that passed the origin check and judges frames afterwards, so that
bad input gets an ``error`` frame or a close code rather than a dead socket.

The handshake, ``hello`` and ``ping`` are handled here; the frames that carry
work in ``ingest/work_frames.py``, the side panel's in ``panel/frames.py``,
the sites' in ``sites/frames.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from automation.wake import dispatcher_wake_async
from core.layer_send import first_line_of
from core.logfmt import log_event
from ingest.frames import decode_frame, echo, frame_id, parse_plugin_info
from ingest.cleanup import socket_clean_up
from ingest.models import plugin_group_name, plugin_owner_group_name, plugin_view_group_name
from ingest.panel.selectors import approvals_waiting as approvals_waiting_count
from ingest.panel.status import server_base_url, with_absolute_links
from ingest.prehello import PreHelloRoom
from ingest.protocol import (
    FRAME_LIMIT_EXTENSION,
    FRAME_LIMIT_LIFT,
    MAX_FRAME_BYTES,
    MAX_HELLO_FRAME_BYTES,
    CloseCode,
    ErrorCode,
    FrameError,
    plugin_is_outdated,
)
from ingest.ratelimit import SlidingWindowLimiter
from ingest.selectors import clients as client_selectors
from ingest.services import clients
from ingest.sites import platforms_known_for_hello, sites_version
from ingest.panel.pacing import StatusPacer

logger = logging.getLogger(__name__)

FrameHandler = Callable[["PluginConsumer", dict[str, Any]], Awaitable[None]]


class PluginConsumer(AsyncWebsocketConsumer):
    # Frame type -> handler, for frames after a successful hello. Adding a
    # frame type is adding one entry (see `frame_handler`).
    frame_handlers: dict[str, FrameHandler] = {}

    client_pk: int | None = None
    client_id: str | None = None
    owner: str | None = None
    # The group of the conversation this socket's side panel looks at (its latest status.get).
    viewing_group: str | None = None
    # The owner's approvals count this socket was last told (hello.ok, status, instruction.status).
    approvals_told: int | None = None

    @classmethod
    def frame_handler(cls, frame_type: str) -> Callable[[FrameHandler], FrameHandler]:
        def register(handler: FrameHandler) -> FrameHandler:
            if frame_type in cls.frame_handlers:
                raise ValueError(f"frame type {frame_type!r} already has a handler")
            cls.frame_handlers[frame_type] = handler
            return handler

        return register

    # --- connection life cycle ---------------------------------------------

    # Sockets of this process that have not said hello yet: 64 from one
    # remote address and 256 in all, past their first two seconds; the
    # oldest idle one goes for a newcomer, who is never refused
    # (ingest/prehello.py). Each may send one frame of up to
    # MAX_HELLO_FRAME_BYTES before it must authenticate.
    pre_hello_room = PreHelloRoom(per_address=64, total=256, grace_seconds=2.0)

    # How many of one socket's final messages may wait for their ack at once.
    max_acks_pending = 32

    _background: tuple[asyncio.Task, ...] | list[asyncio.Task] = ()
    acks_pending: set[asyncio.Task] | frozenset = frozenset()
    _is_evicted = False  # made room for a newer socket before saying hello; being closed
    _is_cleaned_up = False
    _status_pacer: StatusPacer | None = None

    async def __call__(self, scope, receive, send) -> None:
        # However the socket ends (a close, a crash of a handler, a cancelled
        # server task), its presence and its pending deliveries are cleaned up.
        try:
            await super().__call__(scope, receive, send)
        except Exception as error:
            # The loop that reads this socket's channel-layer messages ended:
            # most often the layer went away (Redis restarted). Nothing can be
            # sent to the socket any more, so it is closed for the plugin to
            # reconnect (whose hello joins the layer afresh), never left open
            # and deaf; daphne would close it with 1011 and a traceback.
            log_event(
                logger, "socket_lost_channel_layer", level=logging.WARNING, client_id=self.client_id,
                error=first_line_of(error), error_type=type(error).__name__,
            )
            with contextlib.suppress(Exception):
                await self.close(code=CloseCode.TRY_AGAIN)
        finally:
            await self._clean_up(code=None)

    async def connect(self) -> None:
        self._background = []
        self.acks_pending = set()
        self.ingest_slots = asyncio.Semaphore(self.max_acks_pending)
        self._limiter = SlidingWindowLimiter(settings.CONDUCTOR_MAX_FRAMES_PER_SECOND)
        self._room_made = asyncio.Event()
        self._status_pacer = StatusPacer(self._send_status)
        await self.accept()
        evicted = PluginConsumer.pre_hello_room.admit(self, _remote_address(self.scope), now=time.monotonic())
        if evicted is not None:
            evicted.make_room()
        self._background.append(asyncio.ensure_future(self._close_without_hello()))

    def make_room(self) -> None:
        """This socket, idle and without hello, goes so that a newer one may wait (``PreHelloRoom``).

        It has already left the room; its own hello timer closes it, and a
        frame that arrives meanwhile is dropped.
        """
        self._is_evicted = True
        self._room_made.set()

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels' dispatch without its ``aclose_old_connections`` before every handler.

        That call runs on the database thread, so each incoming frame would
        wait behind whatever that thread is storing, and a socket could not
        read its next frame (to store it in the same batch) before the last
        one was stored. Every database call here goes through
        ``database_sync_to_async``, which closes stale connections around it.
        """
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def disconnect(self, code: int) -> None:
        await self._clean_up(code=code)

    async def _clean_up(self, *, code: int | None) -> None:
        if self._is_cleaned_up:
            return
        self._is_cleaned_up = True
        PluginConsumer.pre_hello_room.leave(self)
        for task in [*self._background, *self.acks_pending]:
            task.cancel()
        if self._status_pacer is not None:
            self._status_pacer.close()
        if self.client_pk is not None:
            # Group, presence and delivery requests: each step retried on its
            # own, so that one failing does not skip the others (ingest/cleanup.py).
            await socket_clean_up(
                layer=self.channel_layer, client_pk=self.client_pk, client_id=self.client_id,
                channel_name=self.channel_name, groups=self._owner_groups,
            )
        log_event(logger, "socket_closed", client_id=self.client_id, code=code)

    async def _close_without_hello(self) -> None:
        try:
            await asyncio.wait_for(self._room_made.wait(), timeout=settings.CONDUCTOR_HELLO_TIMEOUT_SECONDS)
        except TimeoutError:
            if self.client_pk is None:
                log_event(logger, "hello_timeout", level=logging.WARNING)
                await self.close(code=CloseCode.HELLO_TIMEOUT)
            return
        log_event(
            logger, "socket_evicted", level=logging.WARNING, address=_remote_address(self.scope),
            reason="idle without hello; a newer socket needed its place",
        )
        await self.close(code=CloseCode.TOO_MANY_WAITING)

    async def _keep_presence(self) -> None:
        """Refresh presence while the socket lives; a killed server stops refreshing.

        Each refresh also renews the socket's place in its client's group,
        through which deliveries and revocation reach it: the channel layer
        forgets it when Redis restarts (and after a day on either layer), and
        the socket would go on looking connected while no delivery reached it.
        """
        while True:
            await asyncio.sleep(settings.CONDUCTOR_PING_INTERVAL_SECONDS)
            try:
                await self._touch()
                for group in (self._group_name, *self._owner_groups):
                    await self.channel_layer.group_add(group, self.channel_name)
            except Exception:
                log_event(
                    logger, "presence_refresh_failed", level=logging.ERROR, exc_info=True, client_id=self.client_id,
                    next_try_s=settings.CONDUCTOR_PING_INTERVAL_SECONDS,
                )

    async def _touch(self) -> None:
        await database_sync_to_async(clients.plugin_client_touch)(
            client_pk=self.client_pk, channel_name=self.channel_name
        )

    @property
    def _group_name(self) -> str:
        return plugin_group_name(self.client_pk)

    @property
    def _owner_groups(self) -> tuple[str, ...]:
        """The group of every socket of this client's owner (the badge's count), once it said hello, and the
        group of the conversation it looks at (``instruction.status``), once it asked ``status.get``."""
        if self.owner is None:
            return ()
        return (plugin_owner_group_name(self.owner), *((self.viewing_group,) if self.viewing_group else ()))

    async def look_at(self, platform: str, conversation_id: str) -> None:
        """``status.get``: this socket is sent the conversation's ``instruction.status`` and no longer another's."""
        group = plugin_view_group_name(self.owner, platform, conversation_id)
        if group == self.viewing_group:
            return
        await self.channel_layer.group_add(group, self.channel_name)
        if self.viewing_group is not None:
            await self.channel_layer.group_discard(self.viewing_group, self.channel_name)
        self.viewing_group = group

    # --- frames from the plugin ----------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Answer one frame; whatever goes wrong, the answer is an error frame (SPEC §6)."""
        frame: dict[str, Any] | None = None
        saying_hello = self.client_pk is None
        if saying_hello:
            if self._is_evicted:
                return  # being closed: it made room for a newer socket
            PluginConsumer.pre_hello_room.mark_busy(self)
        try:
            if self.client_pk is None and _size(text_data, bytes_data) > MAX_HELLO_FRAME_BYTES:
                # Conductor's daphne refuses such a frame before reading it;
                # this is for servers without that extension.
                log_event(logger, "hello_too_large", level=logging.WARNING, bytes=_size(text_data, bytes_data))
                await self._close_too_big()
                return
            if self.client_pk is not None and not self._limiter.allow():
                raise FrameError(
                    ErrorCode.RATE_LIMITED,
                    f"more than {self._limiter.limit} frames in one second; this frame was dropped",
                )
            frame = decode_frame(text_data)
            if self.client_pk is None:
                await self._hello(frame)
                return
            handler = self.frame_handlers.get(frame["type"])
            if handler is None:
                raise FrameError(
                    ErrorCode.UNKNOWN_TYPE, f"unknown frame type {echo(frame['type'])}", frame_id(frame)
                )
            await handler(self, frame)
        except FrameError as error:
            if self.client_pk is None:
                # Before a valid hello every problem is the same problem.
                await self.send_error(ErrorCode.UNAUTHORIZED, error.detail, frame_id=error.frame_id)
                await self.close(code=CloseCode.UNAUTHORIZED)
                return
            await self.send_error(error.code, error.detail, frame_id=error.frame_id)
        except Exception:
            # A bug or a lost database: say so and keep the socket; nothing was acknowledged.
            log_event(
                logger, "frame_failed", level=logging.ERROR, exc_info=True, client_id=self.client_id,
                frame_type=frame.get("type") if frame else None,
            )
            if saying_hello:
                # A hello half taken (the database or the channel layer away) leaves no
                # socket worth keeping: the plugin reconnects and says hello again.
                await self.send_error(ErrorCode.SERVER_ERROR, "the server could not take this hello; reconnect")
                await self.close(code=CloseCode.TRY_AGAIN)
                return
            await self.send_error(
                ErrorCode.SERVER_ERROR, "the server failed to handle this frame; it was not processed",
                frame_id=frame_id(frame) if frame else None,
            )

    async def conductor_frame_limit_too_large(self, message: dict[str, Any]) -> None:
        """Conductor's daphne dropped a frame over ``MAX_FRAME_BYTES`` unread (``FRAME_TOO_LARGE``): answer it.

        Only sent after the lift, so only to a client that said hello. It
        counts against the frame rate like any frame.
        """
        if not self._limiter.allow():
            await self.send_error(
                ErrorCode.RATE_LIMITED, f"more than {self._limiter.limit} frames in one second; this frame was dropped"
            )
            return
        await self.send_error(
            ErrorCode.TOO_LARGE, f"frame is over {MAX_FRAME_BYTES} bytes ({message.get('bytes')} bytes); not read"
        )

    async def _log_hello_refused(self, client_id: Any, **fields: Any) -> None:
        """Log a refused hello, naming its ``client_id`` only when that names a client.

        An id that names none may be the token pasted into the wrong field,
        which must not reach a log.
        """
        is_known = isinstance(client_id, str) and await database_sync_to_async(client_selectors.plugin_client_exists)(
            client_id=client_id
        )
        log_event(
            logger, "hello_refused", level=logging.WARNING, client_id=client_id if is_known else None,
            unknown_client=not is_known, **fields,
        )

    async def _close_too_big(self) -> None:
        try:
            await self.close(code=CloseCode.MESSAGE_TOO_BIG)
        except Exception:
            # autobahn lets an application close only with 1000 or 3000-4999.
            await self.close(code=CloseCode.UNAUTHORIZED)

    async def _hello(self, frame: dict[str, Any]) -> None:
        if frame["type"] != "hello":
            raise FrameError(ErrorCode.UNAUTHORIZED, "the first frame must be a hello")
        client_id, token = frame.get("client_id"), frame.get("token")
        # Checked before the token: a malformed hello is refused for what it
        # is, with the field named, and costs no token hash.
        try:
            info = parse_plugin_info(frame, known=await platforms_known_for_hello(frame))
        except FrameError as error:
            await self._log_hello_refused(client_id, reason=error.detail)
            raise
        client = None
        if isinstance(client_id, str) and isinstance(token, str):
            client = await database_sync_to_async(client_selectors.plugin_client_authenticate)(
                client_id=client_id, token=token
            )
        if client is None:
            await self._log_hello_refused(client_id)
            raise FrameError(ErrorCode.UNAUTHORIZED, "unknown client, wrong token or revoked client")

        self.client_pk, self.client_id, self.owner = client.pk, client.client_id, client.owner
        PluginConsumer.pre_hello_room.leave(self)
        for group in (self._group_name, *self._owner_groups):
            await self.channel_layer.group_add(group, self.channel_name)
        try:
            replaced = await database_sync_to_async(clients.plugin_client_connect)(
                client=client, channel_name=self.channel_name, info=info
            )
        except clients.PluginClientRevoked:
            for group in (self._group_name, *self._owner_groups):
                await self.channel_layer.group_discard(group, self.channel_name)
            self.client_pk = self.client_id = self.owner = None
            log_event(logger, "hello_refused", level=logging.WARNING, client_id=client.client_id)
            raise FrameError(ErrorCode.UNAUTHORIZED, "unknown client, wrong token or revoked client") from None
        if replaced:
            await self.channel_layer.send(replaced, {"type": "plugin.replaced"})
        if FRAME_LIMIT_EXTENSION in self.scope.get("extensions", {}):
            await self.base_send({"type": FRAME_LIMIT_LIFT})  # frames up to the full limit from now on
        # Deliveries that waited for this client are due now.
        await dispatcher_wake_async(self.channel_layer)
        self._background.append(asyncio.ensure_future(self._keep_presence()))
        approvals_waiting, current_sites = await database_sync_to_async(_hello_facts)(owner=client.owner)
        self.approvals_told = approvals_waiting
        await self.send_frame(
            {
                "type": "hello.ok",
                "client_id": client.client_id,
                "server_time": time.time_ns() // 1_000_000,
                "ping_interval_ms": int(settings.CONDUCTOR_PING_INTERVAL_SECONDS * 1000),
                "plugin_outdated": plugin_is_outdated(
                    info.plugin_version, oldest=settings.CONDUCTOR_OLDEST_PLUGIN_VERSION
                ),
                "approvals_waiting": approvals_waiting,
                "sites_version": current_sites,
            }
        )

    # --- messages from other processes (channel layer) ---------------------------

    async def plugin_replaced(self, event: dict[str, Any]) -> None:
        """A newer socket of the same client said hello: this one is closed."""
        await self.close(code=CloseCode.REPLACED)

    async def plugin_revoked(self, event: dict[str, Any]) -> None:
        await self.close(code=CloseCode.REVOKED)

    async def plugin_status(self, event: dict[str, Any]) -> None:
        """An ``instruction.status`` of the conversation this socket looks at (``ingest/panel/push.py``), paced
        (``ingest/panel/pacing.py``), its links made absolute."""
        frame = event["frame"]
        self.approvals_told = frame["approvals_waiting"]
        await self._status_pacer.push(frame["message"]["conductor_message_id"], frame)

    async def _send_status(self, frame: dict[str, Any]) -> None:
        await self.send_frame(with_absolute_links(frame, base=server_base_url(self.scope)))

    async def plugin_approvals(self, event: dict[str, Any]) -> None:
        """The owner's count of blocks waiting for approval (``ingest/panel/push.py``): told only when it
        changed for this socket (a socket that looks at the change's conversation had it in its status)."""
        if event["count"] != self.approvals_told:
            self.approvals_told = event["count"]
            await self.send_frame({"type": "approvals.waiting", "count": event["count"]})

    async def plugin_sites(self, event: dict[str, Any]) -> None:
        """The chat sites in force changed (``ingest.sites.services.sites_announce``): an unasked ``sites``."""
        await self.send_frame(event["frame"])

    async def plugin_deliver(self, event: dict[str, Any]) -> None:
        """A dispatcher sends a delivery frame (``browser.proxy_delivery``, ``browser.dom_delivery``) to this client."""
        await self.send_frame(event["frame"])

    # --- sending -------------------------------------------------------------------

    async def send_frame(self, frame: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(frame))

    async def send_error(self, code: str, detail: str, *, frame_id: str | None = None) -> None:
        await self.send_frame({"type": "error", "id": frame_id, "code": code, "detail": detail})


def _hello_facts(*, owner: str) -> tuple[int, str]:
    """What ``hello.ok`` tells besides the client: the owner's approvals waiting, and the sites' version."""
    return approvals_waiting_count(owner=owner), sites_version()


def _remote_address(scope: dict[str, Any]) -> str | None:
    """The peer's address (behind a reverse proxy, the proxy's); None when the server does not say."""
    client = scope.get("client")
    return str(client[0]) if client else None


def _size(text_data: str | None, bytes_data: bytes | None) -> int:
    """A frame's size in bytes, encoding text only when its length cannot tell."""
    if text_data is None:
        return len(bytes_data or b"")
    if len(text_data) > MAX_HELLO_FRAME_BYTES:
        return len(text_data)  # at least this many bytes
    return len(text_data.encode("utf-8", "surrogatepass"))


@PluginConsumer.frame_handler("ping")
async def handle_ping(consumer: PluginConsumer, frame: dict[str, Any]) -> None:
    await consumer._touch()
    await consumer.send_frame({"type": "pong"})


@PluginConsumer.frame_handler("hello")
async def handle_repeated_hello(consumer: PluginConsumer, frame: dict[str, Any]) -> None:
    raise FrameError(ErrorCode.INVALID, "already said hello on this socket", frame_id(frame))
