/**
 * chatgpt.com: what its pages, requests and answer streams look like.
 *
 * Shapes from PLATFORMS.md "ChatGPT (chatgpt.com)", followed as of 2026-11-29:
 * - `POST /backend-api/f/conversation` (gpt4free, 2025-07 onward; logged out
 *   `/backend-anon/`), the older `/backend-api/conversation` kept;
 * - the SSE stream with `delta_encoding` "v1" JSON-patch ops, and the
 *   cumulative whole-message events without it (OmniRoute `chatgpt-web`,
 *   2026; gpt4free to 2026-08);
 * - earlier turns echoed, already finished, at the start of a stream: the
 *   answer is the message seen `in_progress` (OmniRoute, 2026);
 *
 * and from PLATFORMS.md "Found since (2026-12)", public code dated 2026:
 * - the stream handoff: a first leg whose body is only `delta_encoding`,
 *   `resume_conversation_token`, `stream_handoff` (`options` naming
 *   `resume_sse_endpoint` and/or `subscribe_ws_topic` topics) and `[DONE]`;
 *   the answer then streams from `POST /backend-api/f/conversation/resume`
 *   (body `{conversation_id, offset}`, the same v1 SSE) or over the page's
 *   websocket, which the plugin does not read (the page is read instead);
 * - a short reply as one root `add` already `finished_successfully`, never
 *   `in_progress` (OmniRoute `chatgpt-web/sse.ts`): it is the answer when it
 *   belongs to the new turn, that is after the user message this request
 *   sent (or its `input_message`), or with that message as its parent, or in
 *   a continuation, which sends no user message;
 * - `message_stream_complete` ends a stream like `[DONE]`;
 * - a bare `{"v": …}` repeats the last top-level `p`/`o` (a `patch`
 *   included); the operations inside a patch do not change them; a bare
 *   `{"v": {"message": …}}` adds a message at the root, and a bare string
 *   where the repeated op takes none (the root, a patch) is text appended
 *   to the answer (gpt4free reads every bare string as text);
 * - citations as private-use markers, U+E200 `cite` U+E202 `turn0search0`
 *   U+E201, rewritten by gpt4free (`OpenaiChat.py`, 2026-08): see
 *   `readableText`.
 * - the DOM: `[data-message-author-role="assistant"]` with
 *   `data-message-id`, `button[data-testid="stop-button"]`, the composer
 *   `#prompt-textarea` (ProseMirror) and `button[data-testid="send-button"]`
 *   (chrome-ai-bridge, 2025-26). Aria labels are localised and not used;
 *
 * and from PLATFORMS.md "Found since (2026-12-07)" (a reverse client's audit
 * of 2026-07-15; the web app's decoder in its 2026-09 bundle and a client
 * test of that month), in stream.js:
 * - bare patch arrays `{"v": [{"p", "o", "v"}, …]}` with no top-level
 *   `p`/`o` carry most body deltas and the finishing status: each element
 *   is an operation of its own, as inside a `patch`;
 * - a patch's operations are relative to the patch's own path (the root
 *   when it has none);
 * - `{"type": "moderation", "moderation_response": {"blocked": true}}`
 *   after the whole answer withdraws it: not a final message;
 * - a thinking preamble (channel `commentary`,
 *   `metadata.is_thinking_preamble_message`) is not the answer; `\r\n`
 *   line ends, `event: ping`, `: keep-alive`, `perf_stats`,
 *   `conversation_detail_metadata` are read past.
 *
 * Uncertain: that a message on another `channel` than "final" (or another
 * `recipient` than "all") is not the visible answer; the conversation's leaf
 * being `current_node` of `GET /backend-api/conversation/{id}`; whether a
 * `/resume` body replays echoes of earlier turns (taken as not: it continues
 * one turn); how an entity marker's shown name is chosen (its array's second
 * string); what the page shows for a citation (a link "pill" whose markup no
 * dated source gives: a page capture may keep its label).
 */

import { anyMatches, conversationUrlFor, queryLast } from "../../lib/page-helpers.js";
import { DELIVERY_REQUESTS, readPageValues } from "./delivery.js";
import { readableText } from "./messages.js";
import { conversationIdFromUrl, ORIGIN, SELECTORS } from "./page.js";
import { createStreamParser } from "./stream.js";

/** @type {import('../types.js').Adapter} */
export default {
  name: "chatgpt",
  version: "2026-12-07",
  origins: [ORIGIN],
  conversationIdFromUrl,
  conversationUrl: conversationUrlFor(conversationIdFromUrl, (id) => `${ORIGIN}/c/${encodeURIComponent(id)}`),
  completionRequest: {
    method: "POST",
    // The send, and the continuation of an answer it handed off.
    pattern: /^https:\/\/chatgpt\.com\/backend-(api|anon)\/(f\/)?conversation(\/resume)?\/?(\?|$)/,
  },
  deliveryRequests: DELIVERY_REQUESTS,
  createStreamParser,
  readableText,
  dom: {
    isGenerating: (document) => anyMatches(document, SELECTORS.generating),
    lastAssistantMessage(document) {
      const turn = queryLast(document, SELECTORS.assistantTurn);
      // The rendered Markdown, without the turn's own controls when it is there.
      return turn?.querySelector(".markdown") ?? turn;
    },
    messageId(element) {
      const turn = element.closest?.("[data-message-id]") ?? element;
      return turn.getAttribute?.("data-message-id") || null;
    },
    selectors: SELECTORS,
  },
  readPageValues,
};
