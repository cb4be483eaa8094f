"""The admin of every app, registered from here (``admin.autodiscover`` imports this package)."""

from console.admin import clients, conversations, mcp, policies, sites, tasks  # noqa: F401
