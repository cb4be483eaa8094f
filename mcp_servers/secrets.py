"""Secrets of MCP servers (environment variables, HTTP headers): encrypted at rest.

Fernet (``cryptography``) with a key derived from ``SECRET_KEY`` by HKDF, so
a database dump alone does not reveal them; rotating ``SECRET_KEY`` means
entering them again. A value written ``${NAME}`` is not stored at all: it is
read from Conductor's own environment when the server starts.
"""

from __future__ import annotations

import base64
import json
import os
import re

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

REFERENCE_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class SecretError(ValueError):
    pass


def _fernet() -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"conductor mcp secrets").derive(
        settings.SECRET_KEY.encode()
    )
    return Fernet(base64.urlsafe_b64encode(key))


def secrets_seal(values: dict[str, str]) -> str:
    """``values`` as one encrypted token ("" for none)."""
    if not values:
        return ""
    return _fernet().encrypt(json.dumps(values, sort_keys=True).encode()).decode()


def secrets_open(token: str) -> dict[str, str]:
    """What ``secrets_seal`` sealed. Raises ``SecretError`` when ``SECRET_KEY`` changed since."""
    if not token:
        return {}
    try:
        return json.loads(_fernet().decrypt(token.encode()))
    except InvalidToken:
        raise SecretError("its secrets cannot be read with this SECRET_KEY; enter them again") from None


def secrets_resolve(values: dict[str, str]) -> dict[str, str]:
    """Each ``${NAME}`` in the values replaced by Conductor's own environment variable NAME."""

    def resolve(match: re.Match) -> str:
        name = match[1]
        if name not in os.environ:
            raise SecretError(f"${{{name}}} is not set in Conductor's environment")
        return os.environ[name]

    return {key: REFERENCE_RE.sub(resolve, value) for key, value in values.items()}
