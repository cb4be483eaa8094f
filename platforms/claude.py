"""claude.ai: post the next user turn of a conversation.

Follows PLATFORMS.md, "Claude (claude.ai)": the 2026 body and headers
(OmniRoute ``claude-web``, 2026), errors as ``{error:{type,message}}``
(ClewdR, 2025-26). Fixtures: ``fixtures/platforms/claude/``.

- ``POST https://claude.ai/api/organizations/{org_uuid}/chat_conversations/{conversation_uuid}/completion``
- Headers: ``Content-Type: application/json``, ``Accept: text/event-stream``,
  ``anthropic-client-platform: web_claude_ai``, ``anthropic-device-id``.
- Body: ``prompt``, ``parent_message_uuid``, ``timezone``, ``locale``,
  ``attachments``, ``files``, ``sync_sources``, ``rendering_mode: "messages"``
  and ``turn_message_uuids``. No ``model``: the conversation keeps its own
  (ClewdR sends it only for paid accounts).
- Response: SSE; ``message_start.message.uuid`` is the new assistant message.

Uncertain (single or unattributed sources, or inference): whether the two
``anthropic-*`` headers are required (the device id is dropped when the page
has none); ``turn_message_uuids``, sent so a retry carries the same ids, and
how claude.ai answers a human uuid it has already seen; ``message_start``'s
``message.uuid`` being the assistant message; the page reading the parent
from ``current_leaf_message_uuid`` when the conductor does not know it.
"""

from __future__ import annotations

from platforms.registry import (
    BodyReading,
    DeliveryTarget,
    PlatformAdapter,
    ProxyRequest,
    platforms,
)
from platforms.wire import (
    client_uuid,
    describe_error,
    excerpt,
    known_or_page,
    loads,
    nested,
    page,
    sse_events,
    stream_post,
    url_part,
)

ORIGIN = "https://claude.ai"


class ClaudeAdapter(PlatformAdapter):
    name = "claude"
    label = "Claude"
    page_values = ("conversation_uuid", "device_id", "locale", "org_uuid", "parent_message_uuid", "timezone")

    def build_request(self, target: DeliveryTarget) -> ProxyRequest:
        org = url_part(known_or_page(target.organization_id, "org_uuid"))
        conversation = url_part(known_or_page(target.conversation_id, "conversation_uuid"))
        body = {
            "prompt": target.text,
            "parent_message_uuid": known_or_page(target.parent_message_id, "parent_message_uuid"),
            "timezone": page("timezone"),
            "locale": page("locale"),
            "attachments": [],
            "files": [],
            "sync_sources": [],
            "rendering_mode": "messages",
            "turn_message_uuids": {
                "human_message_uuid": client_uuid(target.delivery_key, "claude.human_message"),
                "assistant_message_uuid": client_uuid(target.delivery_key, "claude.assistant_message"),
            },
        }
        return stream_post(
            f"{ORIGIN}/api/organizations/{org}/chat_conversations/{conversation}/completion",
            {"anthropic-client-platform": "web_claude_ai", "anthropic-device-id": page("device_id")},
            body,
        )

    def read_body(self, body: str) -> BodyReading:
        # Unknown event types (ping, message_limit, conversation_ready, ...)
        # are skipped: claude.ai adds new ones often.
        message_id = None
        for event, data in sse_events(body):
            payload = loads(data)
            if event == "error" and not isinstance(payload, dict):
                return BodyReading(error=excerpt(data) or "an error event")
            if not isinstance(payload, dict):
                continue
            if payload.get("error") or payload.get("type") == "error":
                return BodyReading(error=describe_error(payload.get("error") or payload))
            if payload.get("type") == "message_start":
                uuid = nested(payload, "message", "uuid")
                message_id = uuid if isinstance(uuid, str) and uuid else message_id
        return BodyReading(remote_message_id=message_id)


platforms.register(ClaudeAdapter())
