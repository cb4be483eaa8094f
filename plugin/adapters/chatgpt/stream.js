/** chatgpt.com's answer stream: whole-message events and v1 ops, read into the turn's final answer. */

import { pathMatch } from "../../lib/page-helpers.js";
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
} from "../../lib/stream-readers.js";
import { isAnswer, messageText, readableText, stoppedEarly } from "./messages.js";
import { conversationIdFromUrl, ORIGIN, RESUME_PATH } from "./page.js";
import { applyPointerOp } from "./pointer.js";

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
   * top-level one. A `patch` applies its list of ops (`applyPatch`), which
   * do not change what is repeated. A bare `{"v": …}` holding a message adds
   * it at the root; a bare string where the repeated op takes none (at the
   * root, a patch) is answer text, as gpt4free reads every bare string; a
   * bare list of operations is a patch whatever is repeated (an append of
   * operations means nothing): at the repeated path when the repeated op is
   * a patch, else at the root (2026-07 audit, 2026-09 bundle).
   */
  applyOp(op) {
    const isBare = typeof op.p !== "string" && typeof op.o !== "string";
    let path = typeof op.p === "string" ? op.p : this.lastPath;
    let kind = typeof op.o === "string" ? op.o : this.lastOp;
    if (isBare && isObject(op.v) && isObject(op.v.message)) [path, kind] = ["", "add"];
    this.lastPath = path;
    this.lastOp = kind;
    if (isBare && typeof op.v === "string" && (path === "" || kind === "patch")) [path, kind] = ["/message/content/parts/0", "append"];
    if (isBare && kind !== "patch" && isOperations(op.v)) [path, kind] = ["", "patch"];
    if (kind === "patch") this.applyPatch(path, op.v, 0);
    else this.apply(path, kind, op.v);
  }

  /**
   * A patch's ops, each with its own `p` and `o`, relative to the patch's
   * own path: `{"o": "patch", "p": "/message", "v": [{"p": "/status", …}]}`
   * changes `/message/status`; with no path the patch is at the root (the
   * web app's decoder, 2026-09). A patch inside a patch nests the same way.
   */
  applyPatch(base, ops, depth) {
    if (!Array.isArray(ops) || depth > MAX_PATCH_DEPTH) return;
    for (const op of ops) {
      if (!isObject(op) || typeof op.p !== "string" || typeof op.o !== "string") continue;
      if (op.o === "patch") this.applyPatch(base + op.p, op.v, depth + 1);
      else this.apply(base + op.p, op.o, op.v);
    }
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

/** Patches nested deeper than this inside one another are not read (none is expected at all). */
const MAX_PATCH_DEPTH = 4;

/** A non-empty list whose every item is an operation `{p, o, …}`. */
function isOperations(value) {
  return Array.isArray(value) && value.length > 0 && value.every((item) => isObject(item) && typeof item.p === "string" && typeof item.o === "string");
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
  // After the whole answer, before [DONE]: with `blocked`, the page takes
  // the answer away, so it is not final (2026-12-07).
  moderation(state, payload) {
    state.isRecognised = true;
    if (at(payload, "moderation_response", "blocked") === true) state.notFinal("moderation_blocked");
  },
};


/** @param {{requestUrl: string, requestBody?: string | null, pageUrl?: string}} request */
export function createStreamParser({ requestUrl, requestBody, pageUrl }) {
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
      state.notFinal("error_event");
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
