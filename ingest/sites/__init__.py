"""The chat sites (SPEC §9, "Platforms as data"): the descriptions in force and an operator's copies.

``selectors`` reads the sites in force and the platforms a frame may name
now; ``services`` saves and deletes an operator's description and tells the
connected plugins; ``frames`` answers ``sites.get`` (registered at
``IngestConfig.ready``, so not imported here).
"""

from ingest.sites.selectors import (
    platform_adapter,
    platform_names_in_force,
    platforms_known_for,
    platforms_known_for_hello,
    site_origin_problems,
    sites_in_force,
    sites_left_out,
    sites_version,
)
from ingest.sites.services import SiteNameMismatch, SiteOriginTaken, site_description_delete, site_description_save

__all__ = [
    "SiteNameMismatch",
    "SiteOriginTaken",
    "platform_adapter",
    "platform_names_in_force",
    "platforms_known_for",
    "platforms_known_for_hello",
    "site_description_delete",
    "site_description_save",
    "site_origin_problems",
    "sites_in_force",
    "sites_left_out",
    "sites_version",
]
