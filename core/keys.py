"""Which secret key a server signs with, told without telling the key, and who signs with another.

Every process of one installation must share ``SECRET_KEY``: the channel
layer seals its messages under it (``conductor_site.layer_messages``),
django-q2 signs its queued tasks with it, and sessions are signed with it. A
second server started with a key of its own (a data folder of its own, a
forgotten ``SECRET_KEY``) on the same database and Redis is a
mistake nothing else names: its messages are refused and its tasks dropped,
one by one.

Two signs show it: each dispatcher loop's row carries the fingerprint of its
server's key (``key_fingerprint``, an HMAC that reveals nothing of the key),
and the channel layer counts the messages it could not open
(``channel_refusals``, per process: the ASGI server that answers
``/healthz`` is the one that reads the layer). ``other_key_report`` turns
them into what ``/healthz`` and the overview say.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings

FINGERPRINT_LENGTH = 16
_FINGERPRINT_MESSAGE = b"conductor: which secret key signs this installation's messages"
# Refused channel messages count as a sign for this long after the last one.
REFUSALS_RECENT_SECONDS = 120


def key_fingerprint(secret_key: str) -> str:
    """A short fingerprint of ``secret_key``: equal for equal keys, and it cannot be turned back into one."""
    digest = hmac.new(secret_key.encode(), _FINGERPRINT_MESSAGE, hashlib.sha256).hexdigest()
    return digest[:FINGERPRINT_LENGTH]


def own_key_fingerprint() -> str:
    """The fingerprint of the key this process signs with (``SECRET_KEY``)."""
    return key_fingerprint(settings.SECRET_KEY)


def accepted_key_fingerprints() -> frozenset[str]:
    """The fingerprints of every key this process accepts: ``SECRET_KEY`` and ``SECRET_KEY_FALLBACKS``."""
    return frozenset(key_fingerprint(key) for key in [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS] if key)


class Refusals:
    """How many messages were refused lately: counted per second, so a flood costs a counter; thread-safe."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._per_second: dict[int, int] = {}  # the last REFUSALS_RECENT_SECONDS' only

    def record(self, count: int = 1) -> None:
        second = int(self.clock())
        with self._lock:
            self._per_second[second] = self._per_second.get(second, 0) + count
            if len(self._per_second) > REFUSALS_RECENT_SECONDS:
                self._per_second = self._recent_seconds(second)

    def recent(self) -> int:
        """How many were refused in the last ``REFUSALS_RECENT_SECONDS``."""
        with self._lock:
            return sum(self._recent_seconds(int(self.clock())).values())

    def _recent_seconds(self, now: int) -> dict[int, int]:
        return {second: n for second, n in self._per_second.items() if now - second < REFUSALS_RECENT_SECONDS}


# Messages on the channel layer no key of this process opens (signed with another key).
channel_refusals = Refusals()


def other_key_report(servers: Iterable[str]) -> dict[str, Any] | None:
    """What ``/healthz`` and the overview say of servers signing with another key (None: none seen).

    ``servers``: those whose dispatcher loops sign otherwise (their rows);
    the channel layer's recent refusals in this process are added here.
    """
    servers = sorted(set(servers))
    refused = channel_refusals.recent()
    if not servers and not refused:
        return None
    parts = []
    if servers:
        parts.append(f"a server with another secret key runs tasks on this database ({', '.join(servers)})")
    if refused:
        parts.append(
            f"a process with another secret key writes to the channel layer ({refused} "
            f"message{'s' if refused != 1 else ''} refused in the last {REFUSALS_RECENT_SECONDS // 60} minutes)"
        )
    message = "; ".join(parts) + ": every server of one installation needs the same SECRET_KEY."
    return {"servers": servers, "channel_messages_refused": refused, "message": message[0].upper() + message[1:]}
