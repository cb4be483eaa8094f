"""Checking client frames (SPEC §6) into typed values. Pure; raises ``FrameError``."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from conversations.models import Platform
from ingest.jsoncheck import JsonRefused, loads_checked
from ingest.protocol import MAX_FRAME_BYTES, ErrorCode, FrameError

# How much of a value a frame sent is echoed back in an error's detail.
ECHO_CHARS = 40


def echo(value: Any) -> str:
    """A short, quoted rendering of a hostile value for an error detail."""
    text = repr(value)
    return text if len(text) <= ECHO_CHARS else text[:ECHO_CHARS] + "…"


def decode_frame(text: str | None, *, max_bytes: int = MAX_FRAME_BYTES) -> dict[str, Any]:
    """One text frame as a JSON object with a string ``type``; raises ``FrameError`` (SPEC §6).

    ``text`` None is a binary frame. Work is linear in the frame's size.
    """
    if text is None:
        raise FrameError(ErrorCode.BAD_FRAME, "binary frames are not accepted; send JSON text")
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise FrameError(ErrorCode.TOO_LARGE, f"frame is over {max_bytes} bytes")
    try:
        frame = loads_checked(text)
    except json.JSONDecodeError as exc:
        raise FrameError(
            ErrorCode.BAD_FRAME, f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except JsonRefused as exc:
        raise FrameError(ErrorCode.BAD_FRAME if exc.is_malformed else ErrorCode.INVALID, exc.detail) from None
    if not isinstance(frame, dict):
        raise FrameError(ErrorCode.BAD_FRAME, "a frame must be a JSON object")
    if not isinstance(frame.get("type"), str):
        raise FrameError(ErrorCode.INVALID, "'type' must be a string", frame_id(frame))
    return frame


def is_safe_page_url(url: str) -> bool:
    """True for an ``https`` URL, or an ``http`` one on a loopback host (a page served for development)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return False
    if parts.scheme == "https" and host:
        return True
    if parts.scheme != "http":
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _field(frame: dict[str, Any], name: str, kind: type | tuple[type, ...], *, required: bool = False,
           max_length: int | None = None) -> Any:
    value = frame.get(name)
    if value is None:
        if required:
            raise FrameError(ErrorCode.INVALID, f"'{name}' is required", frame_id(frame))
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        expected = " or ".join(t.__name__ for t in _as_tuple(kind))
        raise FrameError(
            ErrorCode.INVALID, f"'{name}' must be {expected}, got {type(value).__name__}", frame_id(frame)
        )
    if isinstance(value, str):
        if required and not value.strip():
            raise FrameError(ErrorCode.INVALID, f"'{name}' must not be empty", frame_id(frame))
        if max_length is not None and len(value) > max_length:
            raise FrameError(
                ErrorCode.INVALID, f"'{name}' is longer than {max_length} characters", frame_id(frame)
            )
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def frame_id(frame: dict[str, Any]) -> str | None:
    value = frame.get("id")
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class FinalMessage:
    """A checked ``browser.final_message`` frame."""

    frame_id: str | None
    platform: str
    conversation_id: str
    text: str
    message_id: str
    parent_message_id: str
    organization_id: str
    page_url: str
    title: str
    observed_at: dt.datetime | None
    raw: dict[str, Any]


def parse_final_message(frame: dict[str, Any]) -> FinalMessage:
    platform = _field(frame, "platform", str, required=True)
    if platform not in Platform.values:
        raise FrameError(
            ErrorCode.INVALID,
            f"unknown platform {echo(platform)}; expected one of {', '.join(Platform.values)}",
            frame_id(frame),
        )
    observed_raw = _field(frame, "observed_at", str)
    observed_at = None
    if observed_raw:
        try:
            observed_at = dt.datetime.fromisoformat(observed_raw.replace("Z", "+00:00"))
        except ValueError:
            raise FrameError(
                ErrorCode.INVALID, f"'observed_at' is not an ISO-8601 time: {echo(observed_raw)}",
                frame_id(frame),
            ) from None
        if observed_at.tzinfo is None:
            observed_at = observed_at.replace(tzinfo=dt.UTC)
    _field(frame, "id", str, max_length=255)
    page_url = _field(frame, "page_url", str, max_length=2000) or ""
    if page_url and not is_safe_page_url(page_url):
        raise FrameError(
            ErrorCode.INVALID, "'page_url' must be an https URL (or http on a loopback host)", frame_id(frame)
        )
    return FinalMessage(
        frame_id=frame_id(frame),
        platform=platform,
        conversation_id=_field(frame, "conversation_id", str, required=True, max_length=255),
        text=_field(frame, "text", str, required=True),
        message_id=_field(frame, "message_id", str, max_length=255) or "",
        parent_message_id=_field(frame, "parent_message_id", str, max_length=255) or "",
        organization_id=_field(frame, "organization_id", str, max_length=255) or "",
        page_url=page_url,
        title=(_field(frame, "title", str) or "")[:500],
        observed_at=observed_at,
        raw=frame,
    )


@dataclass(frozen=True)
class DeliveryResult:
    """A checked ``browser.proxy_delivery.result`` frame."""

    request_id: str
    ok: bool
    status: int | None
    body: str | None
    error: str | None


def parse_delivery_result(frame: dict[str, Any]) -> DeliveryResult:
    return DeliveryResult(
        request_id=_field(frame, "request_id", str, required=True, max_length=64),
        ok=_field(frame, "ok", bool, required=True),
        status=_field(frame, "status", int),
        body=_field(frame, "body", str),
        error=_field(frame, "error", str),
    )
