"""Checking client frames (SPEC §6) into typed values. Pure; raises ``FrameError``."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from conversations.models import Message
from ingest.models import AdapterReport
from ingest.jsoncheck import JsonRefused, loads_checked
from ingest.protocol import (
    DEFAULT_CAPABILITIES,
    KNOWN_CAPABILITIES,
    KNOWN_DELIVERY_ERROR_CODES,
    MAX_FRAME_BYTES,
    ErrorCode,
    FrameError,
)
from platforms import platforms
from platforms.registry import DeliveryMethod

# How much of a value a frame sent is echoed back in an error's detail.
ECHO_CHARS = 40
# The longest frame ``id`` taken, and echoed back in an error frame's ``id``.
MAX_FRAME_ID_CHARS = 255

# Bounds of what a hello says about the plugin: generous for any real
# plugin, small enough that a client row stays small.
MAX_PLUGIN_VERSION_CHARS = 64
MAX_CAPABILITIES = 16
MAX_ADAPTERS = 16
MAX_NAME_CHARS = 64  # a capability, a platform name or an adapter version
# Bounds of a DOM delivery's evidence: a few flags and short notes.
MAX_EVIDENCE_KEYS = 16
MAX_EVIDENCE_VALUE_CHARS = 200


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
        raise invalid(frame, "'type' must be a string")
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
            raise invalid(frame, f"'{name}' is required")
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        expected = " or ".join(t.__name__ for t in _as_tuple(kind))
        raise invalid(frame, f"'{name}' must be {expected}, got {type(value).__name__}")
    if isinstance(value, str):
        if required and not value.strip():
            raise invalid(frame, f"'{name}' must not be empty")
        if max_length is not None and len(value) > max_length:
            raise invalid(frame, f"'{name}' is longer than {max_length} characters")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def invalid(frame: dict[str, Any], message: str) -> FrameError:
    """The error that answers a frame breaking the grammar: ``invalid_frame`` with ``message``, echoing its id."""
    return FrameError(ErrorCode.INVALID, message, frame_id(frame))


def frame_id(frame: dict[str, Any]) -> str | None:
    """The frame's ``id`` to echo in an answer; None when it has none, or one no valid frame has."""
    value = frame.get("id")
    return value if isinstance(value, str) and len(value) <= MAX_FRAME_ID_CHARS else None


@dataclass(frozen=True)
class PluginInfo:
    """What a ``hello`` says about the plugin, beyond who it is (SPEC §6)."""

    plugin_version: str
    capabilities: tuple[str, ...]
    adapters: dict[str, str]
    platforms: tuple[str, ...] = ()  # the known platforms it watches, in the registry's order


def _names(frame: dict[str, Any], name: str) -> list[str] | None:
    """A hello's list of short names (``capabilities``, ``platforms``), or None when absent."""
    names = frame.get(name)
    if names is None:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise invalid(frame, f"'{name}' must be a list of strings")
    if len(names) > MAX_CAPABILITIES:
        raise invalid(frame, f"'{name}' has more than {MAX_CAPABILITIES} entries")
    if any(len(n) > MAX_NAME_CHARS for n in names):
        raise invalid(frame, f"'{name}' has a name longer than {MAX_NAME_CHARS} characters")
    return names


def parse_plugin_info(frame: dict[str, Any], *, known: Collection[str] | None = None) -> PluginInfo:
    """The plugin's version, capabilities, platforms and adapter versions from a ``hello``.

    Raises ``FrameError`` naming the field when one has the wrong type or is
    over its bounds: before hello that refuses the socket (``unauthorized``,
    SPEC §6: anything but a valid hello). Names this server does not know
    are dropped, not refused: a newer plugin may announce a capability or a
    platform this server cannot use yet, and it must still be able to
    connect (the ``invalid`` of SPEC §6 for an unknown platform is for
    frames about one, such as ``browser.final_message``). So
    ``capabilities`` holds known names only, in ``KNOWN_CAPABILITIES``
    order, and ``platforms`` and ``adapters`` known platforms only: the
    registry's, or ``known`` (``ingest.sites.selectors.platforms_known_for_hello``,
    with the sites an operator added).
    """
    known_names = tuple(platforms.names()) if known is None else (
        *platforms.names(), *sorted(set(known) - set(platforms.names())),
    )
    version = _field(frame, "plugin_version", str, max_length=MAX_PLUGIN_VERSION_CHARS) or ""

    raw_capabilities = _names(frame, "capabilities")
    if raw_capabilities is None:
        capabilities = DEFAULT_CAPABILITIES
    else:
        capabilities = tuple(c for c in KNOWN_CAPABILITIES if c in raw_capabilities)
    raw_platforms = _names(frame, "platforms") or []
    known_platforms = tuple(name for name in known_names if name in raw_platforms)

    raw_adapters = frame.get("adapters")
    if raw_adapters is None:
        raw_adapters = {}
    if not isinstance(raw_adapters, dict) or not all(isinstance(v, str) for v in raw_adapters.values()):
        raise invalid(frame, "'adapters' must be an object of platform names to version strings")
    if len(raw_adapters) > MAX_ADAPTERS:
        raise invalid(frame, f"'adapters' has more than {MAX_ADAPTERS} entries")
    if any(len(k) > MAX_NAME_CHARS or len(v) > MAX_NAME_CHARS for k, v in raw_adapters.items()):
        raise invalid(frame, f"'adapters' has a name or version longer than {MAX_NAME_CHARS} characters")
    adapters = {name: raw_adapters[name] for name in known_names if name in raw_adapters}
    return PluginInfo(plugin_version=version, capabilities=capabilities, adapters=adapters, platforms=known_platforms)


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
    capture: str = ""  # a ``Message.Capture`` value; "" when the plugin did not say


def _platform(frame: dict[str, Any], known: Collection[str] | None) -> str:
    """The frame's required ``platform``, one of ``known``.

    ``known`` is what the caller read as the platforms in force
    (``ingest.sites.selectors.platforms_known_for``: a site an operator added
    among them); None is the registry's, what ships with the code.
    """
    platform = _field(frame, "platform", str, required=True)
    names = platforms.names() if known is None else sorted(known)
    if platform not in names:
        raise invalid(frame, f"unknown platform {echo(platform)}; expected one of {', '.join(names)}")
    return platform


def parse_final_message(frame: dict[str, Any], *, known: Collection[str] | None = None) -> FinalMessage:
    platform = _platform(frame, known)
    observed_raw = _field(frame, "observed_at", str)
    observed_at = None
    if observed_raw:
        try:
            observed_at = dt.datetime.fromisoformat(observed_raw.replace("Z", "+00:00"))
        except ValueError:
            raise invalid(frame, f"'observed_at' is not an ISO-8601 time: {echo(observed_raw)}") from None
        if observed_at.tzinfo is None:
            observed_at = observed_at.replace(tzinfo=dt.UTC)
    _field(frame, "id", str, max_length=MAX_FRAME_ID_CHARS)
    capture = _field(frame, "capture", str) or ""
    if capture and capture not in Message.Capture.values:
        raise invalid(frame, f"unknown capture {echo(capture)}; expected one of {', '.join(Message.Capture.values)}")
    page_url = _field(frame, "page_url", str, max_length=2000) or ""
    if page_url and not is_safe_page_url(page_url):
        raise invalid(frame, "'page_url' must be an https URL (or http on a loopback host)")
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
        capture=capture,
    )


@dataclass(frozen=True)
class GuideRequest:
    """A checked ``guide.get`` frame: the chat whose tool guide the plugin wants (SPEC §6)."""

    frame_id: str | None
    platform: str
    conversation_id: str | None  # None: a new conversation, which gets the platform's guide


def parse_guide_request(frame: dict[str, Any], *, known: Collection[str] | None = None) -> GuideRequest:
    return GuideRequest(**_chat_fields(frame, known, conversation_required=False))


@dataclass(frozen=True)
class ConversationRequest:
    """A checked ``status.get``, ``conversation.pause`` or ``conversation.resume`` frame."""

    frame_id: str | None
    platform: str
    conversation_id: str


def parse_request_id(frame: dict[str, Any]) -> str | None:
    """The optional ``id`` of a request without other fields (``sites.get``), checked."""
    _field(frame, "id", str, max_length=MAX_FRAME_ID_CHARS)
    return frame_id(frame)


def parse_conversation_request(
    frame: dict[str, Any], *, known: Collection[str] | None = None
) -> ConversationRequest:
    return ConversationRequest(**_chat_fields(frame, known, conversation_required=True))


def _chat_fields(
    frame: dict[str, Any], known: Collection[str] | None, *, conversation_required: bool
) -> dict[str, Any]:
    """A chat request's checked ``id``, ``platform`` and ``conversation_id`` (None when absent and optional)."""
    platform = _platform(frame, known)
    request_id = parse_request_id(frame)
    conversation_id = _field(frame, "conversation_id", str, required=conversation_required, max_length=255)
    return {"frame_id": request_id, "platform": platform, "conversation_id": conversation_id or None}


@dataclass(frozen=True)
class DeliveryResult:
    """A checked ``browser.proxy_delivery.result`` or ``browser.dom_delivery.result`` frame."""

    request_id: str
    ok: bool
    status: int | None
    body: str | None
    error: str | None
    error_code: str | None = None  # why the delivery could not be made at all; see DeliveryErrorCode
    method: str = DeliveryMethod.HTTP  # which frame answered: the request must be of this method
    evidence: dict[str, Any] | None = None  # a DOM delivery's: what the plugin saw in the page


def _error_code(frame: dict[str, Any], ok: bool) -> str | None:
    error_code = _field(frame, "error_code", str)
    if error_code is None:
        return None
    if error_code not in KNOWN_DELIVERY_ERROR_CODES:
        raise invalid(frame, f"unknown error_code {echo(error_code)}; "
                             f"expected one of {', '.join(KNOWN_DELIVERY_ERROR_CODES)}")
    # An error code says the delivery could not be made (SPEC §6), so the
    # result is a failure whatever the rest says; one claiming success is
    # contradictory, and refusing it keeps every stored error_code on a failure.
    if ok:
        raise invalid(frame, "'ok' must be false when 'error_code' is given")
    return error_code


def parse_delivery_result(frame: dict[str, Any]) -> DeliveryResult:
    """A ``browser.proxy_delivery.result``: how the page's request came out."""
    ok = _field(frame, "ok", bool, required=True)
    return DeliveryResult(
        request_id=_field(frame, "request_id", str, required=True, max_length=64),
        ok=ok,
        status=_field(frame, "status", int),
        body=_field(frame, "body", str),
        error=_field(frame, "error", str),
        error_code=_error_code(frame, ok),
    )


def parse_dom_delivery_result(frame: dict[str, Any]) -> DeliveryResult:
    """A ``browser.dom_delivery.result``: whether the text was sent through the composer.

    ``evidence`` is a small flat object of what the plugin saw (strings,
    numbers, booleans); ``ok: true`` only with ``evidence.user_turn_seen``
    true (SPEC §6): a plugin that did not see its turn appear has not
    shown the text arrived.
    """
    ok = _field(frame, "ok", bool, required=True)
    evidence = _field(frame, "evidence", dict) or {}
    if len(evidence) > MAX_EVIDENCE_KEYS:
        raise invalid(frame, f"'evidence' has more than {MAX_EVIDENCE_KEYS} entries")
    for key, value in evidence.items():
        if len(key) > MAX_NAME_CHARS or not (
            value is None or isinstance(value, bool | int | float)
            or (isinstance(value, str) and len(value) <= MAX_EVIDENCE_VALUE_CHARS)
        ):
            raise invalid(frame, f"'evidence' {echo(key)} must be a short string, a number, a boolean or null")
    if ok and evidence.get("user_turn_seen") is not True:
        raise invalid(frame, "'ok' may be true only with evidence.user_turn_seen true")
    return DeliveryResult(
        request_id=_field(frame, "request_id", str, required=True, max_length=64),
        ok=ok,
        status=None,
        body=None,
        error=_field(frame, "error", str),
        error_code=_error_code(frame, ok),
        method=DeliveryMethod.DOM,
        evidence=evidence,
    )


# Bounds of an adapter report's detail (SPEC §6): a few flat entries, short.
MAX_REPORT_DETAIL_ENTRIES = 16
MAX_REPORT_DETAIL_CHARS = 200
# The most events one report counts; a higher ``count`` is counted as this.
# A plugin sends one report per platform and kind a minute, of events a
# person's chatting causes (a response, an answer, a delivery): a few a
# minute. So a client can raise ``conductor_adapter_reports`` by at most this
# much per frame it sends, and a plugin that was offline for a while still
# has its report counted rather than refused.
MAX_REPORT_COUNT = 100
ADAPTER_REPORT_KINDS = tuple(AdapterReport.Kind.values)


@dataclass(frozen=True)
class AdapterReportFrame:
    """A checked ``browser.adapter_report`` frame."""

    frame_id: str | None
    platform: str
    adapter: str
    kind: str
    detail: dict[str, Any]
    count: int
    first_at: dt.datetime | None
    last_at: dt.datetime | None


def _report_time(frame: dict[str, Any], name: str) -> dt.datetime | None:
    raw = _field(frame, name, str, max_length=64)
    if not raw:
        return None
    try:
        value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise invalid(frame, f"'{name}' is not an ISO-8601 time: {echo(raw)}") from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _report_detail(frame: dict[str, Any]) -> dict[str, Any]:
    """The report's ``detail``: at most 16 entries, each a scalar or a list of strings, at most 200 characters."""
    detail = frame.get("detail")
    if detail is None:
        return {}
    if not isinstance(detail, dict):
        raise invalid(frame, "'detail' must be an object")
    if len(detail) > MAX_REPORT_DETAIL_ENTRIES:
        raise invalid(frame, f"'detail' has more than {MAX_REPORT_DETAIL_ENTRIES} entries")
    for key, value in detail.items():
        if len(key) > MAX_NAME_CHARS:
            raise invalid(frame, f"'detail' has a key longer than {MAX_NAME_CHARS} characters")
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            text = ",".join(value)
        elif value is None or isinstance(value, bool | int | float):
            text = str(value)
        elif isinstance(value, str):
            text = value
        else:
            raise invalid(frame, f"'detail.{key[:MAX_NAME_CHARS]}' must be a string, a number, a boolean, null "
                                 "or a list of strings")
        if len(text) > MAX_REPORT_DETAIL_CHARS:
            raise invalid(frame, f"'detail.{key[:MAX_NAME_CHARS]}' is longer than {MAX_REPORT_DETAIL_CHARS} "
                                 "characters")
    return detail


def parse_adapter_report(frame: dict[str, Any], *, known: Collection[str] | None = None) -> AdapterReportFrame:
    platform = _platform(frame, known)
    _field(frame, "id", str, max_length=MAX_FRAME_ID_CHARS)
    kind = _field(frame, "kind", str, required=True)
    if kind not in ADAPTER_REPORT_KINDS:
        raise invalid(frame, f"unknown kind {echo(kind)}; expected one of {', '.join(ADAPTER_REPORT_KINDS)}")
    count = _field(frame, "count", int)
    if count is None:
        count = 1
    if count < 1:
        raise invalid(frame, "'count' must be from 1 up")
    return AdapterReportFrame(
        frame_id=frame_id(frame),
        platform=platform,
        adapter=_field(frame, "adapter", str, max_length=MAX_NAME_CHARS) or "",
        kind=kind,
        detail=_report_detail(frame),
        count=min(count, MAX_REPORT_COUNT),
        first_at=_report_time(frame, "first_at"),
        last_at=_report_time(frame, "last_at"),
    )
