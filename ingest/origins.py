"""Handshake origin check for the plugin socket (SPEC §6).

Browser extensions send ``chrome-extension://`` or ``moz-extension://``
origins; native clients and tests send none. Any other origin (a web page, or
``Origin: null`` from a sandboxed page) is refused with HTTP 403 before the
consumer runs, unless listed in ``CONDUCTOR_PLUGIN_ORIGINS``.
"""

from django.conf import settings

EXTENSION_SCHEMES = ("chrome-extension://", "moz-extension://", "safari-web-extension://")


def origin_is_allowed(origin: str | None) -> bool:
    if origin is None:
        return True
    if origin in settings.CONDUCTOR_PLUGIN_ORIGINS:
        return True
    return any(
        origin.startswith(scheme) and len(origin) > len(scheme) for scheme in EXTENSION_SCHEMES
    )


class PluginOriginValidator:
    """ASGI middleware: close the handshake (HTTP 403) for origins not allowed."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        origin = None
        for name, value in scope.get("headers", ()):
            if name == b"origin":
                origin = value.decode("latin1")
        if scope["type"] == "websocket" and not origin_is_allowed(origin):
            # Closing before accept makes the server answer the handshake with 403.
            await receive()  # websocket.connect
            await send({"type": "websocket.close"})
            return
        return await self.application(scope, receive, send)
