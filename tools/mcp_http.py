"""The HTTP client of Streamable HTTP MCP sessions: it connects to global addresses only, unless allowed.

The SDK's own client (``create_mcp_http_client``: its timeouts, the
server's headers), with one change when private addresses are refused
(``tools/mcp_addresses.py``): every connection is made by
``PublicOnlyBackend``, which resolves the name itself, refuses it when any
address it resolves to is not global, and connects to the addresses it
checked, so a DNS answer that changes between a check and the connection
cannot point it inward. Imported when a session starts, as the SDK is.

Through a proxy from the environment (``HTTPS_PROXY``) the proxy connects,
not this backend: there ``url_resolved_refusal``, run before each session,
is the check.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable

import anyio
import httpcore2
import httpx2
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT, create_mcp_http_client

from tools.mcp_addresses import addresses_refusal, url_refusal


async def _addresses(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to now, in the resolver's order, each once."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def url_resolved_refusal(url: str) -> str:
    """Why ``url`` is refused now, its name resolved ("" when it may be connected to, or does not resolve)."""
    reason = url_refusal(url)
    if reason:
        return reason
    parts = httpx2.URL(url)
    try:
        addresses = await _addresses(parts.host, parts.port or (443 if parts.scheme == "https" else 80))
    except OSError:
        return ""  # the connection says it does not resolve
    return addresses_refusal(parts.host, addresses)


class PublicOnlyBackend(httpcore2.AsyncNetworkBackend):
    """httpcore's network backend, connecting only to global addresses it resolved itself."""

    def __init__(self) -> None:
        self.inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                addresses = await _addresses(host, port)
        except (OSError, TimeoutError) as exc:
            raise httpcore2.ConnectError(f"{host} does not resolve: {exc}") from exc
        reason = addresses_refusal(host, addresses)
        if reason:
            raise httpcore2.ConnectError(reason)
        failure: Exception = httpcore2.ConnectError(f"{host} resolves to no address")
        for address in addresses:
            try:
                # TLS still names ``host``: httpcore takes the server name from the URL, not from here.
                return await self.inner.connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                                    socket_options=socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        raise failure

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None):
        raise httpcore2.ConnectError("MCP servers are reached over TCP only")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def mcp_http_client(*, headers: dict[str, str], allow_private: bool) -> httpx2.AsyncClient:
    """A client for one session: the SDK's, with connections to global addresses only unless ``allow_private``."""
    if allow_private:
        return create_mcp_http_client(headers=headers)
    transport = httpx2.AsyncHTTPTransport()
    # httpx takes no network backend; the pool under it (httpcore's) does, and makes every connection with it.
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=httpx2.create_ssl_context(), max_connections=100, max_keepalive_connections=20,
        keepalive_expiry=5.0, network_backend=PublicOnlyBackend(),
    )
    return httpx2.AsyncClient(
        headers=headers, transport=transport,
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
    )
