"""Checking client frames (SPEC §6) into typed values. Pure; raises ``FrameError``."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from conversations.models import Platform
from ingest.protocol import ErrorCode, FrameError


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
            f"unknown platform {platform!r}; expected one of {', '.join(Platform.values)}",
            frame_id(frame),
        )
    observed_raw = _field(frame, "observed_at", str)
    observed_at = None
    if observed_raw:
        try:
            observed_at = dt.datetime.fromisoformat(observed_raw.replace("Z", "+00:00"))
        except ValueError:
            raise FrameError(
                ErrorCode.INVALID, f"'observed_at' is not an ISO-8601 time: {observed_raw[:40]!r}",
                frame_id(frame),
            ) from None
        if observed_at.tzinfo is None:
            observed_at = observed_at.replace(tzinfo=dt.UTC)
    _field(frame, "id", str, max_length=255)
    return FinalMessage(
        frame_id=frame_id(frame),
        platform=platform,
        conversation_id=_field(frame, "conversation_id", str, required=True, max_length=255),
        text=_field(frame, "text", str, required=True),
        message_id=_field(frame, "message_id", str, max_length=255) or "",
        parent_message_id=_field(frame, "parent_message_id", str, max_length=255) or "",
        organization_id=_field(frame, "organization_id", str, max_length=255) or "",
        page_url=_field(frame, "page_url", str, max_length=2000) or "",
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
