/**
 * gemini.google.com: what its pages, requests and answer streams look like.
 *
 * Shapes from PLATFORMS.md "Gemini (gemini.google.com)", followed as of 2026-11-29:
 * - `StreamGenerate` and its `)]}'` + `<length>\n<json>` frames of
 *   `["wrb.fr", null, "<inner JSON>"]` parts: gemini_webapi v2.0.0
 *   (2026-04-06), gpt4free (2026-08-20);
 * - inner [1] `[cid, rid]`, [4] candidates `[rcid, [text], …, [8]: [status]]`
 *   with cumulative text, [25] the context token; the turn is final when the
 *   response closed and the last candidate has status 2 and a context token
 *   (gemini_webapi, 2026-03); error codes at part [5][2][0][1][0] (2026);
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
 * Uncertain: which candidate the page shows when there are several (index 0
 * is read; sources disagree).
 */

import {
  anyMatches,
  conversationUrlFor,
  pathMatch,
  queryLast,
  readValues,
} from "../lib/page-helpers.js";
import {
  at,
  JsonFrameReader,
  MAX_REQUEST_BODY_CHARS,
  parseJson,
  streamParser,
  StreamState,
  text,
} from "../lib/stream-readers.js";

const ORIGIN = "https://gemini.google.com";
const CONVERSATION_PATH = /^(?:\/u\/\d+)?\/app\/([0-9a-fA-F]{8,64})\/?$/;
/**
 * The one request a delivery makes (platforms/gemini.py builds it): the
 * send, under a second account's `/u/<n>` too; its conversation is the cid
 * of the chat metadata in its form body.
 *
 * @type {import('../lib/delivery-rules.js').DeliveryRule[]}
 */
const DELIVERY_REQUESTS = [
  {
    method: "POST",
    path: /^(?:\/u\/\d{1,3})?\/_\/BardChatUi\/data\/assistant\.lamda\.BardFrontendService\/StreamGenerate$/,
    query: ["bl", "f.sid", "hl", "_reqid", "rt"],
    headers: [
      "content-type",
      "x-same-domain",
      "x-goog-authuser",
      "x-goog-ext-525001261-jspb",
      "x-goog-ext-73010989-jspb",
      "x-goog-ext-525005358-jspb",
    ],
    conversationOf: ({ body }) => chatMetadataOf(body, 0) || null,
  },
];
const COMPLETE_STATUS = 2;
/** A candidate whose text is only this placeholder has its content at [22][0] (gemini_webapi `CARD_CONTENT_RE`). */
const CARD_CONTENT = /^http:\/\/googleusercontent\.com\/card_content\/\d+/;
/** Placeholders gemini_webapi strips from the text (`ARTIFACTS_RE`). */
const PLACEHOLDERS = /http:\/\/googleusercontent\.com\/\w+\/\d+\n*/g;
/** Conversations whose last chat metadata this page remembers. */
const REMEMBERED_CHATS = 32;

/**
 * The page's elements, newest first (later entries are fallbacks). The
 * composer's keys are lib/composer.js's `ComposerSelectors`.
 */
const SELECTORS = {
  generating: ['mat-icon[data-mat-icon-name="stop"]', 'mat-icon[fonticon="stop"]'],
  assistantContent: ["model-response message-content .markdown", "model-response message-content", "model-response"],
  // A Quill editor inside the `rich-textarea` element (uncertain, 2025-26).
  composer: ['rich-textarea .ql-editor[contenteditable="true"]', 'rich-textarea [contenteditable="true"]'],
  // The send button is found by its icon's name, not its localised label;
  // when none shows, Enter sends, as it does in Gemini's composer.
  sendButton: ['button:has(mat-icon[data-mat-icon-name="send"])', 'button:has(mat-icon[fonticon="send"])'],
  userTurn: ["user-query"],
  userTurnText: [".query-text"],
  signedOut: ['a[href*="accounts.google.com/ServiceLogin"]'],
};

/**
 * The chat metadata of each conversation's last finished stream on this page,
 * by cid: `{{page:chat_metadata.*}}` for the next delivery. Lives as long as
 * the page's content script (one module instance per tab), which is exactly
 * as long as the page itself would remember them.
 *
 * @type {Map<string, {cid: string, rid: string, rcid: string, context_token: string}>}
 */
const chatMetadata = new Map();

function rememberChatMetadata(metadata) {
  chatMetadata.delete(metadata.cid);
  chatMetadata.set(metadata.cid, metadata);
  if (chatMetadata.size > REMEMBERED_CHATS) chatMetadata.delete(chatMetadata.keys().next().value);
}

class GeminiStreamState extends StreamState {
  constructor(parentId) {
    super();
    this.parentId = parentId;
    this.cid = "";
    this.rid = "";
    this.rcid = "";
    this.text = "";
    this.contextToken = "";
    this.isLastCandidateComplete = false;
    /** A queued status was read (for a report; the turn is not failed by it). */
    this.wasQueued = false;
  }

  /** One `["wrb.fr", …]` part. */
  readPart(part) {
    const code = at(part, 5, 2, 0, 1, 0);
    if (Number.isInteger(code)) {
      // An error code (1037 usage limit, 1060 IP blocked, …): the page shows
      // a banner, or the text so far, and neither is the answer.
      this.stoppedEarly(code >= 0 && code < 100000 ? `error_${code}` : "error_code");
      return;
    }
    // A status list without an error code: the turn is queued, and its
    // answer comes in later frames (gemini_webapi reads it so since PR #220).
    if (Array.isArray(part[5]) && part[5].length) this.wasQueued = true;
    if (typeof part[2] !== "string") return;
    const inner = parseJson(part[2]);
    if (!Array.isArray(inner)) return;
    this.cid = text(at(inner, 1, 0)) || this.cid;
    this.rid = text(at(inner, 1, 1)) || this.rid;
    this.contextToken = text(at(inner, 25)) || this.contextToken;
    const candidate = at(inner, 4, 0); // the draft the page shows first
    if (!Array.isArray(candidate)) return;
    this.rcid = text(candidate[0]) || this.rcid;
    let candidateText = at(candidate, 1, 0);
    if (typeof candidateText === "string" && CARD_CONTENT.test(candidateText)) {
      candidateText = text(at(candidate, 22, 0)) || candidateText;
    }
    if (typeof candidateText === "string") this.text = candidateText; // cumulative: each frame has all of it
    this.isLastCandidateComplete = at(candidate, 8, 0) === COMPLETE_STATUS;
  }
}

/**
 * One slot of the chat metadata a StreamGenerate form body carries (f.req's
 * inner [2]): 0 the conversation (cid), 1 the rid it was sent under (the
 * parent). Anything unexpected gives "".
 */
function chatMetadataOf(requestBody, slot) {
  if (typeof requestBody !== "string" || requestBody.length > MAX_REQUEST_BODY_CHARS) return "";
  try {
    const outer = parseJson(new URLSearchParams(requestBody).get("f.req") ?? "");
    return text(at(parseJson(at(outer, 1)), 2, slot));
  } catch {
    return "";
  }
}

function parentFromRequest(requestBody) {
  return chatMetadataOf(requestBody, 1);
}

/** @param {{requestUrl: string, requestBody?: string | null, pageUrl?: string}} request */
function createStreamParser({ requestBody }) {
  const state = new GeminiStreamState(parentFromRequest(requestBody));
  const reader = new JsonFrameReader((frame) => {
    const envelope = parseJson(frame);
    if (!Array.isArray(envelope) || state.hasFailed) return;
    for (const part of envelope) {
      if (!Array.isArray(part)) continue;
      if (part[0] === "er") state.stoppedEarly("error_event"); // an HTTP-level error written as a frame
      else if (part[0] === "wrb.fr") state.readPart(part);
      if (part[0] === "er" || part[0] === "wrb.fr") state.isRecognised = true;
    }
  });
  return streamParser(reader, state, () => {
    if (!(state.cid && state.text && state.isLastCandidateComplete && state.contextToken)) return null;
    rememberChatMetadata({ cid: state.cid, rid: state.rid, rcid: state.rcid, context_token: state.contextToken });
    return {
      conversation_id: state.cid,
      message_id: state.rid,
      parent_message_id: state.parentId,
      organization_id: "",
      text: readableText(state.text),
    };
  });
}

/**
 * The text as a person reads it: gemini_webapi's placeholders
 * (`http://googleusercontent.com/image_generation_content/0`, …) removed.
 * Applied to both captures.
 *
 * @param {string} value
 */
export function readableText(value) {
  return value.includes("googleusercontent.com/") ? value.replace(PLACEHOLDERS, "") : value;
}

function conversationIdFromUrl(url) {
  const hex = pathMatch(url, ORIGIN, CONVERSATION_PATH)?.[1];
  return hex ? `c_${hex.toLowerCase()}` : null;
}

/** @param {string} name a `WIZ_global_data` key */
function wizGlobal(page, name) {
  return () => page.readGlobal(`WIZ_global_data.${name}`);
}

/** @type {import('./types.js').Adapter} */
export default {
  name: "gemini",
  version: "2026-12-03",
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
  // model_header is left out: model ids depend on the account's tier, and
  // without the header Gemini uses the account's default model.
  async readPageValues(names, page) {
    const metadata = () => chatMetadata.get(conversationIdFromUrl(page.url) ?? "");
    return readValues(names, {
      at_token: wizGlobal(page, "SNlM0e"),
      build_label: wizGlobal(page, "cfb2h"),
      session_id: wizGlobal(page, "FdrFJe"),
      language: wizGlobal(page, "TuX5cc"),
      "chat_metadata.cid": async () => metadata()?.cid,
      "chat_metadata.rid": async () => metadata()?.rid,
      "chat_metadata.rcid": async () => metadata()?.rcid,
      "chat_metadata.context_token": async () => metadata()?.context_token,
    });
  },
};
