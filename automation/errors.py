"""Error texts reduced to their cause, so that failures can be grouped. Pure."""

from __future__ import annotations

import hashlib
import re

_UUID = re.compile(r"\b[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\b", re.IGNORECASE)
# A run of 8 or more hex digits holding at least one digit: task, request and commit ids.
_HEX_ID = re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{8,}\b", re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_SPACES = re.compile(r"\s+")

SIGNATURE_LENGTH = 200


def error_first_line(error: str | None) -> str:
    """The first non-blank line of ``error``, or ""."""
    return next((line.strip() for line in (error or "").splitlines() if line.strip()), "")


def error_signature(error: str | None) -> str:
    """``error``'s first line with ids and numbers replaced (``<id>``, ``<n>``), for grouping.

    ``"HTTP 502 for request 3f2a…"`` and ``"HTTP 503 for request 9b1c…"`` read
    ``"HTTP <n> for request <id>"``.
    """
    line = _UUID.sub("<id>", error_first_line(error))
    line = _HEX_ID.sub("<id>", line)
    line = _NUMBER.sub("<n>", line)
    return _SPACES.sub(" ", line)[:SIGNATURE_LENGTH]


def failure_group_key(*, kind: str, tool: str, signature: str) -> str:
    """A short stable name for a group of failures, fit for a URL."""
    return hashlib.sha256(f"{kind}\0{tool}\0{signature}".encode()).hexdigest()[:16]
