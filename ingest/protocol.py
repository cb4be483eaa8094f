"""Names fixed by the plugin protocol (SPEC §6)."""

MAX_FRAME_BYTES = 1024 * 1024  # frames over this get `too_large`
MAX_HELLO_FRAME_BYTES = 64 * 1024  # before hello, a frame over this closes the socket with 1009

# The ASGI extension of Conductor's daphne (conductor_site/daphne_server.py):
# the server reads at most MAX_HELLO_FRAME_BYTES per message until the
# application sends FRAME_LIMIT_LIFT after a valid hello; after it, the
# server keeps no message over MAX_FRAME_BYTES and says FRAME_TOO_LARGE.
FRAME_LIMIT_EXTENSION = "conductor.frame_limit"
FRAME_LIMIT_LIFT = "conductor.frame_limit.lift"
# From the server, in place of a message over MAX_FRAME_BYTES that it dropped
# unread after the lift: {"type": FRAME_TOO_LARGE, "bytes": <the message's size>}.
FRAME_TOO_LARGE = "conductor.frame_limit.too_large"


class Capability:
    """Delivery frames a plugin says it performs, in its hello's ``capabilities``."""

    PROXY_DELIVERY = "proxy_delivery"  # browser.proxy_delivery
    DOM_DELIVERY = "dom_delivery"  # browser.dom_delivery


KNOWN_CAPABILITIES = (Capability.PROXY_DELIVERY, Capability.DOM_DELIVERY)
# What a hello without ``capabilities`` means: plugins written before the
# field existed perform proxy deliveries only.
DEFAULT_CAPABILITIES = (Capability.PROXY_DELIVERY,)


class DeliveryErrorCode:
    """Why a plugin could not make a delivery's request at all (``error_code`` of a result)."""

    PAGE_VALUE_MISSING = "page_value_missing"  # a {{page:NAME}} it could not fill
    NO_TAB = "no_tab"  # no page of the conversation could be opened
    BLOCKED = "blocked"  # the app refused the request as automated
    # A DOM delivery found no composer: none of the adapter's selectors
    # matched (the page changed). Retried as any other failure.
    SELECTOR_MISSING = "selector_missing"


KNOWN_DELIVERY_ERROR_CODES = (
    DeliveryErrorCode.PAGE_VALUE_MISSING, DeliveryErrorCode.NO_TAB, DeliveryErrorCode.BLOCKED,
    DeliveryErrorCode.SELECTOR_MISSING,
)


class ErrorCode:
    UNAUTHORIZED = "unauthorized"
    BAD_FRAME = "bad_frame"
    UNKNOWN_TYPE = "unknown_type"
    INVALID = "invalid"
    TOO_LARGE = "too_large"
    RATE_LIMITED = "rate_limited"
    # Beyond SPEC §6: the server could not store a valid frame (its database is
    # down). The frame was not acknowledged; the plugin should send it again.
    SERVER_ERROR = "server_error"


class CloseCode:
    MESSAGE_TOO_BIG = 1009  # RFC 6455
    UNAUTHORIZED = 4401
    REVOKED = 4403
    HELLO_TIMEOUT = 4408
    REPLACED = 4409
    # Beyond SPEC §6: this socket sent no hello and too many sockets of this
    # server (or of its address) are waiting for theirs: it made room for a
    # newer one. Try again. (Applications may close only with 1000 or
    # 3000-4999, so not 1013.)
    TOO_MANY_WAITING = 4429
    # Beyond SPEC §6: a part of the server this socket needs went away (the
    # channel layer: Redis restarted) or its hello could not be taken (the
    # database away). Nothing could reach the socket any more, so it is closed
    # rather than left open and deaf. Reconnect.
    TRY_AGAIN = 4503


class FrameError(Exception):
    """A frame the server answers with an ``error`` frame; the socket stays open."""

    def __init__(self, code: str, detail: str, frame_id: str | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.frame_id = frame_id


def version_key(version: str) -> tuple[int, ...] | None:
    """``"1.2.10"`` as ``(1, 2, 10, 0)`` for comparing; None for anything but one to four dot-separated numbers.

    Chrome's extension versions have at most four parts, and missing parts
    count as 0, so ``1.0`` is ``1.0.0``.
    """
    parts = version.strip().split(".")
    if not 1 <= len(parts) <= 4 or not all(part.isascii() and part.isdigit() for part in parts):
        return None
    return tuple(int(part) for part in parts) + (0,) * (4 - len(parts))


def plugin_is_outdated(plugin_version: str, *, oldest: str) -> bool:
    """Whether a hello's ``plugin_version`` is older than ``oldest`` (SPEC §9, ``plugin_outdated``).

    No ``oldest``: never. A version that is not dot-separated numbers (or none)
    counts as outdated when there is one: the server cannot tell it is recent.
    """
    if not oldest:
        return False
    key = version_key(plugin_version)
    return key is None or key < version_key(oldest)
