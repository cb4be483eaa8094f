"""gemini.google.com: post the next user turn of a conversation.

Follows PLATFORMS.md, "Gemini (gemini.google.com)": ``StreamGenerate`` as
gemini_webapi v2.0.0 (2026-04-06) and gpt4free (2026-08-20) send it, the
69-slot ``f.req`` of 2026, error codes from gemini_webapi (2026). Fixtures:
``fixtures/platforms/gemini/``.

- ``POST https://gemini.google.com[/u/{n}]/_/BardChatUi/data/assistant.lamda.BardFrontendService/StreamGenerate``
  with ``bl``, ``f.sid``, ``hl``, ``_reqid`` and ``rt=c``. The ``/u/{n}``
  prefix and ``X-Goog-AuthUser`` come from the page URL (a second account).
- Headers: ``Content-Type: application/x-www-form-urlencoded;charset=utf-8``,
  ``X-Same-Domain: 1``, ``x-goog-ext-73010989-jspb: [0]``,
  ``x-goog-ext-525005358-jspb: ["<UUID>",1]``, and the model header
  ``x-goog-ext-525001261-jspb`` as a page value (model ids depend on the
  account's tier; dropped when the page has none, which means the default
  model).
- Body (a form, not JSON): ``at={{page:at_token}}`` and
  ``f.req=[null,"<inner>"]``, the inner array setting only the slots
  PLATFORMS.md documents: [0] the prompt, [1] the language, [2] the chat
  metadata, [7]=1 (streaming), [59] the header's UUID.
- Response: ``)]}'`` then ``<length>\\n<json>`` frames of ``["wrb.fr",null,"<inner>"]``
  parts; inner [1] is ``[cid, rid]``, and the rid is the new response.

Chat metadata: ``[cid, rid, rcid, null x6, context_token]``. The conductor
knows the cid (the conversation id) and usually the rid (the last assistant
message); the rcid and the context token are page values
(``chat_metadata.*``, from PLATFORMS.md's ``{{page:chat_metadata}}``), written
slot by slot so that filling them in leaves valid JSON.

Uncertain: the metadata's length (10 slots in gemini_webapi's default,
PLATFORMS.md only says ``[cid,rid,rcid,…,context_token]``); the other slots
gemini_webapi also sets ([6], [10], [17], ...), left null here; the UUID's
upper case; ``_reqid``'s range; and the indices themselves, which Gemini
shifts between deploys.
"""

from __future__ import annotations

import json
import re
import uuid

from platforms.registry import (
    BodyReading,
    DeliveryTarget,
    PlatformAdapter,
    ProxyRequest,
    platforms,
)
from platforms.wire import (
    FORM_CONTENT_TYPE,
    client_uuid,
    form_value,
    json_text,
    known_or_page,
    loads,
    nested,
    page,
    url_part,
)

ORIGIN = "https://gemini.google.com"
PATH = "/_/BardChatUi/data/assistant.lamda.BardFrontendService/StreamGenerate"
INNER_SLOTS = 69
STREAMING_SLOT = 7
REQUEST_UUID_SLOT = 59
ACCOUNT_PATH = re.compile(r"^https://gemini\.google\.com/u/(\d+)/")

# A candidate's status at [8][0] once its answer is finished (the completion marker).
FINISHED_STATUS = 2
# In-stream error codes (gemini_webapi, 2026).
ERROR_CODES = {
    1013: "transient",
    1037: "usage limit",
    1050: "model inconsistent with the chat",
    1052: "model header invalid",
    1060: "IP temporarily blocked",
}


class GeminiAdapter(PlatformAdapter):
    name = "gemini"
    label = "Gemini"
    page_values = (
        "at_token",
        "build_label",
        "chat_metadata.cid",
        "chat_metadata.context_token",
        "chat_metadata.rcid",
        "chat_metadata.rid",
        "language",
        "model_header",
        "session_id",
    )

    def build_request(self, target: DeliveryTarget) -> ProxyRequest:
        request_uuid = client_uuid(target.delivery_key, "gemini.request").upper()
        metadata = [
            known_or_page(target.conversation_id, "chat_metadata.cid"),
            known_or_page(target.parent_message_id, "chat_metadata.rid"),
            page("chat_metadata.rcid"),
            None, None, None, None, None, None,
            page("chat_metadata.context_token"),
        ]  # fmt: skip
        inner: list = [None] * INNER_SLOTS
        inner[0] = [target.text, 0, None, None, None, None, 0]
        inner[1] = [page("language")]
        inner[2] = metadata
        inner[STREAMING_SLOT] = 1
        inner[REQUEST_UUID_SLOT] = request_uuid
        # json.dumps keeps the inner text's placeholders; json_text already
        # escaped any "{" that came from the delivered text or the ids.
        f_req = json.dumps([None, json_text(inner)], separators=(",", ":"))

        prefix, account_headers = "", {}
        account = ACCOUNT_PATH.match(target.page_url)
        if account:
            prefix = f"/u/{account.group(1)}"
            account_headers = {"X-Goog-AuthUser": account.group(1)}
        query = "&".join(f"{key}={url_part(value)}" for key, value in {
            "bl": page("build_label"),
            "f.sid": page("session_id"),
            "hl": page("language"),
            "_reqid": str(_request_number(target.delivery_key)),
            "rt": "c",
        }.items())
        return ProxyRequest(
            method="POST",
            url=f"{ORIGIN}{prefix}{PATH}?{query}",
            headers={
                "Content-Type": f"{FORM_CONTENT_TYPE};charset=utf-8",
                "X-Same-Domain": "1",
                **account_headers,
                "x-goog-ext-525001261-jspb": page("model_header"),
                "x-goog-ext-73010989-jspb": "[0]",
                "x-goog-ext-525005358-jspb": json.dumps([request_uuid, 1], separators=(",", ":")),
            },
            body=f"at={page('at_token')}&f.req={form_value(f_req)}",
        )

    def read_body(self, body: str) -> BodyReading:
        # Frames are read line by line rather than by their length prefix:
        # Google writes each one compact on one line, and the prefix counts
        # UTF-16 code units where a str counts code points. An error part
        # fails the delivery only when no candidate was finished: since 2026
        # one with code 1096 follows every turn, finished or not (PLATFORMS.md,
        # "what a finished answer is, in 2026").
        response_id, error, is_finished = None, None, False
        for line in body.removeprefix(")]}'").splitlines():
            envelope = loads(line)
            if not isinstance(envelope, list):
                continue
            for part in envelope:
                if nested(part, 0) != "wrb.fr":
                    continue
                error = error or _part_error(part)
                payload = nested(part, 2)
                inner = loads(payload) if isinstance(payload, str) else None
                rid = nested(inner, 1, 1)
                response_id = rid if isinstance(rid, str) and rid else response_id
                is_finished = is_finished or nested(inner, 4, 0, 8, 0) == FINISHED_STATUS
        if error and not is_finished:
            return BodyReading(error=error)
        return BodyReading(remote_message_id=response_id)


def _part_error(part: list) -> str | None:
    """The error a ``wrb.fr`` part carries instead of a payload, in one line."""
    code = nested(part, 5, 2, 0, 1, 0)
    if isinstance(code, int) and code:
        meaning = ERROR_CODES.get(code)
        return f"code {code} ({meaning})" if meaning else f"code {code}"
    if nested(part, 2) is None and isinstance(nested(part, 5), list):
        return f"status {json.dumps(nested(part, 5, 0))} without a payload"
    return None


def _request_number(delivery_key: str) -> int:
    """``_reqid``: a 7-digit number, the same for every retry of one delivery."""
    return 1_000_000 + uuid.UUID(client_uuid(delivery_key, "gemini.reqid")).int % 9_000_000


platforms.register(GeminiAdapter())
