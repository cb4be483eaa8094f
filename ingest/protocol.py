"""Names fixed by the plugin protocol (SPEC §6)."""

MAX_FRAME_BYTES = 1024 * 1024  # frames over this get `too_large`


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
    UNAUTHORIZED = 4401
    REVOKED = 4403
    HELLO_TIMEOUT = 4408
    REPLACED = 4409


class FrameError(Exception):
    """A frame the server answers with an ``error`` frame; the socket stays open."""

    def __init__(self, code: str, detail: str, frame_id: str | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.frame_id = frame_id
