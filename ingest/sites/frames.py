"""``sites.get`` → ``sites`` (SPEC §9, "Platforms as data"): the chat site descriptions in force.

A plugin asks when ``hello.ok``'s ``sites_version`` is not the one it holds;
it checks each description against the schema itself before using it.
``IngestConfig.ready`` registers ``FRAME_HANDLERS`` on ``PluginConsumer``:
the consumer imports the sites (its hello names their version), so nothing
here imports it back.
"""

from __future__ import annotations

from typing import Any, Protocol

from channels.db import database_sync_to_async

from ingest.frames import parse_request_id
from ingest.sites.selectors import sites_in_force, sites_version


class FrameSender(Protocol):
    """What a handler here needs of ``PluginConsumer``: a frame sent on its socket."""

    async def send_frame(self, frame: dict[str, Any]) -> None: ...


def _sites() -> tuple[str, list[dict[str, Any]]]:
    return sites_version(), sites_in_force()


async def handle_sites_get(consumer: FrameSender, frame: dict[str, Any]) -> None:
    request_id = parse_request_id(frame)
    version, sites = await database_sync_to_async(_sites)()
    await consumer.send_frame({"type": "sites", "id": request_id, "sites_version": version, "sites": sites})


# Frame type -> handler, registered on PluginConsumer at IngestConfig.ready.
FRAME_HANDLERS = {"sites.get": handle_sites_get}
