import logging

from django.urls import path, re_path

from core.logfmt import log_event
from ingest.consumers import PluginConsumer

logger = logging.getLogger(__name__)


async def refuse_unknown_path(scope, receive, send) -> None:
    """Answer a WebSocket handshake to any other path with 404, quietly.

    Where the server supports ASGI's denial response extension, that is a real
    404; daphne supports only accept or close, and answers a close before
    accept with 403. Either way: no traceback, one log line.
    """
    await receive()  # websocket.connect
    log_event(logger, "socket_not_found", level=logging.INFO, path=scope.get("path", ""))
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": 404,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "websocket.http.response.body", "body": b"Not Found"})
    else:
        await send({"type": "websocket.close"})


websocket_urlpatterns = [
    path("ws/plugin/", PluginConsumer.as_asgi()),
    re_path(r"", refuse_unknown_path),
]
