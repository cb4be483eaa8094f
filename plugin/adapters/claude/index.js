/**
 * claude.ai: what its pages, requests and answer streams look like.
 *
 * Shapes from PLATFORMS.md "Claude (claude.ai)", followed as of 2026-11-29:
 * - the completion request and its SSE stream with `rendering_mode:
 *   "messages"`: OmniRoute `claude-web` (2026);
 * - `message_start.message.uuid` as the assistant message and `parent_uuid`
 *   as the human one: a bundle write-up of 2026-03-22 (uncertain);
 * - errors as `{error: {type, message}}` and the legacy `completion`
 *   events: ClewdR (2025-26);
 * - the DOM: `data-is-streaming` on the message container (2025-26,
 *   uncertain), `.font-claude-message` / `.font-claude-response` (class
 *   names change; both kept), the "Stop response" button (refined-claude,
 *   2025-05; its label is localised, so it is the last fallback);
 * - the composer (a ProseMirror `contenteditable`), its send button and the
 *   `data-testid="user-message"` turns: not in PLATFORMS.md, uncertain
 *   (2025-26); see SELECTORS;
 *
 * and from PLATFORMS.md "Found since (2026-12)":
 * - `message_start.message.uuid` / `parent_uuid` confirmed (2026-04 capture);
 * - `content_block_retract {from_index}` withdraws the blocks from that
 *   index on: their text is not part of the answer (OmniRoute lists the
 *   event with an `index` field, read when `from_index` is missing);
 * - `message_snapshot`, `thinking_summary_delta`, `signature_delta`,
 *   citation and tool-update deltas: none of them is answer text;
 *
 * and from PLATFORMS.md "Found since (2026-12-07)" (reverse clients of
 * 2026; Anthropic's documentation fetched 2026-09-02), in stream.js:
 * - only `stop_reason` `end_turn` or `stop_sequence` ends a finished
 *   answer; `max_tokens` is an answer cut by the output limit, `refusal`
 *   (with `stop_details`, after any part of the answer, "Chat paused" on the
 *   page) one to discard whole; a reason the adapter does not know is
 *   reported, and the page is read;
 * - a `fallback` content block (beside a `model_fallback` event) marks
 *   where another model continues the partial output: the text before and
 *   after it is one, joined with nothing between.
 *
 * The answer is its text blocks as the page shows them: a text block right
 * after another flows on in the same paragraph (claude.ai splits cited text
 * into blocks), one after a block of another kind (a tool call, thinking)
 * starts a new paragraph (uncertain: no dated source says how the page
 * joins them).
 */

import { anyMatches, conversationUrlFor, queryLast } from "../../lib/page-helpers.js";
import { DELIVERY_REQUESTS, readPageValues } from "./delivery.js";
import { conversationIdFromUrl, ORIGIN, SELECTORS } from "./page.js";
import { createStreamParser } from "./stream.js";

/** @type {import('../types.js').Adapter} */
export default {
  name: "claude",
  version: "2026-12-07",
  origins: [ORIGIN],
  conversationIdFromUrl,
  conversationUrl: conversationUrlFor(conversationIdFromUrl, (id) => `${ORIGIN}/chat/${encodeURIComponent(id)}`),
  completionRequest: {
    method: "POST",
    pattern: /^https:\/\/claude\.ai\/api\/organizations\/[^/]+\/chat_conversations\/[^/]+\/(retry_)?completion(\?|$)/,
  },
  deliveryRequests: DELIVERY_REQUESTS,
  createStreamParser,
  dom: {
    isGenerating: (document) => anyMatches(document, SELECTORS.generating),
    lastAssistantMessage: (document) => queryLast(document, SELECTORS.assistantContent),
    messageId: () => null, // claude.ai does not put message uuids in its DOM
    selectors: SELECTORS,
  },
  readPageValues,
};
