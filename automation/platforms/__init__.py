"""Platform adapters (SPEC §6): one module per chat web app, registered by name.

Importing this package registers every adapter; see ``registry.py`` for the
interface and the placeholder contract, and ``CAPTURING.md`` for how to check
a module against the live web app.
"""

from automation.platforms import chatgpt, claude, gemini  # noqa: F401  (each registers its adapter)
from automation.platforms.registry import (
    DeliveryTarget,
    DeliveryVerdict,
    DuplicatePlatform,
    PlatformAdapter,
    PlatformRegistry,
    ProxyAnswer,
    ProxyRequest,
    UnsupportedPlatform,
    platforms,
)

__all__ = [
    "DeliveryTarget",
    "DeliveryVerdict",
    "DuplicatePlatform",
    "PlatformAdapter",
    "PlatformRegistry",
    "ProxyAnswer",
    "ProxyRequest",
    "UnsupportedPlatform",
    "platforms",
]
