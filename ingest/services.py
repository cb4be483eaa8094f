"""Writes of the ingest app."""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.text import slugify

from conductor_site.logfmt import log_event
from ingest.models import PluginClient
from ingest.tokens import token_generate, token_hash

logger = logging.getLogger(__name__)


def plugin_client_create(*, name: str, token: str | None = None) -> tuple[PluginClient, str]:
    """Register a plugin client named ``name``; return it and its token.

    The client id is ``name`` made into a slug. The token is generated unless
    given; only its hash is stored, so the returned token is the one chance to
    show it. Raises ``ValidationError`` for an empty or taken name and
    ``WeakTokenError`` for a short token.
    """
    client_id = slugify(name)
    if not client_id:
        raise ValidationError(f"{name!r} gives an empty client id; use letters or digits")
    token = token or token_generate()
    client = PluginClient(client_id=client_id, name=name, token_hash=token_hash(token))
    client.full_clean()
    with transaction.atomic():
        client.save()
    log_event(logger, "plugin_client_create", client_id=client.client_id)
    return client, token
