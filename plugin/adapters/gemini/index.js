/**
 * gemini.google.com: what its pages, requests and answer streams look like.
 *
 * Shapes from PLATFORMS.md "Gemini (gemini.google.com)", followed as of 2026-11-29:
 * - `StreamGenerate` and its `)]}'` + `<length>\n<json>` frames of
 *   `["wrb.fr", null, "<inner JSON>"]` parts: gemini_webapi v2.0.0
 *   (2026-04-06), gpt4free (2026-08-20);
 * - inner [1] `[cid, rid]`, [4] candidates `[rcid, [text], …, [8]: [status]]`
 *   with cumulative text, [25] the context token; error codes at part
 *   [5][2][0][1][0] (2026). PLATFORMS.md's "final when the last candidate
 *   has status 2 together with a context token" (gemini_webapi, 2026-03) is
 *   wrong for 2026's first turns, which have no token: see below;
 * - the page's `WIZ_global_data` keys SNlM0e (`at`), cfb2h (`bl`), FdrFJe
 *   (`f.sid`), TuX5cc (language) (gemini_webapi, 2026);
 * - the URL `/app/<hex>`, the hex being the cid without `c_` (uncertain);
 * - the DOM: `model-response` turns, the stop icon
 *   `mat-icon[data-mat-icon-name="stop"]` (chrome-ai-bridge, 2026); the
 *   `message-content-id-r_…` element ids (uncertain); the composer in
 *   `rich-textarea`, `user-query` turns and the send icon (uncertain,
 *   2025-26; see SELECTORS);
 *
 * and from PLATFORMS.md "Found since (2026-12)" (HanaokaYuzu/Gemini-API
 * `client.py` and `constants.py`, 2026-04; PRs #220, #299):
 * - a part whose [5] is a non-empty list without an error code at
 *   [5][2][0][1][0] says the turn is queued: not a failure, the answer
 *   follows in later frames;
 * - a candidate whose text is a `http://googleusercontent.com/card_content/N`
 *   placeholder has its content at [22][0];
 * - `http://googleusercontent.com/<kind>/<N>` placeholders (images, cards)
 *   are stripped from the text, with the line ends after them (`readableText`);
 * - a frame's length counts the UTF-16 units of "\n" + its JSON + "\n"
 *   (the reader matches brackets and does not rely on it).
 *
 * and from PLATFORMS.md "Found since (2026-12-07)" (a protocol reference
 * last verified 2026-09-21 against a live account; a Go client's test built
 * from a packet capture), in stream.js:
 * - the completion marker `[8][0] == 2` alone makes an answer final,
 *   whatever follows it;
 * - a BardErrorInfo part with code 1096 follows every turn, after the
 *   finished candidate and a title frame (`{"11": [title], "44": true}`): a
 *   code is a failure only when no finished answer came (1037, 1060, 1097,
 *   7, and unknown codes then); an unknown code after a finished answer is
 *   reported (`stream_unrecognised`, its code in the detail);
 * - the context token is at slot 25 or, sparsely, at key "26" of the
 *   trailing object, or absent (first turns): read when there, never
 *   waited for;
 * - a text can end with `<FollowUp label="…" query="…"/>` suggestions,
 *   stripped (`readableText`).
 *
 * Uncertain: which candidate the page shows when there are several (index 0
 * is read; sources disagree).
 */

import { anyMatches, conversationUrlFor, queryLast } from "../../lib/page-helpers.js";
import { DELIVERY_REQUESTS, readPageValues } from "./delivery.js";
import { conversationIdFromUrl, ORIGIN, SELECTORS } from "./page.js";
import { createStreamParser, readableText } from "./stream.js";

/** @type {import('../types.js').Adapter} */
export default {
  name: "gemini",
  version: "2026-12-07",
  origins: [ORIGIN],
  conversationIdFromUrl,
  conversationUrl: conversationUrlFor(conversationIdFromUrl, (id) => `${ORIGIN}/app/${encodeURIComponent(id.replace(/^c_/, ""))}`),
  completionRequest: {
    method: "POST",
    pattern: /^https:\/\/gemini\.google\.com\/(u\/\d+\/)?_\/BardChatUi\/data\/assistant\.lamda\.BardFrontendService\/StreamGenerate(\?|$)/,
  },
  deliveryRequests: DELIVERY_REQUESTS,
  createStreamParser,
  readableText,
  dom: {
    isGenerating: (document) => anyMatches(document, SELECTORS.generating),
    lastAssistantMessage: (document) => queryLast(document, SELECTORS.assistantContent),
    messageId(element) {
      const holder = element.closest?.('[id^="message-content-id-"]') ?? element;
      const id = holder.getAttribute?.("id") ?? "";
      return id.startsWith("message-content-id-") ? id.slice("message-content-id-".length) || null : null;
    },
    selectors: SELECTORS,
  },
  readPageValues,
};
