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
 *   citation and tool-update deltas: none of them is answer text.
 *
 * The answer is its text blocks as the page shows them: a text block right
 * after another flows on in the same paragraph (claude.ai splits cited text
 * into blocks), one after a block of another kind (a tool call, thinking)
 * starts a new paragraph (uncertain: no dated source says how the page
 * joins them).
 */

import {
  anyMatches,
  conversationUrlFor,
  once,
  parseUrl,
  pathMatch,
  queryLast,
  quietly,
  readValues,
  timeZone,
} from "../lib/page-helpers.js";
import {
  at,
  isObject,
  MAX_TEXT_CHARS,
  parseJson,
  parseRequestJson,
  sseReader,
  streamParser,
  StreamState,
  text,
} from "../lib/stream-readers.js";
import { decodedSegment } from "../lib/delivery-rules.js";

const ORIGIN = "https://claude.ai";
const CONVERSATION_PATH = /^\/chat\/([0-9a-fA-F-]{36})\/?$/;
const COMPLETION_PATH = /^\/api\/organizations\/([^/]+)\/chat_conversations\/([^/]+)\/(?:retry_)?completion$/;
/**
 * The one request a delivery makes (platforms/claude.py builds it): the
 * next turn of the conversation its path names. The organization is any one
 * segment (the page fills `{{page:org_uuid}}` in when the server does not know it).
 *
 * @type {import('../lib/delivery-rules.js').DeliveryRule[]}
 */
const DELIVERY_REQUESTS = [
  {
    method: "POST",
    path: /^\/api\/organizations\/[^/]+\/chat_conversations\/([^/]+)\/completion$/,
    query: [],
    headers: ["content-type", "accept", "anthropic-client-platform", "anthropic-device-id"],
    conversationOf: ({ path }) => decodedSegment(path[1]),
  },
];

/** Selectors, newest first; each later one is a fallback for another version of the page. */
const SELECTORS = {
  // While an answer is written its container says so (2025-26, uncertain);
  // the stop button's aria-label is English-only and comes last.
  generating: ['[data-is-streaming="true"]', 'button[aria-label="Stop response"]'],
  assistantContent: [
    '[data-is-streaming] .font-claude-response',
    '[data-is-streaming] .font-claude-message',
    ".font-claude-response",
    ".font-claude-message",
  ],
  // The composer is a ProseMirror editor; `data-testid="chat-input"` and the
  // submit button in its fieldset are uncertain (2025-26, no dated source in
  // PLATFORMS.md), the English aria-label is the last fallback.
  composer: ['[data-testid="chat-input"][contenteditable="true"]', 'fieldset div[contenteditable="true"].ProseMirror', 'div[contenteditable="true"].ProseMirror'],
  sendButton: ['fieldset button[type="submit"]', 'button[aria-label="Send message"]'],
  userTurn: ['[data-testid="user-message"]', ".font-user-message"],
  userTurnText: [],
  // claude.ai sends a signed-out browser to /login, which asks for an email (uncertain).
  signedOut: ['form input[type="email"]'],
};

/**
 * One handler per event `type` of the stream; unknown types (`ping`,
 * `message_limit`, `conversation_ready`, `compaction_status`, …, and the
 * ones claude.ai adds next) have none and are skipped.
 *
 * @type {Record<string, (state: ClaudeStreamState, payload: Record<string, any>) => void>}
 */
const EVENT_HANDLERS = {
  message_start(state, payload) {
    state.messageId = text(at(payload, "message", "uuid")) || state.messageId;
    state.parentId = text(at(payload, "message", "parent_uuid")) || state.parentId;
  },
  content_block_start(state, payload) {
    if (Number.isInteger(payload.index)) state.startBlock(payload.index, text(at(payload, "content_block", "type")));
  },
  content_block_delta(state, payload) {
    // Only text: thinking_delta, input_json_delta (tool input) and
    // citation deltas are not part of the answer's Markdown.
    // A delta without an index goes to the block started last.
    const index = Number.isInteger(payload.index) ? payload.index : state.lastIndex;
    if (at(payload, "delta", "type") === "text_delta") state.append(index, at(payload, "delta", "text"));
  },
  content_block_retract(state, payload) {
    const from = Number.isInteger(payload.from_index) ? payload.from_index : payload.index;
    if (Number.isInteger(from)) state.retract(from);
  },
  message_delta(state, payload) {
    state.stopReason = text(at(payload, "delta", "stop_reason")) || state.stopReason;
  },
  message_stop(state) {
    // The end signal counts only after a stop reason (OmniRoute treats a
    // stream without it as failed).
    if (state.stopReason) state.isComplete = true;
  },
  // Legacy/raw rendering (ClewdR, 2026): each event carries the next piece
  // of text, and the last one a stop reason; there is no message_stop.
  completion(state, payload) {
    state.append(0, payload.completion);
    const stopReason = text(payload.stop_reason);
    if (stopReason) {
      state.stopReason = stopReason;
      state.isComplete = true;
    }
  },
};

/** One content block of the answer: its kind and, for text, the pieces so far. */
class Block {
  constructor(kind) {
    this.kind = kind;
    /** @type {string[]} */
    this.pieces = [];
    this.length = 0;
  }
}

class ClaudeStreamState extends StreamState {
  constructor({ organizationId, conversationId, parentId }) {
    super();
    this.organizationId = organizationId;
    this.conversationId = conversationId;
    this.parentId = parentId;
    this.messageId = "";
    /** @type {Map<number, Block>} the blocks by index, in the order they started */
    this.blocks = new Map();
    this.lastIndex = 0;
    this.length = 0;
    this.stopReason = "";
    this.isComplete = false;
  }

  startBlock(index, kind) {
    this.retract(index); // a block started again at an index replaces it
    this.blocks.set(index, new Block(kind || "text"));
    this.lastIndex = index;
  }

  append(index, piece) {
    if (typeof piece !== "string") return;
    if (!this.blocks.has(index)) this.blocks.set(index, new Block("text"));
    const block = this.blocks.get(index);
    if (block.kind !== "text") return;
    this.length += piece.length;
    if (this.length > MAX_TEXT_CHARS) this.hasFailed = true;
    else {
      block.pieces.push(piece);
      block.length += piece.length;
    }
  }

  /** Withdraws the blocks from `from` on: their text is not the answer's. */
  retract(from) {
    for (const [index, block] of this.blocks) {
      if (index < from) continue;
      this.length -= block.length;
      this.blocks.delete(index);
    }
  }

  /** The text blocks in index order; a paragraph break where a block of another kind stood between two. */
  text() {
    const out = [];
    let isAfterOtherBlock = false;
    for (const index of [...this.blocks.keys()].sort((x, y) => x - y)) {
      const block = this.blocks.get(index);
      if (block.kind !== "text") {
        isAfterOtherBlock = out.length > 0;
        continue;
      }
      const blockText = block.pieces.join("");
      if (!blockText) continue;
      if (isAfterOtherBlock) out.push("\n\n");
      out.push(blockText);
      isAfterOtherBlock = false;
    }
    return out.join("");
  }
}

/** @param {{requestUrl: string, requestBody?: string | null, pageUrl?: string}} request */
function createStreamParser({ requestUrl, requestBody }) {
  const path = parseUrl(requestUrl)?.pathname.match(COMPLETION_PATH);
  const body = parseRequestJson(requestBody);
  // The ids the page chose itself (turn_message_uuids, 2026), used when
  // message_start does not name them.
  const state = new ClaudeStreamState({
    organizationId: path ? decodeSegment(path[1]) : "",
    conversationId: path ? decodeSegment(path[2]) : "",
    parentId: text(at(body, "turn_message_uuids", "human_message_uuid")) || text(at(body, "parent_message_uuid")),
  });
  state.messageId = text(at(body, "turn_message_uuids", "assistant_message_uuid"));
  const reader = sseReader((event, data) => {
    const payload = parseJson(data);
    if (event === "error" || (isObject(payload) && (payload.type === "error" || payload.error))) {
      state.stoppedEarly(errorReason(payload));
      return;
    }
    if (!isObject(payload) || typeof payload.type !== "string") return;
    const handler = Object.hasOwn(EVENT_HANDLERS, payload.type) ? EVENT_HANDLERS[payload.type] : null;
    if (handler) state.isRecognised = true;
    if (handler && !state.isComplete) handler(state, payload);
  });
  return streamParser(reader, state, () => {
    if (!state.isComplete) return null;
    return {
      conversation_id: state.conversationId,
      message_id: state.messageId,
      parent_message_id: state.parentId,
      organization_id: state.organizationId,
      text: state.text(),
    };
  });
}

/**
 * The error types claude.ai writes in its stream (the API's, as ClewdR and
 * OmniRoute read them); any other is `error_event`, so a report never
 * carries a value the stream made up.
 */
const ERROR_TYPES = new Set([
  "overloaded_error",
  "rate_limit_error",
  "api_error",
  "invalid_request_error",
  "permission_error",
  "authentication_error",
  "not_found_error",
  "request_too_large",
]);

/** Why an error event stopped the answer: its known type, else `error_event`. */
function errorReason(payload) {
  const type = at(payload, "error", "type");
  return typeof type === "string" && ERROR_TYPES.has(type) ? type : "error_event";
}

function decodeSegment(segment) {
  try {
    return decodeURIComponent(segment);
  } catch {
    return "";
  }
}

function conversationIdFromUrl(url) {
  return pathMatch(url, ORIGIN, CONVERSATION_PATH)?.[1].toLowerCase() ?? null;
}

/**
 * The organization whose chats this page shows: the `lastActiveOrg` cookie,
 * else the first membership that can chat from `/api/organizations` (ClewdR
 * picks the one whose capabilities include "chat").
 *
 * @param {import('./types.js').Page} page
 */
async function organizationId(page) {
  const cookie = text(await page.cookie("lastActiveOrg"));
  if (cookie) return cookie;
  const organizations = await page.fetchJson(`${ORIGIN}/api/organizations`);
  if (!Array.isArray(organizations)) return "";
  const chatting = organizations.find((org) => Array.isArray(org?.capabilities) && org.capabilities.includes("chat"));
  return text((chatting ?? organizations[0])?.uuid);
}

/** @type {import('./types.js').Adapter} */
export default {
  name: "claude",
  version: "2026-12-03",
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
  async readPageValues(names, page) {
    const org = once(() => organizationId(page));
    const conversation = () => Promise.resolve(conversationIdFromUrl(page.url) ?? "");
    return readValues(names, {
      org_uuid: org,
      conversation_uuid: conversation,
      // The branch's newest message (uncertain: PLATFORMS.md, one source).
      async parent_message_uuid() {
        const [orgId, conversationId] = [await org(), await conversation()];
        if (!orgId || !conversationId) return "";
        const url = `${ORIGIN}/api/organizations/${encodeURIComponent(orgId)}/chat_conversations/${encodeURIComponent(conversationId)}?tree=True&rendering_mode=messages`;
        return at(await page.fetchJson(url), "current_leaf_message_uuid");
      },
      async timezone() {
        return timeZone();
      },
      async locale() {
        return (await quietly(() => page.readGlobal("navigator.language"))) || page.readGlobal("document.documentElement.lang");
      },
      device_id: () => page.cookie("anthropic-device-id"),
    });
  },
};
