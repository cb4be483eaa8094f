"""Platform adapters and their registry (SPEC §6, STYLE rules 4 and 6).

An adapter turns "post this text as the next user message of this
conversation, under this parent message" into the HTTP request the plugin
makes inside the chat page (``browser.proxy_delivery``), and reads the
plugin's answer into a verdict. Adapters are pure: no ORM, no I/O, no clock.

Page values. What only the page can know (session tokens, the page's locale,
ids the conductor has not seen) is written as a ``{{page:NAME}}`` placeholder,
and the plugin fills it in before sending. ``fill_page_values`` is the
reference of how:

- in the URL and in an ``application/x-www-form-urlencoded`` body, the value
  is percent-encoded (``encodeURIComponent``);
- in a JSON body, placeholders only sit inside JSON strings and the value is
  escaped as string content (``JSON.stringify(value).slice(1, -1)``);
- in a header, the value goes in as it is, and a header whose whole value is
  one placeholder filled with ``""`` is dropped (optional headers such as
  ChatGPT's proof token are sent only when the page has them).

Text that reaches a request from elsewhere (the delivered text, ids from the
plugin) never forms a placeholder: ``json_text`` writes its ``{`` as
``\\u007b`` and URL parts are percent-encoded, so a tool result containing
``{{page:access_token}}`` cannot make the plugin paste a token into the chat.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

from core.registry import Registry

PAGE_PLACEHOLDER = re.compile(r"\{\{page:([A-Za-z0-9_.]+)\}\}")
FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"
EXCERPT_CHARS = 200

# Client-generated ids are uuid5s of the delivery key in this namespace, so a
# retried delivery carries the same ids and is recognisably the same message.
DELIVERY_NAMESPACE = uuid.UUID("5b0f3c1e-8d2a-4e57-9a61-3c0de1f7a2b4")


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
class ProxyRequest:
    method: str
    url: str
    headers: dict[str, str]
    body: str

    def as_frame(self) -> dict[str, Any]:
        """The ``request`` object of a ``browser.proxy_delivery`` frame."""
        return {"method": self.method, "url": self.url, "headers": dict(self.headers), "body": self.body}

    @property
    def placeholders(self) -> tuple[str, ...]:
        """The names of the page values the plugin must fill in, sorted."""
        texts = [self.url, self.body, *self.headers.values()]
        return tuple(sorted({name for text in texts for name in PAGE_PLACEHOLDER.findall(text)}))


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


# Building requests -----------------------------------------------------------


class Page(str):
    """A ``{{page:NAME}}`` placeholder: the only string ``json_text`` leaves unescaped."""


def page(name: str) -> Page:
    return Page("{{page:" + name + "}}")


def known_or_page(value: str, name: str) -> str:
    """``value`` when the conductor knows it, else the placeholder for it."""
    return value if value else page(name)


def client_uuid(delivery_key: str, purpose: str) -> str:
    """A client-generated id that is the same for every retry of one delivery.

    A uuid5 of the key and ``purpose``, re-stamped as version 4: the web apps
    make these with ``crypto.randomUUID()``, and a server that checks the
    version should see the kind of id it expects.
    """
    derived = uuid.uuid5(DELIVERY_NAMESPACE, f"{delivery_key}\n{purpose}")
    return str(uuid.UUID(bytes=derived.bytes, version=4))


def json_text(value: Any) -> str:
    """``value`` as compact JSON (no spaces after separators, like ``JSON.stringify``).

    Every ``{`` inside a string is written ``\\u007b``, except in a ``Page``:
    the plugin then finds only the placeholders the adapter meant.
    """
    if isinstance(value, Page):
        return json.dumps(str(value))
    if isinstance(value, str):
        return json.dumps(value).replace("{", "\\u007b")
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{json_text(str(k))}:{json_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(json_text(item) for item in value) + "]"
    return json.dumps(value)


def url_part(value: str) -> str:
    """A path segment or query value: percent-encoded, placeholders kept as they are."""
    if isinstance(value, Page):
        return str(value)
    return quote(value, safe="")


def form_value(text: str) -> str:
    """Percent-encode a form field's value, keeping the placeholders inside it as they are."""
    pieces, last = [], 0
    for match in PAGE_PLACEHOLDER.finditer(text):
        pieces += [quote(text[last : match.start()], safe=""), match.group(0)]
        last = match.end()
    pieces.append(quote(text[last:], safe=""))
    return "".join(pieces)


def fill_page_values(request: ProxyRequest, values: Mapping[str, str]) -> ProxyRequest:
    """The request as the plugin sends it once the page's values are filled in.

    The reference of the plugin's side of the contract (see the module
    docstring). Raises ``KeyError`` naming a placeholder ``values`` lacks.
    In Gemini's form body some values sit inside JSON strings as well, where
    percent-encoding alone is right only for values without ``"`` or ``\\``:
    true of the ids, tokens and language codes placed there.
    """

    def value(match: re.Match[str]) -> str:
        try:
            return values[match.group(1)]
        except KeyError:
            raise KeyError(f"no page value for {match.group(0)}") from None

    def percent_encoded(match: re.Match[str]) -> str:
        return quote(value(match), safe="")

    def json_escaped(match: re.Match[str]) -> str:
        return json.dumps(value(match))[1:-1]

    headers = {}
    for header, text in request.headers.items():
        filled = PAGE_PLACEHOLDER.sub(value, text)
        if filled or not PAGE_PLACEHOLDER.fullmatch(text):
            headers[header] = filled
    is_form = request.headers.get("Content-Type", "").startswith(FORM_CONTENT_TYPE)
    return replace(
        request,
        url=PAGE_PLACEHOLDER.sub(percent_encoded, request.url),
        headers=headers,
        body=PAGE_PLACEHOLDER.sub(percent_encoded if is_form else json_escaped, request.body),
    )


# Reading answers -------------------------------------------------------------


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def loads(text: str) -> Any:
    """Parsed JSON, or None when ``text`` is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return None


def nested(value: Any, *path: int | str) -> Any:
    """``value[path[0]][path[1]]...``, or None where the path leaves the data."""
    for key in path:
        if isinstance(key, int) and isinstance(value, list) and -len(value) <= key < len(value):
            value = value[key]
        elif isinstance(key, str) and isinstance(value, dict):
            value = value.get(key)
        else:
            return None
    return value


def describe_error(error: Any) -> str:
    """One line for an error object: ``type: message``, a bare string, or the JSON."""
    if isinstance(error, str):
        return excerpt(error)
    if isinstance(error, dict):
        kind = error.get("type") or error.get("code")
        message = error.get("message") or error.get("detail")
        if isinstance(message, str | int):
            return excerpt(f"{kind}: {message}" if isinstance(kind, str) else str(message))
    return excerpt(json.dumps(error))


def error_detail(body: str) -> str:
    """The error a non-2xx JSON body states, else an excerpt of the body ("" when empty)."""
    data = loads(body)
    if isinstance(data, dict):
        for key in ("error", "detail", "message"):
            if data.get(key):
                return describe_error(data[key])
    return excerpt(body)


def sse_events(body: str) -> Iterator[tuple[str, str]]:
    """``(event, data)`` for each ``data:`` line of a server-sent-event stream.

    Each data line is its own item (the event name is the last ``event:``
    line of its block, "" when none): these platforms write one JSON
    document per line, and reading lines alone survives a stream whose
    blank separators were lost.
    """
    event = ""
    for line in body.splitlines():
        if not line.strip():
            event = ""
        elif line.startswith("event:"):
            event = line[len("event:") :].strip()
        elif line.startswith("data:"):
            yield event, line[len("data:") :].strip()
