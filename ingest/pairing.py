"""Pairing codes: the server URL, client id and token of a plugin client in one string.

``conductor-pair:v1:<base64url JSON>``, the JSON being
``{"server": "http(s)://host:port", "client_id": "...", "token": "..."}``.
The server is the http(s) URL the plugin's options take (the plugin derives
the socket URL, ``ws(s)://host:port/ws/plugin/``, from it), so a code fills
the same fields a person would. ``plugin/lib/pairing.js`` decodes it; the two
share the vectors in ``plugin/tests/fixtures/pairing-codes.json``.

A code holds the token: like the token it is shown once and never logged.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from urllib.parse import urlsplit

PREFIX = "conductor-pair:"
VERSION = "v1"
FIELDS = ("server", "client_id", "token")
BASE64URL = re.compile(r"[A-Za-z0-9_-]+")

NOT_A_CODE = "This is not a Conductor pairing code: it starts with conductor-pair:."
DAMAGED = "This pairing code is damaged or cut short: copy it again from the admin page."
NOT_HTTP = "This pairing code's server is not an http:// or https:// URL."


class PairingCodeError(ValueError):
    """A string that is not a pairing code this server understands; the message says why."""


def pairing_code_encode(*, server_url: str, client_id: str, token: str) -> str:
    payload = json.dumps(
        {"server": server_url, "client_id": client_id, "token": token},
        separators=(",", ":"), ensure_ascii=False,
    )
    encoded = base64.urlsafe_b64encode(payload.encode()).rstrip(b"=").decode("ascii")
    return f"{PREFIX}{VERSION}:{encoded}"


def pairing_code_decode(code: str) -> dict[str, str]:
    """The code's ``server``, ``client_id`` and ``token``; raises ``PairingCodeError``.

    Whitespace anywhere is ignored (a code copied from a mail or a terminal may
    be wrapped). The messages are the plugin's own (``plugin/lib/pairing.js``).
    """
    code = "".join(str(code).split())
    if not code.startswith(PREFIX):
        raise PairingCodeError(NOT_A_CODE)
    version, _, encoded = code[len(PREFIX):].partition(":")
    if version != VERSION:
        raise PairingCodeError(
            f"This pairing code is version {version or '(none)'}, which this reader does not know "
            f"(it reads {VERSION}): update the plugin, or pair again."
        )
    if not BASE64URL.fullmatch(encoded):
        raise PairingCodeError(DAMAGED)
    try:
        payload = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise PairingCodeError(DAMAGED) from exc
    if not isinstance(payload, dict) or not all(
        isinstance(payload.get(key), str) and payload[key] for key in FIELDS
    ):
        raise PairingCodeError(DAMAGED)
    server = urlsplit(payload["server"])
    if server.scheme not in ("http", "https") or not server.netloc:
        raise PairingCodeError(NOT_HTTP)
    return {key: payload[key] for key in FIELDS}
