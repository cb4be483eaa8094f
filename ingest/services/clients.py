"""Writes of the ingest app."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Collection

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.text import slugify

from conversations.models import DEFAULT_OWNER, validate_owner
from core import layer_send
from core.logfmt import log_event
from ingest.frames import PluginInfo
from ingest.models import PluginClient
from ingest.pairing import pairing_code_encode
from ingest.tokens import token_generate, token_hash

logger = logging.getLogger(__name__)


class PluginClientRevoked(Exception):
    """The client is revoked (or its token changed since it was read): it cannot connect or get a new token."""


def plugin_client_create(
    *, name: str, token: str | None = None, owner: str = DEFAULT_OWNER
) -> tuple[PluginClient, str]:
    """Register a plugin client named ``name``, a browser of ``owner``; return it and its token.

    The client id is ``name`` made into a slug. The token is generated unless
    given; only its hash is stored, so the returned token is the one chance to
    show it. Raises ``ValidationError`` for an empty or taken name or a
    malformed owner, and ``WeakTokenError`` for a short token.
    """
    client_id = slugify(name)
    if not client_id:
        raise ValidationError(f"{name!r} gives an empty client id; use letters or digits")
    token = token or token_generate()
    client = PluginClient(client_id=client_id, name=name, owner=owner, token_hash=token_hash(token))
    client.full_clean()
    with transaction.atomic():
        client.save()
    log_event(logger, "plugin_client_create", client_id=client.client_id, owner=client.owner)
    return client, token


def plugin_client_pair(*, name: str, server_url: str, owner: str = DEFAULT_OWNER) -> tuple[PluginClient, str]:
    """Register a plugin client named ``name``; return it and its pairing code for ``server_url``.

    The code holds the generated token, so it is the one chance to show it and
    is never logged. Raises as ``plugin_client_create``.
    """
    client, token = plugin_client_create(name=name, owner=owner)
    return client, pairing_code_encode(server_url=server_url, client_id=client.client_id, token=token)


def plugin_client_connect(
    *, client: PluginClient, channel_name: str, info: PluginInfo | None = None, now: dt.datetime | None = None
) -> str:
    """Make ``channel_name`` the client's socket and mark it present.

    ``info`` is what the hello said about the plugin; it replaces what the
    previous hello said (None leaves it as it was).

    Returns the channel name of the socket it replaces ("" if none): the
    newest socket is the client's, so the caller closes the older one.

    Raises ``PluginClientRevoked`` when the client was revoked, or its token
    rotated, since ``client`` was authenticated. The caller joins the client's
    group before calling this, so a revoke or rotation that commits after it
    reaches the socket as a group message, and one that committed before is
    caught here: no socket stays open on a token that no longer works.
    """
    now = now or timezone.now()
    with transaction.atomic():
        previous = (
            PluginClient.objects.select_for_update()
            .filter(pk=client.pk, enabled=True, token_hash=client.token_hash)
            .values_list("connection_channel", flat=True)
            .first()
        )
        if previous is None:
            raise PluginClientRevoked(f"{client.client_id} was revoked or given a new token meanwhile")
        described = {} if info is None else {
            "plugin_version": info.plugin_version,
            "capabilities": list(info.capabilities),
            "adapters": info.adapters,
        }
        # A new socket looks at no conversation until its side panel asks (status.get).
        PluginClient.objects.filter(pk=client.pk).update(
            connected=True, connection_channel=channel_name, last_seen_at=now, viewing_platform="",
            viewing_conversation_id="", **described
        )
    log_event(
        logger, "plugin_connect", client_id=client.client_id, replaced=bool(previous),
        plugin_version=info.plugin_version if info else None,
    )
    return previous if previous != channel_name else ""


def plugin_client_touch(
    *, client_pk: int, channel_name: str, now: dt.datetime | None = None
) -> bool:
    """Refresh the presence of the client's current socket.

    Returns False when ``channel_name`` is no longer the client's socket
    (a newer one replaced it, or the client was disconnected): nothing changes.
    """
    return bool(
        PluginClient.objects.filter(pk=client_pk, connection_channel=channel_name).update(
            connected=True, last_seen_at=now or timezone.now()
        )
    )


def plugin_client_disconnect(*, client_pk: int, channel_name: str) -> bool:
    """Mark the client gone if ``channel_name`` is still its socket; a newer socket stays."""
    return client_pk in plugin_clients_disconnect(sockets=[(client_pk, channel_name)])


def plugin_clients_disconnect(*, sockets: Collection[tuple[int, str]]) -> set[int]:
    """For each (client pk, channel name) of a closed socket, mark the client gone if that is still its socket.

    Returns the pks of the clients marked gone; a client whose newer socket
    took over stays connected. One transaction for them all: a burst of
    closed sockets costs a few statements, not a few per socket.
    """
    if not sockets:
        return set()
    current = Q()
    for client_pk, channel_name in sockets:
        current |= Q(pk=client_pk, connection_channel=channel_name)
    with transaction.atomic():
        # Locked, as plugin_client_connect locks the row: a hello that
        # commits meanwhile is not undone by this update.
        gone = set(PluginClient.objects.select_for_update().filter(current).values_list("pk", flat=True))
        PluginClient.objects.filter(pk__in=gone).update(connected=False, connection_channel="")
    for client_pk in sorted(gone):
        log_event(logger, "plugin_disconnect", client_pk=client_pk)
    return gone


def plugin_client_revoke(*, client: PluginClient, actor: str) -> None:
    """Disable the client for good; its open socket is closed with 4403 once this commits."""
    with transaction.atomic():
        PluginClient.objects.filter(pk=client.pk).update(
            enabled=False, connected=False, connection_channel=""
        )
        transaction.on_commit(
            lambda: layer_send.group_send(client.group_name, {"type": "plugin.revoked"})
        )
    log_event(logger, "plugin_client_revoke", client_id=client.client_id, actor=actor)



def plugin_client_rotate(*, client: PluginClient, actor: str) -> str:
    """Give the client a new token and return it; the old token stops working at once.

    Only the new token's hash is stored, so the returned token is the one
    chance to show it. An open socket, authenticated with the old token, is
    closed with 4403 once this commits; the plugin reconnects with the new
    token. Raises ``PluginClientRevoked`` for a revoked client.
    """
    token = token_generate()
    hashed = token_hash(token)
    with transaction.atomic():
        # Conditional on `enabled`, so a concurrent revoke wins.
        rotated = PluginClient.objects.filter(pk=client.pk, enabled=True).update(
            token_hash=hashed, connected=False, connection_channel=""
        )
        if not rotated:
            raise PluginClientRevoked(f"{client.client_id} is revoked; create a new client instead")
        # The consumer answers "plugin.revoked" by closing with 4403, as for a
        # revoke: the socket was authenticated with a token that no longer holds.
        transaction.on_commit(
            lambda: layer_send.group_send(client.group_name, {"type": "plugin.revoked"})
        )
    client.token_hash, client.connected, client.connection_channel = hashed, False, ""
    log_event(logger, "plugin_client_rotate", client_id=client.client_id, actor=actor)
    return token


def plugin_clients_owner_set(*, clients: list[PluginClient], owner: str, actor: str) -> list[PluginClient]:
    """Make ``owner`` the owner of the clients; return those that changed.

    Writes only the owner, so a token rotated meanwhile stays rotated. The
    conversations a client routed stay their owner's: from now on the client
    routes none of them (``conversation_route`` counts only the owner's
    clients), and a delivery already routed to it fails rather than reach it.
    Raises ``ValidationError`` for a malformed owner.
    """
    validate_owner(owner)
    changed = [client for client in clients if client.owner != owner]
    PluginClient.objects.filter(pk__in=[client.pk for client in changed]).update(owner=owner)
    for client in changed:
        log_event(logger, "plugin_client_owner", client_id=client.client_id, owner_from=client.owner, owner_to=owner,
                  actor=actor)
        client.owner = owner
    return changed
