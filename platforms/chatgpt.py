"""chatgpt.com: post the next user turn of a conversation.

Follows PLATFORMS.md, "ChatGPT (chatgpt.com)": the ``/f/conversation``
endpoint (gpt4free, 2025-07 onward), headers and body as of 2026 (OmniRoute
``chatgpt-web``, captured April 2026; gpt4free to 2026-08). Fixtures:
``fixtures/platforms/chatgpt/``.

- ``POST https://chatgpt.com/backend-api/f/conversation``
- Headers: ``Authorization: Bearer {{page:access_token}}``,
  ``Accept: text/event-stream``, the sentinel and conduit tokens and the
  ``oai-*`` client headers, all page values. The page runs the sentinel
  (``chat-requirements``, its proof of work and Turnstile) and the conduit
  ``prepare`` step before it sends; a header it has no value for is dropped.
- Body: ``action: "next"``, one user message whose ``id`` derives from the
  delivery key, ``conversation_id``, ``parent_message_id`` (the leaf),
  ``model``, ``timezone``, ``conversation_mode``, ``supports_buffering`` and
  ``supported_encodings: ["v1"]``.
- Response: SSE. With v1, ``delta`` events carry JSON-patch ops, the first
  ``add`` holding the whole message; without it each event carries the whole
  message. Ends with ``data: [DONE]``; errors arrive as ``{"error": ...}``.
  Some turns (2026) answer with a ``stream_handoff`` only, the answer going
  on in ``/f/conversation/resume`` or a websocket: the send was taken, and
  the new message id is not in this body.
- Delivered through the composer by default (``delivery_methods``): see below.

Uncertain or left out: whether the conduit step and the sentinel prepare
token are still required (both placeholders, dropped when empty);
``model: "auto"`` (the slug a conversation uses is not known here; slugs
change per deploy); ``create_time`` and ``timezone_offset_min`` are not sent
(a pure builder has no clock, and a placeholder cannot stand in a number);
the leaf field the page reads ``parent_message_id`` from when it is unknown.
The new assistant message is the one seen ``in_progress``: earlier turns may
be echoed already finished at the start of the stream (OmniRoute).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from platforms.registry import (
    BodyReading,
    DeliveryMethod,
    DeliveryTarget,
    PlatformAdapter,
    ProxyRequest,
    platforms,
)
from platforms.wire import (
    client_uuid,
    describe_error,
    known_or_page,
    loads,
    nested,
    page,
    sse_events,
    stream_post,
)

URL = "https://chatgpt.com/backend-api/f/conversation"
MODEL = "auto"


class ChatGPTAdapter(PlatformAdapter):
    name = "chatgpt"
    label = "ChatGPT"
    # The composer only, unless configured otherwise (CONDUCTOR_DELIVERY_METHODS
    # or the conversation's own order): a page-made send needs a
    # chat-requirements token, a proof of work and a single-use Turnstile
    # token that only the page's own scripts make (gpt4free, 2026-08); the
    # request without them is refused and may flag the account as automated
    # (PLATFORMS.md, "Found since").
    delivery_methods = (DeliveryMethod.DOM,)
    page_values = (
        "access_token",
        "account_id",
        "client_build_number",
        "client_version",
        "conduit_token",
        "conversation_id",
        "device_id",
        "language",
        "parent_message_id",
        "sentinel_chat_requirements_token",
        "sentinel_prepare_token",
        "sentinel_proof_token",
        "sentinel_turnstile_token",
        "session_id",
        "timezone",
    )

    def build_request(self, target: DeliveryTarget) -> ProxyRequest:
        body = {
            "action": "next",
            "messages": [{
                "id": client_uuid(target.delivery_key, "chatgpt.user_message"),
                "author": {"role": "user"},
                "content": {"content_type": "text", "parts": [target.text]},
                "metadata": {},
            }],
            "conversation_id": known_or_page(target.conversation_id, "conversation_id"),
            "parent_message_id": known_or_page(target.parent_message_id, "parent_message_id"),
            "model": MODEL,
            "timezone": page("timezone"),
            "conversation_mode": {"kind": "primary_assistant"},
            "history_and_training_disabled": False,
            "supports_buffering": True,
            "supported_encodings": ["v1"],
            "system_hints": [],
        }
        return stream_post(
            URL,
            {
                "Authorization": "Bearer " + page("access_token"),
                "openai-sentinel-chat-requirements-token": page("sentinel_chat_requirements_token"),
                "openai-sentinel-chat-requirements-prepare-token": page("sentinel_prepare_token"),
                "openai-sentinel-proof-token": page("sentinel_proof_token"),
                "openai-sentinel-turnstile-token": page("sentinel_turnstile_token"),
                "x-conduit-token": page("conduit_token"),
                "oai-device-id": page("device_id"),
                "oai-language": page("language"),
                "oai-client-version": page("client_version"),
                "oai-client-build-number": page("client_build_number"),
                "oai-session-id": page("session_id"),
                "chatgpt-account-id": page("account_id"),
            },
            body,
        )

    def read_body(self, body: str) -> BodyReading:
        message_id = None
        for _, data in sse_events(body):
            payload = loads(data)
            if not isinstance(payload, dict):
                continue  # "v1", [DONE], or a line that is not JSON
            error = payload.get("error") or nested(payload, "v", "error")
            if error:
                return BodyReading(error=describe_error(error))
            for message in _messages(payload):
                if (
                    message_id is None
                    and nested(message, "author", "role") == "assistant"
                    and message.get("status") == "in_progress"
                    and isinstance(message.get("id"), str)
                ):
                    message_id = message["id"]
        return BodyReading(remote_message_id=message_id)


def _messages(payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Whole messages an event carries: the v1 ``add`` op's, or the plain event's."""
    for message in (payload.get("message"), nested(payload, "v", "message")):
        if isinstance(message, dict):
            yield message


platforms.register(ChatGPTAdapter())
