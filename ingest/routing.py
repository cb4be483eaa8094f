from django.urls import path

from ingest.consumers import PluginConsumer

websocket_urlpatterns = [
    path("ws/plugin/", PluginConsumer.as_asgi()),
]
