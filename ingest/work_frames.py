"""The frames that carry a chat's work (SPEC §6): final messages and their acks, delivery results,
``guide.get`` and adapter reports.

Registered on ``PluginConsumer`` when ``IngestConfig.ready`` imports this module;
the side panel's (``ingest/panel/frames.py``) and the sites' frames are
registered there from their ``FRAME_HANDLERS``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.db import DatabaseError

from core.logfmt import log_event
from ingest.batching import final_message_queue
from ingest.blocks import parse_blocks
from ingest.consumers import PluginConsumer
from ingest.frames import (
    DeliveryResult,
    FinalMessage,
    echo,
    frame_id,
    parse_adapter_report,
    parse_delivery_result,
    parse_dom_delivery_result,
    parse_final_message,
    parse_guide_request,
)
from ingest.protocol import ErrorCode, FrameError
from ingest.services.deliveries import delivery_result_record
from ingest.services.guides import tool_guide_serve
from ingest.services.messages import ClientMessage
from ingest.services.reports import adapter_report_record
from ingest.sites import platforms_known_for

logger = logging.getLogger(__name__)


@PluginConsumer.frame_handler("browser.final_message")
async def handle_final_message(consumer: PluginConsumer, frame: dict[str, Any]) -> None:
    message = parse_final_message(frame, known=await platforms_known_for(frame))
    # Parsed on a thread of its own: the parse of a large message is pure
    # CPU work, and the database thread is shared by every socket of this
    # process, so their acks need not wait behind it.
    blocks = await sync_to_async(parse_blocks, thread_sensitive=False)(message.text)
    # The next frames are read while this one is stored, so that they can be
    # stored with it (see ingest.batching); the slots bound what one
    # socket may have waiting.
    await consumer.ingest_slots.acquire()
    stored = final_message_queue().submit(
        ClientMessage(message=message, client_pk=consumer.client_pk, blocks=blocks)
    )
    consumer.acks_pending.add(ack := asyncio.ensure_future(_ack_when_stored(consumer, message, stored)))
    ack.add_done_callback(consumer.acks_pending.discard)


async def _ack_when_stored(consumer: PluginConsumer, message: FinalMessage, stored: asyncio.Future) -> None:
    """Ack the message once its batch has committed; an error frame if it was not stored."""
    try:
        result = await stored
    except DatabaseError:
        # Not stored, so not acknowledged: the plugin keeps the message and resends it.
        log_event(
            logger, "ingest_failed", level=logging.ERROR, exc_info=True, client_id=consumer.client_id,
            frame_id=message.frame_id,
        )
        await consumer.send_error(
            ErrorCode.SERVER_ERROR, "the message could not be stored; send it again later", frame_id=message.frame_id
        )
        return
    except Exception:
        log_event(
            logger, "frame_failed", level=logging.ERROR, exc_info=True, client_id=consumer.client_id,
            frame_type="browser.final_message", frame_id=message.frame_id,
        )
        await consumer.send_error(
            ErrorCode.SERVER_ERROR, "the server failed to handle this frame; it was not processed",
            frame_id=message.frame_id,
        )
        return
    finally:
        consumer.ingest_slots.release()
    await consumer.send_frame(
        {
            "type": "ack",
            "id": message.frame_id,
            "message_id": str(result.message_id),
            "instructions": result.instructions,
            "duplicate": result.duplicate,
        }
    )


async def _record_delivery_result(consumer: PluginConsumer, frame: dict[str, Any], result: DeliveryResult) -> None:
    recorded = await database_sync_to_async(delivery_result_record)(
        client_pk=consumer.client_pk, result=result
    )
    if not recorded:
        raise FrameError(
            ErrorCode.INVALID,
            f"no {frame['type'].removesuffix('.result')} with request_id {echo(result.request_id)} "
            "is awaiting this client's answer",
            frame_id(frame),
        )


@PluginConsumer.frame_handler("browser.proxy_delivery.result")
async def handle_delivery_result(consumer: PluginConsumer, frame: dict[str, Any]) -> None:
    await _record_delivery_result(consumer, frame, parse_delivery_result(frame))


@PluginConsumer.frame_handler("browser.dom_delivery.result")
async def handle_dom_delivery_result(consumer: PluginConsumer, frame: dict[str, Any]) -> None:
    await _record_delivery_result(consumer, frame, parse_dom_delivery_result(frame))


@PluginConsumer.frame_handler("guide.get")
async def handle_guide_get(consumer: PluginConsumer, frame: dict[str, Any]) -> None:
    request = parse_guide_request(frame, known=await platforms_known_for(frame))
    guide = await database_sync_to_async(tool_guide_serve)(
        client_pk=consumer.client_pk, platform=request.platform, conversation_id=request.conversation_id
    )
    await consumer.send_frame({"type": "guide", "id": request.frame_id, "version": guide.version, "text": guide.text})


@PluginConsumer.frame_handler("browser.adapter_report")
async def handle_adapter_report(consumer: PluginConsumer, frame: dict[str, Any]) -> None:
    report = parse_adapter_report(frame, known=await platforms_known_for(frame))
    await database_sync_to_async(adapter_report_record)(client_pk=consumer.client_pk, report=report)
    await consumer.send_frame({"type": "ack", "id": report.frame_id})
