"""The chat sites in force (SPEC §9, "Platforms as data"): the shipped descriptions, with an operator's.

A row of ``SiteDescription`` replaces the shipped file of its name or adds a
site. ``sites_version`` names the whole set in force, so a plugin holding
another set asks for it (``sites.get``); a site an operator added becomes a
platform of this process when a read here first sees it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ingest.models import SiteDescription
from platforms import platforms
from platforms.sites import PageSiteAdapter, shipped_site_descriptions, site_description_errors


def _shipped_digest() -> str:
    shipped = shipped_site_descriptions()
    return hashlib.sha256(json.dumps(shipped, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _register_added(descriptions: dict[str, dict[str, Any]]) -> None:
    for name, description in descriptions.items():
        if name not in platforms and not site_description_errors(description):
            platforms.register(PageSiteAdapter(description))


def sites_version() -> str:
    """What names the sites in force: it changes with every save or removal of an operator's description.

    One statement (the rows' names and revisions); one more when a row names
    a site this process does not know yet, which it then registers.
    """
    rows = list(SiteDescription.objects.order_by("name").values_list("name", "revision", "updated_at"))
    unknown = [name for name, _, _ in rows if name not in platforms]
    if unknown:
        _register_added(dict(SiteDescription.objects.filter(name__in=unknown).values_list("name", "description")))
    key = ";".join(f"{name}:{revision}:{updated_at.isoformat()}" for name, revision, updated_at in rows)
    return hashlib.sha256(f"{_shipped_digest()}|{key}".encode()).hexdigest()[:16]


def sites_in_force() -> list[dict[str, Any]]:
    """Every description in force, by name: the shipped ones, each replaced by an operator's of its name."""
    descriptions = dict(shipped_site_descriptions())
    added = dict(SiteDescription.objects.values_list("name", "description"))
    # Saved only through the service, which checks them; checked again should the schema have tightened.
    valid = {name: description for name, description in added.items() if not site_description_errors(description)}
    _register_added(valid)
    descriptions.update(valid)
    return [descriptions[name] for name in sorted(descriptions)]


def platform_adapter(name: str):
    """The platform adapter of ``name``, a site an operator added included; ``UnsupportedPlatform`` otherwise."""
    if name not in platforms:
        description = SiteDescription.objects.filter(name=name).values_list("description", flat=True).first()
        if description is not None:
            _register_added({name: description})
    return platforms.get(name)
