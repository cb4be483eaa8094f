"""Platform adapters and their registry (SPEC §6, STYLE rules 4 and 6).

An adapter turns "post this text as the next user message of this
conversation, under this parent message" into the HTTP request the plugin
makes inside the chat page (``browser.proxy_delivery``), and reads the
plugin's answer into a verdict. Adapters are pure: no ORM, no I/O, no clock.

How a request is built and an answer read (placeholders, encodings, SSE):
``platforms/wire.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.registry import Registry
from platforms.wire import ProxyRequest, error_detail, excerpt



class DeliveryMethod:
    """The ways a text can reach a chat (SPEC §6.1), as named in settings and in the admin."""

    HTTP = "http"  # browser.proxy_delivery: the app's own request, made inside the page
    DOM = "dom"  # browser.dom_delivery: typed into the page's composer and sent


DELIVERY_METHODS = (DeliveryMethod.HTTP, DeliveryMethod.DOM)
# In CONDUCTOR_DELIVERY_METHODS, the key of the order for platforms not named.
EVERY_PLATFORM = "*"


def parse_delivery_methods(text: str) -> tuple[str, ...]:
    """``"http,dom"`` as ``("http", "dom")``; ``ValueError`` saying what is wrong with it.

    At least one method, each a known one, none twice.
    """
    methods = tuple(part.strip() for part in text.split(","))
    if methods == ("",):
        raise ValueError("name at least one delivery method")
    for method in methods:
        if method not in DELIVERY_METHODS:
            raise ValueError(f"unknown delivery method {method!r}; known: {', '.join(DELIVERY_METHODS)}")
    if len(set(methods)) != len(methods):
        raise ValueError(f"a delivery method is named twice in {text!r}")
    return methods


class DuplicatePlatform(ValueError):
    pass


class UnsupportedPlatform(LookupError):
    pass


@dataclass(frozen=True)
class DeliveryTarget:
    """Where and what to post: built by the delivery executor from the task and its link."""

    platform: str
    conversation_id: str  # the platform's own conversation id
    parent_message_id: str  # the last assistant message to reply under; "" when unknown
    organization_id: str  # "" when unknown (Claude's organization uuid)
    page_url: str  # "" when unknown
    text: str  # the next user message
    delivery_key: str  # the same across retries of one task; seeds client-generated ids


@dataclass(frozen=True)
class ProxyAnswer:
    """What the plugin sent back in ``browser.proxy_delivery.result``."""

    ok: bool
    status: int | None
    body: str | None
    error: str | None

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> ProxyAnswer:
        """From the stored result (``DeliveryRequest.result``): ``{ok, status, body, error}``."""
        return cls(
            ok=bool(result.get("ok")),
            status=result.get("status"),
            body=result.get("body"),
            error=result.get("error"),
        )


@dataclass(frozen=True)
class DeliveryVerdict:
    is_delivered: bool
    is_retryable: bool  # meaningful when not delivered
    error: str | None = None  # one line when not delivered
    remote_message_id: str | None = None  # the message id the response revealed, when it did

    @classmethod
    def delivered(cls, remote_message_id: str | None = None) -> DeliveryVerdict:
        return cls(is_delivered=True, is_retryable=False, remote_message_id=remote_message_id)

    @classmethod
    def retryable(cls, error: str) -> DeliveryVerdict:
        return cls(is_delivered=False, is_retryable=True, error=error)


@dataclass(frozen=True)
class BodyReading:
    """What an adapter found in a 2xx response body."""

    error: str | None = None  # the in-stream error, in one line, when there was one
    remote_message_id: str | None = None


class PlatformAdapter:
    """One platform's request shape and response reading.

    Subclasses set ``name`` and ``page_values`` (every placeholder name their
    requests may carry, for the plugin's author) and implement
    ``build_request`` and ``read_body``; ``read_answer`` applies the rules
    shared by every platform (SPEC §3) before asking ``read_body``.
    """

    name: str = ""
    label: str = ""  # the app's own name, for people
    page_values: tuple[str, ...] = ()
    # The delivery methods to try, in order, unless the settings or the
    # conversation say otherwise (SPEC §6.1).
    delivery_methods: tuple[str, ...] = DELIVERY_METHODS
    # The methods it can perform at all, whatever the settings ask (a page site: dom only).
    performs: tuple[str, ...] = DELIVERY_METHODS

    def build_request(self, target: DeliveryTarget) -> ProxyRequest:
        raise NotImplementedError

    def read_body(self, body: str) -> BodyReading:
        """Look for an in-stream error and the new message id in a 2xx body. Never raises."""
        raise NotImplementedError

    def read_answer(self, answer: ProxyAnswer) -> DeliveryVerdict:
        """Delivered only for ``ok: true``, a 2xx status and a body without an error.

        Every other answer is retryable: a non-2xx status, ``ok: false``, no
        status, an in-stream error, or an HTML page where a stream was due (a
        Cloudflare challenge or a login page that a redirect led to). A 2xx
        stream that stops early still counts as delivered: the platform took
        the message, and posting it again would duplicate it.
        """
        status, body = answer.status, answer.body or ""
        if status is not None and not 200 <= status < 300:
            detail = error_detail(body) or excerpt(answer.error or "") or "empty body"
            return DeliveryVerdict.retryable(f"{self.name} answered HTTP {status}: {detail}")
        if not answer.ok:
            where = f" (HTTP {status})" if status is not None else ""
            detail = excerpt(answer.error or "") or error_detail(body) or "no error given"
            return DeliveryVerdict.retryable(f"{self.name} request failed in the page{where}: {detail}")
        if status is None:
            detail = excerpt(answer.error or "") or excerpt(body) or "no detail"
            return DeliveryVerdict.retryable(f"{self.name} answered without an HTTP status: {detail}")
        if body.lstrip()[:1] == "<":
            return DeliveryVerdict.retryable(
                f"{self.name} answered HTTP {status} with an HTML page instead of a stream: {excerpt(body)}"
            )
        reading = self.read_body(body)
        if reading.error is not None:
            return DeliveryVerdict.retryable(
                f"{self.name} answered HTTP {status} with an error in the stream: {excerpt(reading.error)}"
            )
        return DeliveryVerdict.delivered(reading.remote_message_id)


class PlatformRegistry(Registry[PlatformAdapter]):
    what = "platform"
    duplicate_error = DuplicatePlatform
    unknown_error = UnsupportedPlatform
    unknown_format = "unsupported platform {key!r}; known: {known}"


platforms = PlatformRegistry()


def platform_choices() -> list[tuple[str, str]]:
    """The platforms as model field choices: the registry is the one list of them."""
    return [(adapter.name, adapter.label) for adapter in platforms]
