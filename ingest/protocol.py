"""Names fixed by the plugin protocol (SPEC §6)."""

MAX_FRAME_BYTES = 1024 * 1024  # frames over this get `too_large`
MAX_HELLO_FRAME_BYTES = 64 * 1024  # before hello, a frame over this closes the socket with 1009

# The ASGI extension of Conductor's daphne (conductor_site/daphne_server.py):
# the server reads at most MAX_HELLO_FRAME_BYTES per message until the
# application sends FRAME_LIMIT_LIFT after a valid hello.
FRAME_LIMIT_EXTENSION = "conductor.frame_limit"
FRAME_LIMIT_LIFT = "conductor.frame_limit.lift"


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
    # Beyond SPEC §6: too many sockets of this server are waiting for their
    # hello; try again later. (Applications may close only with 1000 or
    # 3000-4999, so not 1013.)
    TOO_MANY_WAITING = 4429


class FrameError(Exception):
    """A frame the server answers with an ``error`` frame; the socket stays open."""

    def __init__(self, code: str, detail: str, frame_id: str | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.frame_id = frame_id
