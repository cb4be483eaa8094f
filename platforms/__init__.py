"""Platform adapters (SPEC §6): one module per chat web app, registered by name.

Importing this package registers every adapter; see ``registry.py`` for the
interface and the placeholder contract, and ``CAPTURING.md`` for how to check
a module against the live web app.
"""

from platforms import chatgpt, claude, gemini, sites  # noqa: F401  (each registers its adapter or adapters)
from platforms.registry import (
    DELIVERY_METHODS,
    parse_delivery_methods,
    platform_choices,
    platforms,
)

__all__ = ["DELIVERY_METHODS", "parse_delivery_methods", "platform_choices", "platforms"]
