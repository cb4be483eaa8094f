import pytest
from channels.layers import channel_layers


@pytest.fixture
def channel_layer():
    """A fresh instance of the configured channel layer (channels-lite or Redis).

    Layers bind to the event loop that first receives on them, and each async
    test runs its own loop, so no instance is shared between tests.
    """
    channel_layers.backends.pop("default", None)
    layer = channel_layers["default"]
    yield layer
    channel_layers.backends.pop("default", None)
