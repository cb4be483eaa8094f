"""What an MCP tool call gives back to the chat (SPEC §5.4): pure, no I/O.

Text as text; images and audio as their type and size, never their bytes;
embedded resources and resource links as their URI; ``structuredContent``
as the server gave it. ``isError`` makes the block fail with the call's
first text as its error.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from typing import Any

ERROR_MAX_CHARS = 500


def _decoded_size(data: str) -> int | None:
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return None


def _content_item(item: dict[str, Any]) -> dict[str, Any]:
    kind = item.get("type")
    if kind == "text":
        return {"type": "text", "text": item.get("text", "")}
    if kind in ("image", "audio"):
        return {"type": kind, "mimeType": item.get("mimeType"), "bytes": _decoded_size(item.get("data", ""))}
    if kind == "resource":
        resource = item.get("resource") or {}
        return {"type": "resource", "uri": resource.get("uri"), "mimeType": resource.get("mimeType")}
    if kind == "resource_link":
        return {"type": "resource_link", "uri": item.get("uri"), "name": item.get("name"),
                "mimeType": item.get("mimeType")}
    return {"type": kind}


def mcp_result_render(wire: dict[str, Any]) -> dict[str, Any]:
    """A ``CallToolResult`` (wire JSON) as the block's result: ``content`` and, when given, ``structuredContent``."""
    result: dict[str, Any] = {"content": [_content_item(item) for item in wire.get("content") or []]}
    if wire.get("structuredContent") is not None:
        result["structuredContent"] = wire["structuredContent"]
    return result


def mcp_error_text(wire: dict[str, Any]) -> str:
    """A failed call's error in one line: its first text, or a plain statement without one."""
    for item in wire.get("content") or []:
        if item.get("type") == "text" and item.get("text", "").strip():
            text = " ".join(item["text"].split())
            return text if len(text) <= ERROR_MAX_CHARS else text[: ERROR_MAX_CHARS - 1] + "…"
    return "the tool reported an error (isError) without a text"


# What a refused write says in the error texts of the usual runtimes (Node's EACCES and EROFS,
# Python's PermissionError, a C library's strerror).
WRITE_REFUSED = re.compile(r"EACCES|EROFS|EPERM|permission denied|read-only file system|operation not permitted", re.I)


def write_refused_hint(error: str, writable: Sequence[str]) -> str:
    """``error``, with where the server may write when it reads as a refused write (its sandbox's doing)."""
    if not writable or not WRITE_REFUSED.search(error):
        return error
    return f"{error} (the sandbox lets this server write only in: {', '.join(writable)})"
