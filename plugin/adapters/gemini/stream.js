/** gemini.google.com's answer stream: its length-prefixed JSON frames read into the turn's answer. */

import { at, JsonFrameReader, parseJson, streamParser, StreamState, text } from "../../lib/stream-readers.js";
import { parentFromRequest, rememberChatMetadata } from "./chat-metadata.js";

const COMPLETE_STATUS = 2;
/** A candidate whose text is only this placeholder has its content at [22][0] (gemini_webapi `CARD_CONTENT_RE`). */
const CARD_CONTENT = /^http:\/\/googleusercontent\.com\/card_content\/\d+/;
/** Placeholders gemini_webapi strips from the text (`ARTIFACTS_RE`). */
const PLACEHOLDERS = /http:\/\/googleusercontent\.com\/\w+\/\d+\n*/g;

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
      this.notFinal(code >= 0 && code < 100000 ? `error_${code}` : "error_code");
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

/** @param {{requestUrl: string, requestBody?: string | null, pageUrl?: string}} request */
export function createStreamParser({ requestBody }) {
  const state = new GeminiStreamState(parentFromRequest(requestBody));
  const reader = new JsonFrameReader((frame) => {
    const envelope = parseJson(frame);
    if (!Array.isArray(envelope) || state.hasFailed) return;
    for (const part of envelope) {
      if (!Array.isArray(part)) continue;
      if (part[0] === "er") state.notFinal("error_event"); // an HTTP-level error written as a frame
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
