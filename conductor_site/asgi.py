"""ASGI entry point: Django for HTTP, Channels for the plugin WebSocket."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "conductor_site.settings")
# Django must be set up before anything imports models.
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from ingest.origins import PluginOriginValidator  # noqa: E402
from ingest.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": PluginOriginValidator(URLRouter(websocket_urlpatterns)),
    }
)
