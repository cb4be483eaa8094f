"""Chat sites described as data (SPEC §9, "Platforms as data"): a platform entry per description.

The plugin reads these sites from the page and delivers through the composer
(``dom``), driven by a description per site: ``plugin/sites/<name>.json``,
checked against ``plugin/sites/schema.json``. The server reads the same
files, so the tool guide, the policies, the console and ``/metrics`` know
each site by its name, and hands them (with an operator's edits) to its
plugins (``ingest.sites.services``).

A page site has no request of its own: ``build_request`` is never asked for
(its delivery methods are ``dom`` only, and ``pipelines.delivery_methods``
keeps to what a platform performs).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from platforms.registry import BodyReading, DeliveryMethod, DeliveryTarget, PlatformAdapter, ProxyRequest, platforms

SITES_DIR = Path(__file__).resolve().parent.parent / "plugin" / "sites"
SCHEMA_PATH = SITES_DIR / "schema.json"
# What one description may weigh, as JSON (the plugin takes no bigger one either).
MAX_DESCRIPTION_BYTES = 16 * 1024
MAX_SITES = 64


class InvalidSiteDescription(ValueError):
    pass


@cache
def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def site_description_errors(value: Any) -> list[str]:
    """What is wrong with ``value`` as a site description, each in one line; empty when it is valid."""
    try:
        size = len(json.dumps(value, ensure_ascii=False).encode())
    except (TypeError, ValueError) as exc:
        return [f"not JSON: {exc}"]
    if size > MAX_DESCRIPTION_BYTES:
        return [f"the description is {size} bytes; at most {MAX_DESCRIPTION_BYTES}"]
    errors = sorted(_validator().iter_errors(value), key=lambda error: list(error.absolute_path))
    return [f"{'/'.join(str(part) for part in error.absolute_path) or '(top)'}: {error.message[:200]}"
            for error in errors[:10]]


def valid_site_description(value: Any) -> dict[str, Any]:
    """``value`` when it is a valid description; ``InvalidSiteDescription`` naming what is wrong otherwise."""
    errors = site_description_errors(value)
    if errors:
        raise InvalidSiteDescription("; ".join(errors))
    return value


@cache
def shipped_site_descriptions() -> dict[str, dict[str, Any]]:
    """The descriptions shipped in ``plugin/sites/``, by name; a file that does not validate, or two on one origin, stop the start."""
    shipped: dict[str, dict[str, Any]] = {}
    for path in sorted(SITES_DIR.glob("*.json")):
        if path == SCHEMA_PATH:
            continue
        description = json.loads(path.read_text(encoding="utf-8"))
        try:
            valid_site_description(description)
        except InvalidSiteDescription as exc:
            raise InvalidSiteDescription(f"{path}: {exc}") from None
        if description["name"] != path.stem:
            raise InvalidSiteDescription(f"{path}: its name is {description['name']!r}, its file {path.stem!r}")
        shipped[description["name"]] = description
    # An origin belongs to one site: two shipped files claiming one is a packaging mistake.
    owners: dict[str, str] = {}
    for name, description in shipped.items():
        for origin in description["origins"]:
            if origin in owners:
                raise InvalidSiteDescription(f"{SITES_DIR}: {origin} is claimed by both {owners[origin]!r} and {name!r}")
            owners[origin] = name
    return shipped


class PageSiteAdapter(PlatformAdapter):
    """A site the plugin reads from the page and writes to through its composer."""

    delivery_methods = performs = (DeliveryMethod.DOM,)

    def __init__(self, description: Mapping[str, Any]) -> None:
        self.name = description["name"]
        self.label = description["title"]
        self.origins = tuple(description["origins"])

    def build_request(self, target: DeliveryTarget) -> ProxyRequest:
        raise NotImplementedError(f"{self.name} is delivered through its composer only")

    def read_body(self, body: str) -> BodyReading:
        return BodyReading()


for _description in shipped_site_descriptions().values():
    platforms.register(PageSiteAdapter(_description))
