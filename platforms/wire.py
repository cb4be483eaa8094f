"""What a chat app's requests and answers are made of: placeholders, encodings, and readers (SPEC §6.1).

Pure helpers the platform adapters (``platforms/<name>.py``) build their
requests and read their answers with; the adapters' interface and registry
are in ``platforms/registry.py``.

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

PAGE_PLACEHOLDER = re.compile(r"\{\{page:([A-Za-z0-9_.]+)\}\}")
FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"
EXCERPT_CHARS = 200


@dataclass(frozen=True)
class ProxyRequest:
    """The page's own HTTP request a proxy delivery asks the plugin to make (``{{page:NAME}}``: a page value)."""

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


# Client-generated ids are uuid5s of the delivery key in this namespace, so a
# retried delivery carries the same ids and is recognisably the same message.
DELIVERY_NAMESPACE = uuid.UUID("5b0f3c1e-8d2a-4e57-9a61-3c0de1f7a2b4")


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


def stream_post(url: str, headers: Mapping[str, str], body: Any) -> ProxyRequest:
    """A JSON POST answered with server-sent events: the two headers every such send carries, then ``headers``."""
    return ProxyRequest(
        method="POST",
        url=url,
        headers={"Content-Type": "application/json", "Accept": "text/event-stream", **headers},
        body=json_text(body),
    )


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
