"""The side panel's frames (SPEC §6): ``status.get`` and ``conversation.pause`` / ``conversation.resume``.

``IngestConfig.ready`` registers ``FRAME_HANDLERS`` on ``PluginConsumer``: the
consumer imports the panel (its hello tells the approvals waiting), so
nothing here imports it back. ``instruction.status`` is pushed by
``ingest/panel/push.py`` and sent by ``PluginConsumer.plugin_status``.
"""

from __future__ import annotations

from typing import Any, Protocol

from channels.db import database_sync_to_async

from ingest.frames import echo, parse_conversation_request
from ingest.panel.services import conversation_pause_from_plugin, conversation_status_get
from ingest.panel.status import server_base_url, with_absolute_links
from ingest.protocol import ErrorCode, FrameError
from ingest.sites import platforms_known_for


class PanelSocket(Protocol):
    """What the panel's handlers need of ``PluginConsumer``."""

    client_pk: int | None
    approvals_told: int | None
    scope: dict[str, Any]

    async def look_at(self, platform: str, conversation_id: str) -> None: ...

    async def send_frame(self, frame: dict[str, Any]) -> None: ...


async def handle_status_get(consumer: PanelSocket, frame: dict[str, Any]) -> None:
    request = parse_conversation_request(frame, known=await platforms_known_for(frame))
    # Joined before the read: a change committed meanwhile is pushed rather than missed.
    await consumer.look_at(request.platform, request.conversation_id)
    status = await database_sync_to_async(conversation_status_get)(
        client_pk=consumer.client_pk, platform=request.platform, conversation_id=request.conversation_id
    )
    answer = {
        "type": "status", "id": request.frame_id, "platform": request.platform,
        "conversation_id": request.conversation_id, "paused": status.is_paused, "messages": status.messages,
        "approvals_waiting": status.approvals_waiting,
    }
    consumer.approvals_told = status.approvals_waiting
    await consumer.send_frame(with_absolute_links(answer, base=server_base_url(consumer.scope)))


async def _pause_or_resume(consumer: PanelSocket, frame: dict[str, Any], *, is_paused: bool) -> None:
    request = parse_conversation_request(frame, known=await platforms_known_for(frame))
    paused = await database_sync_to_async(conversation_pause_from_plugin)(
        client_pk=consumer.client_pk, platform=request.platform, conversation_id=request.conversation_id,
        is_paused=is_paused,
    )
    if paused is None:
        raise FrameError(
            ErrorCode.INVALID, f"no conversation {echo(request.conversation_id)} of this client's owner on "
            f"{request.platform}", request.frame_id,
        )
    await consumer.send_frame({"type": "ack", "id": request.frame_id, "paused": paused})


async def handle_conversation_pause(consumer: PanelSocket, frame: dict[str, Any]) -> None:
    await _pause_or_resume(consumer, frame, is_paused=True)


async def handle_conversation_resume(consumer: PanelSocket, frame: dict[str, Any]) -> None:
    await _pause_or_resume(consumer, frame, is_paused=False)


# Frame type -> handler, registered on PluginConsumer at IngestConfig.ready.
FRAME_HANDLERS = {
    "status.get": handle_status_get,
    "conversation.pause": handle_conversation_pause,
    "conversation.resume": handle_conversation_resume,
}
