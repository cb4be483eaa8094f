"""Which addresses a Streamable HTTP MCP server's URL may reach (SPEC §5.4).

A server's URL is the operator's, but what Conductor sends there (and reads
back into a page) makes it a way into the machine's own network: loopback,
link-local (cloud metadata at 169.254.169.254) and private addresses are
refused unless ``CONDUCTOR_MCP_ALLOW_PRIVATE_URLS`` is true. Any address that
is not global counts (``ipaddress``'s ``is_global``: also shared, reserved,
multicast and unspecified ones).

The URL is checked twice: when a server is saved (``url_refusal``: a literal
address in any spelling the resolver takes, such as ``127.1`` or
``2130706433``, and ``localhost``), and at every connection
(``addresses_refusal`` on what the name resolves to then, in
``tools/mcp_http.py``), so a name whose DNS answer points inward, or changes
after the check, does not get through. Pure, but for the resolver.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

ALLOW_SETTING = "CONDUCTOR_MCP_ALLOW_PRIVATE_URLS"
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


class PrivateAddressRefused(Exception):
    """The URL's host is, or resolves to, an address MCP servers may not be reached at."""


def address_kind(address: str) -> str:
    """"" for a global address; else what it is ("loopback", "link-local", "private", "non-global")."""
    ip = ipaddress.ip_address(address.partition("%")[0])  # a link-local IPv6 address may name its interface
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_global:
        return ""
    for kind in ("loopback", "link_local", "private"):
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    return "non-global"


def refusal_text(host: str, address: str, kind: str) -> str:
    what = host if host == address else f"{host} ({address})"
    return (f"{what} is a {kind} address: MCP servers on loopback, link-local and private addresses are "
            f"refused unless {ALLOW_SETTING} is true")


def url_refusal(url: str) -> str:
    """Why ``url`` is refused without looking its name up ("" when it may be tried).

    Refused: a loopback name, and a literal address that is not global.
    Another name is checked when it is connected to.
    """
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return refusal_text(host, host, "loopback")
    try:
        literal = socket.getaddrinfo(host, None, flags=socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError, ValueError):
        return ""  # a name, not an address
    return addresses_refusal(host, [info[4][0] for info in literal])


def addresses_refusal(host: str, addresses: Iterable[str]) -> str:
    """Why connecting to ``host`` at ``addresses`` is refused: the first that is not global ("" when none)."""
    for address in addresses:
        kind = address_kind(address)
        if kind:
            return refusal_text(host, address, kind)
    return ""
