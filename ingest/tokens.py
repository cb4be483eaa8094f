"""Plugin tokens: generation, hashing and verification.

Tokens are random 256-bit secrets (or operator-chosen ones of at least
``MIN_TOKEN_LENGTH`` characters), so a single SHA-256 is the right hash: a slow
password hasher buys nothing against a secret with that much entropy and would
cost every plugin handshake a few hundred milliseconds. Only the hash is stored.
"""

import hashlib
import hmac
import secrets

MIN_TOKEN_LENGTH = 32
HASH_PREFIX = "sha256$"


class WeakTokenError(ValueError):
    """An operator-supplied token is too short to be stored."""


def token_generate() -> str:
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    if len(token) < MIN_TOKEN_LENGTH:
        raise WeakTokenError(f"a plugin token needs at least {MIN_TOKEN_LENGTH} characters")
    return HASH_PREFIX + hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, stored_hash: str) -> bool:
    """Whether ``token`` hashes to ``stored_hash``, compared in constant time."""
    candidate = HASH_PREFIX + hashlib.sha256(token.encode()).hexdigest()
    return hmac.compare_digest(candidate, stored_hash)
