"""Conductor's own settings (SPEC §8), parsed from the environment.

Kept apart from ``settings.py`` as a pure function so that parsing, defaults
and validation can be tested without re-importing Django's settings module.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import environ
from django.core.exceptions import ImproperlyConfigured

from ingest.protocol import version_key
from platforms import parse_delivery_methods, platforms
from platforms.registry import EVERY_PLATFORM


def _positive_int(env: environ.Env, name: str, default: int, *, minimum: int = 1) -> int:
    value = env.int(name, default=default)
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def _positive_float(env: environ.Env, name: str, default: float) -> float:
    value = env.float(name, default=default)
    if value <= 0:
        raise ImproperlyConfigured(f"{name} must be greater than 0, got {value}")
    return value


def _plugin_version(env: environ.Env, name: str, default: str) -> str:
    raw = env.str(name, default=default).strip()
    if raw and version_key(raw) is None:
        raise ImproperlyConfigured(f"{name} must be a version such as 1.0.0 (or empty), got {raw!r}")
    return raw


def _backoff_seconds(env: environ.Env) -> tuple[int, ...]:
    name = "CONDUCTOR_RETRY_BACKOFF_SECONDS"
    raw = env.str(name, default="5,15,45")
    try:
        values = tuple(int(part) for part in raw.split(",") if part.strip())
    except ValueError:
        raise ImproperlyConfigured(
            f"{name} must be a comma-separated list of whole seconds, got {raw!r}"
        ) from None
    if not values or any(value < 0 for value in values):
        raise ImproperlyConfigured(
            f"{name} must list at least one non-negative number of seconds, got {raw!r}"
        )
    return values


def _delivery_methods(env: environ.Env) -> dict[str, tuple[str, ...]]:
    """``claude=http,dom;chatgpt=dom`` as ``{"claude": ("http", "dom"), "chatgpt": ("dom",)}``.

    An entry without ``platform=`` applies to every platform not named
    (key ``"*"``). Unset or empty: ``{}``, each platform's own order.
    """
    name = "CONDUCTOR_DELIVERY_METHODS"
    raw = env.str(name, default="")
    methods: dict[str, tuple[str, ...]] = {}
    for entry in (part.strip() for part in raw.split(";")):
        if not entry:
            continue
        platform, _, listed = entry.rpartition("=")
        platform = platform.strip() or EVERY_PLATFORM
        if platform != EVERY_PLATFORM and platform not in platforms.names():
            raise ImproperlyConfigured(
                f"{name}: unknown platform {platform!r}; known: {', '.join(platforms.names())}"
            )
        if platform in methods:
            raise ImproperlyConfigured(f"{name}: {platform!r} is given twice")
        try:
            methods[platform] = parse_delivery_methods(listed)
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name}: {exc}") from None
        if platform != EVERY_PLATFORM and not set(methods[platform]) <= set(platforms.get(platform).performs):
            raise ImproperlyConfigured(
                f"{name}: {platform!r} is delivered only by {', '.join(platforms.get(platform).performs)}"
            )
    return methods


# An owner's name, as ``conversations.models.validate_owner`` checks it (the
# models cannot be imported while settings load; a test keeps the two equal).
OWNER_NAME = re.compile(r"\A[a-z0-9][a-z0-9_.-]*\Z")


def _mail_between_owners(env: environ.Env) -> frozenset[frozenset[str]]:
    """``alice:bob,alice:carol`` as ``{{"alice", "bob"}, {"alice", "carol"}}``.

    Each pair's owners may mail each other, both ways. Unset or empty: no
    pair, mail stays within each owner.
    """
    name = "CONDUCTOR_MAIL_BETWEEN_OWNERS"
    raw = env.str(name, default="")
    pairs: set[frozenset[str]] = set()
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        owners = [owner.strip() for owner in entry.split(":")]
        if len(owners) != 2 or not all(OWNER_NAME.match(owner) for owner in owners):
            raise ImproperlyConfigured(
                f"{name}: {entry!r} is not a pair of owners such as alice:bob "
                "(each a lowercase letter or digit, then lowercase letters, digits, '_', '.' or '-')"
            )
        if owners[0] == owners[1]:
            raise ImproperlyConfigured(f"{name}: {entry!r} pairs an owner with itself, whose mail needs no pair")
        pairs.add(frozenset(owners))
    return frozenset(pairs)


def _engine_settings(env: environ.Env) -> dict[str, Any]:
    """The task engine: the dispatcher's tick and lease, retries, deliveries, retention and the django-q2 cluster."""
    return {
        "CONDUCTOR_TICK_SECONDS": _positive_float(env, "CONDUCTOR_TICK_SECONDS", 2.0),
        # The server a dispatcher loop runs for: `serve` names it host:port for its children.
        "CONDUCTOR_SERVER_NAME": env.str("CONDUCTOR_SERVER_NAME", default="").strip()[:128] or socket.gethostname(),
        "CONDUCTOR_MAX_TASKS_PER_TICK": _positive_int(env, "CONDUCTOR_MAX_TASKS_PER_TICK", 20),
        "CONDUCTOR_OUTBOUND_JITTER_MAX_MS": _positive_int(
            env, "CONDUCTOR_OUTBOUND_JITTER_MAX_MS", 800, minimum=0
        ),
        "CONDUCTOR_RETRY_BACKOFF_SECONDS": _backoff_seconds(env),
        "CONDUCTOR_RETRY_JITTER_MAX_MS": _positive_int(
            env, "CONDUCTOR_RETRY_JITTER_MAX_MS", 1000, minimum=0
        ),
        "CONDUCTOR_MAX_ATTEMPTS": _positive_int(env, "CONDUCTOR_MAX_ATTEMPTS", 3),
        "CONDUCTOR_PART_AWAY_MAX_MINUTES": _positive_int(env, "CONDUCTOR_PART_AWAY_MAX_MINUTES", 15),
        "CONDUCTOR_LEASE_SECONDS": _positive_int(env, "CONDUCTOR_LEASE_SECONDS", 60),
        "CONDUCTOR_DELIVERY_TIMEOUT_SECONDS": _positive_int(
            env, "CONDUCTOR_DELIVERY_TIMEOUT_SECONDS", 30
        ),
        "CONDUCTOR_DELIVERY_METHODS": _delivery_methods(env),
        "CONDUCTOR_RETENTION_DAYS": _positive_int(env, "CONDUCTOR_RETENTION_DAYS", 30),
        # The django-q2 cluster: its workers (one runs the dispatcher loop,
        # one stands by to take it over, the rest serve renewal and pruning)
        # and the longest any other task may run before the cluster kills it.
        "CONDUCTOR_Q_WORKERS": _positive_int(env, "CONDUCTOR_Q_WORKERS", 4, minimum=2),
        "CONDUCTOR_Q_TIMEOUT_SECONDS": _positive_int(env, "CONDUCTOR_Q_TIMEOUT_SECONDS", 300),
    }


def _plugin_settings(env: environ.Env) -> dict[str, Any]:
    """The plugins and their sockets, what they may send, mail between owners, and what operators watch."""
    return {
        "CONDUCTOR_PLUGIN_ORIGINS": tuple(env.list("CONDUCTOR_PLUGIN_ORIGINS", default=[])),
        "CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR": _positive_int(
            env, "CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR", 120
        ),
        # Mail stays within an owner (SPEC §5.1) except between the pairs of
        # owners an operator names here, both ways.
        "CONDUCTOR_MAIL_BETWEEN_OWNERS": _mail_between_owners(env),
        "CONDUCTOR_MAX_FRAMES_PER_SECOND": _positive_int(
            env, "CONDUCTOR_MAX_FRAMES_PER_SECOND", 50
        ),
        # The oldest plugin version this server supports (SPEC §9): an older
        # hello gets `"plugin_outdated": true`. Empty: every version is supported.
        "CONDUCTOR_OLDEST_PLUGIN_VERSION": _plugin_version(env, "CONDUCTOR_OLDEST_PLUGIN_VERSION", "1.0.0"),
        # Beyond SPEC §8: how often a live socket refreshes its client's
        # presence (a client counts as gone after twice this, at most 60 s),
        # how long a new socket may wait before its hello, and the largest
        # WebSocket message the server reads (frames over 1 MiB get too_large).
        "CONDUCTOR_PING_INTERVAL_SECONDS": _positive_float(
            env, "CONDUCTOR_PING_INTERVAL_SECONDS", 20.0
        ),
        "CONDUCTOR_HELLO_TIMEOUT_SECONDS": _positive_float(
            env, "CONDUCTOR_HELLO_TIMEOUT_SECONDS", 10.0
        ),
        "CONDUCTOR_SOCKET_MAX_MESSAGE_BYTES": _positive_int(
            env, "CONDUCTOR_SOCKET_MAX_MESSAGE_BYTES", 16 * 1024 * 1024
        ),
        # With REDIS_URL: the most connections to Redis one process's channel
        # layer opens at once; a burst past it waits for a free one (see
        # docs/operations.md, "Redis", for sizing it to the sockets a server holds).
        "CONDUCTOR_REDIS_MAX_CONNECTIONS": _positive_int(env, "CONDUCTOR_REDIS_MAX_CONNECTIONS", 100),
        # How long a platform that had captures may have none before the
        # overview warns that its chats went quiet.
        "CONDUCTOR_CAPTURE_SILENCE_HOURS": _positive_float(env, "CONDUCTOR_CAPTURE_SILENCE_HOURS", 24.0),
        # The bearer token a scraper sends for /metrics; empty: only a staff
        # session (with the overview's permission) may read it.
        "CONDUCTOR_METRICS_TOKEN": env.str("CONDUCTOR_METRICS_TOKEN", default="").strip(),
    }


def _tool_settings(env: environ.Env, data_dir: Path) -> dict[str, Any]:
    """The tools: the workspace, their results, ``shell.run`` and MCP servers."""
    return {
        "CONDUCTOR_WORKSPACE": Path(
            env.str("CONDUCTOR_WORKSPACE", default=str(data_dir / "workspace"))
        ).resolve(),
        "CONDUCTOR_RESULT_MAX_CHARS": _positive_int(env, "CONDUCTOR_RESULT_MAX_CHARS", 20000),
        # Beyond SPEC §8: the most a tool's result may take when stored (its
        # JSON, in bytes); a larger one is stored as its size and a preview.
        "CONDUCTOR_RESULT_STORE_MAX_BYTES": _positive_int(
            env, "CONDUCTOR_RESULT_STORE_MAX_BYTES", 1024 * 1024, minimum=1024
        ),
        "CONDUCTOR_SHELL_MAX_TIMEOUT_SECONDS": _positive_int(
            env, "CONDUCTOR_SHELL_MAX_TIMEOUT_SECONDS", 300
        ),
        # Run shell.run's commands and stdio MCP servers where the kernel refuses a part of their
        # sandbox (Landlock, the namespaces, the socket filter); off, they are refused (tools/shell.py).
        "CONDUCTOR_SHELL_UNCONFINED": env.bool("CONDUCTOR_SHELL_UNCONFINED", default=False),
        # MCP servers (SPEC §5.4): the longest call timeout a server may set,
        # and a JSON file of servers in the shared ``mcpServers`` shape.
        "CONDUCTOR_MCP_MAX_TIMEOUT_SECONDS": _positive_int(env, "CONDUCTOR_MCP_MAX_TIMEOUT_SECONDS", 300),
        "CONDUCTOR_MCP_SERVERS": env.str("CONDUCTOR_MCP_SERVERS", default="").strip(),
        # Keep a stdio server running between calls, one per worker process (off: a fresh one per call).
        "CONDUCTOR_MCP_KEEP_ALIVE": env.bool("CONDUCTOR_MCP_KEEP_ALIVE", default=True),
        # Whether a Streamable HTTP server's URL may reach loopback, link-local
        # and private addresses (tools/mcp_addresses.py); off, they are refused.
        "CONDUCTOR_MCP_ALLOW_PRIVATE_URLS": env.bool("CONDUCTOR_MCP_ALLOW_PRIVATE_URLS", default=False),
    }


def conductor_settings(env: environ.Env, *, data_dir: Path) -> dict[str, Any]:
    """Return every ``CONDUCTOR_*`` setting of SPEC §8, read from ``env``.

    Raises ``ImproperlyConfigured`` with the setting's name when a value is
    out of range, so a typo fails at start-up instead of at the first task.
    """
    return {**_engine_settings(env), **_plugin_settings(env), **_tool_settings(env, data_dir)}
