"""The side panel's frames (SPEC §6): ``status.get`` and ``conversation.pause`` / ``conversation.resume``.

Registered on ``PluginConsumer`` when the app is ready (``IngestConfig.ready``);
``instruction.status`` is pushed by ``ingest/status_push.py`` and sent by
``PluginConsumer.plugin_status``.
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from ingest.consumers import PluginConsumer
from ingest.frames import echo, parse_conversation_request
from ingest.protocol import ErrorCode, FrameError
from ingest.services.conversations import conversation_pause_from_plugin, conversation_status_get
from ingest.sites import platforms_known_for
from ingest.status import server_base_url, with_absolute_links


@PluginConsumer.frame_handler("status.get")
async def handle_status_get(consumer: PluginConsumer, frame: dict[str, Any]) -> None:
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


async def _pause_or_resume(consumer: PluginConsumer, frame: dict[str, Any], *, is_paused: bool) -> None:
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


@PluginConsumer.frame_handler("conversation.pause")
async def handle_conversation_pause(consumer: PluginConsumer, frame: dict[str, Any]) -> None:
    await _pause_or_resume(consumer, frame, is_paused=True)


@PluginConsumer.frame_handler("conversation.resume")
async def handle_conversation_resume(consumer: PluginConsumer, frame: dict[str, Any]) -> None:
    await _pause_or_resume(consumer, frame, is_paused=False)
