/**
 * gemini.google.com's answer stream: its length-prefixed JSON frames read
 * into the turn's answer. Which shape each branch follows, and its date,
 * is said where the branch is; what becomes of an answer that is not final
 * is lib/finality.js's.
 */

import { at, isObject, JsonFrameReader, parseJson, streamParser, StreamState, text } from "../../lib/stream-readers.js";
import { parentFromRequest, rememberChatMetadata } from "./chat-metadata.js";

/** A candidate's status at [8][0]: 2 on the last candidate frame of a finished turn, 1 on every earlier one. */
const COMPLETE_STATUS = 2;
/** The context token's slot in the inner array (field 26 in JSPB's sparse form). */
const CONTEXT_TOKEN_SLOT = 25;
/**
 * The error codes PLATFORMS.md names: 1096, appended to every turn in 2026,
 * finished or not; 1037 usage limit, 1060 IP blocked, 1097 no answer on a
 * continued chat, 7 rejected (2026-09); 1013 transient, 1050 and 1052 the
 * model (gemini_webapi, 2026-04). Any of them, or another, without a
 * finished answer is a failure; another after a finished answer is reported.
 */
const KNOWN_CODES = new Set([7, 1013, 1037, 1050, 1052, 1060, 1096, 1097]);
/** Codes kept per stream, the first ones (a report names each unknown one). */
const MAX_CODES = 8;
/** A code is named in a reason (`error_<code>`) up to this; a larger one is `error_code`. */
const MAX_NAMED_CODE = 999_999;
/** A candidate whose text is only this placeholder has its content at [22][0] (gemini_webapi `CARD_CONTENT_RE`). */
const CARD_CONTENT = /^http:\/\/googleusercontent\.com\/card_content\/\d+/;
/** Placeholders gemini_webapi strips from the text (`ARTIFACTS_RE`). */
const PLACEHOLDERS = /http:\/\/googleusercontent\.com\/\w+\/\d+\n*/g;
/** One follow-up suggestion element, `<FollowUp label="…" query="…"/>`, whole. */
const FOLLOW_UP = /^<FollowUp(?:\s+[A-Za-z_][\w.:-]*=(?:"[^"]*"|'[^']*'))*\s*\/>$/;

class GeminiStreamState extends StreamState {
  constructor(parentId) {
    super();
    this.parentId = parentId;
    this.cid = "";
    this.rid = "";
    this.rcid = "";
    this.text = "";
    this.contextToken = "";
    /** A candidate carried the completion marker: the answer is final, whatever follows. */
    this.hasFinishedAnswer = false;
    /** @type {number[]} the error codes read, in order (bounded) */
    this.codes = [];
    /** Why the stream failed if it ends without a finished answer: its first code or `er` part ("" for none). */
    this.failure = "";
    /** A queued status was read (for a report; the turn is not failed by it). */
    this.wasQueued = false;
  }

  /** One `["wrb.fr", …]` part. */
  readPart(part) {
    const code = at(part, 5, 2, 0, 1, 0);
    if (Number.isInteger(code)) {
      // A BardErrorInfo part. Up to 2026-04 (gemini_webapi) any code ended
      // the turn; since 2026-09 1096 follows every turn, after its finished
      // candidate and a title frame, so a code fails the turn only when no
      // finished answer came, which only the end of the stream tells.
      if (this.codes.length < MAX_CODES) this.codes.push(code);
      this.failure ||= code >= 0 && code <= MAX_NAMED_CODE ? `error_${code}` : "error_code";
      return;
    }
    // A status list without an error code: the turn is queued, and its
    // answer comes in later frames (gemini_webapi reads it so since PR #220, 2026-02).
    if (Array.isArray(part[5]) && part[5].length) this.wasQueued = true;
    if (typeof part[2] !== "string") return;
    const inner = parseJson(part[2]);
    if (!Array.isArray(inner)) return;
    this.cid = text(at(inner, 1, 0)) || this.cid;
    this.rid = text(at(inner, 1, 1)) || this.rid;
    this.contextToken = contextTokenOf(inner) || this.contextToken;
    this.readCandidate(at(inner, 4, 0)); // the draft the page shows first
  }

  /**
   * A candidate `[rcid, [text], …, [8]: [status]]`, its text cumulative.
   * The marker alone makes the answer final (a live-verified reference,
   * 2026-09-21): PLATFORMS.md's "marker together with a context token"
   * (gemini_webapi, 2026-03) is not followed, as a finished first turn has
   * no token. Once marked, only a marked candidate changes the answer.
   */
  readCandidate(candidate) {
    if (!Array.isArray(candidate)) return;
    const isMarked = at(candidate, 8, 0) === COMPLETE_STATUS;
    if (this.hasFinishedAnswer && !isMarked) return;
    this.rcid = text(candidate[0]) || this.rcid;
    let candidateText = at(candidate, 1, 0);
    if (typeof candidateText === "string" && CARD_CONTENT.test(candidateText)) {
      candidateText = text(at(candidate, 22, 0)) || candidateText;
    }
    if (typeof candidateText === "string") this.text = candidateText;
    if (isMarked) this.hasFinishedAnswer = true;
  }

  /** The stream ended: its capture when it holds a finished answer, else null and why (a failure, or nothing said). */
  capture() {
    if (!(this.hasFinishedAnswer && this.cid && this.text)) {
      if (this.failure) this.notFinal(this.failure);
      return null;
    }
    for (const code of new Set(this.codes)) if (!KNOWN_CODES.has(code)) this.unknown({ reason: "error_code_unknown", code });
    rememberChatMetadata({ cid: this.cid, rid: this.rid, rcid: this.rcid, context_token: this.contextToken });
    return {
      conversation_id: this.cid,
      message_id: this.rid,
      parent_message_id: this.parentId,
      organization_id: "",
      text: readableText(this.text),
    };
  }
}

/**
 * The context token of an inner array, "" when it has none: slot 25
 * (gemini_webapi, 2026-03), or field 26 of the sparse object JSPB puts
 * after the last slot it writes (2026-09: it arrives so, or not at all, on
 * first turns). Never a sign that the answer is final.
 */
function contextTokenOf(inner) {
  const sparse = inner[inner.length - 1];
  return text(inner[CONTEXT_TOKEN_SLOT]) || (isObject(sparse) ? text(at(sparse, String(CONTEXT_TOKEN_SLOT + 1))) : "");
}

/** @param {{requestUrl: string, requestBody?: string | null, pageUrl?: string}} request */
export function createStreamParser({ requestBody }) {
  const state = new GeminiStreamState(parentFromRequest(requestBody));
  const reader = new JsonFrameReader((frame) => {
    const envelope = parseJson(frame);
    if (!Array.isArray(envelope) || state.hasFailed) return;
    for (const part of envelope) {
      if (!Array.isArray(part)) continue;
      // An HTTP-level error written as a frame: a failure too, when no finished answer came.
      if (part[0] === "er") state.failure ||= "error_event";
      else if (part[0] === "wrb.fr") state.readPart(part);
      if (part[0] === "er" || part[0] === "wrb.fr") state.isRecognised = true;
    }
  });
  return streamParser(reader, state, () => state.capture());
}

/**
 * The text as a person reads it: gemini_webapi's placeholders
 * (`http://googleusercontent.com/image_generation_content/0`, …) removed
 * (2026-04), and the follow-up suggestions a text can end with
 * (`<FollowUp label="…" query="…"/>`, 2026-09), which are not answer text.
 * Applied to both captures.
 *
 * @param {string} value
 */
export function readableText(value) {
  const shown = value.includes("googleusercontent.com/") ? value.replace(PLACEHOLDERS, "") : value;
  return shown.includes("<FollowUp") ? withoutFollowUps(shown) : shown;
}

/** The text without the follow-up elements at its end (and the blank space before them). */
function withoutFollowUps(value) {
  let rest = value.trimEnd();
  for (;;) {
    const start = rest.lastIndexOf("<FollowUp");
    if (start < 0 || !FOLLOW_UP.test(rest.slice(start))) break;
    rest = rest.slice(0, start).trimEnd();
  }
  return rest.length === value.trimEnd().length ? value : rest;
}
