"""``sites.get`` → ``sites`` (SPEC §9, "Platforms as data"): the chat site descriptions in force.

A plugin asks when ``hello.ok``'s ``sites_version`` is not the one it holds;
it checks each description against the schema itself before using it.
Registered on ``PluginConsumer`` when the app is ready (``IngestConfig.ready``).
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from ingest.consumers import PluginConsumer
from ingest.frames import parse_request_id
from ingest.sites.selectors import sites_in_force, sites_version


def _sites() -> tuple[str, list[dict[str, Any]]]:
    return sites_version(), sites_in_force()


@PluginConsumer.frame_handler("sites.get")
async def handle_sites_get(consumer: PluginConsumer, frame: dict[str, Any]) -> None:
    request_id = parse_request_id(frame)
    version, sites = await database_sync_to_async(_sites)()
    await consumer.send_frame({"type": "sites", "id": request_id, "sites_version": version, "sites": sites})
