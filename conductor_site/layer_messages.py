"""Messages between processes carry proof that a Conductor process wrote them.

Both channel layers (channels_redis on Redis, channels-lite on its SQLite
file) seal each message with Fernet (AES-CBC and an HMAC-SHA256 over it,
``symmetric_encryption_keys`` in their own serializers) under a key derived
from ``SECRET_KEY``. Whoever can write to Redis or to the layer's file but
does not know the key cannot make a message a consumer acts on: the receiving
layer drops what it cannot open (``RefusesForgedMessages``) and logs
``channel_message_refused``: at most once a minute per layer, with the count
of messages refused since the last line, so that a flood of forged rows
costs their reading, not a log line each. A sealed message also expires: one older than
the layer's ``expiry`` plus 10 s is refused as well.

Rotation: messages are sealed with the key of ``SECRET_KEY`` and opened with
that of ``SECRET_KEY`` or of any of ``SECRET_KEY_FALLBACKS`` (Django's own
rotation setting), so processes can be restarted one by one onto a new key
(docs/security.md, "The channel layer between processes").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from cryptography.fernet import InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.core.exceptions import ImproperlyConfigured

from core.keys import channel_refusals
from core.logfmt import CountedLines, log_event

logger = logging.getLogger(__name__)

KDF_INFO = b"conductor channel layer"
# At most one channel_message_refused line per layer in this many seconds, however many messages.
REFUSED_LOG_INTERVAL_SECONDS = 60.0
# Refused messages read less than this many seconds apart are one run, counted in one line.
REFUSED_RUN_GAP_SECONDS = 0.1


T = TypeVar("T")


class RefusedMessage(Exception):
    """A message on the layer that no key of this process sealed: dropped (already logged)."""


def channel_layer_key(secret_key: str) -> str:
    """The channel layer's key derived from ``secret_key`` (HKDF-SHA256), as the layers take it.

    Derived, so that the secret key itself never becomes a message key, and
    a key of the layer that leaked would not sign a session.
    """
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=KDF_INFO).derive(secret_key.encode())
    return derived.hex()


def channel_layer_keys(secret_key: str, fallbacks: Iterable[str] = ()) -> list[str]:
    """The layer's keys: the first seals, every one opens (``SECRET_KEY`` first, then its fallbacks)."""
    return [channel_layer_key(key) for key in [secret_key, *fallbacks] if key]


class RefusesForgedMessages:
    """A channel layer mixin: requires keys, and refuses a message none of them opens.

    ``deserialize`` raises ``RefusedMessage`` instead of the serializer's
    ``InvalidToken``; each layer's receiving loop reads through
    ``_skipping_refused``, which skips such a message, goes on with the next
    one and counts the refused ones in ``channel_message_refused`` lines.
    """

    def __init__(self, *args, symmetric_encryption_keys=None, **kwargs) -> None:
        if not symmetric_encryption_keys:
            raise ImproperlyConfigured(
                f"{type(self).__name__} needs symmetric_encryption_keys (conductor_site.layer_messages)"
            )
        super().__init__(*args, symmetric_encryption_keys=symmetric_encryption_keys, **kwargs)
        self._refusals = CountedLines(REFUSED_LOG_INTERVAL_SECONDS)

    async def _skipping_refused(self, receive_one: Callable[[], Awaitable[T]]) -> T:
        """``await receive_one()`` until it gives a message this process sealed; the refused ones are counted.

        A run of refused messages makes at most one line, once the run ends
        (a message that opens, an error, or no message for
        ``REFUSED_RUN_GAP_SECONDS``: on Redis the next read waits for the
        next message), with how many were refused since the last line.
        """
        refused, reason = 0, ""
        try:
            while True:
                if not refused:
                    try:
                        return await receive_one()
                    except RefusedMessage as exc:
                        refused, reason = 1, str(exc)
                        continue
                attempt = asyncio.ensure_future(receive_one())
                try:
                    if not (await asyncio.wait({attempt}, timeout=REFUSED_RUN_GAP_SECONDS))[0]:
                        self._refused_run_ended(refused, reason)
                        refused = 0
                    return await attempt
                except RefusedMessage as exc:
                    refused, reason = refused + 1, str(exc)
                finally:
                    attempt.cancel()  # only when this task itself was cancelled meanwhile
        finally:
            if refused:
                self._refused_run_ended(refused, reason)

    def _refused_run_ended(self, refused: int, reason: str) -> None:
        if (count := self._refusals.add(refused)) is not None:
            log_event(
                logger, "channel_message_refused", level=logging.WARNING, layer=type(self).__name__,
                messages=count, reason=reason,
            )

    def deserialize(self, message: bytes) -> dict:
        try:
            decoded = super().deserialize(message)
        except InvalidToken:
            if self._sealed_here(message):
                self._refuse(message, reason="expired")
            # Sealed under another key: a process of another installation, or a
            # server of this one started with a key of its own (``core.keys``).
            channel_refusals.record()
            self._refuse(message, reason="not sealed with this installation's key")
        if not isinstance(decoded, dict):
            self._refuse(message, reason="not a message")
        return decoded

    def _sealed_here(self, message: bytes) -> bool:
        """True when one of this process's keys sealed ``message`` (it was refused as expired)."""
        serializer = self._serializer
        token = message[serializer.random_prefix_length:]
        try:
            serializer.crypter.extract_timestamp(token)  # checks the seal, not the age
        except InvalidToken:
            return False
        return True

    def _refuse(self, message: bytes, *, reason: str):
        raise RefusedMessage(reason)
