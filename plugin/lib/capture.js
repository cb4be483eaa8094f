/**
 * Deciding when an assistant message is final, and how it was read
 * (SPEC §6 `capture`): from the chat app's own response stream first, from
 * the page as the fallback.
 *
 * The content script feeds a `CaptureTracker` two kinds of signals: the
 * watched streams (start, chunks, end with a status, abort) and the page's
 * own end-of-message signal (the adapter's `dom.isGenerating` going from
 * true to false). The tracker reports a capture:
 *
 * - `network`, when a stream ended normally with a 2xx status and the
 *   adapter's parser found a final message in it;
 * - `dom`, when the page finished writing an answer and, a grace period
 *   later, no stream of that answer was read: none was seen (a page reloaded
 *   mid-answer, a changed endpoint, stream reading switched off), or one
 *   ended normally but its shape was not understood. Never when a stream of
 *   that answer was aborted or errored: the message is not final.
 *
 * Pure: the clock, the timers and the DOM reading are passed in.
 */

/** @typedef {import('../adapters/types.js').Capture} Capture */

/**
 * @typedef {{
 *   adapter: import('../adapters/types.js').Adapter,
 *   report(capture: Capture, method: "network" | "dom"): void,
 *   readDom(): {text: string, message_id: string} | null,
 *   conversationId(): string,
 *   graceMs?: number,
 *   setTimer?: (fn: () => void, ms: number) => any,
 *   clearTimer?: (handle: any) => void,
 * }} TrackerOptions
 */

/** How long after the page's end signal a stream of the same answer may still end. */
export const DEFAULT_GRACE_MS = 1500;
/** Streams followed at once; a page that opens more is not a chat app at work. */
const MAX_STREAMS = 16;

class Answer {
  constructor() {
    this.streamsSeen = 0;
    this.isCaptured = false;
    this.isAborted = false;
  }
}

export class CaptureTracker {
  /** @param {TrackerOptions} options */
  constructor({
    adapter,
    report,
    readDom,
    conversationId,
    graceMs = DEFAULT_GRACE_MS,
    // Wrapped: a browser's setTimeout throws when called as another object's method.
    setTimer = (fn, ms) => setTimeout(fn, ms),
    clearTimer = (handle) => clearTimeout(handle),
  }) {
    this.adapter = adapter;
    this.report = report;
    this.readDom = readDom;
    this.conversationId = conversationId;
    this.graceMs = graceMs;
    this.setTimer = setTimer;
    this.clearTimer = clearTimer;
    /** @type {Map<number, {parser: import('../adapters/types.js').StreamParser, answer: Answer}>} */
    this.streams = new Map();
    /** The answer the page is writing now, or the next one. */
    this.answer = new Answer();
    this.isGenerating = false;
    this.graceTimers = new Set();
    /** The last text reported, so the same turn read twice is sent once. */
    this.lastText = "";
  }

  /** A watched request went out. */
  streamStarted(id, { url, body, pageUrl }) {
    if (this.streams.size >= MAX_STREAMS) return;
    const parser = this.adapter.createStreamParser({ requestUrl: url, requestBody: body, pageUrl });
    this.streams.set(id, { parser, answer: this.answer });
    this.answer.streamsSeen += 1;
  }

  streamChunk(id, text) {
    this.streams.get(id)?.parser.feed(text);
  }

  /** The response body ended normally (`status` is the HTTP status). */
  streamEnded(id, { status }) {
    const stream = this.streams.get(id);
    if (!stream) return;
    this.streams.delete(id);
    if (!(status >= 200 && status < 300)) {
      stream.answer.isAborted = true; // an error page, not an answer
      return;
    }
    const capture = stream.parser.finish();
    if (!capture || !capture.text) {
      // A stream of the known shape without a final message was cut short or
      // failed: the answer is not final. One of a shape not understood
      // leaves the answer to the page.
      if (stream.parser.isRecognised()) stream.answer.isAborted = true;
      return;
    }
    stream.answer.isCaptured = true;
    if (!capture.conversation_id) capture.conversation_id = this.conversationId();
    this.send(capture, "network");
  }

  /** The body was cut: the page's stop button, a lost connection, an error. */
  streamAborted(id) {
    const stream = this.streams.get(id);
    if (!stream) return;
    this.streams.delete(id);
    stream.answer.isAborted = true;
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
      this.settle(answer);
    }, this.graceMs);
    this.graceTimers.add(timer);
  }

  /** Stops the pending grace timers (the page is going away). */
  stop() {
    for (const timer of this.graceTimers) this.clearTimer(timer);
    this.graceTimers.clear();
  }

  /** After the grace period: read the page when no stream of this answer was read. */
  settle(answer) {
    if (answer.isCaptured || answer.isAborted) return;
    for (const stream of this.streams.values()) if (stream.answer === answer) return; // still streaming
    const read = this.readDom();
    if (!read || !read.text.trim()) return;
    const conversationId = this.conversationId();
    if (!conversationId) return;
    answer.isCaptured = true;
    this.send(
      { conversation_id: conversationId, message_id: read.message_id || "", parent_message_id: "", organization_id: "", text: read.text },
      "dom",
    );
  }

  send(capture, method) {
    if (capture.text === this.lastText && method === "dom") return;
    this.lastText = capture.text;
    this.report(capture, method);
  }
}
