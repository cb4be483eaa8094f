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
 *   (chrome-ai-bridge, 2025-26). Aria labels are localised and not used.
 *
 * Uncertain: that a message on another `channel` than "final" (or another
 * `recipient` than "all") is not the visible answer; the conversation's leaf
 * being `current_node` of `GET /backend-api/conversation/{id}`; whether a
 * `/resume` body replays echoes of earlier turns (taken as not: it continues
 * one turn); how an entity marker's shown name is chosen (its array's second
 * string); what the page shows for a citation (a link "pill" whose markup no
 * dated source gives: a page capture may keep its label).
 */

import {
  anyMatches,
  conversationUrlFor,
  once,
  pathMatch,
  queryLast,
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
import { jsonBodyField } from "../lib/delivery-rules.js";

const ORIGIN = "https://chatgpt.com";
/** The continuation of a handed-off answer (PLATFORMS.md "Found since", 2026). */
const RESUME_PATH = /^\/backend-(?:api|anon)\/f\/conversation\/resume\/?$/;
// "/c/<id>", also under a custom GPT: "/g/<gizmo>/c/<id>".
const CONVERSATION_PATH = /^(?:\/g\/[^/]+)?\/c\/([A-Za-z0-9-]{8,64})\/?$/;
/**
 * The one request a delivery makes (platforms/chatgpt.py builds it): the
 * send, whose JSON body names the conversation. The headers are the page's
 * own (its bearer token, the sentinel and conduit tokens, the `oai-*` ones).
 *
 * @type {import('../lib/delivery-rules.js').DeliveryRule[]}
 */
const DELIVERY_REQUESTS = [
  {
    method: "POST",
    path: /^\/backend-api\/f\/conversation$/,
    query: [],
    headers: [
      "content-type",
      "accept",
      "authorization",
      "openai-sentinel-chat-requirements-token",
      "openai-sentinel-chat-requirements-prepare-token",
      "openai-sentinel-proof-token",
      "openai-sentinel-turnstile-token",
      "x-conduit-token",
      "oai-device-id",
      "oai-language",
      "oai-client-version",
      "oai-client-build-number",
      "oai-session-id",
      "chatgpt-account-id",
    ],
    conversationOf: ({ body }) => jsonBodyField(body, "conversation_id"),
  },
];
/** Keys a JSON pointer may not walk through: assigning them would reach prototypes. */
const FORBIDDEN_KEYS = new Set(["__proto__", "constructor", "prototype"]);

/**
 * The page's elements, newest first (later entries are fallbacks). The
 * composer's keys are lib/composer.js's `ComposerSelectors`.
 */
const SELECTORS = {
  generating: ['button[data-testid="stop-button"]'],
  assistantTurn: ['[data-message-author-role="assistant"]'],
  // The ProseMirror editor (chrome-ai-bridge, 2025-26); a hidden <textarea
  // name="prompt-textarea"> sits beside it, so the contenteditable comes first.
  composer: ['#prompt-textarea[contenteditable="true"]', 'div[contenteditable="true"].ProseMirror', "textarea#prompt-textarea"],
  sendButton: ['button[data-testid="send-button"]', "button#composer-submit-button"],
  userTurn: ['[data-message-author-role="user"]'],
  // The user's text as typed, without the turn's controls (uncertain, 2025).
  userTurnText: [".whitespace-pre-wrap"],
  signedOut: ['[data-testid="login-button"]'],
};

/**
 * One tracked message: its envelope (`{message, conversation_id, …}`) as the
 * stream built it so far, and whether it was ever seen being written.
 */
class TrackedMessage {
  /** @param {boolean} isOfNewTurn whether it came after the user message this request sent */
  constructor(envelope, isOfNewTurn) {
    this.envelope = envelope;
    this.wasInProgress = false;
    this.isOfNewTurn = isOfNewTurn;
  }

  get message() {
    return at(this.envelope, "message");
  }
}

class ChatGptStreamState extends StreamState {
  constructor({ conversationId, userMessageId, isContinuation }) {
    super();
    this.conversationId = conversationId;
    /** The id of the user message this request sent ("" for a continuation, which sends none). */
    this.userMessageId = userMessageId;
    this.isContinuation = isContinuation;
    /**
     * Set once the stream is past the earlier turns it echoes: at the user
     * message this request sent, or from the start of a continuation.
     */
    this.isInNewTurn = isContinuation;
    /** @type {TrackedMessage | null} the message v1 ops apply to: the last one added */
    this.current = null;
    /** @type {Map<string, TrackedMessage>} cumulative events' messages, by id */
    this.byId = new Map();
    /** @type {TrackedMessage | null} the last answer of this turn seen finished */
    this.final = null;
    /** Why this turn's last answer stopped early (`finished_partial_completion`, a length limit); "" while none did. */
    this.partialReason = "";
    /** @type {TrackedMessage | null} the answer that stopped early, kept for `held` */
    this.partial = null;
    /** The last top-level path and operation, which a bare `{"v": …}` repeats. */
    this.lastPath = "";
    this.lastOp = "append";
    this.isDone = false;
    /** A `stream_handoff` was read: the answer goes on in another request. */
    this.isHandedOff = false;
  }

  /** A message as it first appears: whether it belongs to the new turn. */
  track(envelope) {
    const parent = text(at(envelope, "message", "metadata", "parent_id"));
    const tracked = new TrackedMessage(envelope, this.isInNewTurn || (parent !== "" && parent === this.userMessageId));
    if (this.userMessageId && text(at(envelope, "message", "id")) === this.userMessageId) this.isInNewTurn = true;
    return tracked;
  }

  /**
   * Notes where `tracked` stands after an event changed it: an answer is
   * final once finished, when it was seen being written or is one of this
   * turn's (a short reply comes as one finished `add`).
   */
  observe(tracked) {
    const message = tracked.message;
    if (!isAnswer(message)) return;
    if (message.status === "in_progress") tracked.wasInProgress = true;
    if (tracked.wasInProgress || tracked.isOfNewTurn) {
      const early = stoppedEarly(message);
      if (early) {
        // The page shows it with "Continue generating"; a continuation
        // streams the same message again, whole.
        this.partialReason = early;
        this.partial = tracked;
        if (this.final === tracked) this.final = null;
      } else if (message.status === "finished_successfully") {
        this.final = tracked;
        this.partialReason = "";
        this.partial = null;
      }
    }
    this.conversationId = text(at(tracked.envelope, "conversation_id")) || this.conversationId;
  }

  /**
   * A top-level v1 op `{p, o, v}`; a missing `p`/`o` repeats the last
   * top-level one. A `patch` applies its list of ops, each with its own `p`
   * and `o`, which do not change what is repeated. A bare `{"v": …}` holding
   * a message adds it at the root; a bare string where the repeated op takes
   * none (at the root, a patch) is answer text, as gpt4free reads every bare
   * string.
   */
  applyOp(op) {
    const isBare = typeof op.p !== "string" && typeof op.o !== "string";
    let path = typeof op.p === "string" ? op.p : this.lastPath;
    let kind = typeof op.o === "string" ? op.o : this.lastOp;
    if (isBare && isObject(op.v) && isObject(op.v.message)) [path, kind] = ["", "add"];
    this.lastPath = path;
    this.lastOp = kind;
    if (isBare && typeof op.v === "string" && (path === "" || kind === "patch")) [path, kind] = ["/message/content/parts/0", "append"];
    if (kind === "patch") {
      if (Array.isArray(op.v)) for (const inner of op.v) if (isObject(inner)) this.applyInnerOp(inner);
      return;
    }
    this.apply(path, kind, op.v);
  }

  applyInnerOp(op) {
    if (typeof op.p === "string" && typeof op.o === "string") this.apply(op.p, op.o, op.v);
  }

  apply(path, kind, value) {
    if (path === "" && kind === "add") {
      if (isObject(value) && isObject(value.message)) {
        this.current = this.track(value);
        this.observe(this.current);
      }
      return;
    }
    if (!this.current || !path.startsWith("/")) return;
    if (!applyPointerOp(this.current.envelope, path, kind, value)) this.hasFailed = true;
    this.observe(this.current);
  }

  /** A cumulative event: the whole message as it stands now. */
  applyWholeMessage(payload) {
    const id = text(payload.message.id);
    if (!id) return;
    const tracked = this.byId.get(id) ?? this.track(payload);
    tracked.envelope = payload;
    this.byId.set(id, tracked);
    if (messageText(payload.message).length > MAX_TEXT_CHARS) this.hasFailed = true;
    this.observe(tracked);
  }
}

/**
 * The typed events read (`{"type": …}`); others (`title_generation`,
 * `server_ste_metadata`, `message_marker`, `resume_conversation_token`, …)
 * only name the conversation.
 *
 * @type {Record<string, (state: ChatGptStreamState, payload: Record<string, any>) => void>}
 */
const TYPED_EVENTS = {
  // The answer goes on in `/f/conversation/resume` or over the page's
  // websocket; which one the page picks among the options is its choice.
  stream_handoff(state) {
    state.isHandedOff = true;
    state.isRecognised = true;
  },
  message_stream_complete(state) {
    state.isDone = true;
    state.isRecognised = true;
  },
  // The user message this request sent, confirmed: what follows is the new turn.
  input_message(state) {
    state.isInNewTurn = true;
  },
};

/**
 * Why a finished answer is not whole: `max_tokens` when its
 * `finish_details` say the length limit cut it (whatever its status),
 * `partial_completion` for any other `finished_partial_completion`; "" for
 * a whole one or one still being written.
 */
function stoppedEarly(message) {
  const status = text(message.status);
  if (!status.startsWith("finished_")) return "";
  if (at(message, "metadata", "finish_details", "type") === "max_tokens") return "max_tokens";
  return status === "finished_partial_completion" ? "partial_completion" : "";
}

/** The assistant's visible answer (not a tool call, a tool's output or hidden reasoning). */
function isAnswer(message) {
  if (!isObject(message) || at(message, "author", "role") !== "assistant") return false;
  if (at(message, "content", "content_type") !== "text") return false;
  const recipient = at(message, "recipient");
  const channel = at(message, "channel");
  return (recipient === undefined || recipient === "all") && (channel == null || channel === "final");
}

function messageText(message) {
  const parts = at(message, "content", "parts");
  return Array.isArray(parts) ? parts.filter((part) => typeof part === "string").join("") : "";
}

/**
 * Applies one JSON-patch-like op at a JSON pointer inside `root`.
 *
 * @returns {boolean} false when the result grew past the text bound
 */
function applyPointerOp(root, path, kind, value) {
  const keys = path.slice(1).split("/").map((key) => key.replaceAll("~1", "/").replaceAll("~0", "~"));
  const last = keys.pop();
  let parent = root;
  for (const key of keys) {
    parent = child(parent, key);
    if (parent === undefined) return true;
  }
  if (last === undefined || FORBIDDEN_KEYS.has(last) || typeof parent !== "object" || parent === null) return true;
  const index = Array.isArray(parent) ? arrayIndex(parent, last, kind === "add") : last;
  if (index === undefined) return true;
  const current = Array.isArray(parent) || Object.hasOwn(parent, index) ? parent[index] : undefined;
  switch (kind) {
    case "add":
    case "replace":
      parent[index] = value;
      return typeof value !== "string" || value.length <= MAX_TEXT_CHARS;
    case "append":
      if (typeof current === "string" && typeof value === "string") {
        if (current.length + value.length > MAX_TEXT_CHARS) return false;
        parent[index] = current + value;
      } else if (Array.isArray(current)) {
        current.push(...(Array.isArray(value) ? value : [value]));
      } else if (isObject(current) && isObject(value)) {
        for (const [key, item] of Object.entries(value)) if (!FORBIDDEN_KEYS.has(key)) current[key] = item;
      } else if (current === undefined) {
        parent[index] = value;
      }
      return true;
    case "truncate":
      if (typeof current === "string" && Number.isInteger(value) && value >= 0) parent[index] = current.slice(0, value);
      return true;
    case "remove":
      if (Array.isArray(parent)) parent.splice(index, 1);
      else delete parent[index];
      return true;
    default:
      return true; // an op this parser does not know yet changes nothing it reads
  }
}

function child(value, key) {
  if (FORBIDDEN_KEYS.has(key)) return undefined;
  if (Array.isArray(value)) {
    const index = arrayIndex(value, key, false);
    return index === undefined ? undefined : value[index];
  }
  return isObject(value) && Object.hasOwn(value, key) ? value[key] : undefined;
}

/** An array index from a pointer segment: an existing index, or the end ("-" or length) when adding. */
function arrayIndex(array, key, isAdding) {
  if (isAdding && (key === "-" || key === String(array.length))) return array.length;
  if (!/^(0|[1-9][0-9]*)$/.test(key)) return undefined;
  const index = Number(key);
  return index < array.length ? index : undefined;
}

/** @param {{requestUrl: string, requestBody?: string | null, pageUrl?: string}} request */
function createStreamParser({ requestUrl, requestBody, pageUrl }) {
  const body = parseRequestJson(requestBody);
  const isContinuation = pathMatch(requestUrl, ORIGIN, RESUME_PATH) !== null;
  const state = new ChatGptStreamState({
    conversationId: text(at(body, "conversation_id")) || (pageUrl ? (conversationIdFromUrl(pageUrl) ?? "") : ""),
    userMessageId: text(at(body, "messages", 0, "id")),
    isContinuation,
  });
  const reader = sseReader((_event, data) => {
    if (state.hasFailed) return;
    if (data === "[DONE]") {
      state.isDone = true;
      return;
    }
    const payload = parseJson(data);
    if (!isObject(payload)) return; // "v1" after `event: delta_encoding`, or garbage
    if (payload.error || at(payload, "v", "error")) {
      state.stoppedEarly("error_event");
    } else if (isObject(payload.message)) {
      state.isRecognised = true;
      state.applyWholeMessage(payload);
    } else if (Object.hasOwn(payload, "v") && typeof payload.type !== "string") {
      state.isRecognised = true;
      state.applyOp(payload);
    } else {
      if (typeof payload.type === "string" && Object.hasOwn(TYPED_EVENTS, payload.type)) TYPED_EVENTS[payload.type](state, payload);
      // Typed events (title_generation, stream_handoff, …) name the conversation too.
      if (typeof payload.conversation_id === "string" && !state.conversationId) state.conversationId = payload.conversation_id;
    }
  });
  return streamParser(
    reader,
    state,
    () => {
      const final = state.final;
      if (!state.isDone || !final || state.partialReason) return null;
      return {
        conversation_id: state.conversationId,
        message_id: text(final.message.id),
        parent_message_id: text(at(final.message, "metadata", "parent_id")) || state.userMessageId,
        organization_id: "",
        text: readableText(messageText(final.message)),
      };
    },
    {
      handoff: () => (state.isHandedOff && !state.final ? state.conversationId : null),
      continues: () => (isContinuation ? state.conversationId : null),
      incomplete: () => state.incompleteReason || state.partialReason,
      held: () => (state.partial && !state.incompleteReason
        ? { message_id: text(state.partial.message.id), text: readableText(messageText(state.partial.message)) }
        : null),
    },
  );
}

/** A citation or entity reference: U+E200, fields separated by U+E202, U+E201. */
const REFERENCE = /\uE200([^\uE200\uE201]*)\uE201/g;
/** The private-use markers gpt4free strips wherever they are left (U+E200 to U+E206). */
const MARKERS = /[\uE200-\uE206]/g;

/**
 * The answer's text as a person reads it: a citation (`cite`, `turn0search0`)
 * is removed, as gpt4free does when it has no source list to link; an
 * entity reference shows its name (the second string of its JSON array);
 * markers left over are dropped. Applied to both captures.
 *
 * @param {string} value
 */
export function readableText(value) {
  if (!/[\uE200-\uE206]/.test(value)) return value;
  return value
    .replace(REFERENCE, (_whole, inside) => {
      const [kind, data] = inside.split("\uE202");
      if (kind === "entity" || kind === "product_entity") {
        const names = parseJson(data ?? "");
        if (Array.isArray(names) && typeof names[1] === "string") return names[1];
      }
      return "";
    })
    .replace(MARKERS, "");
}

function conversationIdFromUrl(url) {
  return pathMatch(url, ORIGIN, CONVERSATION_PATH)?.[1] ?? null;
}

/** @type {import('./types.js').Adapter} */
export default {
  name: "chatgpt",
  version: "2026-12-03",
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
  // The sentinel (chat-requirements token, proof of work, Turnstile) and
  // conduit tokens are made by the page's own scripts right before it sends;
  // the plugin cannot produce them, so they are left out and the server's
  // optional headers that carry them are dropped. So are the client version,
  // build number, session id and workspace account id: no dated source says
  // where the page keeps them, and a wrong one is worse than none.
  async readPageValues(names, page) {
    const session = once(() => page.fetchJson(`${ORIGIN}/api/auth/session`));
    const accessToken = once(async () => text(at(await session(), "accessToken")));
    const conversation = () => Promise.resolve(conversationIdFromUrl(page.url) ?? "");
    return readValues(names, {
      access_token: accessToken,
      conversation_id: conversation,
      async parent_message_id() {
        const [token, conversationId] = [await accessToken(), await conversation()];
        if (!token || !conversationId) return "";
        const data = await page.fetchJson(`${ORIGIN}/backend-api/conversation/${encodeURIComponent(conversationId)}`, {
          headers: { Authorization: `Bearer ${token}` },
        });
        return at(data, "current_node");
      },
      device_id: () => page.cookie("oai-did"),
      language: () => page.readGlobal("navigator.language"),
      async timezone() {
        return timeZone();
      },
    });
  },
};
