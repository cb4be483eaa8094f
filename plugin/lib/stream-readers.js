/**
 * Readers of the chat apps' answers, shared by the platform adapters:
 * bounded line (SSE, JSON lines) and JSON-frame (Gemini's chunked frames)
 * readers that work on any chunk split in linear time, the StreamParser
 * around them, and JSON access that never throws. The events each app
 * writes stay in its adapter.
 */

import { isReason } from "./finality.js";

/** A longer line (or Gemini frame) is hostile or broken: the stream is given up. */
export const MAX_LINE_CHARS = 8 * 1024 * 1024;
/** The server refuses frames over 1 MiB (SPEC §6), so a longer message cannot be sent anyway. */
export const MAX_TEXT_CHARS = 1024 * 1024;
/** Request bodies are read for ids only; one larger than this is not read. */
export const MAX_REQUEST_BODY_CHARS = 4 * 1024 * 1024;

/** @returns {any} the parsed JSON, or undefined when `text` is not JSON */
export function parseJson(text) {
  if (typeof text !== "string") return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * `value[path[0]][path[1]]...` over parsed JSON, or undefined where the path
 * leaves the data. Only own properties: JSON.parse can create a key named
 * "__proto__", and the walk must never reach Object.prototype.
 */
export function at(value, ...path) {
  for (const key of path) {
    if (typeof key === "number") {
      if (!Array.isArray(value) || key < 0 || key >= value.length) return undefined;
      value = value[key];
    } else {
      if (!isObject(value) || !Object.hasOwn(value, key)) return undefined;
      value = value[key];
    }
  }
  return value;
}

/** @returns {value is Record<string, any>} a plain JSON object (not an array, not null) */
export function isObject(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** @returns {string} `value` when it is a non-empty string, else "" */
export function text(value) {
  return typeof value === "string" ? value : "";
}

/**
 * The part of a line or frame that has come so far, kept as pieces and
 * joined once when it is complete, so that work stays linear however small
 * the chunks. One longer than `maxChars` is hostile or broken: it is
 * dropped, and the reader holding it reads nothing more.
 */
class PendingText {
  /** @param {number} maxChars */
  constructor(maxChars) {
    this.maxChars = maxChars;
    /** @type {string[]} */
    this.pieces = [];
    this.chars = 0;
    /** Set once a line or frame outgrew the bound. */
    this.overflowed = false;
  }

  get isEmpty() {
    return this.pieces.length === 0;
  }

  /** Keeps the next piece of a line or frame not complete yet. */
  add(piece) {
    this.pieces.push(piece);
    this.chars += piece.length;
    if (this.chars > this.maxChars) {
      this.overflowed = true;
      this.pieces = [];
    }
  }

  /** @returns {string | null} the whole line or frame, `last` its end; null when it outgrew the bound */
  complete(last) {
    const tooLong = this.chars + last.length > this.maxChars;
    const whole = tooLong ? null : this.pieces.join("") + last;
    this.pieces = [];
    this.chars = 0;
    if (tooLong) this.overflowed = true;
    return whole;
  }
}

/**
 * Splits decoded text into lines (`\n`, `\r\n` or `\r`, as SSE allows) on any
 * chunk split. Each character is looked at once.
 */
export class LineReader {
  /** @param {(line: string) => void} onLine */
  constructor(onLine, maxLineChars = MAX_LINE_CHARS) {
    this.onLine = onLine;
    this.pending = new PendingText(maxLineChars);
    this.afterCR = false;
  }

  /** Set once a line outgrew the bound; nothing is read after that. */
  get overflowed() {
    return this.pending.overflowed;
  }

  /** @param {string} chunk */
  feed(chunk) {
    if (this.overflowed || !chunk) return;
    let start = 0;
    if (this.afterCR && chunk.charCodeAt(0) === 10) start = 1; // the \n of a \r\n split between chunks
    this.afterCR = false;
    const ends = /\r\n|\r|\n/g;
    ends.lastIndex = start;
    for (let match = ends.exec(chunk); match; match = ends.exec(chunk)) {
      const line = this.pending.complete(chunk.slice(start, match.index));
      start = ends.lastIndex;
      if (match[0] === "\r" && start === chunk.length) this.afterCR = true;
      if (line === null) return;
      this.onLine(line);
    }
    if (start < chunk.length) this.pending.add(chunk.slice(start));
  }

  /** Delivers a last line that had no line end. */
  end() {
    if (this.overflowed || this.pending.isEmpty) return;
    const line = this.pending.complete("");
    if (line !== null) this.onLine(line);
  }
}

/**
 * Server-sent events as `(event, data)` per `data:` line, like the server's
 * `sse_events`: these apps write one JSON document per data line, and
 * reading lines alone survives a stream whose blank separators were lost.
 *
 * @param {(event: string, data: string) => void} onData
 */
export function sseReader(onData) {
  let event = "";
  return new LineReader((line) => {
    if (!line.trim()) event = "";
    else if (line.startsWith("event:")) event = line.slice("event:".length).trim();
    else if (line.startsWith("data:")) onData(event, line.slice("data:".length).trim());
  });
}

/**
 * Cuts a stream of JSON values written back to back, with anything between
 * them that is not `[` or `{` skipped (Gemini's `)]}'` prefix and length
 * lines). Frames are found by bracket matching rather than by the length
 * lines, which count UTF-16 code units and which a proxy or a changed
 * prefix could make lie; matching survives both.
 */
export class JsonFrameReader {
  /** @param {(frame: string) => void} onFrame */
  constructor(onFrame, maxFrameChars = MAX_LINE_CHARS) {
    this.onFrame = onFrame;
    this.pending = new PendingText(maxFrameChars);
    this.depth = 0;
    this.inString = false;
    this.escaped = false;
  }

  /** Set once a frame outgrew the bound; nothing is read after that. */
  get overflowed() {
    return this.pending.overflowed;
  }

  /** @param {string} chunk */
  feed(chunk) {
    if (this.overflowed || !chunk) return;
    let start = this.depth > 0 ? 0 : -1; // where the current frame begins in this chunk
    for (let i = 0; i < chunk.length; i++) {
      const c = chunk.charCodeAt(i);
      if (this.depth === 0) {
        if (c === 0x5b || c === 0x7b) {
          start = i;
          this.depth = 1;
        }
        continue;
      }
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (c === 0x5c) this.escaped = true;
        else if (c === 0x22) this.inString = false;
        continue;
      }
      if (c === 0x22) this.inString = true;
      else if (c === 0x5b || c === 0x7b) this.depth++;
      else if (c === 0x5d || c === 0x7d) {
        this.depth--;
        if (this.depth === 0) {
          const frame = this.pending.complete(chunk.slice(start, i + 1));
          start = -1;
          if (frame === null) return;
          this.onFrame(frame);
        }
      }
    }
    if (this.depth > 0) this.pending.add(chunk.slice(start));
  }

  /** The end of the stream: a frame cut before its closing bracket is not JSON, so there is nothing to deliver. */
  end() {}
}

/** Unknowns kept per stream for reports, at most (the first ones). */
const MAX_UNKNOWNS = 4;

/** What every adapter's parser state tracks, besides its own shape's fields. */
export class StreamState {
  constructor() {
    /** The stream gives no capture: it said its answer is not final, or a text outgrew the bound. */
    this.hasFailed = false;
    /** An event of the adapter's shape (an error included) was read: see StreamParser's `isRecognised`. */
    this.isRecognised = false;
    /** Why the stream said its answer is not final (see `notFinal`); "" while it did not. */
    this.incompleteReason = "";
    /** @type {Record<string, string | number>[]} what the stream held that the adapter does not know, as report details */
    this.unknowns = [];
  }

  /**
   * The stream itself says its answer is not final: it gives no capture.
   * `reason` is one of lib/finality.js's REASONS (`max_tokens`, `refused`,
   * `error_1037`, …), whose verdict says what becomes of the answer; the
   * first one said is kept, and one the rule does not name is
   * `stopped_early`.
   */
  notFinal(reason) {
    this.hasFailed = true;
    this.isRecognised = true;
    if (!this.incompleteReason) this.incompleteReason = isReason(reason) ? reason : "stopped_early";
  }

  /**
   * Notes something the stream held that the adapter does not know and read
   * past (an unknown error code after a finished answer, an unknown stop
   * reason), for a `stream_unrecognised` report. `detail` holds names and
   * numbers of the adapter's own, never a value of the chat's.
   *
   * @param {Record<string, string | number>} detail
   */
  unknown(detail) {
    if (this.unknowns.length < MAX_UNKNOWNS) this.unknowns.push(detail);
  }
}

/**
 * The StreamParser (types.js) over a reader and the state its callback
 * builds: a stream that failed or outgrew the reader's bound gives no
 * capture; otherwise `capture` says whether it ended with a final message
 * (it may call `state.notFinal` instead, when only the end tells).
 * `handoff` and `continues` are the adapter's when its answers can move
 * from one request to another (ChatGPT's stream handoff); by default a
 * stream neither hands off nor continues one. `incomplete` is why the
 * stream said its answer is not final (by default the state's
 * `incompleteReason`), and `held` the partial answer it held back when its
 * app continues the same message later (ChatGPT's "Continue generating");
 * by default none. `unknowns` are the state's.
 *
 * @param {LineReader | JsonFrameReader} reader
 * @param {StreamState} state
 * @param {() => import('../adapters/types.js').Capture | null} capture
 * @param {{handoff?: () => string | null, continues?: () => string | null, incomplete?: () => string,
 *   held?: () => {message_id: string, text: string} | null}} [moves]
 * @returns {import('../adapters/types.js').StreamParser}
 */
export function streamParser(
  reader,
  state,
  capture,
  { handoff = () => null, continues = () => null, incomplete = () => state.incompleteReason, held = () => null } = {},
) {
  return {
    feed(chunk) {
      reader.feed(chunk);
    },
    finish() {
      reader.end();
      return state.hasFailed || reader.overflowed ? null : capture();
    },
    isRecognised() {
      return state.isRecognised;
    },
    handoff: () => (state.hasFailed || reader.overflowed ? null : handoff()),
    continues,
    incomplete: () => (reader.overflowed ? "" : incomplete()),
    held: () => (reader.overflowed ? null : held()),
    unknowns: () => (reader.overflowed ? [] : [...state.unknowns]),
  };
}

/**
 * The request body the page sent, parsed as JSON when it is a bounded
 * string of JSON, else undefined.
 */
export function parseRequestJson(body) {
  return typeof body === "string" && body.length <= MAX_REQUEST_BODY_CHARS ? parseJson(body) : undefined;
}

