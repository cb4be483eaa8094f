"""A request's client address, as the admin login's throttling (django-axes) keys it.

Behind a reverse proxy every request comes from the proxy's address, so a
lockout keyed on ``REMOTE_ADDR`` would lock a username out for everyone. The
proxy names the client in ``X-Forwarded-For``, but anyone can send that
header too, so it is read only from a request whose ``REMOTE_ADDR`` is one of
``CONDUCTOR_TRUSTED_PROXIES``, and only its right-most entries, the ones the
trusted proxies appended themselves: the client is the right-most entry that
is not a trusted proxy. What a client put in the header to the left of that
is never read.

This is ``AXES_CLIENT_IP_CALLABLE``, not django-ipware's settings: ipware
checks the proxies it is told to trust against the header's own entries,
never against ``REMOTE_ADDR``, and nginx's ``$proxy_add_x_forwarded_for``
does not write the proxy's own address there.
"""

from __future__ import annotations

import functools
import ipaddress

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusted_proxies_parse(entries: list[str]) -> tuple[str, ...]:
    """``CONDUCTOR_TRUSTED_PROXIES``'s entries, each an address or a network; a bad one stops the start."""
    proxies = tuple(entry.strip() for entry in entries if entry.strip())
    for entry in proxies:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ImproperlyConfigured(
                f"CONDUCTOR_TRUSTED_PROXIES: {entry!r} is not an IP address or network "
                "(such as 10.0.0.5 or 10.0.0.0/24)"
            ) from None
    return proxies


@functools.cache
def _networks(proxies: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in proxies)


def _address(text: str) -> Address | None:
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    # A dual-stack listener sees an IPv4 peer as ::ffff:a.b.c.d.
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def _is_trusted(address: Address, networks: tuple[Network, ...]) -> bool:
    return any(address in network for network in networks)


def client_address(request: HttpRequest) -> str | None:
    """The address of the client that sent ``request``: ``REMOTE_ADDR``, or behind a trusted proxy, the one it forwarded.

    Walks ``X-Forwarded-For`` from the right while each entry is a trusted
    proxy and stops at the first that is not: that is the client. An entry
    that is not an address ends the walk at the last good one, as it was
    not written by a trusted proxy; a header of trusted proxies only names
    the left-most of them.
    """
    remote = request.META.get("REMOTE_ADDR")
    networks = _networks(tuple(settings.CONDUCTOR_TRUSTED_PROXIES))
    peer = _address(remote or "")
    if not networks or peer is None or not _is_trusted(peer, networks):
        return remote
    client = peer
    for entry in reversed(request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")):
        hop = _address(entry)
        if hop is None:
            break
        client = hop
        if not _is_trusted(hop, networks):
            break
    return str(client)
