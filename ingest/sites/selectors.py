"""The chat sites in force (SPEC §9, "Platforms as data"): the shipped descriptions, with an operator's.

A row of ``SiteDescription`` replaces the shipped file of its name or adds a
site. ``sites_version`` names the whole set in force, so a plugin holding
another set asks for it (``sites.get``).

One set of platforms in every process: the process-wide registry
(``platforms``) holds what ships with the code (the three adapters with
network capture and the shipped descriptions), the same in every process and
never changed by a read. A site an operator added or edited is a platform
only while its row is in force: ``platform_adapter`` and
``platform_names_in_force`` read the rows (one query for their names and
revisions; the process rebuilds its adapters from one more when they changed:
``_sites_read``), so every process accepts it from the moment its save
commits, with its edits, and none once it is deleted.

An origin belongs to one site. The schema keeps the origins of the adapters
with network capture out of every description; that no two sites claim one
origin is a rule over the set, said here: ``site_origin_problems`` refuses a
save that would break it, and ``sites_in_force`` leaves out an operator's
description that breaks it all the same (two saves that raced, or a removal
that brought a shipped copy back onto an origin another row took), as the
plugin does (``plugin/lib/sites.js`` ``sitesInForce``): never by name order,
the shipped copy keeps its origins.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Collection
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import urlsplit

from channels.db import database_sync_to_async

from core.logfmt import log_event
from ingest.models import SiteDescription
from platforms import chatgpt, claude, gemini, platforms
from platforms.registry import PlatformAdapter
from platforms.sites import PageSiteAdapter, shipped_site_descriptions, site_description_errors

logger = logging.getLogger(__name__)


@cache
def builtin_adapter_origins() -> dict[str, str]:
    """The origins of the adapters with network capture, each with its platform's name; no description claims one.

    The schema's ``$defs/origin`` ``not`` enum lists the same (a test checks).
    """
    urls = {"claude": claude.ORIGIN, "chatgpt": chatgpt.URL, "gemini": gemini.ORIGIN}
    return {f"{urlsplit(url).scheme}://{urlsplit(url).netloc}": name for name, url in urls.items()}


def _operator_descriptions() -> dict[str, dict[str, Any]]:
    """The operator's rows that validate, by name (saved only through the service, checked again should the schema have tightened)."""
    return _valid(dict(SiteDescription.objects.values_list("name", "description")))


def _valid(rows: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: description for name, description in rows.items() if not site_description_errors(description)}


def _claims(sites: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    claims: dict[str, list[str]] = {}
    for name, description in sites.items():
        for origin in description["origins"]:
            claims.setdefault(origin, []).append(name)
    return claims


def _one_site_per_origin(
    shipped: dict[str, dict[str, Any]], operators: dict[str, dict[str, Any]]
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The descriptions in force and the operator's ones left out (name → why).

    An origin two sites claim goes to neither by name: every operator's
    description claiming it is left out (the shipped copy of its name, if
    any, comes back). Shipped descriptions never collide
    (``platforms.sites.shipped_site_descriptions`` refuses to start), so
    each pass leaves one out at least, until none collide.
    """
    in_force = {**shipped, **operators}
    from_operator = set(operators)
    left_out: dict[str, str] = {}
    while contested := {origin: names for origin, names in _claims(in_force).items() if len(names) > 1}:
        for origin, names in sorted(contested.items()):
            for name in [each for each in names if each in from_operator]:
                others = ", ".join(each for each in names if each != name)
                left_out[name] = f"{origin} is claimed by {others} too"
                from_operator.discard(name)
                if name in shipped:
                    in_force[name] = shipped[name]
                else:
                    del in_force[name]
    return in_force, left_out


def _shipped_digest() -> str:
    shipped = shipped_site_descriptions()
    return hashlib.sha256(json.dumps(shipped, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _rows_key(rows: list[tuple[str, int, Any]]) -> str:
    """What the operator's rows are, by their names, revisions and times (a delete and a new save differ too)."""
    return ";".join(f"{name}:{revision}:{updated_at.isoformat()}" for name, revision, updated_at in rows)


@dataclass(frozen=True)
class SitesRead:
    """The sites in force, as one read of the operator's rows saw them."""

    key: str  # ``_rows_key`` of the rows read
    version: str  # ``sites_version``
    in_force: tuple[dict[str, Any], ...]  # by name
    left_out: dict[str, str]  # the operator's descriptions not in force: name → why
    # The operator's descriptions in force, each a fresh adapter made from its row.
    adapters: dict[str, PlatformAdapter]


# The latest read of this process, rebuilt when the rows' key differs; a
# read is immutable, so threads share it and a race costs one rebuild more.
_kept: SitesRead | None = None


def _sites_read() -> SitesRead:
    """The sites in force now: one query for the rows' key, one more when they changed since this process read them."""
    global _kept
    key = _rows_key(list(SiteDescription.objects.order_by("name").values_list("name", "revision", "updated_at")))
    kept = _kept
    if kept is not None and kept.key == key:
        return kept
    rows = list(SiteDescription.objects.order_by("name").values_list("name", "revision", "updated_at", "description"))
    operators = _valid({name: description for name, _, _, description in rows})
    in_force, left_out = _one_site_per_origin(dict(shipped_site_descriptions()), operators)
    for name, why in sorted(left_out.items()):
        log_event(logger, "site_description_left_out", level=logging.WARNING, site=name, reason=why)
    key = _rows_key([row[:3] for row in rows])  # the rows this read holds, should a save have come between
    _kept = SitesRead(
        key=key,
        version=hashlib.sha256(f"{_shipped_digest()}|{key}".encode()).hexdigest()[:16],
        in_force=tuple(in_force[name] for name in sorted(in_force)),
        left_out=left_out,
        adapters={name: PageSiteAdapter(in_force[name]) for name in operators if name not in left_out},
    )
    return _kept


def sites_version() -> str:
    """What names the sites in force: it changes with every save or removal of an operator's description."""
    return _sites_read().version


def sites_in_force() -> list[dict[str, Any]]:
    """Every description in force, by name: the shipped ones, each replaced by an operator's of its name.

    An operator's description that claims another site's origin is left out
    (logged when read; the admin's list says so: ``sites_left_out``).
    """
    return list(_sites_read().in_force)


def sites_left_out() -> dict[str, str]:
    """The operator's descriptions not in force because another site claims one of their origins: name → why."""
    return dict(_sites_read().left_out)


def site_origin_problems(*, name: str, description: Any) -> list[str]:
    """Why ``description``, saved as the site ``name``, may not claim its origins; empty when it may.

    An origin of an adapter with network capture, or one another site claims
    (a shipped description or an operator's, the shipped copy of ``name``
    aside: this one replaces it). Each message names the other site.
    """
    origins = description.get("origins") if isinstance(description, dict) else None
    if not isinstance(origins, list):
        return []
    others = {**shipped_site_descriptions(), **_operator_descriptions()}
    others.pop(name, None)
    operators = set(SiteDescription.objects.values_list("name", flat=True))
    claims = _claims(others)
    problems = []
    for origin in origins:
        if not isinstance(origin, str):
            continue
        if origin in builtin_adapter_origins():
            adapter = builtin_adapter_origins()[origin]
            problems.append(f"{origin} is the built-in {platforms.get(adapter).label} adapter's: "
                            "a site description cannot claim it.")
        for other in claims.get(origin, []):
            whose = "an operator's description" if other in operators else "shipped with Conductor"
            problems.append(f"{origin} already belongs to the site {other!r} ({others[other]['title']}, {whose}): "
                            "an origin belongs to one site.")
    return problems


def platform_adapter(name: str) -> PlatformAdapter:
    """The platform adapter of ``name`` now: an operator's description in force (made from its row, its
    edits included), else the registry's; ``UnsupportedPlatform`` otherwise, a deleted site's included."""
    if name in platforms and not isinstance(registered := platforms.get(name), PageSiteAdapter):
        return registered  # Claude, ChatGPT, Gemini: no description may take their names (the schema), no query
    adapter = _sites_read().adapters.get(name)
    return adapter if adapter is not None else platforms.get(name)


def platform_names_in_force() -> frozenset[str]:
    """Every platform a frame may name now: the registry's, and the sites an operator added that are in force."""
    return frozenset(platforms.names()) | frozenset(_sites_read().adapters)


async def platforms_known_for(frame: dict[str, Any]) -> Collection[str]:
    """The platforms a frame about ``frame["platform"]`` is checked against (``ingest.frames``).

    The registry, the same in every process, when it knows the name (no
    query: the frames of the built-in and shipped sites cost nothing more);
    otherwise the platforms in force now, read from the database.
    """
    name = frame.get("platform")
    if not isinstance(name, str) or name in platforms:
        return frozenset(platforms.names())
    return await database_sync_to_async(platform_names_in_force)()


async def platforms_known_for_hello(frame: dict[str, Any]) -> Collection[str]:
    """The platforms a ``hello``'s ``platforms`` and ``adapters`` are kept from: the registry when it
    knows every name given (no query), else the platforms in force now, with an operator's sites."""
    given_platforms, given_adapters = frame.get("platforms"), frame.get("adapters")
    named = [*(given_platforms if isinstance(given_platforms, list) else []),
             *(given_adapters if isinstance(given_adapters, dict) else {})]
    if all(isinstance(name, str) and name in platforms for name in named):
        return frozenset(platforms.names())
    return await database_sync_to_async(platform_names_in_force)()
