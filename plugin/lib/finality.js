/**
 * What is final: the one rule that says what becomes of an answer whose
 * stream gave no capture.
 *
 * An adapter's stream parser (adapters/types.js) gives a capture when its
 * stream holds a finished answer, and only then; a stream with a finished
 * answer is final whatever frames follow it (Gemini appends an error part
 * to every turn). Otherwise `incomplete()` names why, with one of REASONS
 * below, and the tracker (lib/capture.js) does what that reason's verdict
 * says; the reasons the tracker itself gives when a stream said nothing
 * (cut short, handed off, not understood) are here too. The verdicts:
 *
 * - `cut`: the output hit its length limit; the page shows part of the
 *   answer and a way to continue it.
 * - `stopped`: the app stopped the answer with an error or a limit; the
 *   page shows a half answer or a banner.
 * - `withdrawn`: the app took back an answer it had written (moderation, a
 *   refusal); the page shows it gone or paused, and nothing there says that
 *   Conductor ran none of its blocks, so the side panel says so.
 * - `open`: the stream does not say the answer is final, for a reason a
 *   later frame, a later request or the page can overturn, or the adapter
 *   cannot tell.
 *
 * For `cut`, `stopped` and `withdrawn` nothing is sent, from the stream or
 * from the page, and `stream_incomplete` names the reason. For `open` the
 * tracker waits for the page's own finish signal and reads the page then,
 * unless another stream of the answer gives it first: the page fallback
 * never hides a finished answer, and is held back only by a stream that
 * says its answer was stopped, cut or withdrawn.
 */

export const VERDICTS = Object.freeze({ CUT: "cut", STOPPED: "stopped", WITHDRAWN: "withdrawn", OPEN: "open" });

const { CUT, STOPPED, WITHDRAWN, OPEN } = VERDICTS;

/**
 * Every reason, with its verdict and what it says to a person (the side
 * panel's note for a withdrawn answer). Gemini's codes are `error_<code>`
 * (GEMINI_CODE) besides these.
 *
 * @type {Readonly<Record<string, {verdict: string, says: string}>>}
 */
export const REASONS = Object.freeze({
  // Said by a stream.
  max_tokens: { verdict: CUT, says: "the answer hit its length limit (ChatGPT's finish_details, Claude's stop_reason)" },
  partial_completion: { verdict: CUT, says: "ChatGPT finished the answer as a partial completion" },
  error_event: { verdict: STOPPED, says: "the stream carried an error (ChatGPT's error, Claude's error event of another type, Gemini's er part)" },
  overloaded_error: { verdict: STOPPED, says: "Claude was overloaded" },
  rate_limit_error: { verdict: STOPPED, says: "Claude's rate limit stopped the answer" },
  api_error: { verdict: STOPPED, says: "Claude's server failed" },
  invalid_request_error: { verdict: STOPPED, says: "Claude refused the request as invalid" },
  permission_error: { verdict: STOPPED, says: "Claude refused the request (permission)" },
  authentication_error: { verdict: STOPPED, says: "Claude's session had expired" },
  not_found_error: { verdict: STOPPED, says: "Claude did not find the conversation" },
  request_too_large: { verdict: STOPPED, says: "Claude found the request too large" },
  error_code: { verdict: STOPPED, says: "Gemini sent an error code out of range, and no finished answer" },
  stopped_early: { verdict: STOPPED, says: "the stream stopped the answer (an adapter gave a reason that is not a name)" },
  moderation_blocked: { verdict: WITHDRAWN, says: "ChatGPT's moderation withdrew the answer after it was written" },
  refused: { verdict: WITHDRAWN, says: "Claude refused to go on and paused the chat; the answer so far is not to be used" },
  tool_use: { verdict: OPEN, says: "Claude stopped for a tool call: the turn goes on" },
  stop_reason_unknown: { verdict: OPEN, says: "Claude ended with a stop reason the plugin does not know (reported)" },
  // Given by the tracker, for a stream that said nothing about its answer.
  stream_without_final_message: { verdict: OPEN, says: "the stream ended before its end signal" },
  stream_handed_off: { verdict: OPEN, says: "the stream handed the answer on to another request" },
  stream_unrecognised: { verdict: OPEN, says: "the stream's shape was not understood" },
  stream_broken: { verdict: OPEN, says: "the stream's connection broke" },
  stream_unread: { verdict: OPEN, says: "a stream of the answer was seen but gave nothing" },
  no_stream: { verdict: OPEN, says: "no stream of the answer was seen" },
});

/** Gemini's in-stream error codes, `error_1037` and the like: the answer was stopped, when no finished answer came. */
const GEMINI_CODE = /^error_\d{1,6}$/;

/** @returns {boolean} whether `reason` is one of the rule's reasons */
export function isReason(reason) {
  return typeof reason === "string" && (Object.hasOwn(REASONS, reason) || GEMINI_CODE.test(reason));
}

/** @returns {string} the verdict of `reason` (VERDICTS), "" when there is none (no reason, or not one of the rule's) */
export function verdictOf(reason) {
  if (!isReason(reason)) return "";
  return Object.hasOwn(REASONS, reason) ? REASONS[reason].verdict : STOPPED;
}

/** @returns {boolean} whether a stream that says `reason` keeps its answer from being read from the page: cut, stopped or withdrawn */
export function holdsPageBack(reason) {
  const verdict = verdictOf(reason);
  return verdict === CUT || verdict === STOPPED || verdict === WITHDRAWN;
}

/** @returns {string} what `reason` says to a person, "" when it is none of the rule's */
export function saysOf(reason) {
  if (!isReason(reason)) return "";
  return Object.hasOwn(REASONS, reason) ? REASONS[reason].says : `Gemini sent error code ${reason.slice("error_".length)} and no finished answer`;
}
