"""Saving an operator's description of a chat site (SPEC §9, "Platforms as data").

Read them with ``ingest.sites.selectors``. The plugins connected when a
change commits are sent the sites in force at once (an unasked ``sites``
frame); the others learn of it from their next ``hello.ok``
(``sites_version``) and fetch them with ``sites.get``.

A description may not claim an origin of the adapters with network capture
(the schema) nor one another site claims (``site_origin_problems``).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from core import layer_send
from core.logfmt import log_event
from ingest.models import SiteDescription, plugin_owner_group_name
from ingest.selectors.clients import plugin_clients_connected
from ingest.sites.selectors import site_origin_problems, sites_in_force, sites_version
from platforms.sites import valid_site_description

logger = logging.getLogger(__name__)


class SiteNameMismatch(ValueError):
    pass


class SiteOriginTaken(ValueError):
    """The description claims an origin another site, or an adapter with network capture, has."""


def site_description_save(*, name: str, description: dict[str, Any], actor: str) -> SiteDescription:
    """Store ``description`` as the site ``name``'s, a revision more; ``InvalidSiteDescription``,
    ``SiteNameMismatch`` or ``SiteOriginTaken`` say what is wrong and store nothing."""
    valid_site_description(description)
    if description["name"] != name:
        raise SiteNameMismatch(f"the description names the site {description['name']!r}, not {name!r}")
    with transaction.atomic():
        # Two saves that race past this check (another name, the same origin)
        # both commit; the sites in force then leave out both (``selectors``
        # ``sites_in_force``), and neither reaches a plugin: no lock is needed
        # for the rule to hold where it matters.
        problems = site_origin_problems(name=name, description=description)
        if problems:
            raise SiteOriginTaken(" ".join(problems))
        updated = SiteDescription.objects.filter(name=name).update(
            description=description, revision=F("revision") + 1, updated_at=timezone.now(), updated_by=actor,
        )
        if not updated:
            SiteDescription.objects.create(
                name=name, description=description, updated_at=timezone.now(), updated_by=actor
            )
        site = SiteDescription.objects.get(name=name)
        transaction.on_commit(sites_announce)
    log_event(logger, "site_description_saved", site=name, revision=site.revision, actor=actor)
    return site


def site_description_delete(*, name: str, actor: str) -> bool:
    """Remove the operator's description of ``name`` (a shipped site's own copy is back in force)."""
    with transaction.atomic():
        deleted, _ = SiteDescription.objects.filter(name=name).delete()
        if deleted:
            transaction.on_commit(sites_announce)
    if deleted:
        log_event(logger, "site_description_deleted", site=name, actor=actor)
    return bool(deleted)


# The channel-layer message a socket turns into its frame (PluginConsumer.plugin_sites).
LAYER_TYPE = "plugin.sites"


def sites_announce(*, send=layer_send.group_send) -> int:
    """Send the sites in force to every connected plugin, one frame per owner's group; return the groups told."""
    owners = sorted(set(plugin_clients_connected().values_list("owner", flat=True)))
    if not owners:
        return 0
    frame = {"type": "sites", "id": None, "sites_version": sites_version(), "sites": sites_in_force()}
    for owner in owners:
        send(plugin_owner_group_name(owner), {"type": LAYER_TYPE, "frame": frame})
    return len(owners)
