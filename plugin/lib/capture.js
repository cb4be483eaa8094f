/**
 * Deciding when an assistant message is final, and how it was read
 * (SPEC §6 `capture`): from the chat app's own response stream first, from
 * the page as the fallback.
 *
 * The content script feeds a `CaptureTracker` two kinds of signals: the
 * watched streams (start, chunks, end with a status, abort with its reason)
 * and the page's own end-of-message signal (the adapter's `dom.isGenerating`
 * going from true to false). The tracker reports a capture:
 *
 * - `network`, when a stream ended normally with a 2xx status and the
 *   adapter's parser found a final message in it;
 * - `dom`, when the page finished writing an answer and, a grace period
 *   later, no stream of that answer gave it: none was seen (a page reloaded
 *   mid-answer, a changed endpoint, stream reading switched off), one ended
 *   without a final message (its shape not understood, cut short, handed
 *   off to the page's websocket), or its connection broke.
 *
 * Only the page itself stopping a stream (its stop button: the fetch is
 * aborted), an HTTP error status, or a stream that says its answer was
 * stopped, cut or withdrawn (the parser's `incomplete`, whose verdict is
 * lib/finality.js's, the one rule of what is final) suppresses the page
 * fallback: the answer was not finished, or there is none, and the page
 * shows a half answer or a banner. The last is noticed as
 * `stream_incomplete`, and a withdrawn answer is also told to `withdrawn`
 * (the side panel's note); when the person continues or regenerates, that
 * request's stream is a new one and is captured as usual. A stream whose
 * reason is `open` (its stop reason unknown, a turn that goes on) leaves
 * the answer to the page, as one that said nothing does.
 *
 * An answer can move from one request to another (ChatGPT's stream
 * handoff): the first leg's parser says so (`handoff`), and the request that
 * continues it (`continues`) belongs to the same answer, whenever it starts.
 *
 * What the tracker notices that suggests the site changed goes to `notice`
 * (SPEC §6 `browser.adapter_report` kinds, with details that hold no chat
 * content); the content script may count and report them.
 *
 * Pure: the clock, the timers and the DOM reading are passed in.
 */

import { holdsPageBack, VERDICTS, verdictOf } from "./finality.js";
import { StreamSignature, reportPath } from "./reports.js";

/** @typedef {import('../adapters/types.js').Capture} Capture */

/**
 * @typedef {{
 *   adapter: import('../adapters/types.js').Adapter,
 *   report(capture: Capture, method: "network" | "dom"): void,
 *   readDom(): {text: string, message_id: string} | null,
 *   conversationId(): string,
 *   notice?: (kind: string, detail: Record<string, string | number | string[]>) => void,
 *   withdrawn?: (note: {reason: string, conversation_id: string}) => void,
 *   graceMs?: number,
 *   setTimer?: (fn: () => void, ms: number) => any,
 *   clearTimer?: (handle: any) => void,
 * }} TrackerOptions
 *   `notice(kind, detail)`: the hook for `browser.adapter_report`
 *   (`stream_unrecognised`, `stream_incomplete`, `dom_fallback_used`);
 *   `withdrawn(note)`: an answer the app withdrew (`moderation_blocked`,
 *   `refused`), for the side panel; by default nothing is done with either.
 */

/** How the page stops its own request: the fetch's AbortError, or XMLHttpRequest's abort event. */
const STOPPED_BY_PAGE = new Set(["AbortError", "abort"]);

/** How long after the page's end signal a stream of the same answer may still end. */
export const DEFAULT_GRACE_MS = 1500;
/** Streams followed at once; a page that opens more is not a chat app at work. */
const MAX_STREAMS = 16;
/** Partial answers kept for their continuation, at most (each at most the stream readers' text bound). */
const MAX_HELD = 4;

class Answer {
  constructor() {
    this.streamsSeen = 0;
    this.isCaptured = false;
    /** The page stopped a stream of it, one answered an HTTP error, or one said it stopped early: not to be read from the page. */
    this.isStopped = false;
    /** The page's end signal came and its grace period passed. */
    this.isPageDone = false;
    /** Why the page would be read, for `notice` ("" while no stream of it ended without a capture). */
    this.fallbackReason = "";
    /** The page's last answer when this one's first request went out: a page still showing it has no new answer to read. */
    this.shownBefore = null;
  }
}

export class CaptureTracker {
  /** @param {TrackerOptions} options */
  constructor({
    adapter,
    report,
    readDom,
    conversationId,
    notice = () => {},
    withdrawn = () => {},
    graceMs = DEFAULT_GRACE_MS,
    // Wrapped: a browser's setTimeout throws when called as another object's method.
    setTimer = (fn, ms) => setTimeout(fn, ms),
    clearTimer = (handle) => clearTimeout(handle),
  }) {
    this.adapter = adapter;
    this.report = report;
    this.readDom = readDom;
    this.conversationId = conversationId;
    this.notice = notice;
    this.withdrawn = withdrawn;
    this.graceMs = graceMs;
    this.setTimer = setTimer;
    this.clearTimer = clearTimer;
    /** @type {Map<number, {parser: import('../adapters/types.js').StreamParser, answer: Answer, url: string}>} */
    this.streams = new Map();
    /** The answer the page is writing now, or the next one. */
    this.answer = new Answer();
    /** @type {Map<string, Answer>} answers handed off to a continuation not started yet, by conversation */
    this.handedOff = new Map();
    this.isGenerating = false;
    this.graceTimers = new Set();
    /** The last text reported, so the same turn read twice is sent once. */
    this.lastText = "";
    /** @type {Map<string, string>} partial answers held back, by message id, which a continuation completes */
    this.held = new Map();
  }

  /** A watched request went out. */
  streamStarted(id, { url, body, pageUrl }) {
    if (this.streams.size >= MAX_STREAMS) return;
    const parser = this.adapter.createStreamParser({ requestUrl: url, requestBody: body, pageUrl });
    // A continuation belongs to the answer its first leg handed off, even
    // when the page's signal went off and on between the two requests.
    const continued = parser.continues?.() ?? null;
    const key = continued === null ? null : continued || this.conversationId();
    const answer = (key !== null && this.handedOff.get(key)) || this.answer;
    if (key !== null) this.handedOff.delete(key);
    // The page writing again with no stream of its own is this continuation.
    if (this.isGenerating && answer !== this.answer && this.answer.streamsSeen === 0) this.answer = answer;
    this.streams.set(id, { parser, answer, url, signature: new StreamSignature() });
    answer.streamsSeen += 1;
    // What the page showed as the request went out, before this answer.
    if (answer.streamsSeen === 1) answer.shownBefore = this.readDom();
  }

  streamChunk(id, text) {
    const stream = this.streams.get(id);
    if (!stream) return;
    stream.parser.feed(text);
    stream.signature.feed(text);
  }

  /** The response body ended normally (`status` is the HTTP status, `contentType` its media type). */
  streamEnded(id, { status, contentType = "" }) {
    const stream = this.streams.get(id);
    if (!stream) return;
    this.streams.delete(id);
    const { answer, parser } = stream;
    if (!(status >= 200 && status < 300)) {
      answer.isStopped = true; // an error page, not an answer
      return;
    }
    const capture = parser.finish();
    this.noticeUnknowns(stream, contentType);
    if (capture && capture.text) {
      answer.isCaptured = true;
      capture.text = this.continued(capture);
      if (!capture.conversation_id) capture.conversation_id = this.conversationId();
      this.send(capture, "network");
      return;
    }
    const reason = parser.incomplete?.() ?? "";
    if (holdsPageBack(reason)) {
      this.holdBack(stream, reason);
      return;
    }
    const handoff = parser.handoff?.() ?? null;
    if (handoff !== null) {
      // The answer goes on in another request; if the page reads it from
      // elsewhere (a websocket), the page is read once it finished.
      this.handedOff.set(handoff || this.conversationId(), answer);
      answer.fallbackReason ||= "stream_handed_off";
    } else if (parser.isRecognised()) {
      // Cut short, or open for a reason of its own (a stop reason not
      // known, a turn that goes on): the page shows what became of the answer.
      answer.fallbackReason ||= reason || "stream_without_final_message";
    } else {
      answer.fallbackReason ||= "stream_unrecognised";
      this.notice("stream_unrecognised", {
        path: reportPath(stream.url),
        content_type: mediaType(contentType),
        signature: stream.signature.signature(),
      });
    }
    if (answer.isPageDone) this.settle(answer);
  }

  /**
   * A stream said its answer was stopped, cut or withdrawn: nothing of it
   * is sent, from the stream or from the page; a partial answer its app may
   * continue is held.
   */
  holdBack({ answer, parser, url }, reason) {
    answer.isStopped = true;
    this.notice("stream_incomplete", { reason, path: reportPath(url) });
    if (verdictOf(reason) === VERDICTS.WITHDRAWN) this.withdrawn({ reason, conversation_id: this.conversationId() });
    this.hold(parser.held?.() ?? null);
  }

  /** Reports what a stream held that its adapter does not know but read past, each once. */
  noticeUnknowns({ parser, url, signature }, contentType) {
    for (const unknown of parser.unknowns?.() ?? []) {
      this.notice("stream_unrecognised", {
        ...unknown,
        path: reportPath(url),
        content_type: mediaType(contentType),
        signature: signature.signature(),
      });
    }
  }

  /**
   * The body was cut: `reason` "AbortError" or "abort" when the page itself
   * stopped it (its stop button), else a lost connection or an error.
   */
  streamAborted(id, { reason = "" } = {}) {
    const stream = this.streams.get(id);
    if (!stream) return;
    this.streams.delete(id);
    if (STOPPED_BY_PAGE.has(reason)) {
      stream.answer.isStopped = true;
      return;
    }
    stream.answer.fallbackReason ||= "stream_broken";
    if (stream.answer.isPageDone) this.settle(stream.answer);
  }

  /**
   * The page's own signal: it started (true) or stopped (false) writing an
   * answer. Streams belong to the answer that was being written, or was
   * next, when they started; a stream may start a moment before the page
   * shows that it is writing.
   */
  generatingChanged(isGenerating) {
    if (isGenerating === this.isGenerating) return;
    this.isGenerating = isGenerating;
    if (isGenerating) return;
    const answer = this.answer;
    this.answer = new Answer();
    const timer = this.setTimer(() => {
      this.graceTimers.delete(timer);
      answer.isPageDone = true;
      this.settle(answer);
    }, this.graceMs);
    this.graceTimers.add(timer);
  }

  /** Stops the pending grace timers (the page is going away). */
  stop() {
    for (const timer of this.graceTimers) this.clearTimer(timer);
    this.graceTimers.clear();
  }

  /**
   * After the grace period, and after each of its streams that ends later:
   * read the page when no stream of this answer gave it and none is still
   * open.
   */
  settle(answer) {
    if (answer.isCaptured || answer.isStopped) return;
    for (const stream of this.streams.values()) if (stream.answer === answer) return; // still streaming
    const read = this.readDom();
    if (!read || !read.text.trim()) return;
    // A stream that failed may leave the page as it was (an error banner,
    // no new turn): the earlier answer still shown is not this one.
    const before = answer.shownBefore;
    if (before && before.text === read.text && before.message_id === read.message_id) return;
    const conversationId = this.conversationId();
    if (!conversationId) return;
    answer.isCaptured = true;
    for (const [key, waiting] of this.handedOff) if (waiting === answer) this.handedOff.delete(key);
    this.notice("dom_fallback_used", { reason: answer.fallbackReason || (answer.streamsSeen ? "stream_unread" : "no_stream") });
    const text = this.adapter.readableText ? this.adapter.readableText(read.text) : read.text;
    this.send({ conversation_id: conversationId, message_id: read.message_id || "", parent_message_id: "", organization_id: "", text }, "dom");
  }

  /** Keeps a partial answer its app may continue as the same message (a bounded few, the latest). */
  hold(partial) {
    if (!partial || !partial.message_id || !partial.text) return;
    this.held.delete(partial.message_id);
    this.held.set(partial.message_id, partial.text);
    if (this.held.size > MAX_HELD) this.held.delete(this.held.keys().next().value);
  }

  /**
   * The whole text of a capture that continues a held partial answer (the
   * same message id): as it is when its stream gave the whole message, the
   * partial text and then its own when the stream gave only what was added.
   */
  continued(capture) {
    const partial = capture.message_id ? this.held.get(capture.message_id) : undefined;
    if (partial === undefined) return capture.text;
    this.held.delete(capture.message_id);
    return capture.text.startsWith(partial) ? capture.text : partial + capture.text;
  }

  send(capture, method) {
    if (capture.text === this.lastText && method === "dom") return;
    this.lastText = capture.text;
    this.report(capture, method);
  }
}

/** A response's media type, without its parameters, in lower case. */
function mediaType(contentType) {
  return String(contentType).split(";")[0].trim().toLowerCase();
}
