/** claude.ai's answer stream: its events read into the turn's answer, its organization and conversation. */

import { parseUrl } from "../../lib/page-helpers.js";
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

const COMPLETION_PATH = /^\/api\/organizations\/([^/]+)\/chat_conversations\/([^/]+)\/(?:retry_)?completion$/;

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
    // stream without it as failed); the reason says whether the answer is final.
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

/**
 * What each stop reason says of the answer: "" final, else the reason
 * (lib/finality.js) it is not. `end_turn` and `stop_sequence` end a finished
 * answer, and no other reason proves one (PLATFORMS.md 2026-12-07);
 * `max_tokens` is an answer the output limit cut (reverse clients map it to
 * "length"), `refusal` one to discard whole, even after a whole block
 * (Anthropic's documentation, 2026-09-02; claude.ai shows "Chat paused"),
 * `tool_use` a turn that goes on after a tool call (PLATFORMS.md, OmniRoute
 * 2026). A reason not here: the adapter cannot tell, and reports it.
 */
const STOP_REASONS = {
  end_turn: "",
  stop_sequence: "",
  max_tokens: "max_tokens",
  refusal: "refused",
  tool_use: "tool_use",
};

/**
 * Blocks that are not text but do not break it: a `fallback` block marks
 * where another model continues the partial output, possibly mid-word or
 * inside a fence, so the text before and after it is one (2026-09).
 */
const SEAMLESS_KINDS = new Set(["fallback"]);

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

  /**
   * The text blocks in index order; a paragraph break where a block of
   * another kind stood between two, unless it is a seamless one.
   */
  text() {
    const out = [];
    let isAfterOtherBlock = false;
    for (const index of [...this.blocks.keys()].sort((x, y) => x - y)) {
      const block = this.blocks.get(index);
      if (block.kind !== "text") {
        if (!SEAMLESS_KINDS.has(block.kind)) isAfterOtherBlock = out.length > 0;
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

  /** The stream ended: its capture when its stop reason says the answer is final, else null and why. */
  capture() {
    if (!this.stopReason) return null; // cut before its stop reason: it said nothing
    if (!Object.hasOwn(STOP_REASONS, this.stopReason)) {
      this.unknown({ reason: "stop_reason_unknown" }); // its value is the stream's: not in a report
      this.notFinal("stop_reason_unknown");
      return null;
    }
    const notFinal = STOP_REASONS[this.stopReason];
    if (notFinal) {
      this.notFinal(notFinal);
      return null;
    }
    if (!this.isComplete) return null;
    return {
      conversation_id: this.conversationId,
      message_id: this.messageId,
      parent_message_id: this.parentId,
      organization_id: this.organizationId,
      text: this.text(),
    };
  }
}

/** @param {{requestUrl: string, requestBody?: string | null, pageUrl?: string}} request */
export function createStreamParser({ requestUrl, requestBody }) {
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
      state.notFinal(errorReason(payload));
      return;
    }
    if (!isObject(payload) || typeof payload.type !== "string") return;
    const handler = Object.hasOwn(EVENT_HANDLERS, payload.type) ? EVENT_HANDLERS[payload.type] : null;
    if (handler) state.isRecognised = true;
    if (handler && !state.isComplete) handler(state, payload);
  });
  return streamParser(reader, state, () => state.capture());
}

/**
 * The error types claude.ai writes in its stream (the API's, as ClewdR and
 * OmniRoute read them), each a reason of lib/finality.js; any other is
 * `error_event`, so a report never carries a value the stream made up.
 */
export const ERROR_TYPES = new Set([
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
