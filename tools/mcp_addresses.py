"""Which addresses a Streamable HTTP MCP server's URL may reach (SPEC §5.4).

A server's URL is the operator's, but what Conductor sends there (and reads
back into a page) makes it a way into the machine's own network: loopback,
link-local (cloud metadata at 169.254.169.254) and private addresses are
refused unless ``CONDUCTOR_MCP_ALLOW_PRIVATE_URLS`` is true. Any address that
is not global counts (``ipaddress``'s ``is_global``: also shared, reserved,
multicast and unspecified ones). An IPv6 address that carries an IPv4 one
is judged by that too: IPv4-mapped (``::ffff:127.0.0.1``), IPv4-compatible
(``::127.0.0.1``), NAT64's well-known prefix (``64:ff9b::7f00:1``, which a
NAT64 gateway turns into 127.0.0.1) and 6to4 (``2002:7f00:1::``); NAT64's
local-use prefix (``64:ff9b:1::/48``) is refused whole, as what it reaches is
the local network's to say. A scoped address (``fe80::1%eth0``, written
``%25eth0`` in a URL) is judged without its zone.

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
from urllib.parse import unquote, urlsplit

ALLOW_SETTING = "CONDUCTOR_MCP_ALLOW_PRIVATE_URLS"
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated, but still parsed and routed by some stacks


def address_kind(address: str) -> str:
    """"" for a global address; else what it is ("loopback", "link-local", "private", "non-global")."""
    ip = ipaddress.ip_address(address.partition("%")[0])  # a link-local IPv6 address may name its interface
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in NAT64_LOCAL_USE:
            return "private"
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            # ::ffff:0:0/96 and ::/96 are not global themselves; what they carry says more.
            ip = embedded
    if ip.is_global:
        return ""
    for kind in ("loopback", "link_local", "private"):
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    return "non-global"


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for, when it carries one in a form a stack or a gateway reaches."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in NAT64_WELL_KNOWN or (ip in IPV4_COMPATIBLE and int(ip) > 1):  # not :: or ::1
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def refusal_text(host: str, address: str, kind: str) -> str:
    what = host if host == address else f"{host} ({address})"
    return (f"{what} is a {kind} address: MCP servers on loopback, link-local and private addresses are "
            f"refused unless {ALLOW_SETTING} is true")


def url_refusal(url: str) -> str:
    """Why ``url`` is refused without looking its name up ("" when it may be tried).

    Refused: a loopback name, and a literal address that is not global.
    Another name is checked when it is connected to.
    """
    host = unquote(urlsplit(url).hostname or "").rstrip(".").lower()
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return refusal_text(host, host, "loopback")
    # A zone (``%25eth0``) names an interface the resolver may not know; the address is what counts.
    address = host.partition("%")[0]
    try:
        literal = socket.getaddrinfo(address, None, flags=socket.AI_NUMERICHOST)
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
