"""The chat sites in force (SPEC §9, "Platforms as data"): the shipped descriptions, with an operator's.

A row of ``SiteDescription`` replaces the shipped file of its name or adds a
site. ``sites_version`` names the whole set in force, so a plugin holding
another set asks for it (``sites.get``); a site an operator added becomes a
platform of this process when a read here first sees it.

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
from functools import cache
from typing import Any
from urllib.parse import urlsplit

from core.logfmt import log_event
from ingest.models import SiteDescription
from platforms import chatgpt, claude, gemini, platforms
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
    rows = dict(SiteDescription.objects.values_list("name", "description"))
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
    """Every description in force, by name: the shipped ones, each replaced by an operator's of its name.

    An operator's description that claims another site's origin is left out
    (logged; the admin's list says so: ``sites_left_out``).
    """
    operators = _operator_descriptions()
    _register_added(operators)
    in_force, left_out = _one_site_per_origin(dict(shipped_site_descriptions()), operators)
    for name, why in sorted(left_out.items()):
        log_event(logger, "site_description_left_out", level=logging.WARNING, site=name, reason=why)
    return [in_force[name] for name in sorted(in_force)]


def sites_left_out() -> dict[str, str]:
    """The operator's descriptions not in force because another site claims one of their origins: name → why."""
    return _one_site_per_origin(dict(shipped_site_descriptions()), _operator_descriptions())[1]


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


def platform_adapter(name: str):
    """The platform adapter of ``name``, a site an operator added included; ``UnsupportedPlatform`` otherwise."""
    if name not in platforms:
        description = SiteDescription.objects.filter(name=name).values_list("description", flat=True).first()
        if description is not None:
            _register_added({name: description})
    return platforms.get(name)
