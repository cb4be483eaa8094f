"""The admin of every app, registered from here (``admin.autodiscover`` imports this package)."""

from console.admin import clients, conversations, mcp, policies, tasks  # noqa: F401
